"""Rule 6 of `sam3tiles.merge`: a cut part that links to nothing and lies outside its own core, against
another tile's part (another object's edge as this tile saw it), is a sliver, dropped. The tolerance is
`SLIVER_CELLS` mask cells of the part's tile."""

from __future__ import annotations

import numpy as np
import shapely

from ..tiling.frame import TileFrame
from ..vectorize.pieces import MASK_CELL
from .parts import SLIVER_CELLS


def sliver_tol(frame: TileFrame) -> float:
    """Rule 6's distance in CRS units: `SLIVER_CELLS` mask cells of the tile."""
    return SLIVER_CELLS * MASK_CELL * frame.pixel


#: `near` bits: a part of another tile lies within the sliver tolerance, of any prompt / of the part's own.
NEAR_ANY, NEAR_SAME = 1, 2


def near_other_tile(idx: np.ndarray, geoms, tiles, prompts, frames, among=None) -> np.ndarray:
    """Per part in `idx`: `NEAR_ANY` where a part of another tile (one of `among`, default all) lies within
    the sliver tolerance, with `NEAR_SAME` where one of the same prompt does."""
    out = np.zeros(len(idx), dtype=np.uint8)
    pool = np.arange(len(geoms)) if among is None else np.asarray(among, dtype=np.int64)
    if not len(idx) or not len(pool):
        return out
    tree = shapely.STRtree(geoms[pool])
    for k, i in enumerate(idx.tolist()):
        near = pool[tree.query(geoms[i], predicate="dwithin", distance=sliver_tol(frames[int(tiles[i])]))]
        other = tiles[near] != tiles[i]
        if other.any():
            out[k] = NEAR_ANY | (NEAR_SAME if (prompts[near][other] == prompts[i]).any() else 0)
    return out


def lone_slivers(lone: np.ndarray, geoms, tiles, prompts, frames, near, owned_area) -> set[int]:
    """Unmatched cut parts outside their own core that lie against another object (rule 6).
    `near`: per part, another tile's part is known to lie within the tolerance (from an earlier pass)."""
    if not len(lone):
        return set()
    outside = lone[owned_area[lone] <= 0.05 * shapely.area(geoms[lone])]
    if not len(outside):
        return set()
    known = (near[outside] & NEAR_ANY) > 0
    out = set(outside[known].tolist())
    rest = outside[~known]
    out.update(rest[near_other_tile(rest, geoms, tiles, prompts, frames) > 0].tolist())
    return out
