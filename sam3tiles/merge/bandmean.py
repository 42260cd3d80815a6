"""Rule 5's band mean: where an outline turns too often for the smoothing's windows, the views of the tiles
that share a band are averaged there.

The smoothing along the outline (`smooth.smooth_ring`) stops each window where the chords to its ends turn:
on a meandering river (bends over ~10 mask cells) most windows stop at their shortest, so the owner's own
noise stays. Inside a band two or more tiles drew the same stretch, each with its own noise (a real model's
answer changes with its context): there their mean is a better measure of the boundary than any one view.
So on a ring whose windows stop short along most of it (more than half of them, at points evenly spaced
along the ring as the smoothing takes them, under `TURNING_CELLS`), each point inside
the shared part of two or more windows moves to the mean of the views' outlines there (the nearest point
of each view's outline, at most `FAR_CELLS` away and running the same way: not the far side of a thin
object nor another stretch; taken every `STRIDE_CELLS`, linear between), the move spread over
`SPREAD_POINTS` points each way (no step where a view ends) and capped as the smoothing's; a part the mean
would make invalid (a ring crossing itself) keeps the smoothing alone. Straight roads, field strips and
corners keep the smoothing alone. The mean runs inside `smooth.smooth_outline`, ring by ring after the
smoothing: one validity test, one union and the moved area from the rings (no overlay).
"""

from __future__ import annotations

from typing import Callable, Mapping

import numpy as np
import shapely

from ..tiling.frame import TileFrame
from ..vectorize.pieces import EDGE_MARGIN
from .parts import ccw, north_up_bounds, polygonal

#: A ring whose smoothing windows (half-lengths, mask cells) are under this along more than half of it turns
#: too often for them (a meander): its points in the bands take the views' mean.
TURNING_CELLS = 30.0
#: A view's outline further than this many mask cells from a point is another stretch (or a decision, not a
#: noise): it is left out of that point's mean.
FAR_CELLS = 3.0
#: The least cosine between the ring's direction at a point and a view's direction at its nearest point (the
#: far side of a thin object runs the other way).
SAME_WAY = 0.5
#: The views' mean is taken at points about this many mask cells apart (the noise is smooth over ~12), and
#: linear between.
STRIDE_CELLS = 6.0
#: The moves are averaged over this many of the ring's points each way.
SPREAD_POINTS = 6


def band_mean(views: Mapping[int, object], frames: Mapping[int, TileFrame], tiles: list, cell: float,
              cap: float) -> Callable:
    """(ring, the smoothing's windows along it (mask cells, points `smooth.STEP_CELLS` apart), hole) -> the
    ring (smoothed) with, where more than half of its windows are under `TURNING_CELLS` (a meander), its
    points in the windows of two or more `tiles` moved to the mean of those tiles' `views` (at most `cap`);
    the ring itself where none moves (`smooth.smooth_outline`'s `mean`)."""
    made = {}  # (the tiles' windows less their margins, the views' outlines: made for the rings that take it)

    def inner():
        if "inner" not in made:
            made["inner"] = {t: _inner(frames[t].window, EDGE_MARGIN * frames[t].pixel) for t in tiles}
        return made["inner"]

    def line():
        if "line" not in made:
            made["line"] = _segments([_areal(views[t]) for t in inner()], cell, FAR_CELLS * cell)
        return made["line"]

    def mean(xy: np.ndarray, windows: np.ndarray, hole: bool) -> np.ndarray:
        if (windows < TURNING_CELLS).mean() <= 0.5:
            return xy
        way = 1.0 if ccw(xy) != hole else -1.0  # (as the views run)
        return _ring_mean(xy, inner(), line, cell, cap, way)
    return mean


def _ring_mean(xy: np.ndarray, inner: dict, line: Callable, cell: float, cap: float, way: float = 1.0):
    """The closed ring `xy` moved as `band_mean` says (`way`: -1 where it runs against its views: a shell
    clockwise or a hole counter-clockwise); `xy` itself where it does not move."""
    cover = np.array([_inside(inner[t], xy[:-1]) for t in inner])
    sel = np.flatnonzero(cover.sum(axis=0) >= 2)
    if not len(sel):
        return xy
    m = len(xy) - 1
    every, sel = sel, sel[::max(1, int(STRIDE_CELLS * cell * m / np.hypot(*np.diff(xy, axis=0).T).sum()))]
    way = way * (xy[(sel + 1) % m] - xy[(sel - 1) % m])
    view, on = np.nonzero(cover[:, sel])  # (each view's points: all of them at once)
    near, ahead = _nearest(xy[sel[on]], view, line(), FAR_CELLS * cell)
    step = near - xy[sel[on]]
    cos = (ahead * way[on]).sum(axis=1) / np.maximum(np.hypot(*ahead.T) * np.hypot(*way[on].T), 1e-300)
    ok = np.isfinite(step[:, 0]) & (np.hypot(*step.T) <= FAR_CELLS * cell) & (cos > SAME_WAY)
    total = np.column_stack([np.bincount(on[ok], step[ok, 0], len(sel)), np.bincount(on[ok], step[ok, 1], len(sel))])
    count = np.bincount(on[ok], minlength=len(sel))
    two = count >= 2
    if not two.any():
        return xy
    mean = np.zeros((len(sel), 2))
    mean[two] = total[two] / count[two, None]
    move = np.zeros((m, 2))
    move[every] = np.column_stack([np.interp(every, sel, mean[:, 0]), np.interp(every, sel, mean[:, 1])])
    k = min(SPREAD_POINTS, m // 3)
    cs = np.concatenate([np.zeros((1, 2)), np.cumsum(np.concatenate([move[m - k:], move, move[:k]]), axis=0)])
    i = np.arange(m) + k
    move = (cs[i + k + 1] - cs[i - k]) / (2 * k + 1)
    size = np.hypot(*move.T)
    over = size > cap
    move[over] *= (cap / size[over])[:, None]
    out = xy.copy()
    out[:-1] += move
    out[-1] = out[0]
    return out


def _areal(view):
    """A tile's `view`: a (multi)polygon as it is (a vectorised mask's parts: valid, as `smooth._pairs` takes
    them), else its areal part (`parts.polygonal`)."""
    return view if view.geom_type in ("Polygon", "MultiPolygon") else polygonal(view)


def _inner(window, margin: float):
    """`window` less `margin` along its edges; its bounds where it is a north-up rectangle (`_inside` needs no
    geometry test)."""
    box = north_up_bounds(window)
    if box is not None and min(box[2] - box[0], box[3] - box[1]) > 2 * margin:
        return (box[0] + margin, box[1] + margin, box[2] - margin, box[3] - margin)
    return shapely.buffer(window, -margin, join_style="mitre")


def _inside(area, xy: np.ndarray) -> np.ndarray:
    """Which of the points `xy` lie in the interior of `area` (`shapely.contains_xy`; `_inner`'s bounds: between
    them)."""
    if not isinstance(area, tuple):
        return shapely.contains_xy(area, xy[:, 0], xy[:, 1])
    x0, y0, x1, y1 = area
    return (xy[:, 0] > x0) & (xy[:, 0] < x1) & (xy[:, 1] > y0) & (xy[:, 1] < y1)


def _segments(views: list, piece: float, far: float):
    """The outlines of `views` ((multi)polygons, oriented) as `_nearest` reads them: their segments (first
    points and steps, x and y apart), each coordinate's part, each segment's first coordinate, and a grid of
    cells `far` + half a `piece` wide holding the segments cut into pieces at most `piece` long (a point's
    nearest segment within `far` has a piece whose midpoint lies in the point's cell or one beside it): the
    pieces' keys (view, cell), sorted, each one's segment; None where there is no segment. (One sort of the
    pieces' keys: no tree to build, and the segments far from the bands cost no more than their key.)"""
    parts, owner = shapely.get_parts(shapely.boundary(shapely.orient_polygons(np.asarray(views, dtype=object))),
                                     return_index=True)
    xy, part = shapely.get_coordinates(parts, return_index=True)
    same = np.flatnonzero(part[1:] == part[:-1])
    if not len(same):
        return None
    view = owner[part[same]]
    x, y = xy[:, 0].copy(), xy[:, 1].copy()  # (x and y apart, contiguous: gathers a column at a time)
    ax, ay = x[same], y[same]
    dx, dy = x[same + 1] - ax, y[same + 1] - ay
    cuts = np.maximum(np.ceil(np.hypot(dx, dy) / piece), 1).astype(np.int64)
    if (cuts == 1).all():  # (a mask's staircase: its segments a pixel or a few long, under a piece)
        seg, f = np.arange(len(same)), 0.5
    else:
        seg = np.repeat(np.arange(len(same)), cuts)
        f = (np.arange(len(seg)) - np.repeat(np.cumsum(cuts) - cuts, cuts) + 0.5) / cuts[seg]
    mid = np.column_stack([ax[seg] + f * dx[seg], ay[seg] + f * dy[seg]])
    size = far + piece / 2
    x0, y0, x1, y1 = shapely.total_bounds(parts)
    lo = np.asarray([x0, y0]) - 2 * size
    shape = np.floor((np.asarray([x1, y1]) + 2 * size - lo) / size).astype(np.int64) + 1
    key = _keys(view[seg], np.floor((mid - lo) / size).astype(np.int64), shape)
    order = np.argsort(key, kind="stable")
    return (ax, ay, dx, dy), part, same, (key[order], seg[order], lo, size, shape, far)


def _keys(view: np.ndarray, cell: np.ndarray, shape: np.ndarray) -> np.ndarray:
    """The grid key of each (view, cell (column, row)): a view's cells of one column in a run, by row."""
    return (view * shape[0] + cell[:, 0]) * shape[1] + cell[:, 1]


def _nearest(pts: np.ndarray, view: np.ndarray, segments, far: float) -> tuple[np.ndarray, np.ndarray]:
    """(The nearest point of the outline of view `view` (each point's; `_segments`, made for `far` or more) to
    each of `pts`, the outline's direction there over its segment and one each side (a mask's staircase: over
    one pixel step it runs across)); NaN where none lies within `far`. Two segments as near: the first."""
    near, ahead = np.full((len(pts), 2), np.nan), np.full((len(pts), 2), np.nan)
    if segments is None or not len(pts):
        return near, ahead
    (ax, ay, dx, dy), part, same, (keys, seg, lo, size, shape, made) = segments
    if far > made:
        raise ValueError(f"the outlines' grid was made for {made}, not {far}")
    cell = np.clip(np.floor((pts - lo) / size).astype(np.int64), 1, shape - 2)  # (off the grid: nothing near)
    # per point, its cell's column and the two beside it, each a run of keys over three rows (point by point:
    # each point's candidates in one run)
    mid = np.column_stack([_keys(view, cell + [step, 0], shape) for step in (-1, 0, 1)]).ravel()
    first = np.searchsorted(keys, mid - 1, "left")
    count = np.searchsorted(keys, mid + 1, "right") - first
    q = np.repeat(np.arange(len(pts)), count.reshape(-1, 3).sum(axis=1))
    cand = seg[np.repeat(first - np.cumsum(count) + count, count) + np.arange(len(q))]
    px, py = pts[:, 0][q], pts[:, 1][q]
    sx, sy, tx, ty = ax[cand], ay[cand], dx[cand], dy[cand]
    u = np.clip(((px - sx) * tx + (py - sy) * ty) / np.maximum(tx * tx + ty * ty, 1e-300), 0.0, 1.0)
    fx, fy = sx + u * tx, sy + u * ty
    got = (px - fx) ** 2 + (py - fy) ** 2  # (squared: their order, one root a point)
    has = np.flatnonzero(np.bincount(q, minlength=len(pts)))
    if not len(has):
        return near, ahead
    starts = np.searchsorted(q, has)
    best = np.full(len(pts), np.inf)
    best[has] = np.minimum.reduceat(got, starts)
    tie = np.where(got == best[q], cand, len(same))
    s = np.full(len(pts), len(same))
    s[has] = np.minimum.reduceat(tie, starts)
    k = np.flatnonzero(np.sqrt(best) <= far)
    row = np.zeros(len(pts), dtype=np.int64)  # (a row of the chosen segment: its pieces give one foot)
    hit = np.flatnonzero(tie == s[q])
    row[q[hit]] = hit
    near[k] = np.column_stack([fx[row[k]], fy[row[k]]])
    # the outline's direction over the chosen segment and one each side of it in its part
    j = same[s[k]]
    back = np.where((j > 0) & (part[np.maximum(j - 1, 0)] == part[j]), s[k] - 1, s[k])
    on = np.where((j + 2 < len(part)) & (part[np.minimum(j + 2, len(part) - 1)] == part[j]), s[k] + 1, s[k])
    ahead[k] = np.column_stack([ax[on] + dx[on] - ax[back], ay[on] + dy[on] - ay[back]])
    return near, ahead
