"""What the merge's passes hand each other across processes: pieces and objects as WKB (`Packed`), and a
pass's part (`BlockPart`: its decided objects, and the pieces it left to a later pass)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import shapely

from ..vectorize.pieces import Pieces
from .stats import MergeStats


@dataclass
class Packed:
    """Pieces (or merged objects) as arrays, geometries as WKB: pickles an order of magnitude faster than
    lists of shapely objects, so a block's merge can cross processes cheaply. Coordinates stay exact."""

    wkb: np.ndarray
    columns: dict

    @classmethod
    def of(cls, obj) -> "Packed":
        names = [f for f in obj.__dataclass_fields__ if f != "geometry"]
        return cls(shapely.to_wkb(np.asarray(obj.geometry, dtype=object)) if len(obj.geometry) else
                   np.zeros(0, dtype=object), {n: np.asarray(getattr(obj, n)) for n in names})

    def unpack(self, kind):
        geoms = list(shapely.from_wkb(self.wkb)) if len(self.wkb) else []
        return kind(geometry=geoms, **{n: v.tolist() for n, v in self.columns.items()})

    def __len__(self) -> int:
        return len(self.wkb)

    def take(self, idx) -> "Packed":
        """The rows `idx`, sharing the WKB bytes (no copy of the geometries)."""
        idx = np.asarray(idx, dtype=np.int64)
        return Packed(self.wkb[idx], {n: v[idx] for n, v in self.columns.items()})

    @classmethod
    def concat(cls, parts) -> "Packed":
        """Rows of `parts` one after the other; empty parts are skipped (their columns have no dtype)."""
        parts = [p for p in parts if len(p)]
        if not parts:
            return cls.of(Pieces())
        wkb = np.empty(sum(len(p) for p in parts), dtype=object)
        wkb[:] = [w for p in parts for w in p.wkb]
        return cls(wkb, {n: np.concatenate([p.columns[n] for p in parts]) for n in parts[0].columns})


@dataclass
class BlockPart:
    """What one block's merge hands the final pass: its decided objects and its undecided pieces."""

    objects: Packed  # Merged
    first: np.ndarray
    stats: MergeStats
    pieces: Packed  # undecided pieces (Pieces), in job order
    order: np.ndarray
    inside: np.ndarray
    near: np.ndarray


def part_of(part) -> BlockPart:
    """A pass's result (`rules._Part`) as what it hands on: its objects, and its deferred pieces with their
    order keys and flags."""
    d, cols = part.deferred, part.cols
    rest = Packed.of(cols.pieces(d)) if cols is not None else Packed.of(Pieces())
    return BlockPart(Packed.of(part.merged), part.first, part.stats, rest,
                     cols.order[d] if cols is not None else np.zeros(0, np.int64), part.inside[d], part.near[d])
