"""Which grid tiles a run encodes, and why each other one is skipped: one mechanism for every reason.

A `TileSelection` says, for each tile of a grid, "run" or "skip, because ...". It is made once per input by
the plan from a list of skip rules, each a reason and a test over every tile's core at once:

* `AreaSkip` ("outside the area"): the tile's core, grown by half the grid's overlap on every side (about
  its window: what the tile sees), does not touch the area of interest (`--aoi`). So every object up to
  the overlap across that reaches into the area (its centre within half the overlap of it along each
  axis) has its centre in the core of a tile that runs, the tile that sees it whole (`tiling.grid`).
  Larger objects reach further: the run grows the selection where one crosses into a skipped tile
  (`tiling.growth`);
* `MaskSkip` ("no tissue"): the tile's core holds no pixel of a low-resolution mask (a slide's tissue,
  `tiling.tissue`), dilated by a margin of mask pixels.

Tiles found all nodata when read ("all nodata", `NODATA`) are no rule: a read says so, at run time (the
plan's tile layer reads them). A new reason (tiles in holes between the files of a mosaic, ...) is one more
rule: an object with a `reason` (the words the plan, the report and the quicklook print), a `growable` flag
(may the run take the tile back when an object crosses into it) and `skips(grid, cores)`; the plan puts it
in the list. The first rule that skips a tile names its reason.

The runner (`run.executing.runner.InputRun`), the plan (`run.planning.plan`, `sam3tiles plan`), the report and the
quicklook all read the same selection.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Sequence

import numpy as np
import shapely
from shapely.geometry.base import BaseGeometry

from .grid import TileGrid

#: The reasons a tile is skipped, as the plan, the report and the quicklook say them.
OUTSIDE = "outside the area"
NO_TISSUE = "no tissue"
NODATA = "all nodata"


class Skip(Protocol):
    """A reason to skip tiles: `skips(grid, cores)` -> bool per tile (True: skip), `cores` the tiles' cores
    as [n, 4] source-pixel boxes (x0, y0, x1, y1) in tile index order."""

    reason: str
    growable: bool

    def skips(self, grid: TileGrid, cores: np.ndarray) -> np.ndarray: ...


@dataclass(frozen=True, eq=False)
class AreaSkip:
    """Skip the tiles whose core grown by `margin` grid pixels on every side (default: half the grid's overlap;
    in source pixels: divided by the scale) does not touch `area` (source pixels). Growing the cores, which
    are boxes, is the exact square (Chebyshev) margin: an area grown by a buffer would round its corners."""

    area: BaseGeometry
    margin: float | None = None
    reason: str = OUTSIDE
    growable: bool = True

    def skips(self, grid: TileGrid, cores: np.ndarray) -> np.ndarray:
        m = (grid.overlap / 2 if self.margin is None else self.margin) / grid.scale
        shapely.prepare(self.area)
        return ~shapely.intersects(self.area, shapely.box(cores[:, 0] - m, cores[:, 1] - m, cores[:, 2] + m,
                                                          cores[:, 3] + m))


@dataclass(frozen=True, eq=False)
class MaskSkip:
    """Skip the tiles whose core holds no True pixel of `mask` ([h, w] bool; each pixel `cell` = (x, y) source
    pixels) dilated by `margin` mask pixels."""

    mask: np.ndarray
    cell: tuple[float, float]
    margin: int = 2
    reason: str = NO_TISSUE
    growable: bool = False

    def skips(self, grid: TileGrid, cores: np.ndarray) -> np.ndarray:
        from scipy import ndimage

        m = self.mask
        if self.margin > 0:
            m = ndimage.binary_dilation(m, np.ones((2 * self.margin + 1,) * 2, bool))
        h, w = m.shape
        # a summed-area table: the mask pixels under each core in O(1)
        sat = np.zeros((h + 1, w + 1), np.int64)
        sat[1:, 1:] = m.astype(np.int64).cumsum(0).cumsum(1)
        fx, fy = self.cell
        x0 = np.clip(np.floor(cores[:, 0] / fx), 0, w).astype(np.int64)
        y0 = np.clip(np.floor(cores[:, 1] / fy), 0, h).astype(np.int64)
        x1 = np.clip(np.ceil(cores[:, 2] / fx), 0, w).astype(np.int64)
        y1 = np.clip(np.ceil(cores[:, 3] / fy), 0, h).astype(np.int64)
        return (sat[y1, x1] - sat[y0, x1] - sat[y1, x0] + sat[y0, x0]) == 0


def core_boxes(grid: TileGrid) -> np.ndarray:
    """Every tile's core as a source-pixel box (x0, y0, x1, y1), [n, 4] in tile index order."""
    xs, ys = (np.asarray(v, float) / grid.scale for v in grid.core_bounds)
    rows, cols = grid.shape
    c = np.tile(np.arange(cols), rows)
    r = np.repeat(np.arange(rows), cols)
    return np.stack([xs[c], ys[r], xs[c + 1], ys[r + 1]], axis=1)


@dataclass
class TileSelection:
    """Run or skip, per tile of `grid`: `codes[i]` is 0 for a tile to run, k for one skipped by `rules[k - 1]`.
    `grown`: the tiles a run took back (`grow`). Copy it before growing (`copy`): a plan's stays as planned."""

    grid: TileGrid
    codes: np.ndarray
    rules: tuple = ()
    grown: set = field(default_factory=set)

    @classmethod
    def of(cls, grid: TileGrid, rules: Sequence[Skip] = ()) -> TileSelection:
        """The selection `rules` make on `grid`: the first rule that skips a tile names its reason."""
        codes = np.zeros(len(grid), np.uint8)
        if rules:
            cores = core_boxes(grid)
            for k, rule in enumerate(rules, 1):
                codes[(codes == 0) & np.asarray(rule.skips(grid, cores), bool)] = k
        return cls(grid, codes, tuple(rules))

    def copy(self) -> TileSelection:
        return TileSelection(self.grid, self.codes.copy(), self.rules, set(self.grown))

    def runs(self, index: int) -> bool:
        """Whether grid tile `index` is encoded."""
        return self.codes[index] == 0

    def reason(self, index: int) -> str | None:
        """Why grid tile `index` is skipped (None: it runs)."""
        k = int(self.codes[index])
        return self.rules[k - 1].reason if k else None

    def growable(self, index: int) -> bool:
        """Whether a skipped tile may be taken back when an object crosses into it (`grow`)."""
        k = int(self.codes[index])
        return bool(k) and self.rules[k - 1].growable

    def grow(self, index: int) -> None:
        """Take a skipped tile back: it runs."""
        self.codes[index] = 0
        self.grown.add(int(index))

    @property
    def to_run(self) -> int:
        return int((self.codes == 0).sum())

    @property
    def skipped(self) -> int:
        return len(self.codes) - self.to_run

    def counts(self) -> dict[str, int]:
        """Tiles skipped per reason, in the rules' order (reasons that skip nothing left out)."""
        n = np.bincount(self.codes, minlength=len(self.rules) + 1)
        out: dict[str, int] = {}
        for k, rule in enumerate(self.rules, 1):
            if n[k]:
                out[rule.reason] = out.get(rule.reason, 0) + int(n[k])
        return out

    def codes_at(self, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
        """The code of the tile whose core holds each point of the lattice `xs` x `ys` (source pixels):
        [len(ys), len(xs)] (the quicklook shades the skipped tiles with it)."""
        bx, by = (np.asarray(v, float) / self.grid.scale for v in self.grid.core_bounds)
        rows, cols = self.grid.shape
        c = np.clip(np.searchsorted(bx, xs, side="right") - 1, 0, cols - 1)
        r = np.clip(np.searchsorted(by, ys, side="right") - 1, 0, rows - 1)
        return self.codes.reshape(rows, cols)[r[:, None], c[None, :]]


def describe_counts(counts: dict[str, int]) -> str:
    """'12 outside the area, 3 no tissue' (empty when nothing is skipped)."""
    return ", ".join(f"{n} {reason}" for reason, n in counts.items() if n)
