"""Rule 5's band mean: where an outline turns too often for the smoothing's windows, the views of the tiles
that share a band are averaged there.

The smoothing along the outline (`smooth.smooth_ring`) stops each window where the chords to its ends turn:
on a meandering river (bends over ~10 mask cells) most windows stop at their shortest, so the owner's own
noise stays. Inside a band two or more tiles drew the same stretch, each with its own noise (a real model's
answer changes with its context): there their mean is a better measure of the boundary than any one view.
So on a ring whose windows stop short along most of it (median under `TURNING_CELLS`), each point inside
the shared part of two or more windows moves to the mean of the views' outlines there (the nearest point
of each view's outline, at most `FAR_CELLS` away and running the same way: not the far side of a thin
object nor another stretch), the move spread over `SPREAD_POINTS` points each way (no step where a view
ends) and capped as the smoothing's. Straight roads, field strips and corners keep the smoothing alone.
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
    lines = {t: shapely.boundary(shapely.orient_polygons(polygonal(views[t]))) for t in tiles}
    polys, moved = [], False
    for g in shapely.get_parts(shapely.orient_polygons(geom)).tolist():
        rings = [np.asarray(r.coords) for r in (g.exterior, *g.interiors)]
        new = [_ring_mean(xy, inner, lines, cell, windows, cap) for xy in rings]
        if all(a is b for a, b in zip(new, rings)):
            polys.append(g)
            continue
        got, moved = shapely.Polygon(new[0], new[1:]), True
        polys.append(got if got.is_valid else shapely.make_valid(got))
    if not moved:
        return geom
    return polygonal(shapely.union_all(polys), valid=True)


def _ring_mean(xy: np.ndarray, inner: dict, lines: dict, cell: float, windows: Callable, cap: float):
    """The closed ring `xy` moved as `band_mean` says; `xy` itself where it does not move."""
    cover = np.array([shapely.contains_xy(inner[t], xy[:-1, 0], xy[:-1, 1]) for t in inner])
    sel = np.flatnonzero(cover.sum(axis=0) >= 2)
    if not len(sel) or (half := windows(xy)) is None or np.median(half) >= TURNING_CELLS:
        return xy
    m = len(xy) - 1
    way = xy[(sel + 1) % m] - xy[(sel - 1) % m]
    total, count = np.zeros((len(sel), 2)), np.zeros(len(sel))
    for k, t in enumerate(inner):
        on = np.flatnonzero(cover[k, sel])
        if not len(on):
            continue
        at = shapely.line_locate_point(lines[t], shapely.points(xy[sel[on]]))
        near = shapely.get_coordinates(shapely.line_interpolate_point(lines[t], at))
        ahead = (shapely.get_coordinates(shapely.line_interpolate_point(lines[t], at + 0.5 * cell))
                 - shapely.get_coordinates(shapely.line_interpolate_point(lines[t], at - 0.5 * cell)))
        step = near - xy[sel[on]]
        cos = (ahead * way[on]).sum(axis=1) / np.maximum(np.hypot(*ahead.T) * np.hypot(*way[on].T), 1e-300)
        ok = (np.hypot(*step.T) <= FAR_CELLS * cell) & (cos > SAME_WAY)
        total[on[ok]] += step[ok]
        count[on[ok]] += 1
    two = count >= 2
    if not two.any():
        return xy
    move = np.zeros((m, 2))
    move[sel[two]] = total[two] / count[two, None]
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
