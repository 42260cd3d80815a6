"""The merge's rules 0-3 over one pass of pieces: a tile's pieces as parts (rule 0), the parts wholly in their
tile's own area (rule 1), the pairs of parts of different tiles that are one object because their masks
agree in the band both tiles see (rule 2), and the connected components those links make (rule 3).
`rules.merge_pass` runs them, then the resolver decides each component (rules 4-6)."""

from __future__ import annotations

from typing import Mapping

import numpy as np
import shapely

from ..tiling.frame import TileFrame
from ..tiling.piecekey import PARTS, part_order, tile_of
from ..vectorize.pieces import EDGE_MARGIN, MASK_CELL, Pieces
from .parts import (ELONGATED, JOIN_CELLS, LINK_CELLS, PAIR_CHUNK, SLIVER_CELLS, THICK_CELLS, Cols,
                    edge_dist, north_up_bounds, polygonal, regions, spread)
from .stats import MergeStats


def _explode(c: Cols, frames: Mapping[int, TileFrame], stats: MergeStats) -> Cols:
    """Rule 0: one row per part; parts of a cut piece get their own seam flags."""
    c.order = part_order(c.order, 0)
    odd = np.flatnonzero(~np.isin(shapely.get_type_id(c.geoms), (3, 6)))  # not (Multi)Polygon: areal part only
    for i in odd.tolist():
        c.geoms[i] = polygonal(c.geoms[i])
    multi = np.flatnonzero(shapely.get_num_geometries(c.geoms) > 1)
    units = {}
    for i in multi.tolist():
        frame = frames[int(tile_of(c.keys[i]))]
        u = regions(c.geoms[i], JOIN_CELLS * MASK_CELL * frame.pixel)
        if len(u) > 1:
            units[i] = u
    if not units:
        return c
    stats.parts_split += len(units)
    k = np.ones(len(c.geoms), dtype=np.int64)
    for i, u in units.items():
        k[i] = len(u)
    if k.max() >= PARTS:  # a mask of more separate regions than the order key numbers
        raise ValueError(f"a mask of {int(k.max())} separate regions: the merge orders {PARTS - 1} parts a piece")
    start = np.cumsum(k) - k
    rep = np.repeat(np.arange(len(k)), k)
    out = c.take(rep)
    out.order = out.order + (np.arange(len(rep)) - start[rep])
    for i, u in units.items():
        sl = slice(int(start[i]), int(start[i] + k[i]))
        g = np.empty(len(u), dtype=object)
        g[:] = u
        out.geoms[sl] = g
        if not c.complete[i]:
            e = edge_dist(g, frames[int(tile_of(c.keys[i]))])
            out.edge[sl] = e
            out.complete[sl] = e >= EDGE_MARGIN
    return out


def band_parts(pieces: Pieces, order, frames: Mapping[int, TileFrame]) -> Cols:
    """Rules 0 and 1 over one tile's pieces (in `order`): its parts that rule 2 compares (those not wholly
    in the tile's exclusive area), as `merge_pass` makes them."""
    c = _explode(Cols.of(pieces, order), frames, MergeStats())
    return c.take(np.flatnonzero(~_inside(c, frames)))


def _inside(c: Cols, frames: Mapping[int, TileFrame]) -> np.ndarray:
    """Rule 1: parts wholly in their tile's exclusive area (tiles with several passes: none)."""
    tiles = c.tiles
    ukeys = np.unique(c.keys)
    ut = tile_of(ukeys)
    multi_pass = np.unique(ut[1:][ut[1:] == ut[:-1]])
    excl = np.asarray([frames[int(t)].exclusive for t in tiles], dtype=object)
    inside = shapely.within(c.geoms, excl)
    if len(multi_pass):
        inside &= ~np.isin(tiles, multi_pass)
    return inside


def _links(c: Cols, cand: np.ndarray, frames, iou_min, ios_min, block, stats,
           known: Mapping | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Rule 2: pairs of candidate parts (one prompt, different tiles) whose masks agree in the shared band.
    `known`: verdicts computed before, by the pair's order keys (lower first); the rest are computed here."""
    e = np.zeros(0, dtype=np.int64)
    if len(cand) < 2:
        return e, e
    a, b = candidate_pairs(c, cand)
    stats.pairs_compared = int((block[a] != block[b]).sum()) if block is not None else len(a)
    if not len(a):
        return e, e
    ok = np.zeros(len(a), dtype=bool)
    todo = np.arange(len(a))
    if known:
        got = [known.get(k) for k in zip(c.order[a].tolist(), c.order[b].tolist())]
        have = np.asarray([g is not None for g in got], dtype=bool)
        ok[have] = [g for g in got if g is not None]
        todo = np.flatnonzero(~have)
    if len(todo):
        ok[todo] = pair_verdicts(c, a[todo], b[todo], frames, iou_min, ios_min)
    ok[~ok] = _cut_piece(c, a[~ok], b[~ok], a[ok], b[ok], frames)
    return a[ok], b[ok]


def _cut_piece(c: Cols, a, b, la, lb, frames) -> np.ndarray:
    """Per pair (`a`, `b`) rule 2 did not link: a complete part and a cut one where another part of the
    complete one's piece is cut and linked to the cut one (`la`, `lb`: the links): the tile's mask ran to its
    window edge, broken on the way by the model's noise, so its complete part is a half of what the other
    tile saw cut, and the pair gets rule 2's third look (`_continued`), as two cut parts do."""
    out = np.zeros(len(a), dtype=bool)
    one = np.flatnonzero(c.complete[a] != c.complete[b])
    if not len(one) or not len(la):
        return out
    piece = c.order // PARTS
    linked = set(zip(piece[np.r_[la, lb]].tolist(), np.r_[lb, la].tolist()))
    whole = np.where(c.complete[a[one]], a[one], b[one])
    cut = np.where(c.complete[a[one]], b[one], a[one])
    k = one[[(p, j) in linked for p, j in zip(piece[whole].tolist(), cut.tolist())]]
    if not len(k):
        return out
    _, _, both, inter = _band_overlap(c, a[k], b[k], frames)
    has = inter > 0
    out[k[has]] = _continued(c, a[k][has], b[k][has], both[has], inter[has], frames)
    return out


def _band_overlap(c: Cols, a: np.ndarray, b: np.ndarray, frames) -> tuple:
    """Per pair of parts: each clipped to the band their tiles share, their overlap there and its area."""
    bands, box = _bands(c.tiles[a], c.tiles[b], frames)
    ga, gb = _clip_pairs(c.geoms, a, b, bands, box)
    both = shapely.intersection(*_local(ga, gb))
    return ga, gb, both, shapely.area(both)


def candidate_pairs(c: Cols, cand: np.ndarray, among=None) -> tuple[np.ndarray, np.ndarray]:
    """Pairs (a, b), a < b, of candidate parts `cand` whose geometries meet, of one prompt and different
    piece keys (tiles or decoder passes). `among`: only pairs with at least one part in it (a bool per part)."""
    cg = c.geoms[cand]
    a, b = shapely.STRtree(cg).query(cg, predicate="intersects")
    sel = a < b
    a, b = cand[a[sel]], cand[b[sel]]
    sel = (c.keys[a] != c.keys[b]) & (c.prompt[a] == c.prompt[b])
    if among is not None:
        sel &= among[a] | among[b]
    return a[sel], b[sel]


def pair_verdicts(c: Cols, a: np.ndarray, b: np.ndarray, frames, iou_min, ios_min) -> np.ndarray:
    """Rule 2's verdict per pair of parts (a before b in order): do the two masks agree in the band their
    tiles share. A function of the two parts and their tiles' frames only, so computed at any time."""
    bands, box = _bands(c.tiles[a], c.tiles[b], frames)
    ok = np.zeros(len(a), dtype=bool)
    for lo in range(0, len(a), PAIR_CHUNK):  # the clipped copies of one chunk at a time
        sl = slice(lo, lo + PAIR_CHUNK)
        ok[sl] = _verdicts(c, a[sl], b[sl], bands[sl], box[sl], frames, iou_min, ios_min)
    return ok


def _verdicts(c: Cols, a, b, bands, box, frames, iou_min, ios_min) -> np.ndarray:
    """`pair_verdicts` over one chunk of pairs: each part clipped to the band once, its clipped copy and the
    pair's overlap there used by every look."""
    ga, gb = _clip_pairs(c.geoms, a, b, bands, box)
    area_a, area_b = shapely.area(ga), shapely.area(gb)
    both = shapely.intersection(*_local(ga, gb))
    inter = shapely.area(both)
    union = area_a + area_b - inter
    smaller = np.minimum(area_a, area_b)
    iou = np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)
    ios = np.divide(inter, smaller, out=np.zeros_like(inter), where=smaller > 0)
    ok = (iou >= iou_min) | (ios >= ios_min)
    retry = np.flatnonzero(~ok & (inter > 0))
    if len(retry):
        ok[retry] = _tolerant(c, a[retry], b[retry], ga[retry], gb[retry], area_a[retry], area_b[retry], frames,
                              ios_min, inter[retry])
    weak = np.flatnonzero(ok & (iou < iou_min))
    if len(weak):  # linked by containment alone: not where the smaller view only pokes into the band
        small = np.where(area_a[weak] <= area_b[weak], ga[weak], gb[weak])
        ok[weak] = ~_poking(c, a[weak], b[weak], bands[weak], small, area_a[weak], area_b[weak], frames)
    cut = np.flatnonzero(~ok & (inter > 0) & ~c.complete[a] & ~c.complete[b])
    if len(cut):
        ok[cut] = _continued(c, a[cut], b[cut], both[cut], inter[cut], frames)
    return ok


def _bands(ta: np.ndarray, tb: np.ndarray, frames) -> tuple[np.ndarray, np.ndarray]:
    """Per pair of tiles: the band both windows see (a polygon), and its bounds where it is an
    axis-aligned rectangle (north-up frames), NaN elsewhere."""
    cache: dict[tuple[int, int], int] = {}
    uniq: list = []
    which = np.empty(len(ta), dtype=np.int64)
    for i, (x, y) in enumerate(zip(ta.tolist(), tb.tolist())):
        k = (x, y) if x <= y else (y, x)
        j = cache.get(k)
        if j is None:
            j = cache[k] = len(uniq)
            uniq.append(frames[x].window.intersection(frames[y].window) if x != y else frames[x].window)
        which[i] = j
    ub = np.full((len(uniq), 4), np.nan)
    for j, band in enumerate(uniq):
        if not band.is_empty and shapely.equals(band, shapely.box(*band.bounds)):
            ub[j] = band.bounds
    arr = np.empty(len(uniq), dtype=object)
    arr[:] = uniq
    return arr[which], ub[which]


def _clip_pairs(geoms: np.ndarray, a, b, bands: np.ndarray, box: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Parts `a` and `b` of each pair clipped to the pair's band (`_clip`), each part once per band (a noisy
    model's fragments: one part in several pairs of one tile pair, a third of the clips under `wobble`).
    `bands`: one object per tile pair (`_bands`)."""
    n = len(a)
    _, band = np.unique(np.fromiter(map(id, bands.tolist()), dtype=np.uint64, count=n), return_inverse=True)
    part = np.r_[a, b].astype(np.int64)
    _, first, back = np.unique(part * (n + 1) + np.r_[band, band], return_index=True, return_inverse=True)
    got = _clip(geoms[part[first]], np.r_[bands, bands][first], np.r_[box, box][first])[back.ravel()]
    return got[:n], got[n:]


def clip_to(geoms: np.ndarray, areas: np.ndarray) -> np.ndarray:
    """`geoms` each clipped to its polygon of `areas` (tiles' cores: one object per tile, shared by its parts):
    by its bounds where it is a north-up rectangle (`clip_rects`: a tenth of an overlay's CPU on a mask's
    staircase, more on a noisy one), by an overlay elsewhere."""
    ids = np.fromiter(map(id, areas.tolist()), dtype=np.uint64, count=len(areas))
    _, first, back = np.unique(ids, return_index=True, return_inverse=True)
    box = np.full((len(first), 4), np.nan)
    for j, a in enumerate(areas[first].tolist()):
        if (bounds := north_up_bounds(a)) is not None:
            box[j] = bounds
    return _clip(geoms, areas, box[back.ravel()])


def _clip(geoms: np.ndarray, bands: np.ndarray, box: np.ndarray) -> np.ndarray:
    """`geoms` clipped to `bands`: to a rectangular band (`box` finite: north-up frames) by its bounds
    (`clip_rects`), to any other by an overlay."""
    out = geoms.copy()
    rect = np.isfinite(box[:, 0])
    out[rect] = clip_rects(geoms[rect], box[rect])
    if not rect.all():
        out[~rect] = shapely.intersection(geoms[~rect], bands[~rect])
    return out


def covered(geoms: np.ndarray, kept, tol: np.ndarray, need: np.ndarray) -> np.ndarray:
    """Per geometry of `geoms`: whether its area within `tol` of `kept` (one geometry for all, or one each)
    reaches `need`: the area of its buffer by `tol` over it (`quad_segs` 2). Decided without a buffer where the
    area under `kept` itself is enough, or where not even all a buffer can add (`added`) would be; `kept`
    buffered near the geometry only (`near_box`): a whole field strip or parcel buffered for a corner of it
    was most of a noisy tessellation's merge."""
    kept = np.broadcast_to(np.asarray(kept, dtype=object), np.shape(geoms))
    inter = shapely.area(shapely.intersection(geoms, kept))
    out = inter >= need
    k = np.flatnonzero(~out)
    k = k[inter[k] + added(kept[k], 1.02 * tol[k]) >= need[k] * (1 - 1e-9)]
    if len(k):
        part = clip_rects(kept[k], near_box(geoms[k], tol[k]))
        some = ~shapely.is_empty(part)  # (nothing of it within reach: not covered, as `need` > `inter` >= 0)
        k, near = k[some], shapely.buffer(part[some], tol[k[some]], quad_segs=2)
        out[k] = shapely.area(shapely.intersection(geoms[k], near)) >= need[k]
    return out


def near_box(geoms: np.ndarray, reach) -> np.ndarray:
    """Per geometry of `geoms`: its bounds grown by `reach` (one, or one each) and a millionth of it more, as
    `clip_rects` takes rectangles: what lies within `reach` of the geometry lies inside (a buffer by `reach` of
    another geometry cut to it is the same within the geometry's bounds). Unbounded for an empty one."""
    b = shapely.bounds(geoms)
    r = np.broadcast_to(np.asarray(reach, dtype=float), (len(b),)) * (1 + 1e-6)
    out = np.c_[b[:, :2] - r[:, None], b[:, 2:] + r[:, None]]
    empty = np.isnan(out).any(axis=1)
    out[empty] = [-np.inf, -np.inf, np.inf, np.inf]
    return out


def clip_rects(geoms: np.ndarray, rects: np.ndarray) -> np.ndarray:
    """`geoms` each clipped to its rectangle (`rects`: xmin, ymin, xmax, ymax). One whose bounds lie within
    it is itself (most parts in an overlap band: an overlay each that changed nothing); the others cut by
    GEOS's rectangle clip (the same area as an overlay, to 1e-12 relative, at a tenth of its CPU on the
    pixel staircases of masks), by an overlay where that clip's result is not valid or may be wrong
    (`_slanted_on_edge`)."""
    g = shapely.bounds(geoms)
    within = (g[:, 0] >= rects[:, 0]) & (g[:, 1] >= rects[:, 1]) & (g[:, 2] <= rects[:, 2]) & (g[:, 3] <= rects[:, 3])
    out = geoms.copy()
    cut = np.flatnonzero(~within)
    if len(cut):
        got = np.empty(len(cut), dtype=object)
        got[:] = [shapely.clip_by_rect(x, *r) for x, r in zip(geoms[cut].tolist(), rects[cut].tolist())]
        bad = ~shapely.is_valid(got) | _slanted_on_edge(geoms[cut], rects[cut])
        if bad.any():
            got[bad] = shapely.intersection(geoms[cut[bad]], shapely.box(*rects[cut[bad]].T))
        out[cut] = got
    return out


def _slanted_on_edge(geoms: np.ndarray, rects: np.ndarray) -> np.ndarray:
    """Per geometry: whether a vertex lies on its rectangle's sides and an edge of its rings is neither
    horizontal nor vertical. GEOS's rectangle clip (3.14) can return a valid polygon of the wrong region
    there (a V-shaped notch whose tip touches a side, the ring through a corner: the notch kept, the wedges
    beside it dropped); on pixel staircases it did not in 10^5 random clips on the pixel grid, and apart
    from the sides' lines (no vertex on them) it did not either. (A merge's parts are staircases: ~1 % of
    its CPU, no overlay.)"""
    n = shapely.get_num_coordinates(geoms)
    xy = shapely.get_coordinates(geoms)
    x, y = xy[:, 0], xy[:, 1]
    hit = ((x == np.repeat(rects[:, 0], n)) | (x == np.repeat(rects[:, 2], n)) | (y == np.repeat(rects[:, 1], n))
           | (y == np.repeat(rects[:, 3], n)))
    slant = np.r_[(x[1:] != x[:-1]) & (y[1:] != y[:-1]), False]  # (a step to the next geometry: cleared)
    start = np.cumsum(n) - n
    slant[start[n > 0][1:] - 1] = False
    out = np.zeros(len(geoms), dtype=bool)
    some = n > 0
    if some.any():
        out[some] = np.logical_or.reduceat(hit, start[some]) & np.logical_or.reduceat(slant, start[some])
    # a step from one ring to the next is no edge: where there are several, ring by ring
    k = np.flatnonzero(out & ((shapely.get_type_id(geoms) != 3) | (shapely.get_num_interior_rings(geoms) > 0)))
    if len(k):
        parts, of = shapely.get_parts(geoms[k], return_index=True)
        ring, part = shapely.get_rings(parts, return_index=True)
        xy, at = shapely.get_coordinates(ring, return_index=True)
        d = np.diff(xy, axis=0)
        out[k] = False
        out[k[of[part[at[1:][(at[1:] == at[:-1]) & (d[:, 0] != 0) & (d[:, 1] != 0)]]]]] = True
    return out


def _local(ga: np.ndarray, gb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both geometries of each pair moved by the same offset (the pair's lower-left corner) to small
    coordinates: GEOS overlays two near-identical masks (two tiles' views of one object, whose edges
    coincide) about twice as fast there as at map coordinates of 10^5-10^6, where its robustness
    fallbacks kick in. Areas of the overlay are unchanged but for rounding (about 1e-13 relative)."""
    lo = np.fmin(shapely.bounds(ga)[:, :2], shapely.bounds(gb)[:, :2])
    lo = np.where(np.isfinite(lo), lo, 0.0)
    out = []
    for g in (ga, gb):
        _, idx = shapely.get_coordinates(g, return_index=True)
        out.append(shapely.transform(g, lambda xy, idx=idx: xy - lo[idx]))
    return out[0], out[1]


def _tolerant(c: Cols, a, b, ga, gb, area_a, area_b, frames, ios_min, inter=None) -> np.ndarray:
    """Rule 2's second look: the smaller of each pair (`ga`, `gb`: both clipped to the band) lies >= `ios_min`
    within `LINK_CELLS` mask cells of the larger (masks that moved by a cell between tiles: `lies_near`;
    `inter`: the area they share)."""
    small_a = area_a <= area_b
    tol = LINK_CELLS * MASK_CELL * _pair_pixel(c, a, b, frames)
    gs, gl = np.where(small_a, ga, gb), np.where(small_a, gb, ga)
    return lies_near(gs, gl, tol, ios_min * np.minimum(area_a, area_b), inter)


def lies_near(gs: np.ndarray, gl: np.ndarray, tol: np.ndarray, need: np.ndarray, inter=None) -> np.ndarray:
    """Per pair: whether the area of `gs` within `tol` of `gl` (inside `gl`'s buffer by `tol`) reaches `need`.
    Only what lies within `tol` of `gl`'s bounds can count: where `gs`'s area there falls short already
    (neighbours meeting at their ends) the answer is no without a buffer; else `gl`'s stretch within `tol`
    of `gs`'s bounds is buffered (no other can reach `gs`), both overlaid near 0 (`_local`). `inter` (the
    area the two share, where known): no buffer either where it and all the buffer can add (`added`) fall
    short (two strips side by side). `tol` and `need`: one per pair, or one for all."""
    tol, need = (np.broadcast_to(np.asarray(x, dtype=float), (len(gs),)) for x in (tol, need))
    lb = shapely.bounds(gl)
    reach = shapely.area(clip_rects(gs, np.c_[lb[:, :2] - tol[:, None], lb[:, 2:] + tol[:, None]]))
    out = np.zeros(len(gs), dtype=bool)
    k = np.flatnonzero(reach >= need * (1 - 1e-9))  # (the rounding of two overlays' areas)
    if not len(k):
        return out
    gs, gl, tol = gs[k], gl[k], tol[k]
    sb = shapely.bounds(gs)
    gl = clip_rects(gl, np.c_[sb[:, :2] - tol[:, None], sb[:, 2:] + tol[:, None]])
    if inter is not None:  # (GEOS simplifies a buffer's input by a hundredth of its distance: 2 % to spare)
        go = inter[k] + added(gl, 1.02 * tol) >= need[k] * (1 - 1e-9)
        k, gs, gl, tol = k[go], gs[go], gl[go], tol[go]
    gs, gl = _local(gs, gl)
    out[k] = shapely.area(shapely.intersection(gs, shapely.buffer(gl, tol, quad_segs=2))) >= need[k]
    return out


def added(geoms: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Per (multi)polygon: at least the area its buffer by `r` adds to it (inf for other geometries): `r` x
    its boundary's length (a strip along each edge) + r^2 / 2 x the turn of its rings (a sector at each
    corner; every point of the buffer outside it lies in the strip of the edge or the sector of the corner
    nearest to it)."""
    out = np.full(len(geoms), np.inf)
    poly = np.isin(shapely.get_type_id(geoms), (3, 6))
    if not poly.any():
        return out
    g, rr = geoms[poly], np.asarray(r, dtype=float)[poly]
    parts, pi = shapely.get_parts(g, return_index=True)
    rings, ri = shapely.get_rings(parts, return_index=True)
    xy, ci = shapely.get_coordinates(rings, return_index=True)
    same = ci[1:] == ci[:-1]
    d = (xy[1:] - xy[:-1])[same]
    ring = ci[:-1][same]
    ang = np.arctan2(d[:, 1], d[:, 0])
    nxt = np.arange(1, len(ang) + 1)
    last = np.r_[ring[1:] != ring[:-1], True] if len(ring) else np.zeros(0, dtype=bool)
    first = np.flatnonzero(np.r_[True, ring[1:] != ring[:-1]]) if len(ring) else np.zeros(0, dtype=np.int64)
    nxt[last] = first  # each ring's last edge turns into its first
    turn = np.abs((ang[nxt % max(len(ang), 1)] - ang + np.pi) % (2 * np.pi) - np.pi) if len(ang) else ang
    per_ring = np.bincount(ring, weights=turn, minlength=len(rings))
    total = np.bincount(pi[ri], weights=per_ring, minlength=len(g))
    out[poly] = rr * shapely.length(g) + rr * rr / 2 * total
    return out


def _poking(c: Cols, a, b, bands, small, area_a, area_b, frames) -> np.ndarray:
    """Per pair linked by containment alone (IoS or the one-cell tolerance, IoU under `IOU_MIN`): the
    smaller's view in the band (`small`) is a strip poking into it, no deeper than `SLIVER_CELLS` mask cells
    (half a cell of rounding) from the band's edge, while its part goes on past the band on its own tile's side.
    There the other tile sees it at its own window edge: a strip that thin carries no shape, it lies within
    a cell of whatever the other tile drew there (the next line of a paragraph, fused with the strip), and
    the tile that sees it whole, away from its edge, says where it stops. No link; a lone strip is rule 6's."""
    small_a = area_a <= area_b
    s = np.where(small_a, a, b)
    cell = MASK_CELL * _pair_pixel(c, a, b, frames)
    inner = shapely.buffer(bands, -(SLIVER_CELLS + 0.5) * cell, join_style="mitre")
    poke = ~shapely.intersects(small, inner)
    if poke.any():
        k = np.flatnonzero(poke)
        poke[k] = _thick(shapely.difference(c.geoms[s[k]], bands[k]), cell[k])
    return poke


def _thick(geoms: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Per geometry: whether its buffer by -`r` is not empty (it holds a region 2 `r` across). Tried first
    on its stretch within 8 `r` of a point inside it (a part of it: what that stretch holds, it holds), the
    whole buffered only where that says no (a whole river is costly to erode, a square of it is not)."""
    out = np.zeros(len(geoms), dtype=bool)
    ok = ~shapely.is_empty(geoms)
    if not ok.any():
        return out
    k = np.flatnonzero(ok)
    p = shapely.get_coordinates(shapely.point_on_surface(geoms[k]))
    box = np.c_[p - 8 * r[k, None], p + 8 * r[k, None]]
    near = clip_rects(geoms[k], box)
    good = shapely.is_valid(near)
    out[k[good]] = ~shapely.is_empty(shapely.buffer(near[good], -r[k[good]], quad_segs=2))
    rest = k[~out[k]]
    if len(rest):
        out[rest] = ~shapely.is_empty(shapely.buffer(geoms[rest], -r[rest], quad_segs=2))
    return out


def _continued(c: Cols, a, b, both, inter, frames) -> np.ndarray:
    """Rule 2's third look, for two cut parts that disagree in the band (`both`: their overlap there, of area
    `inter`): they overlap over a region `THICK_CELLS` mask cells across (not a copy grown by a cell beside a
    neighbour: the two views share a stretch of one object) and their own-core areas meet across the core
    boundary, and it lies across each of them that is elongated (`_across`). Two tiles that each split one
    object, at different places, give halves no one-to-one comparison links. An overlap of less area than such
    a region can have is not buffered (a point half that width from its edges, 0.92 of it where the buffer's
    arcs are chords, has a disk of 2.68 r^2 around it)."""
    pix = _pair_pixel(c, a, b, frames)
    r = THICK_CELLS * MASK_CELL * pix / 2
    thick = inter >= 2.0 * r * r
    if thick.any():
        t = np.flatnonzero(thick)
        thick[t] = _thick(both[t], r[t])
    out = np.zeros(len(a), dtype=bool)
    if thick.any():
        t = np.flatnonzero(thick)
        own = [shapely.intersection(c.geoms[x], np.asarray([frames[int(k)].core for k in c.tiles[x].tolist()],
                                                           dtype=object)) for x in (a[t], b[t])]
        out[t] = shapely.distance(*own) < JOIN_CELLS * MASK_CELL * pix[t]
    if out.any():  # (not where one of them is elongated and the overlap covers a slice along it)
        t = np.flatnonzero(out)
        out[t] = [_across(both[k], c.geoms[a[k]], c.geoms[b[k]]) for k in t.tolist()]
    return out


def _across(both, ga, gb) -> bool:
    """Whether the overlap `both` of parts `ga` and `gb` spans at least half the width (its area over its
    length along its axis, `parts.spread`) of each of them that is `ELONGATED`, across that axis: halves of a
    strip split at different places overlap across the strip; a view that fused a strip with a stretch of the
    one beside it overlaps that one's view in a slice along it, however thick (long scene, held-out seed 283,
    every behaviour at once: a region grown ten metres into a 45 m strip linked to that strip's view; the
    owner's clean view of the first strip was then divided between the two, 0.777 / 0.760 IoU against the
    owners' own views' 0.946 / 0.950). Compact halves (a parcel split across its shorter side) are not
    asked: their own axis need not be the object's."""
    o = shapely.get_coordinates(both)  # (not empty: a region THICK_CELLS across)
    for g in (ga, gb):
        xy, _, u = spread(g)
        length = np.ptp(xy @ u)
        width = g.area / max(length, 1e-300)  # (a meandering river's own width, not its meanders')
        if length >= ELONGATED * width and np.ptp(o @ np.array([-u[1], u[0]])) < 0.5 * width:
            return False
    return True


def _pair_pixel(c: Cols, a, b, frames) -> np.ndarray:
    """Per pair of parts: the larger of their two tiles' pixel sizes (one frame per tile: lazy frames)."""
    ut, inv = np.unique(np.r_[c.tiles[a], c.tiles[b]], return_inverse=True)
    pix = np.asarray([frames[int(t)].pixel for t in ut.tolist()])[inv.ravel()]
    return np.maximum(pix[: len(a)], pix[len(a):])


#: A part at most this share of the area of each of two parts it links to is a speck beside them, not a
#: view of them: it cannot say they are one object.
SPECK_SHARE = 0.25


def _bridges(c: Cols, la: np.ndarray, lb: np.ndarray, frames, iou_min: float) -> tuple[np.ndarray, np.ndarray]:
    """Rule 3's guard: the links (`la`, `lb`) less those through which a speck joins two objects. A speck is
    a part linked to two parts (of any tiles) each at least 1 / `SPECK_SHARE` times its area (a false
    positive in the gap between two strips, two text lines, two parcels, often where four tiles meet: it
    lies within a cell of both, so rule 2 links it to each). Where the parts that dwarf it (specks left
    out) lie in two components or more of the links between parts that are not specks, it is the only
    bridge between views the other links keep apart: it keeps its links to the component of the part it
    overlaps most (the larger, then the lower-left, on a tie: the tiles' order does not decide) and drops
    the others. Views of one object link to each other where they agree, not through a speck alone. A speck
    whose dwarfing parts lie in one component (a small view of one object, where it runs into a tile's
    window edge, beside two large views of it) stands for that component (held-out seed 598: a speck between
    two strips linked to one strip's view and to such a view of the other joined them). A speck that agrees
    with a part where both tiles see (`_agree`: a view cut short by its own window, the same object as far as
    it sees) is a view of that part's component: it keeps its links there, to each such component, and drops
    the rest (held-out seed 759: a strip's view along a tile's window edge, 2 900 m^2 beside the two views of
    18 000 it agreed with, was the only view across a silent tile, and the strip came out as two)."""
    if not len(la):
        return la, lb
    src, dst = np.r_[la, lb], np.r_[lb, la]
    area = shapely.area(c.geoms)
    big = area[dst] * SPECK_SHARE >= area[src]
    speck = np.bincount(src[big], minlength=len(area)) >= 2
    if not speck.any():
        return la, lb
    plain = ~speck[la] & ~speck[lb]
    comp = _components(len(area), la[plain], lb[plain])
    by = np.argsort(src, kind="stable")  # each speck's links found by a search, not a scan of all links
    specks = np.flatnonzero(speck)
    spans = list(zip(specks.tolist(), np.searchsorted(src[by], specks).tolist(),
                     np.searchsorted(src[by], specks, side="right").tolist()))
    home = comp.copy()
    for i, lo, hi in spans:  # a speck of one object (a small view of it beside two large ones) stands for it
        other = dst[by[lo:hi]]
        dwarfing = np.unique(comp[other[(area[other] * SPECK_SHARE >= area[i]) & ~speck[other]]])
        home[i] = dwarfing[0] if len(dwarfing) == 1 else -1
    drop = np.zeros(len(la), dtype=bool)
    for i, lo, hi in spans:
        mine, other = by[lo:hi] % len(la), dst[by[lo:hi]]
        held = (area[other] * SPECK_SHARE >= area[i]) & (home[other] >= 0)
        if len(np.unique(home[other[held]])) < 2:
            continue
        agree = _agree(c, np.full(len(other), i), other, frames, iou_min)
        if agree.any():
            drop[mine[~agree & ~np.isin(home[other], home[other[agree]])]] = True
            continue
        k = other[held]
        inter = shapely.area(shapely.intersection(c.geoms[i], c.geoms[k]))
        b = shapely.bounds(c.geoms[k])
        best = k[np.lexsort((b[:, 1], b[:, 0], -area[k], -inter))[0]]
        drop[mine[(home[other] != home[best]) | speck[other] & (other != best)]] = True
    return la[~drop], lb[~drop]


def _agree(c: Cols, a: np.ndarray, b: np.ndarray, frames, iou_min: float) -> np.ndarray:
    """Per pair of parts: whether they agree where their tiles both see (IoU >= `iou_min` in the band, rule 2's
    first look) over a region `THICK_CELLS` mask cells across (two specks agreeing in a corner of the band
    say nothing; held-out seed 578)."""
    ga, gb, both, inter = _band_overlap(c, a, b, frames)
    out = inter >= iou_min * (shapely.area(ga) + shapely.area(gb) - inter)
    if out.any():
        k = np.flatnonzero(out)
        out[k] = _thick(both[k], THICK_CELLS * MASK_CELL * _pair_pixel(c, a[k], b[k], frames) / 2)
    return out


def _components(n: int, la: np.ndarray, lb: np.ndarray) -> np.ndarray:
    """Rule 3: the connected component of every part (a label per part)."""
    if not len(la):
        return np.arange(n)
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    _, comp = connected_components(coo_matrix((np.ones(len(la), np.int8), (la, lb)), shape=(n, n)),
                                   directed=False)
    return comp

