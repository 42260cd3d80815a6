"""The merge's order keys (sam3tiles.tiling.piecekey): int64 for every tile index a run may have."""

import numpy as np

from sam3tiles.tiling.piecekey import MAX_INDEX, ORDER_TILE, PARTS, part_order, piece_order
from sam3tiles.tiling.refine import Refiner


def _orders(tiles, positions, parts):
    pieces = piece_order(np.asarray(tiles, dtype=np.int64), np.asarray(positions, dtype=np.int64))
    return part_order(pieces, np.asarray(parts, dtype=np.int64))


def test_order_keys_keep_tile_then_position_then_part_order_up_to_the_largest_tile_index():
    # (tile, position in the tile, part in the piece), sorted: their keys must sort the same way
    rows = [(t, p, q) for t in (0, 1, 2**23 - 1, 2**23, 2**23 + 1, MAX_INDEX - 1, MAX_INDEX)
            for p in (0, 1, ORDER_TILE - 1) for q in (0, PARTS - 1)]
    keys = _orders(*zip(*rows))
    assert (keys >= 0).all(), "an order key wrapped around int64"
    assert (np.diff(keys) > 0).all(), "order keys out of (tile, position, part) order"


def test_a_grid_refined_to_the_default_depth_fits_the_order_keys():
    # twice-refined sub-tiles of a 10^5-tile grid (issue 12's country scale) get indices up to ~273x the grid's
    class Grid:
        def __len__(self):
            return 100_000
    r = Refiner(Grid(), 2)
    assert r.offsets[-1] <= MAX_INDEX
    keys = _orders([r.offsets[-1] - 1, r.offsets[-1]], [ORDER_TILE - 1, 0], [PARTS - 1, 0])
    assert keys[0] < keys[1] and (keys >= 0).all()
