"""Rule 5's boundary model: the outline of an object stitched across tiles, smoothed along its length where
the tiles' views of it disagree.

A real SAM 3 draws every outline with noise: a boundary a cell or two in or out, smoothly along it, drawn
anew for each tile (a changed context, a changed answer). The stitch of rule 5 keeps each tile's view inside
its core, so the merged outline carries that noise everywhere, and a step where it passes from one tile's
view to the next at a core line. Where two tiles overlap, their views of the same stretch say how large the
noise is: views that agree (within `AGREE_CELLS` mask cells on average: two tiles' grids of cells) leave
the outline as the owners drew it, to the vertex. Views that differ by a steady offset (a grown view
beside a shrunk one, the same all along: their median signed distance over `OFFSET_RATIO` times its spread,
`NOISY_OFFSET_RATIO` times where the views are a model's noise apart, `steady`;
or one pair of views a cell apart beside pairs that agree, `odd_view`) are not smoothed (it would only
round the ends and bends): the offset holds over each whole tile, so each
owner's part is moved to the views' consensus (`shift_views`; a third of a thin object's width); where that
move is none or would change the object's shape, views noisier than the bar of agreement are smoothed as a
noise. Points where two views lie `DECIDED_CELLS` apart are a decision (a stretch one tile drew and the other
did not), not measured. Views
that differ as a noise does, in and out along
the outline, make the outline a noisy measurement of a smooth boundary, and each point of it becomes the
mean of the outline around it (a moving average along the arc length, at most `REACH_CELLS` mask cells each
way), moved by at most `CAP_CELLS` cells (the noise's size: no meander or corner is flattened by more).

The window is chosen, point by point, from the outline's own shape: the largest for which the chords from the
point to the window's two ends turn by at most `TURN` radians (from `MIN_CELLS` cells on, where the noise no
longer sets the chords' direction). A corner stops the window before it (so points near a corner keep their
place and the corner its angle), a meander shortens it, a straight road or field edge gets the whole reach,
and past it up to `LONG_REACH_CELLS` while the chords turn so little that the window's mean lies within
`BIAS_CELLS` of the arc it averages (a kink or a meander stops it where `REACH_CELLS` did; a turn only the
noise makes, over a stretch of `NOISE_RUN_CELLS` or less and under `SHARP` times that bound, does not). A window changes
by at most one point from a point to the next (the average moves smoothly along the ring).

On a meander, where the windows stop at every bend, the points in a band take the views' mean there as well
(`bandmean.band_mean`). An outline whose smoothing would change its shape (split a part, join two, open or
close a hole) is left as the owners drew it.
"""

from __future__ import annotations

from typing import Callable, Mapping

import numpy as np
import shapely

from ..tiling.frame import TileFrame
from ..vectorize.pieces import EDGE_MARGIN, MASK_CELL
from .bandmean import band_mean
from .consensus import shift_views
from .knots import valid_part, valid_polygon
from .parts import CAP_CELLS, JOIN_CELLS, ccw, inward_area, polygonal, same_shape

#: Views of one stretch that differ by less than this many mask cells on average agree (nothing moves).
AGREE_CELLS = 0.5
#: Views whose steady offset (a grown view beside a shrunk one) exceeds this many times their noise's spread
#: differ by a decision, not a noise: each tile's part is moved to the views' consensus (`shift_views`).
OFFSET_RATIO = 1.0
#: Views that lie this many mask cells apart or more (the median size of their signed distances) are noisier
#: than two grids of cells (a pixel staircase: about `AGREE_CELLS`): a model's noise, which wanders in and out
#: slowly along the outline (over ~10 cells), so a band's stretch holds only a few independent measures of it
#: and a pair's median wanders up to its spread. Their steady offset must exceed `NOISY_OFFSET_RATIO` times the
#: spread.
NOISY_CELLS = 0.75
NOISY_OFFSET_RATIO = 1.25
#: The moving average's reach each way along the outline, in mask cells (about 100 tile px), where the chords
#: turn by up to `TURN`.
REACH_CELLS = 29.0
#: Its reach on straight stretches (a field strip's side, a road): past `REACH_CELLS` a window grows while the
#: chords to its ends turn by at most 6 `BIAS_CELLS` / its half-length (on an arc, the mean of a window whose
#: chords turn by t lies about t x half-length / 6 inside it: at most `BIAS_CELLS`).
LONG_REACH_CELLS = 100.0
#: The most a long window's mean lies off the arc it averages, in mask cells (`LONG_REACH_CELLS`).
BIAS_CELLS = 0.6
#: Past `REACH_CELLS`, a stretch of the outline this many mask cells long or shorter where the chords turn too
#: much is the noise's doing (twice its length along the outline), not a bend's: a bend stops the windows of
#: every point within about the window's length of it.
NOISE_RUN_CELLS = 24.0
#: A turn over this many times the long windows' bound stops the window however short its stretch.
SHARP = 2.0
#: The shortest window whose chords are tested for turning, in mask cells (the noise's length is ~12 cells).
MIN_CELLS = 17.0
#: The largest turn (radians) between the chords from a point to its window's two ends.
TURN = 0.6
#: Two views' boundaries this many mask cells apart or more at a point differ by a decision there (a stretch
#: one tile drew and the other did not: a speck of the object, an end, a bank), not by a noise nor a steady
#: offset (a grown view and a shrunk one with their noise lie within it): the point is left out of the pair's
#: distances (`view_offsets`). A pair where over half of one view's points are so far from the other's (one
#: tile drew a speck, or a stretch, of what the other drew across the band) is no measure of the two views.
DECIDED_CELLS = 3 * CAP_CELLS
#: The fewest points a pair of views is measured at (`DECIDED_CELLS`).
MIN_POINTS = 3
#: Points a side of a band that `disagreement` measures at most.
SAMPLES = 24
#: The outline's points along its length, in mask cells (their windows are found at every other one).
STEP_CELLS = 0.5


def smooth_views(geom, views: Mapping[int, object], frames: Mapping[int, TileFrame],
                 bands: dict | None = None) -> tuple[object, float]:
    """(`geom` (the owners' stitch of an object) smoothed along its outline where the tiles' `views` (tile ->
    that tile's parts of the object, one geometry) disagree in the bands their windows share, the area the
    smoothing moved inward); moved to the views' consensus (`shift_views`) where they differ by a steady
    offset (`view_offsets`), or where one pair does and the rest agree (`odd_view`), smoothed where that move
    is none or would change the object's shape and their noise is over `AGREE_CELLS`; (`geom` itself, 0)
    where they agree or no two tiles saw it. `bands`: the bands of tile pairs found so far (`_band`), kept by
    a caller whose `frames` stay the same."""
    tiles = [t for t, v in views.items() if not v.is_empty]
    if len(tiles) < 2:
        return geom, 0.0
    cell = MASK_CELL * min(frames[t].pixel for t in tiles)
    pairs = _pairs(views, frames, tiles, bands, AGREE_CELLS * cell)
    if not pairs:
        return geom, 0.0
    apart, offset, spread = _offsets(pairs)
    # pooled, the views agree; one pair of them may still differ all along (a view grown or shifted beside
    # views that agree with each other): a steady offset, moved to the views' consensus as any other
    odd = apart < AGREE_CELLS * cell
    if odd and not odd_view(pairs, AGREE_CELLS * cell):
        return geom, 0.0
    area = polygonal(geom, valid=True)  # (the owners' stitch: a union)
    if odd or steady(apart, offset, spread, cell):
        out = shift_views(area, pairs, tiles, frames, cell)
        if out is not area and same_shape(area, out, JOIN_CELLS * cell):
            return out, shapely.difference(area, out).area
        if odd or spread < AGREE_CELLS * cell:
            return geom, 0.0
        # (no tile's own growth or shift explains the pairs' offsets, or moving each would change the object's
        # shape: the views differ as a noise does after all, where their noise is over the bar of agreement)
    out, inward = smooth_outline(area, cell, band_mean(views, frames, tiles, cell, CAP_CELLS * cell))
    return (out, inward) if out is not area and same_shape(area, out, JOIN_CELLS * cell, smoothed=True) \
        else (geom, 0.0)


def steady(apart: float, offset: float, spread: float, cell: float) -> bool:
    """Whether views `apart`, `offset` and `spread` (`view_offsets`' figures, map units) differ by a steady
    offset: one over `OFFSET_RATIO` times their noise's spread, `NOISY_OFFSET_RATIO` times where they lie
    `NOISY_CELLS` apart or more. A model's noise moved the consensus of views a cell apart that stood within
    1.25 spreads of it (long held-out seeds under `wobble` alone: a road 0.783 -> 0.700 IoU where the
    smoothing gives 0.850), where a grown or shifted view beside a clean one (views half a cell apart, their
    noise a staircase's) stood as close and was a steady offset."""
    return offset > (NOISY_OFFSET_RATIO if apart >= NOISY_CELLS * cell else OFFSET_RATIO) * spread


def odd_view(pairs, agree: float) -> bool:
    """Whether a pair of views (`_pairs`) differs by a steady offset of `agree` or more (its median signed
    distance): where the views pooled over every pair agree (the pairs that agree outnumber it), a view grown,
    shrunk or shifted beside its neighbours, or two runs of tiles that drew the object differently; a noise
    moves a pair's median that far only now and then (`view_offsets`)."""
    return bool((np.abs(_medians([p[2] for p in pairs])) >= agree).any())


def disagreement(views: Mapping[int, object], frames: Mapping[int, TileFrame], tiles=None) -> float:
    """How far apart the tiles' views of one object lie where two tiles' windows overlap (`view_offsets`'s
    first figure)."""
    return view_offsets(views, frames, tiles)[0]


def view_offsets(views: Mapping[int, object], frames: Mapping[int, TileFrame], tiles=None):
    """(How far apart, how steadily offset, how noisy) the tiles' views of one object are where two tiles'
    windows overlap, in map units. At points a mask cell apart along each view's boundary (`EDGE_MARGIN`
    inside the band: at a window's edge a mask stops short), the signed distance to the other view's
    boundary, + where the first view of the pair lies outside the second. Apart: the median of its size
    (the median: a stretch one tile drew and the other did not, an end or a bank, is a decision, not noise,
    and a minority). Offset: per pair the median signed distance (a grown view beside a shrunk one: the
    same all along), the size of it over the pairs, weighted by their points. Noisy: the spread of each
    pair's distances about its own offset (1.4826 median absolute deviations: a noise's standard deviation).
    (0, 0, 0) where no two views share a band."""
    return _offsets(_pairs(views, frames, list(views) if tiles is None else tiles))


def _pairs(views, frames, tiles, bands=None, agree: float | None = None) -> list:
    """(a, b, the signed distances of `_pair_signed`, the points to take normals at) for every two tiles whose
    views have a boundary in the band their windows share (`_band`; `bands`: those found so far); [] where
    `agree` is given and the views agree within it (`_distances`)."""
    polys = {t: v if (v := views[t]).geom_type in ('Polygon', 'MultiPolygon') else polygonal(v) for t in tiles}
    lines = {t: shapely.boundary(polys[t]) for t in tiles}
    bands = {} if bands is None else bands
    found = []
    for i, a in enumerate(tiles):
        for b in tiles[i + 1:]:
            band = bands.get((a, b))
            if band is None:
                band = bands[a, b] = _band(frames[a], frames[b])
            if band:
                la, lb = _clip(lines[a], *band[:2]), _clip(lines[b], *band[:2])
                if not (la.is_empty or lb.is_empty):
                    found.append((a, b, la, lb, band[2]))
    if not found:
        return []
    n = len(found)
    # the staircase of the masks' pixels simplified away (a fifth of a cell)
    line = _specks_dropped(shapely.simplify(_objects([f[2] for f in found] + [f[3] for f in found]),
                                            0.2 * np.asarray([f[4] for f in found] * 2), preserve_topology=False))
    keep = ~(shapely.is_empty(line[:n]) | shapely.is_empty(line[n:]))
    found = [(a, b, la, lb, c) for (a, b, *_, c), la, lb, k in zip(found, line[:n], line[n:], keep) if k]
    return _pair_signed(found, polys, agree) if found else []


def _specks_dropped(lines: np.ndarray) -> np.ndarray:
    """`lines` without their lines of no length: a speck (a ring less than the simplification's tolerance
    across, a sliver of an overlay) simplifies to one point twice, no stretch of a boundary (and GEOS's
    segmentize refuses it)."""
    parts, at = shapely.get_parts(lines, return_index=True)
    speck = (shapely.get_type_id(parts) == 1) & (shapely.length(parts) == 0)
    if not speck.any():
        return lines
    out = lines.copy()
    for k in np.unique(at[speck]).tolist():
        rest = parts[(at == k) & ~speck]
        out[k] = (shapely.multilinestrings(rest) if (shapely.get_type_id(rest) == 1).all()
                  else shapely.geometrycollections(rest)) if len(rest) else shapely.LineString()
    return out


def _apart(pairs) -> float:
    """`view_offsets`' first figure from `_pairs`: the median size of the signed distances."""
    return float(np.median(np.concatenate([np.abs(p[2]) for p in pairs])))


def _offsets(pairs) -> tuple[float, float, float]:
    """`view_offsets`'s three figures from `_pairs`."""
    if not pairs:
        return 0.0, 0.0, 0.0
    mids = _medians([p[2] for p in pairs]).tolist()
    offset = float(np.average(np.abs(mids), weights=[len(p[2]) for p in pairs]))
    residual = np.concatenate([np.abs(p[2] - m) for p, m in zip(pairs, mids)])
    return _apart(pairs), offset, 1.4826 * float(np.median(residual))


def _medians(arrays: list) -> np.ndarray:
    """`np.median` of each of `arrays` (none empty, no NaN), from one sort of them all: the middle value, or
    the mean of the two middle ones as `np.mean` takes it ((a + b) / 2)."""
    size = np.asarray([len(a) for a in arrays])
    group = np.repeat(np.arange(len(arrays)), size)
    values = np.concatenate(arrays)
    s = values[np.lexsort((values, group))]
    mid = np.cumsum(size) - size + size // 2
    return np.where(size % 2 == 1, s[mid], (s[mid - 1 + size % 2] + s[mid]) / 2)


def _band(fa: TileFrame, fb: TileFrame) -> tuple:
    """(The band two tiles' windows share, `EDGE_MARGIN` inside each (at a window's edge a mask stops short),
    its bounds where it is a rectangle (else None), a mask cell of the coarser tile); () where they share
    none."""
    if not shapely.intersects(fa.window, fb.window):
        return ()
    band = shapely.intersection(fa.window, fb.window)
    cell = MASK_CELL * max(fa.pixel, fb.pixel)
    band = shapely.buffer(band, -EDGE_MARGIN * cell / MASK_CELL, join_style="mitre")
    if band.is_empty:
        return ()
    x0, y0, x1, y1 = band.bounds
    box = (x1 - x0) * (y1 - y0)
    # np.isclose's test (rtol 1e-5, atol 1e-8): the common north-up case, clipped by its bounds
    return band, ((x0, y0, x1, y1) if abs(band.area - box) <= 1e-8 + 1e-5 * abs(box) else None), cell


def _pair_signed(found: list, polys: dict, agree: float | None = None) -> list:
    """For each pair (a, b, a's boundary in their band, b's, both simplified, a mask cell) in `found`: (a, b, the
    signed distances between the two views there (`view_offsets`; those of `DECIDED_CELLS` or more left out),
    (per side the points to take the outward normals at, the cell, which of the points' distances are kept):
    `consensus._normals`); [] where the views agree within `agree` (`_distances`). Each shapely step runs
    once over every side of every pair."""
    n = len(found)
    cell = np.asarray([f[4] for f in found] * 2)
    own, other = [f[0] for f in found] + [f[1] for f in found], [f[1] for f in found] + [f[0] for f in found]
    # at most `SAMPLES` points a side, a cell apart or more (the noise is smooth over ~12 cells)
    line = _objects([f[2] for f in found] + [f[3] for f in found])
    xy, at = shapely.get_coordinates(shapely.segmentize(line, np.maximum(cell, shapely.length(line) / SAMPLES)),
                                     return_index=True)
    count = np.bincount(at, minlength=2 * n)
    start = np.concatenate([[0], np.cumsum(count)[:-1]])
    picks = [slice(None, None, max(1, int(k) // SAMPLES)) for k in count.tolist()]
    idx = np.concatenate([np.arange(int(k))[pick] + s0 for k, pick, s0 in zip(count.tolist(), picks, start.tolist())])
    side = np.repeat(np.arange(2 * n), [len(range(int(k))[pick]) for k, pick in zip(count.tolist(), picks)])
    pts = xy[idx]
    dist = _distances(pts, np.roll(line, n)[side], agree, side % n)
    if dist is None:
        return []
    outside = np.zeros(len(pts), dtype=bool)
    of = np.asarray(other)[side]
    for t in set(other):  # each view's polygon prepared once
        on = of == t
        outside[on] = ~shapely.contains_xy(polys[t], pts[on, 0], pts[on, 1])
    sign = np.where(side < n, 1.0, -1.0)
    d = sign * np.where(outside, 1.0, -1.0) * dist
    # per pair, its two sides' points in a run (a's side, then b's): the pairs measured, each one's kept points
    order = np.argsort(side % n, kind="stable")
    d, side = d[order], side[order]
    near = np.abs(d) < DECIDED_CELLS * cell[side]
    size, close = np.bincount(side, minlength=2 * n), np.bincount(side, weights=near, minlength=2 * n)
    good = ((2 * close >= size).reshape(2, n).all(axis=0) & (close[:n] + close[n:] >= MIN_POINTS)).tolist()
    bounds = np.concatenate([[0], np.cumsum(size[:n] + size[n:])]).tolist()
    ends = np.concatenate([[0], np.cumsum(count)]).tolist()
    out = []
    for r in np.flatnonzero(good).tolist():
        a, b, *_rest, c = found[r]
        sides = [(xy[ends[k]:ends[k + 1]], polys[own[k]], picks[k]) for k in (r, r + n)]
        kept = near[bounds[r]:bounds[r + 1]]
        out.append((a, b, d[bounds[r]:bounds[r + 1]][kept], (sides, c, kept)))
    return out


def _distances(pts: np.ndarray, lines: np.ndarray, agree: float | None, pair: np.ndarray | None = None):
    """The distance of each point of `pts` to its line in `lines`; None where `agree` is given and each pair's
    points (`pair`: the pair of each point; None: one pair) lie under it at their median (then so do they all:
    the views agree, and the rest need not be measured). An even spread of the points is measured first, a
    little over half of them: a pair with over half of its points under `agree` there agrees; the rest of
    the other pairs' points next, and the rest of all where one of those pairs does not agree."""
    if agree is None:
        return shapely.distance(shapely.points(pts), lines)
    pair = np.zeros(len(pts), dtype=np.intp) if pair is None else pair
    size = np.bincount(pair)
    first = np.argsort(np.arange(len(pts)) % 8, kind="stable")[:len(pts) // 2 + 1 + len(pts) // 8]
    d = np.empty(len(pts))
    d[first] = shapely.distance(shapely.points(pts[first]), lines[first])
    agrees = np.bincount(pair[first], weights=d[first] < agree, minlength=len(size)) >= size // 2 + 1
    if agrees.all():
        return None
    rest = np.ones(len(pts), dtype=bool)
    rest[first] = False
    todo = rest & ~agrees[pair]
    d[todo] = shapely.distance(shapely.points(pts[todo]), lines[todo])
    if (_medians([d[pair == k] for k in np.flatnonzero(~agrees).tolist()]) < agree).all():
        return None
    todo = rest & agrees[pair]
    d[todo] = shapely.distance(shapely.points(pts[todo]), lines[todo])
    return d


def _objects(geoms: list) -> np.ndarray:
    out = np.empty(len(geoms), dtype=object)
    out[:] = geoms
    return out


def _clip(g, band, rect=None):
    """`g` inside `band` (a rectangle's bounds clip where `rect`, the rectangle's bounds, is given; else an
    overlay)."""
    if rect is not None:
        return shapely.clip_by_rect(g, *rect)
    return shapely.intersection(g, band)


def smooth_outline(geom, cell: float, mean: Callable | None = None) -> tuple[object, float]:
    """(Every ring of `geom` (a (multi)polygon) smoothed along its length (`smooth_ring`), the area moved
    inward: `parts.inward_area`); `cell` one mask cell in map units. Rings shorter than two windows stay, and
    so does a part whose smoothing would split it or open or close a hole (it moves a boundary, not a shape).
    `mean`: (smoothed ring, its windows, hole) -> the ring moved on (`bandmean.band_mean`), kept where the
    part stays valid (else the smoothing alone)."""
    polys, inward = [], 0.0
    for g in shapely.get_parts(geom).tolist():
        if not isinstance(g, shapely.Polygon):
            continue
        rings = [_canonical(np.asarray(r.coords), k > 0) for k, r in enumerate((g.exterior, *g.interiors))]
        new, half = [], []
        for r in rings:
            new.append(smooth_ring(r, cell, half) if shapely.length(shapely.linearrings(r)) > 2 * MIN_CELLS * cell
                       else r)
            half += [] if len(half) == len(new) else [None]
        long = [None if h is None else h >= MIN_CELLS for h in half]  # (`knots.valid_polygon`)
        got, new = _meant(g, new, half, long, mean, cell) if mean is not None else (valid_part(g, new, cell, long), new)
        if got is None:
            polys.append(g)
            continue
        polys.append(got)
        inward += sum(inward_area(r, q, k > 0) for k, (r, q) in enumerate(zip(rings, new)))
    return (_joined(polys) if len(polys) > 1 else polys[0] if polys else geom), inward


def _joined(polys: list):
    """The union of the valid polygons `polys`: one multipolygon of them where no two share more than points
    (a valid one: interiors apart, boundaries meeting at points at most; the union's overlay of parts apart
    costs as much as one of parts that overlap)."""
    arr = np.asarray(polys, dtype=object)
    a, b = shapely.STRtree(arr).query(arr, predicate="intersects")
    a, b = a[a < b], b[a < b]
    apart = all(m[0] == "F" and m[4] in "F0" for m in shapely.relate(arr[a], arr[b]).tolist())
    return shapely.multipolygons(arr) if apart else shapely.union_all(arr)


def _canonical(xy: np.ndarray, hole: bool) -> np.ndarray:
    """The closed ring `xy` from its least vertex (by x, then y), a shell clockwise and a hole counter-clockwise
    (as `shapely.normalize` writes them): the smoothing samples the ring from its first point on, and the same
    outline, started elsewhere or run the other way (another GEOS, another order of the union's parts), is
    smoothed the same."""
    ring = xy[:-1] if ccw(xy) == hole else xy[-2::-1]
    least = np.flatnonzero(ring[:, 0] == ring[:, 0].min())
    k = int(least[np.argmin(ring[least, 1])])
    return np.concatenate([ring[k:], ring[:k + 1]])


def _meant(g, new: list, half: list, long: list, mean: Callable, cell: float) -> tuple:
    """(The polygon, its rings): `new` (`g`'s smoothed rings, `half` their windows, `long` which are long ones)
    moved on by `mean` where they stay one valid polygon; else the smoothing's own (`knots.valid_part`), the
    mean tried again on it where that untangled a knot."""
    for again in (False, True):
        meant = [q if h is None else mean(q, h, k > 0) for k, (q, h) in enumerate(zip(new, half))]
        if any(a is not b for a, b in zip(meant, new)) and (m := valid_polygon(meant, long, cell)) is not None:
            return m, meant
        if again or all(a is b for a, b in zip(meant, new)):
            break
        first = new[0]
        if (got := valid_part(g, new, cell, long)) is None or new[0] is first:
            return got, new
    return valid_part(g, new, cell, long) if not again else got, new


def smooth_ring(xy: np.ndarray, cell: float, windows: list | None = None) -> np.ndarray:
    """The closed ring `xy`, each vertex moved as the outline at points `STEP_CELLS` apart moves when each
    becomes the mean of the points in its window (`_windows`), at most `CAP_CELLS` mask cells (a vertex
    where nothing moves, near a corner, stays where it was). `windows`: the windows' half-lengths (cells, at
    those points) appended to it."""
    xy = np.asarray(xy, dtype=float)
    s, t, (px, py), half = _ring_windows(xy, cell)
    if windows is not None:
        windows.append(half * STEP_CELLS)
    n = len(t)
    pad = int(half.max()) + 1  # at most a third of the ring (`_windows`)
    i = np.arange(n) + pad
    ends, size = (i - half, i + half + 1), 2 * half + 1
    dx, dy = (_window_means(v, pad, ends, size) - v for v in (px, py))
    norm = np.hypot(dx, dy)
    cap = CAP_CELLS * cell
    over = norm > cap
    dx[over] *= cap / norm[over]
    dy[over] *= cap / norm[over]
    # the moves at the ring's own vertices (arc length, around the ring)
    tt = np.concatenate([t, [s[-1]]])
    return xy + np.column_stack([np.interp(s, tt, np.concatenate([dx, dx[:1]])),
                                 np.interp(s, tt, np.concatenate([dy, dy[:1]]))])


def _window_means(v: np.ndarray, pad: int, ends: tuple, size: np.ndarray) -> np.ndarray:
    """The mean of `v` (one coordinate of a ring's points) over each point's window (`ends`: the first point
    and one past the last in `v` padded by `pad` points each side around the ring; `size` points)."""
    cs = np.concatenate([[0.0], np.cumsum(np.concatenate([v[len(v) - pad:], v, v[:pad]]))])
    return (cs[ends[1]] - cs[ends[0]]) / size


def _ring_windows(xy: np.ndarray, cell: float) -> tuple:
    """(arc length at each vertex of `xy`, at points `STEP_CELLS` apart, those points about the mean of the
    vertices (x, y), their windows' half-lengths in points). The windows are found at every other point
    (`_windows`, at twice the step: half the CPU; a window's chords turn alike over half a cell more or
    less), the points between taking their neighbours' (the lesser, and one more where those differ: a window
    still changes by at most one point from a point to the next)."""
    x, y = xy[:, 0], xy[:, 1]
    s = np.concatenate([[0.0], np.cumsum(np.hypot(np.diff(x), np.diff(y)))])
    n = max(int(np.ceil(s[-1] / (STEP_CELLS * cell))), 8)
    n += n % 2  # (even: the windows are found at every other point)
    t = np.arange(n) * (s[-1] / n)
    px, py = np.interp(t, s, x) - x.mean(), np.interp(t, s, y) - y.mean()
    step = 2 * STEP_CELLS
    half = np.empty(n, dtype=np.int64)
    half[0::2] = 2 * _windows(np.column_stack([px[0::2], py[0::2]]), int(REACH_CELLS / step),
                              int(round(MIN_CELLS / step)), int(LONG_REACH_CELLS / step), step)
    after = np.roll(half[0::2], -1)
    half[1::2] = np.minimum(half[0::2], after) + (half[0::2] != after)
    return s, t, (px, py), half


def _windows(p: np.ndarray, reach: int, first: int, long_reach: int | None = None,
             step: float = STEP_CELLS) -> np.ndarray:
    """Per point of the ring `p` (`step` mask cells apart): its window's half-length in points, the largest up
    to `reach` for which the chords to the window's two ends turn by at most `TURN` at every size from `first`
    on (0 where they turn more already at `first`), and on up to `long_reach` while they turn by at most 6
    `BIAS_CELLS` / the size (in cells: a straight stretch), then limited to grow by one point from a point to
    the next."""
    n = len(p)
    top = reach if long_reach is None else max(reach, long_reach)
    half = np.zeros(n, dtype=np.int64)
    alive = np.ones(n, dtype=bool)
    size = max(1, first)
    last = min(top, n // 3)
    # the ring padded by `last` points each side, x and y apart (contiguous): the chords from j to j + size
    # for j = i - size (the chord before i) to i (the one after it) in one subtraction
    x, y = (np.concatenate([p[n - last:, k], p[:, k], p[:last, k]]) for k in (0, 1))
    while size <= last and alive.any():
        bx = x[last:last + n + size] - x[last - size:last + n]
        by = y[last:last + n + size] - y[last - size:last + n]
        sq = bx * bx + by * by  # (squared lengths: one square root a pair, not a hypot a chord)
        cos = (bx[:n] * bx[size:] + by[:n] * by[size:]) / np.sqrt(np.maximum(sq[:n] * sq[size:], 1e-300))
        if size <= reach:
            alive &= cos >= np.cos(TURN)
        else:
            turn = 6 * BIAS_CELLS / (size * step)
            bent, sharp = cos < np.cos(min(TURN, turn)), cos < np.cos(min(TURN, SHARP * turn))
            alive &= ~(_runs_over(bent, int(NOISE_RUN_CELLS / step)) | sharp)
        half[alive] = size
        size += max(1, size // 4)
    half = np.minimum(half, top)
    return _cone(half)


def _runs_over(flag: np.ndarray, k: int) -> np.ndarray:
    """`flag` (around a ring) but for its runs of `k` points or fewer."""
    n = len(flag)
    if flag.all() or not flag.any():
        return flag
    start = int(np.argmin(flag))  # (the ring read from a point not flagged: no run wraps)
    f = np.concatenate([[False], flag[start:], flag[:start], [False]])
    edge = np.flatnonzero(f[1:] != f[:-1])
    first, stop = edge[0::2], edge[1::2]
    long = stop - first > k
    if long.all():
        return flag
    cut = np.empty(2 * int(long.sum()) + 2, dtype=np.int64)  # (0, the long runs' starts and ends, n)
    cut[0], cut[-1] = 0, n
    cut[1:-1:2], cut[2:-1:2] = first[long], stop[long]
    out = np.repeat(np.resize(np.asarray([False, True]), len(cut) - 1), np.diff(cut))
    return np.concatenate([out[n - start:], out[:n - start]])


def _cone(half: np.ndarray) -> np.ndarray:
    """min over the ring of half[j] + |i - j| (circular): running minima of half[j] - j forward and
    half[j] + j backward over the ring padded by max(half) each side (no cone reaches farther)."""
    n, m = len(half), int(half.max()) if len(half) else 0
    if m == 0:
        return half.copy()
    m = min(m, n)
    h = np.concatenate([half[n - m:], half, half[:m]])
    j = np.arange(len(h))
    fwd = np.minimum.accumulate(h - j) + j
    bwd = (np.minimum.accumulate((h + j)[::-1]))[::-1] - j
    return np.minimum(fwd, bwd)[m:m + n]

