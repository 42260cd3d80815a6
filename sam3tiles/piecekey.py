"""The keys that name a piece and order it: one home for their arithmetic.

* *Piece key* (`Pieces.tile_key`): `tile index * PASSES_PER_TILE + decoder pass`. Pieces of one tile and
  one decoder pass share a key; the merge never fuses two pieces of one key, and finds a piece's tile
  (its `TileFrame`) with `tile_of`.
* *Order keys* (the merge's tie-breaks and output order, int64): a piece's is `tile index * ORDER_TILE +
  its position in the tile`; a part's is `the piece's order key * PARTS + its index in the piece`. So
  the result of a merge depends only on tile order, never on a spatial index's.

Works alike on Python ints and numpy int64 arrays.
"""

from __future__ import annotations

#: Decoder passes one tile can take: a pass index is below this, so the key holds (tile, pass) uniquely.
PASSES_PER_TILE = 1024
#: Order keys of pieces: tile index * ORDER_TILE + position in the tile (so at most 2**24 pieces a tile).
ORDER_TILE = 1 << 24
#: Order keys of parts: the piece's order key * PARTS + the part's index in its piece.
PARTS = 1 << 16
#: Largest tile index a piece's order key holds within int64 (tile index * ORDER_TILE < 2**63).
MAX_INDEX = 2**39 - 1


def piece_key(tile_index, pass_index=0):
    """The piece key of `tile_index`'s decoder pass `pass_index` (0 <= pass_index < PASSES_PER_TILE)."""
    return tile_index * PASSES_PER_TILE + pass_index


def tile_of(key):
    """The tile index of a piece key (or an array of them)."""
    return key // PASSES_PER_TILE


def pass_of(key):
    """The decoder pass of a piece key (or an array of them)."""
    return key % PASSES_PER_TILE
