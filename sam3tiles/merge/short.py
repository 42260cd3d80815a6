"""Rule 4's look past the owner's window: a complete view that stops short of its window's edge.

A model's mask of an object cut by the tile edge can stop a cell or two short of that edge
(../shared/model-behaviour.md; the DB text detector shrinks a line's box where its text runs off the
image), so the tile owning the object sees it complete, a few pixels inside its window. The owner cannot
say what lies past its window: a neighbour's cut view, linked to the owner's, that goes on past that edge
over a stretch `THICK_CELLS` across is the same object seen further. The owner's view is then a half to
stitch (each view inside its own core), not an object whole beside a fragment of itself.
"""

from __future__ import annotations

import shapely

from ..tiling.frame import TileFrame
from ..vectorize.pieces import EDGE_MARGIN, MASK_CELL
from .parts import SLIVER_CELLS, THICK_CELLS


def stops_short(k, i, frame: TileFrame) -> bool:
    """Whether view `i` (complete in its tile, `frame`) comes within `EDGE_MARGIN` (and the sliver tolerance,
    `SLIVER_CELLS`) of a stretch of another tile's view `k`, `THICK_CELLS` across, lying past `i`'s window:
    `i` stops short of its window's edge where `k` goes on past it."""
    beyond = shapely.difference(k, frame.window)
    if beyond.is_empty:
        return False
    half = THICK_CELLS * MASK_CELL * frame.pixel / 2
    thick = shapely.buffer(shapely.buffer(beyond, -half, join_style="mitre"), half, join_style="mitre")
    if thick.is_empty:
        return False
    return shapely.distance(thick, i) <= (EDGE_MARGIN + SLIVER_CELLS * MASK_CELL) * frame.pixel
