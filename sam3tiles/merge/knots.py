"""Rule 5's smoothed rings made one valid polygon again (`smooth.smooth_outline`): thinned where the smoothing
left a smooth curve, a knot it tied at a notch or a spur untangled, a fold refused.

A smoothed ring keeps the vertices of the pixel staircase it was, each moved (about two a mask cell); where
the smoothing's windows were long the outline is a smooth curve, and one vertex a cell draws it (half the
vertices to test for validity, to write and to read back). Where the two sides of a notch or a spur a cell
or two across move by different averages they cross, closing a loop of next to no area: collapsed to the
crossing point (`_untangled`), the rest of the smoothing stands; a loop of a mask cell or more is a fold, and
the part keeps the owners' outline.
"""

from __future__ import annotations

import re

import numpy as np
import shapely

#: Where the smoothing's windows are long (`smooth.MIN_CELLS` or more: a smooth stretch), the smoothed outline
#: keeps one vertex about every this many mask cells (the staircase's vertices, each moved, are ~2 a cell):
#: its chords lie within a few hundredths of a cell of the curve, within half this where the cap left a pixel
#: step in it. Near a shorter window (a corner, a meander) every vertex stays.
FEW_CELLS = 1.0


def valid_polygon(rings: list, long: list, cell: float):
    """The polygon of `rings` (a shell and its holes, smoothed; `long`: each one's `_fewer` flags, None where
    it was not smoothed) with the vertices `_fewer` keeps, where it is valid; else that of all their vertices,
    where that is; None where neither is."""
    few = [_fewer(r, k, cell) for r, k in zip(rings, long)]
    if any(f is not r for f, r in zip(few, rings)) and (got := shapely.Polygon(few[0], few[1:])).is_valid:
        return got
    return got if (got := shapely.Polygon(rings[0], rings[1:])).is_valid else None


def _fewer(xy: np.ndarray, long: np.ndarray | None, cell: float) -> np.ndarray:
    """The closed ring `xy` (smoothed; `long`: whether the smoothing's window was a long one, at points evenly
    spaced along it from its first vertex) with one vertex every `FEW_CELLS` where the windows are long, and
    every vertex where they are not or next to one that is not; `xy` itself where it was not smoothed (`long`
    None) or fewer than four vertices would stay."""
    if long is None:
        return xy
    s = np.concatenate([[0.0], np.cumsum(np.hypot(np.diff(xy[:, 0]), np.diff(xy[:, 1])))])
    at = np.minimum((s * (len(long) / max(s[-1], 1e-300))).astype(np.int64), len(long) - 1)
    short = ~long[at]
    keep = short | np.roll(short, 1) | np.roll(short, -1)
    step = np.floor(s / (FEW_CELLS * cell))
    keep[1:] |= step[1:] != step[:-1]
    keep[0] = keep[-1] = True
    return xy[keep] if keep.sum() >= 4 else xy


def valid_part(g, new: list, cell: float, long: list):
    """The polygon of `new` (the rings of the polygon `g`, moved; `long`: `valid_polygon`'s; a knot
    untangled in place, then thinned: `_untangled`), valid, with `g`'s holes; None where there is none.
    Repaired by GEOS's `structure` method, collapsed parts dropped: a spike out and back along itself (a pixel
    step folded over its neighbour) has no area, and leaves the polygon without it (the `linework` method
    keeps it as a line beside the polygon, at ~10 x the CPU on a long river's ring)."""
    got = valid_polygon(new, long, cell)
    if got is None:
        got = shapely.Polygon(new[0], new[1:])
        if len(new) == 1:  # (a hole-free ring that crosses itself: `_untangled`)
            got, new[0] = _untangled(got, new[0], cell)
            if got is not None and got.is_valid:
                got = valid_polygon(new, long, cell)  # (thinned, where that stays valid)
        if got is not None and not got.is_valid:
            got = shapely.make_valid(got, method="structure", keep_collapsed=False)
    ok = isinstance(got, shapely.Polygon) and not got.is_empty and len(got.interiors) == len(g.interiors)
    return got if ok else None


def _untangled(poly, xy: np.ndarray, cell: float, tries: int = 16):
    """(`poly` (invalid, the one ring `xy`) with each loop the smoothing tied where the ring crosses itself
    (`_crossing`) collapsed to the crossing point, the ring so moved); (None, `xy`) where a crossing closes a
    loop of a mask cell's area or more (a fold, not a knot: never one polygon without holes) or more than
    `tries` of them; (`poly`, `xy`) where the first self-intersection is no proper crossing (`make_valid`'s).
    A loop under a mask cell is nothing the masks could draw: the smoothing tied it at a notch or a spur a
    cell or two across, and the rest of the outline stands."""
    for _ in range(tries):
        found = _crossing(poly, xy, cell, where=True)
        if found is None:
            return poly, xy
        out = _collapsed(xy, *found, cell)
        if out is None:
            return None, xy
        xy, poly = out, shapely.Polygon(out)
        if poly.is_valid:
            return poly, xy
    return None, xy


def _collapsed(xy: np.ndarray, i: int, j: int, q: np.ndarray, cell: float):
    """The closed ring `xy` whose segments `i` < `j` cross at `q`, the smaller of its two loops there (the
    points between the segments, or the rest) moved onto `q`; None where that loop's area is a mask cell or
    more."""
    n = len(xy) - 1
    inner = np.arange(i + 1, j + 1)
    outer = np.concatenate([np.arange(j + 1, n), np.arange(0, i + 1)])
    loops = [k for k in (inner, outer) if len(k)]
    area = [abs(_shoelace(np.vstack([q, xy[k]]))) for k in loops]
    k = loops[int(np.argmin(area))]
    if min(area) >= cell * cell:
        return None
    out = xy.copy()
    out[k] = q
    out[-1] = out[0]
    return out


def _shoelace(xy: np.ndarray) -> float:
    x, y = xy[:, 0] - xy[0, 0], xy[:, 1] - xy[0, 1]
    return float((x * np.roll(y, -1) - np.roll(x, -1) * y).sum() / 2)


def _crossing(poly, xy: np.ndarray, cell: float, where: bool = False):
    """Whether the self-intersection GEOS finds first in `poly` (invalid, the one ring `xy`) is two of the ring's
    segments crossing properly (each one's ends a hundred-thousandth of a cell or more either side of the other)
    at a point no other segment passes within a millionth of a cell of. The area the ring encloses (even-odd:
    what `make_valid` keeps) is there two opposite sectors meeting at a point: not one polygon without holes,
    whatever the rest of the ring does. False where that is not so (a touch, a segment along another).
    `where`: (the two segments' indices, the point they cross at) in place of True, None in place of False."""
    found = re.fullmatch(r"Self-intersection\[(\S+) (\S+)\]", shapely.is_valid_reason(poly))
    if found is None:
        return None if where else False
    tol = 1e-6 * cell
    p = np.asarray([float(found[1]), float(found[2])])
    a, b = xy[:-1] - p, xy[1:] - p
    near = np.flatnonzero(_to_segments(a, b) <= tol)
    if len(near) != 2 or not (b[near] != a[near]).any(axis=1).all():  # (two segments, of some length)
        return None if where else False
    i, j = near.tolist()
    si, sj = _sides(a[i], b[i], np.stack([a[j], b[j]])), _sides(a[j], b[j], np.stack([a[i], b[i]]))
    if not (si[0] * si[1] < 0 and sj[0] * sj[1] < 0 and min(np.abs(si).min(), np.abs(sj).min()) >= 10 * tol):
        return None if where else False
    q = a[i] + (b[i] - a[i]) * (sj[0] / (sj[0] - sj[1]))  # where they cross (from `p`)
    proper = bool((_to_segments(a - q, b - q) <= tol).sum() == 2)
    if where:
        return (i, j, q + p) if proper else None
    return proper


def _sides(a: np.ndarray, b: np.ndarray, pts: np.ndarray) -> np.ndarray:
    """The signed distances of `pts` from the line through `a` and `b` (+ on its left)."""
    u, v = b - a, pts - a
    return (u[0] * v[:, 1] - u[1] * v[:, 0]) / np.hypot(u[0], u[1])


def _to_segments(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The distance from the origin to each segment `a[k]`-`b[k]`."""
    ab = b - a
    t = np.clip(-(a * ab).sum(axis=1) / np.maximum((ab * ab).sum(axis=1), 1e-300), 0.0, 1.0)
    return np.hypot(*(a + t[:, None] * ab).T)
