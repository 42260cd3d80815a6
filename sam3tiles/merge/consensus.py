"""Rule 5's move to the views' consensus (`shift_views`): where the tiles' views of one object differ by a
steady offset (a view grown, shrunk or shifted beside another), each tile's part in its core is moved back
by its own growth and shift, estimated from every pair of views (see `merge.smooth`, which decides when)."""

from __future__ import annotations

from typing import Mapping

import numpy as np
import shapely

from ..tiling.frame import TileFrame
from .links import clip_rects
from .parts import CAP_CELLS, union_parts

#: GEOS's default mitre limit (a mitre reaches at most this many buffer distances from its corner).
MITRE_LIMIT = 5.0


def shift_views(geom, pairs, tiles, frames: Mapping[int, TileFrame], cell: float):
    """`geom` (the owners' stitch) where each tile's view is moved to the views' consensus. Views that differ
    steadily (a view grown, shrunk or shifted beside another: one decision for the whole instance, or the
    tile's own grid of mask cells) carry that difference over the whole of their tile, so each pair's signed
    distances are read as a growth plus a shift (`_pair_fit`), each tile's own growth and shift estimated
    from every pair (least squares, each group of linked tiles centred on its mean: no one view is the truth),
    and the part in each tile's core is moved back by them (`moved_parts`: the outline near the core buffered
    and shifted, clipped to the core: no step at a core line but the views' own), each at most `CAP_CELLS`
    cells. `geom` itself where every move is under a tenth of a cell."""
    index = {t: k for k, t in enumerate(tiles)}
    rows = np.zeros((len(pairs), len(tiles)))
    rhs, weight = np.zeros((len(pairs), 3)), np.zeros(len(pairs))
    for r, (a, b, d, sides) in enumerate(pairs):
        rows[r, index[a]], rows[r, index[b]] = 1.0, -1.0
        rhs[r], weight[r] = _pair_fit(d, _normals(sides)), np.sqrt(len(d))
    own = np.linalg.lstsq(rows * weight[:, None], rhs * weight[:, None], rcond=None)[0]  # min norm: groups sum to 0
    own = np.clip(own, -CAP_CELLS * cell, CAP_CELLS * cell)
    if not (np.abs(own) >= 0.1 * cell).any():
        return geom
    return moved_parts(geom, own, tiles, frames, cell)


def moved_parts(geom, own: np.ndarray, tiles, frames: Mapping[int, TileFrame], cell: float):
    """`geom` with each tile's part in its core grown by -g and shifted back by (dx, dy) (`own`, a row a
    tile). Each tile's move starts from `geom` near its core only (clipped to the core grown by what the
    buffer and the shift can carry in, a mitre's reach included): the buffer of the whole object for every
    tile cost a river across 20 tiles 20 whole buffers. The parts, each in its own core, joined as
    `parts.union_parts` joins a stitch's."""
    parts = []
    for t, (g, dx, dy) in zip(tiles, own):
        core = frames[t].core
        reach = MITRE_LIMIT * abs(g) + abs(dx) + abs(dy) + 2 * cell
        x0, y0, x1, y1 = core.bounds
        near = clip_rects(np.asarray([geom], dtype=object),
                          np.asarray([[x0 - reach, y0 - reach, x1 + reach, y1 + reach]]))[0]
        moved = _grown(near, -g, np.asarray([dx, dy])) if abs(g) >= 0.1 * cell else \
            shapely.transform(near, lambda xy, dx=dx, dy=dy: xy - [dx, dy])
        parts.append(shapely.intersection(moved, core))
    rest = geom.difference(shapely.union_all([frames[t].core for t in tiles]))
    return union_parts(np.asarray([rest, *parts], dtype=object))


def _grown(geom, by: float, shift: np.ndarray):
    """`geom` buffered by `by` (mitre joins) and moved by -`shift`, the buffer taken at small coordinates
    (`geom`'s lower-left corner at the origin): at map coordinates of 10^5-10^6 GEOS's buffer of a pixel
    staircase falls back to its slower robust forms (3 x the CPU on a river's part). At map coordinates
    where the result moved back is not valid (a vertex rounded across an edge)."""
    lo = np.asarray(geom.bounds[:2]) if not geom.is_empty else np.zeros(2)
    small = shapely.buffer(shapely.transform(geom, lambda xy: xy - lo), by, join_style="mitre",
                           mitre_limit=MITRE_LIMIT)
    out = shapely.transform(small, lambda xy: xy + (lo - shift))
    if out.is_valid:
        return out
    return shapely.transform(shapely.buffer(geom, by, join_style="mitre", mitre_limit=MITRE_LIMIT),
                             lambda xy: xy - shift)


def _pair_fit(d: np.ndarray, n: np.ndarray) -> np.ndarray:
    """(growth, shift x, shift y) of one view against another from the signed distances `d` at boundary
    points with outward normals `n` (d = growth + shift . normal; least squares, once more without the
    points off the fit by over twice its median absolute residual: a stretch one view drew alone). A shift
    along a direction no normal sees is 0."""
    a = np.column_stack([np.ones(len(d)), n])
    fit = np.linalg.lstsq(a, d, rcond=0.2)[0]
    res = np.abs(a @ fit - d)
    keep = res <= 2 * np.median(res) + 1e-9
    out = np.linalg.lstsq(a[keep], d[keep], rcond=0.2)[0] if keep.sum() >= 3 else fit
    return out


def _normals(sides) -> np.ndarray:
    """The outward normals at the points `smooth._pair_signed` measured, both sides (only `shift_views` needs them:
    taken when it runs)."""
    sides, cell, kept = sides
    return np.concatenate([_outward(xy, own, cell, pick) for xy, own, pick in sides])[kept]


def _outward(xy: np.ndarray, poly, cell: float, pick=slice(None)) -> np.ndarray:
    """Unit normals at the points `xy[pick]` along a boundary of `poly` (its points `xy`), pointing out of it."""
    if len(xy) < 2:
        return np.zeros((len(xy[pick]), 2))
    i = np.arange(len(xy))[pick]
    # np.gradient's central differences (one-sided at the ends) at the picked points only
    tan = np.where((i == 0)[:, None], xy[np.minimum(i + 1, len(xy) - 1)] - xy[i], 0.0)
    end = i == len(xy) - 1
    tan[end] = xy[i[end]] - xy[i[end] - 1]
    mid = ~(end | (i == 0))
    tan[mid] = (xy[i[mid] + 1] - xy[i[mid] - 1]) / 2.0
    xy = xy[i]
    n = np.column_stack([tan[:, 1], -tan[:, 0]]) / np.maximum(np.hypot(tan[:, 0], tan[:, 1]), 1e-300)[:, None]
    probe = xy + 0.3 * cell * n
    return np.where(shapely.contains_xy(poly, probe[:, 0], probe[:, 1])[:, None], -n, n)
