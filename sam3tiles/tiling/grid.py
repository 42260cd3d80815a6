"""The tile grid: 1008x1008 windows at one uniform scale, overlapping, never stretched.

Frames:

* *source pixels*: the input raster's full-resolution pixel grid (col, row), origin top-left.
* *grid pixels*: source pixels times `scale` (scale 2 zooms in: one source pixel is 2x2 grid pixels).
  Tiles are laid out in grid pixels; one tile pixel is one grid pixel.
* *tile pixels*: a tile's own frame, (0, 0) at its top-left, 0..1008 on each axis. Content that lies in
  the image fills `[0, valid_w) x [0, valid_h)`; the rest is padding.

A tile *owns* its core: the cores partition the image, cutting each overlap band in the middle, so an
object smaller than the overlap lies whole in the tile whose core holds its centre.
"""

from __future__ import annotations

import bisect
import itertools
import math
from dataclasses import dataclass
from functools import cached_property
from typing import Iterator

from affine import Affine
from rasterio.windows import Window

from ..errors import UsageError
from ..wording import opt

TILE_SIZE = 1008
#: Smallest tile the pipeline lays out (pixels); the largest is what the model takes (MODEL_SIZE).
MIN_TILE = 64
#: Default overlap in tile pixels. Objects up to this size are whole in at least one tile (kept once
#: by ownership); larger ones are stitched across seams. 256 px is a quarter of a tile: buildings and
#: vehicles at 0.1-0.5 m are whole, and every core keeps >= 128 px of context from any tile edge,
#: where SAM 3's masks are weakest. Cost: (1008/752)^2 = 1.8x the tiles of a grid without overlap.
#: Measured against 192, 128 and 64 with a misbehaving model (docs/why-256-px-overlap.md): each loses
#: > 0.005 F1 on some class, so 256 stays.
DEFAULT_OVERLAP = 256


def max_overlap(tile_size: int) -> int:
    """The largest overlap (tile pixels) a tile size allows: under half a tile, so every tile keeps a core
    and a split into sub-tiles stays within 4x4 (`refine.BRANCH`). The one statement of the rule:
    `options.cross_problems` words it for callers, `TileGrid` holds it as its invariant."""
    return tile_size // 2 - 1


@dataclass(frozen=True)
class Tile:
    """One window of the grid. Coordinates in grid pixels unless named otherwise."""

    index: int
    row: int
    col: int
    x0: int  # grid-pixel offset of the tile's top-left
    y0: int
    size: int
    scale_xy: tuple[float, float]  # grid pixels per source pixel (x, y); equal unless squashed
    valid_wh: tuple[int, int]  # tile pixels that hold image content (the rest is padding)
    core_xyxy: tuple[float, float, float, float]  # owned part, grid pixels
    interior: tuple[bool, bool, bool, bool]  # (left, top, right, bottom): edge borders another tile
    src_transform: Affine  # the source raster's pixel -> CRS transform

    @property
    def src_window(self) -> Window:
        """The source-pixel window of the tile's valid content (fractional when scale != 1)."""
        sx, sy = self.scale_xy
        return Window(self.x0 / sx, self.y0 / sy, self.valid_wh[0] / sx, self.valid_wh[1] / sy)

    @property
    def transform(self) -> Affine:
        """Tile pixel -> CRS (or source pixel, for rasters without georeferencing)."""
        sx, sy = self.scale_xy
        return self.src_transform @ Affine.translation(self.x0 / sx, self.y0 / sy) @ Affine.scale(1 / sx, 1 / sy)

    @property
    def core_tile_px(self) -> tuple[float, float, float, float]:
        """The core in tile pixels."""
        x0, y0, x1, y1 = self.core_xyxy
        return (x0 - self.x0, y0 - self.y0, x1 - self.x0, y1 - self.y0)

    @property
    def window_xyxy(self) -> tuple[float, float, float, float]:
        """The valid part of the window, grid pixels."""
        return (self.x0, self.y0, self.x0 + self.valid_wh[0], self.y0 + self.valid_wh[1])


@dataclass(frozen=True)
class TileGrid:
    """An immutable grid over one raster: `width` x `height` source pixels at `scale`.

    Hashable and tokenized by value (`__dask_tokenize__`), so Dask graphs built from it are deterministic.
    """

    width: int
    height: int
    scale: float = 1.0
    tile_size: int = TILE_SIZE
    overlap: int = DEFAULT_OVERLAP
    transform: Affine = Affine.identity()

    def __post_init__(self) -> None:
        if self.width < 1 or self.height < 1:
            raise UsageError(f"image of {self.width}x{self.height} pixels has nothing to tile")
        if not (self.scale > 0 and math.isfinite(self.scale)):
            raise UsageError(f"{opt('scale')} must be a positive number, got {self.scale}")
        if not 0 <= self.overlap <= max_overlap(self.tile_size):
            raise UsageError(f"{opt('overlap')} must be between 0 and {max_overlap(self.tile_size)} pixels, "
                             f"got {self.overlap}")
        if self.scaled_wh[0] * self.scaled_wh[1] > 4e12:
            raise UsageError(f"{opt('scale', self.scale)} makes the image "
                             f"{self.scaled_wh[0]:.0f}x{self.scaled_wh[1]:.0f} grid pixels: choose a smaller scale")

    def __dask_tokenize__(self):
        return ("sam3tiles.TileGrid", self.width, self.height, self.scale, self.tile_size, self.overlap,
                tuple(self.transform))

    @property
    def stride(self) -> int:
        return self.tile_size - self.overlap

    @property
    def scaled_wh(self) -> tuple[float, float]:
        """Image size in grid pixels (fractional when the scale does not divide evenly)."""
        return (self.width * self.scale, self.height * self.scale)

    def _count(self, extent: float) -> int:
        return max(1, math.ceil((extent - self.overlap) / self.stride))

    @cached_property
    def shape(self) -> tuple[int, int]:
        """(rows, cols) of tiles."""
        w, h = self.scaled_wh
        return (self._count(h), self._count(w))

    def __len__(self) -> int:
        return self.shape[0] * self.shape[1]

    def _bounds(self, n: int, extent: float) -> list[float]:
        # core boundaries: the middle of each overlap band, and the image edges
        return [0.0] + [j * self.stride + self.overlap / 2 for j in range(1, n)] + [extent]

    @cached_property
    def _core_bounds(self) -> tuple[list[float], list[float]]:
        w, h = self.scaled_wh
        rows, cols = self.shape
        return self._bounds(cols, w), self._bounds(rows, h)

    @property
    def core_bounds(self) -> tuple[list[float], list[float]]:
        """The cores' edges in grid pixels: (x edges, cols + 1 of them; y edges, rows + 1): tile (row, col)
        owns [xs[col], xs[col + 1]) x [ys[row], ys[row + 1]). For callers that judge every tile at once
        (`tiling.selection`), without making each `Tile`."""
        return self._core_bounds

    def tile(self, row: int, col: int) -> Tile:
        rows, cols = self.shape
        if not (0 <= row < rows and 0 <= col < cols):
            raise IndexError(f"tile ({row}, {col}) outside a {rows}x{cols} grid")
        w, h = self.scaled_wh
        x0, y0 = col * self.stride, row * self.stride
        valid_w = max(1, min(self.tile_size, math.ceil(w - x0 - 1e-9)))
        valid_h = max(1, min(self.tile_size, math.ceil(h - y0 - 1e-9)))
        bx, by = self._core_bounds
        return Tile(
            index=row * cols + col, row=row, col=col, x0=x0, y0=y0, size=self.tile_size,
            scale_xy=(self.scale, self.scale), valid_wh=(valid_w, valid_h),
            core_xyxy=(bx[col], by[row], bx[col + 1], by[row + 1]),
            interior=(col > 0, row > 0, col < cols - 1, row < rows - 1),
            src_transform=self.transform,
        )

    def tile_at(self, x: float, y: float) -> Tile:
        """The tile whose core holds source pixel (x, y): cores partition the image (a point on a core's edge
        belongs to the tile right of or below it; one past the image's edge to the nearest tile)."""
        bx, by = self._core_bounds
        col = min(max(bisect.bisect_right(bx, x * self.scale) - 1, 0), len(bx) - 2)
        row = min(max(bisect.bisect_right(by, y * self.scale) - 1, 0), len(by) - 2)
        return self.tile(row, col)

    def tiles_over(self, x0: float, y0: float, x1: float, y1: float) -> Iterator[Tile]:
        """The tiles whose cores meet the source-pixel box [x0, x1] x [y0, y1]."""
        first, last = self.tile_at(x0, y0), self.tile_at(x1, y1)
        for r in range(first.row, last.row + 1):
            for c in range(first.col, last.col + 1):
                yield self.tile(r, c)

    def __iter__(self) -> Iterator[Tile]:
        rows, cols = self.shape
        for r in range(rows):
            for c in range(cols):
                yield self.tile(r, c)

    @property
    def padded_wh(self) -> tuple[int, int]:
        """Extent of all windows together, grid pixels (the image plus the padding of edge tiles)."""
        rows, cols = self.shape
        return ((cols - 1) * self.stride + self.tile_size, (rows - 1) * self.stride + self.tile_size)

    # -- refinement: a tile's core re-run at twice the zoom ------------------------------------------------
    def split(self, tile: Tile, first_index: int) -> list[Tile]:
        """The sub-tiles of `tile` at twice its zoom, indexed from `first_index` in row-major order.

        Their cores partition the parent's core: 2x2 quadrants, or one piece along an axis where the
        parent's core at twice the zoom fits one window (a thin edge row), or 3 or more where a quadrant
        plus the margins would not fit (only a single-tile image's large core); each window holds its core
        with at least overlap/2 sub-tile pixels of context on every side that borders another tile, as
        on the grid. Sub-tiles keep the parent's row and col (merge blocks, messages).
        """
        scale = 2 * tile.scale_xy[0]
        if tile.scale_xy[0] != tile.scale_xy[1]:
            raise ValueError("a squashed tile cannot be split")
        ext = (self.width * scale, self.height * scale)
        core = tuple(2 * v for v in tile.core_xyxy)
        spans = [self._split_axis(core[a], core[a + 2], ext[a], 2 * (tile.x0, tile.y0)[a]) for a in (0, 1)]
        out = []
        for (y0c, y1c, wy0, vh) in spans[1]:
            for (x0c, x1c, wx0, vw) in spans[0]:
                out.append(Tile(index=first_index + len(out), row=tile.row, col=tile.col, x0=wx0, y0=wy0,
                                size=self.tile_size, scale_xy=(scale, scale), valid_wh=(vw, vh),
                                core_xyxy=(x0c, y0c, x1c, y1c),
                                interior=(x0c > 0, y0c > 0, x1c < ext[0], y1c < ext[1]),
                                src_transform=self.transform))
        return out

    def _split_axis(self, c0: float, c1: float, extent: float, start: int) -> list[tuple[float, float, int, int]]:
        """Core pieces of [c0, c1) along one axis (sub-tile pixels), each with its window offset and valid
        length; no window starts before `start` (the parent's), so each lies within its parent's window
        (the merge finds a sub-tile's neighbours through the grid's windows). Between siblings the windows
        overlap by the full overlap; toward the parent's neighbours the margin is overlap/2 where it fits and
        less where it cannot (the edge tiles of a grid have cores of up to tile - overlap/2 px, so two
        quadrants of one at twice the zoom plus full margins exceed two tiles): the neighbour's own window
        still reaches overlap/2 parent pixels over the seam."""
        size, m = self.tile_size, self.overlap / 2
        for n in range(1, size):
            cuts = [c0 + (c1 - c0) * k / n for k in range(n + 1)]
            spans = []
            for a, b in itertools.pairwise(cuts):
                inner = (m if a > c0 else 0) + (m if b < c1 else 0)
                slack = size - (b - a) - inner
                outer = m if (a == c0 and a > 0) or (b == c1 and b < extent) else 0
                if slack < 0:
                    break
                ml = m if a > c0 else min(outer, slack) if a > 0 else 0
                mr = m if b < c1 else min(outer, slack) if b < extent else 0
                lo = math.ceil(b + mr - size - 1e-9)  # the window reaches b plus its margin
                hi = max(0, math.floor(a - ml + 1e-9))  # and starts at a minus its margin, or before
                # centre the core in the window, then shift it into the image where the margins allow
                x0 = min(max(math.floor((a + b - size) / 2), lo), hi)
                x0 = max(min(x0, math.floor(extent) - size), lo, start)
                spans.append((a, b, x0, max(1, min(size, math.ceil(extent - x0 - 1e-9)))))
            if len(spans) == n:
                return spans
        raise ValueError(f"core [{c0}, {c1}) cannot be split into tiles of {size} px")


def lattice_offset(origin: float, pixel: float, stride: int, scale: float) -> int | None:
    """Whole source pixels to put before a map's first pixel (at CRS coordinate `origin` along one axis, pixels
    of signed size `pixel`) so that its tile origins fall on multiples of the stride (`stride` grid pixels at
    `scale`) counted from the CRS origin on the map's pixel lattice (issue 52: files added to a map leave its
    tiles where they were). The pixel's index from the CRS origin is counted with its phase (the fraction of a
    pixel the lattice is off the origin) taken in [-0.25, 0.75), so that maps of one lattice whose origins differ
    by float noise (phases near 0 or one half, the usual ones) count alike. 0 <= result < the stride in source
    pixels; None when the stride is no whole number of source pixels at that scale."""
    s = stride / scale
    if abs(s - round(s)) > 1e-9 or round(s) < 1 or pixel == 0:
        return None
    return math.floor(origin / pixel + 0.25) % round(s)


def squash_tile(width: int, height: int, transform: Affine, size: int = TILE_SIZE) -> Tile:
    """The published callers' view: the whole image stretched to one size x size input (a baseline)."""
    sx, sy = size / width, size / height
    return Tile(index=0, row=0, col=0, x0=0, y0=0, size=size, scale_xy=(sx, sy), valid_wh=(size, size),
                core_xyxy=(0.0, 0.0, float(size), float(size)), interior=(False, False, False, False),
                src_transform=transform)


def scale_for_gsd(transform: Affine, gsd: float, resolution: float | None = None) -> float:
    """The scale that resamples a raster of `transform` to a ground sampling distance of `gsd`.

    `resolution` is the source's own sampling distance in the unit of `gsd` (`units.pixel_size`: metres
    on a geographic CRS, microns on a slide); without it both are CRS units.
    """
    if not gsd > 0:
        raise UsageError(f"{opt('gsd')} must be positive, got {gsd}")
    res = (resolution if resolution is not None
           else math.sqrt(abs(transform.a * transform.e - transform.b * transform.d)))
    return res / gsd
