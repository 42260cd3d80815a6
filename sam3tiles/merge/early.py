"""Rule 2's verdicts computed while the tiles still come in, so that the merge after the last tile has
little left to do.

A pair's verdict (do two tiles' parts agree in the band both tiles see: `links.pair_verdicts`) depends
only on the two parts and their tiles' frames, so it can be computed as soon as both tiles are in,
while the model works on the next tiles, instead of after the last tile, when the GPU has nothing left to
do. `merge_pass` then looks the verdicts up (`known`) and computes only those missing: the same links,
the same objects, whatever was looked up. On 25 tiles of 30 ms encodes the merge after the last tile
was 0.06-0.1 s, four fifths of it these overlays.

Used by the in-process engine (`BlockMerger(..., early=True)`), where the driver's thread is idle
between tiles; on a cluster each block's merge runs on a worker instead. Tiles whose frame changes while
the run goes (refined tiles and their sub-tiles) are left out: their pairs are computed by the merge.
"""

from __future__ import annotations

from typing import Callable, Iterable, Mapping

import numpy as np

from ..tiling.frame import TileFrame
from ..tiling.piecekey import piece_order
from ..vectorize.pieces import Pieces
from .parts import Cols
from .links import band_parts, candidate_pairs, pair_verdicts


class EarlyLinks:
    """Verdicts of rule 2 by the pair's part order keys (lower first), computed tile by tile.

    `neighbours(tile)`: the tiles whose windows meet the tile's (candidates for pairs). A tile's parts are
    kept until every neighbour has come in; verdicts until their block's merge takes them (`take`)."""

    def __init__(self, frames: Mapping[int, TileFrame], neighbours: Callable[[int], Iterable[int]],
                 iou_min: float, ios_min: float):
        self.frames, self.neighbours = frames, neighbours
        self.iou_min, self.ios_min = iou_min, ios_min
        self.parts: dict[int, Cols] = {}  # band parts of tiles in, until all their neighbours are in
        self.waiting: dict[int, set] = {}  # tile -> neighbours not yet in
        self.arrived: set[int] = set()
        self.excluded: set[int] = set()
        self.buckets: dict[tuple[int, int], dict] = {}  # (tile, tile) -> {(order a, order b): verdict}
        self.by_tile: dict[int, set] = {}  # tile -> its buckets' keys

    def exclude(self, tile: int) -> None:
        """A tile whose frame changes (refinement): no verdict is computed for it; those computed go."""
        t = int(tile)
        self.excluded.add(t)
        self.parts.pop(t, None)
        for bk in self.by_tile.pop(t, ()):
            self.buckets.pop(bk, None)

    def add(self, tile: int, pieces: Pieces) -> None:
        """A tile's pieces (as `BlockMerger.add` gets them): its pairs with itself (other decoder passes)
        and with every neighbour already in."""
        t = int(tile)
        if t in self.excluded or t in self.arrived:
            return
        self.arrived.add(t)
        nb = [int(u) for u in self.neighbours(t) if int(u) != t]
        self.waiting[t] = {u for u in nb if u not in self.arrived}
        n = len(pieces.geometry)
        c = band_parts(pieces, piece_order(np.int64(t), np.arange(n, dtype=np.int64)), self.frames) if n else None
        if c is not None and len(c.geoms):
            self.parts[t] = c
            self._pairs(t, c, [u for u in nb if u in self.parts])
        for u in nb:  # a neighbour whose neighbours are all in now needs its parts no more
            w = self.waiting.get(u)
            if w is not None:
                w.discard(t)
                if not w:
                    self.parts.pop(u, None)
                    del self.waiting[u]
        if not self.waiting[t]:
            self.parts.pop(t, None)
            del self.waiting[t]

    def _pairs(self, t: int, c: Cols, others: list[int]) -> None:
        allc = Cols(*(np.concatenate([getattr(x, f) for x in [c] + [self.parts[u] for u in others]])
                      for f in Cols.__dataclass_fields__))
        mine = np.zeros(len(allc.geoms), dtype=bool)
        mine[: len(c.geoms)] = True
        rank = np.argsort(allc.order, kind="stable")  # pairs as the merge orients them: lower order first
        allc = allc.take(rank)
        mine = mine[rank]
        a, b = candidate_pairs(allc, np.arange(len(allc.geoms)), among=mine)
        if not len(a):
            return
        ok = pair_verdicts(allc, a, b, self.frames, self.iou_min, self.ios_min)
        ta, tb = allc.tiles[a].tolist(), allc.tiles[b].tolist()
        for oa, ob, x, y, v in zip(allc.order[a].tolist(), allc.order[b].tolist(), ta, tb, ok.tolist()):
            bk = (x, y) if x <= y else (y, x)
            bucket = self.buckets.get(bk)
            if bucket is None:
                bucket = self.buckets[bk] = {}
                self.by_tile.setdefault(x, set()).add(bk)
                self.by_tile.setdefault(y, set()).add(bk)
            bucket[(oa, ob)] = v

    def take(self, tiles: Iterable[int]) -> dict:
        """The verdicts of pairs within `tiles` (a block about to be merged), no longer kept here."""
        members = {int(t) for t in tiles}
        out: dict = {}
        for t in members:
            for bk in list(self.by_tile.get(t, ())):
                if bk[0] in members and bk[1] in members and bk in self.buckets:
                    out.update(self.buckets.pop(bk))
        for t in members:
            left = self.by_tile.get(t)
            if left is not None:
                left.intersection_update(self.buckets)
                if not left:
                    del self.by_tile[t]
        return out

    def rest(self) -> dict:
        """Every verdict still kept (pairs across blocks, for the final pass)."""
        out: dict = {}
        for bucket in self.buckets.values():
            out.update(bucket)
        self.buckets.clear()
        self.by_tile.clear()
        return out
