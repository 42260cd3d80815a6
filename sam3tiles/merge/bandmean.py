"""Rule 5's band mean: where an outline turns too often for the smoothing's windows, the views of the tiles
that share a band are averaged there.

The smoothing along the outline (`smooth.smooth_ring`) stops each window where the chords to its ends turn:
on a meandering river (bends over ~10 mask cells) most windows stop at their shortest, so the owner's own
noise stays. Inside a band two or more tiles drew the same stretch, each with its own noise (a real model's
answer changes with its context): there their mean is a better measure of the boundary than any one view.
So on a ring whose windows stop short along most of it (median under `TURNING_CELLS`), each point inside
the shared part of two or more windows moves to the mean of the views' outlines there (the nearest point
of each view's outline, at most `FAR_CELLS` away and running the same way: not the far side of a thin
object nor another stretch; taken every `STRIDE_CELLS`, linear between), the move spread over
`SPREAD_POINTS` points each way (no step where a view ends) and capped as the smoothing's; a ring the mean
would make cross itself keeps the smoothing alone. Straight roads, field strips and corners keep the
smoothing alone.
"""

from __future__ import annotations

from typing import Callable, Mapping

import numpy as np
import shapely

from ..tiling.frame import TileFrame
from ..vectorize.pieces import EDGE_MARGIN
from .parts import polygonal

#: A ring whose smoothing windows (half-lengths, mask cells) have a median under this turns too often for
#: them (a meander): its points in the bands take the views' mean.
TURNING_CELLS = 30.0
#: A view's outline further than this many mask cells from a point is another stretch (or a decision, not a
#: noise): it is left out of that point's mean.
FAR_CELLS = 3.0
#: The least cosine between the ring's direction at a point and a view's direction at its nearest point (the
#: far side of a thin object runs the other way).
SAME_WAY = 0.5
#: The views' mean is taken at points about this many mask cells apart (the noise is smooth over ~12), and
#: linear between.
STRIDE_CELLS = 2.0
#: The moves are averaged over this many of the ring's points each way.
SPREAD_POINTS = 6


def band_mean(geom, views: Mapping[int, object], frames: Mapping[int, TileFrame], tiles: list, cell: float,
              windows: Callable, cap: float):
    """`geom` (a (multi)polygon: the smoothed outline) with the points of its meandering rings (`windows`:
    ring -> each vertex's window half-length in mask cells, None for a ring the smoothing leaves) that lie in
    the windows of two or more `tiles` moved to the mean of those tiles' `views` (at most `cap`); `geom`
    itself where none moves."""
    inner = {t: shapely.buffer(frames[t].window, -EDGE_MARGIN * frames[t].pixel, join_style="mitre")
             for t in tiles}
    lines = {}  # (each view's outline, oriented, made for the rings that take the mean only)

    def line(t):
        if t not in lines:
            lines[t] = shapely.boundary(shapely.orient_polygons(polygonal(views[t])))
        return lines[t]
    polys, moved = [], False
    for g in shapely.get_parts(shapely.orient_polygons(geom)).tolist():
        rings = [np.asarray(r.coords) for r in (g.exterior, *g.interiors)]
        new = [_ring_mean(xy, inner, line, cell, windows, cap) for xy in rings]
        if all(a is b for a, b in zip(new, rings)):
            polys.append(g)
            continue
        got = shapely.Polygon(new[0], new[1:])
        moved |= got.is_valid
        polys.append(got if got.is_valid else g)  # (a ring the mean made cross itself keeps the smoothing)
    if not moved:
        return geom
    return polygonal(shapely.union_all(polys), valid=True)


def _ring_mean(xy: np.ndarray, inner: dict, line: Callable, cell: float, windows: Callable, cap: float):
    """The closed ring `xy` moved as `band_mean` says; `xy` itself where it does not move."""
    cover = np.array([shapely.contains_xy(inner[t], xy[:-1, 0], xy[:-1, 1]) for t in inner])
    sel = np.flatnonzero(cover.sum(axis=0) >= 2)
    if not len(sel) or (half := windows(xy)) is None or np.median(half) >= TURNING_CELLS:
        return xy
    m = len(xy) - 1
    every, sel = sel, sel[::max(1, int(STRIDE_CELLS * cell * m / np.hypot(*np.diff(xy, axis=0).T).sum()))]
    way = xy[(sel + 1) % m] - xy[(sel - 1) % m]
    total, count = np.zeros((len(sel), 2)), np.zeros(len(sel))
    for k, t in enumerate(inner):
        on = np.flatnonzero(cover[k, sel])
        if not len(on):
            continue
        near, ahead = _nearest(xy[sel[on]], line(t), FAR_CELLS * cell)
        step = near - xy[sel[on]]
        cos = (ahead * way[on]).sum(axis=1) / np.maximum(np.hypot(*ahead.T) * np.hypot(*way[on].T), 1e-300)
        ok = np.isfinite(step[:, 0]) & (np.hypot(*step.T) <= FAR_CELLS * cell) & (cos > SAME_WAY)
        total[on[ok]] += step[ok]
        count[on[ok]] += 1
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


def _nearest(pts: np.ndarray, line, far: float) -> tuple[np.ndarray, np.ndarray]:
    """(The nearest point of `line` (a view's outline) to each of `pts`, the line's direction there over its
    segment and one each side (a mask's staircase: over one pixel step it runs across)); NaN where none lies
    within `far`."""
    xy, part = shapely.get_coordinates(shapely.get_parts(line), return_index=True)
    near, ahead = np.full((len(pts), 2), np.nan), np.full((len(pts), 2), np.nan)
    same = np.flatnonzero(part[1:] == part[:-1])  # segment j: xy[j] -> xy[j + 1]
    if not len(same):
        return near, ahead
    tree = shapely.STRtree(shapely.linestrings(np.stack([xy[same], xy[same + 1]], axis=1)))
    k, best = tree.query_nearest(shapely.points(pts), max_distance=far, all_matches=False)
    a, d = xy[same[best]], xy[same[best] + 1] - xy[same[best]]
    u = np.clip(((pts[k] - a) * d).sum(axis=1) / np.maximum((d * d).sum(axis=1), 1e-300), 0.0, 1.0)
    near[k] = a + u[:, None] * d
    j = same[best]
    lo = np.where((j > 0) & (part[np.maximum(j - 1, 0)] == part[j]), j - 1, j)
    hi = np.where((j + 2 < len(xy)) & (part[np.minimum(j + 2, len(xy) - 1)] == part[j]), j + 2, j + 1)
    ahead[k] = xy[hi] - xy[lo]
    return near, ahead
