"""The keys that name a piece and order it: one home for their arithmetic.

* *Piece key* (`Pieces.tile_key`): `tile index * PASSES_PER_TILE + decoder pass`. Pieces of one tile and
  one decoder pass share a key; the merge never fuses two pieces of one key, and finds a piece's tile
  (its `TileFrame`) with `tile_of`. The pipeline makes one answer of a prompt's passes in the tile
  (`vectorize.merge_passes`), so its pieces are all of pass 0.
* *Order keys* (the merge's tie-breaks and output order, int64): a piece's is `tile index * ORDER_TILE +
  its position in the tile`; a part's is `the piece's order key * PARTS + its index in the piece`. So
  the result of a merge depends only on tile order, never on a spatial index's.

Works alike on Python ints and numpy int64 arrays.
"""

from __future__ import annotations

#: Decoder passes one tile can take: a pass index is below this, so the key holds (tile, pass) uniquely.
PASSES_PER_TILE = 1024
#: Order keys of pieces: tile index * ORDER_TILE + position in the tile: at most 2**18 pieces a tile (200
#: queries x 1024 decoder passes is 204,800).
ORDER_TILE = 1 << 18
#: Order keys of parts: the piece's order key * PARTS + the part's index in its piece (at most 2**15 parts).
PARTS = 1 << 15
#: Largest tile index (grid tiles and refined sub-tiles) whose parts' order keys hold in int64:
#: (MAX_INDEX + 1) * ORDER_TILE * PARTS = 2**63. (It was 2**39 - 1 with 2**24 and 2**16 above, so the
#: parts of tiles from 2**23 on, twice-refined sub-tiles of grids over ~30,000 tiles, wrapped around.)
MAX_INDEX = 2**30 - 1


def piece_key(tile_index, pass_index=0):
    """The piece key of `tile_index`'s decoder pass `pass_index` (0 <= pass_index < PASSES_PER_TILE)."""
    return tile_index * PASSES_PER_TILE + pass_index


def tile_of(key):
    """The tile index of a piece key (or an array of them)."""
    return key // PASSES_PER_TILE


def pass_of(key):
    """The decoder pass of a piece key (or an array of them)."""
    return key % PASSES_PER_TILE


def piece_order(tile_index, position):
    """A piece's order key: its tile's index, then its position among the tile's pieces."""
    return tile_index * ORDER_TILE + position


def part_order(piece_order_key, part_index):
    """A part's order key: its piece's order key, then its index among the piece's parts."""
    return piece_order_key * PARTS + part_index

