"""A tile's frame in map coordinates: its window, core and exclusive area as polygons in the output CRS.

`sam3tiles.grid` lays tiles out in pixels (grid, tile and source frames); a `TileFrame` is the same tile in
the CRS the pieces are in, which is where the merge compares them, the plan measures its overlap and
refinement shares a parent's area with its sub-tiles. (Not `sam3tiles.frames`: those are output tables.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Mapping, MutableMapping

from shapely.geometry import MultiLineString, Polygon

from .grid import Tile


@dataclass(frozen=True)
class TileFrame:
    """A tile's window, core and exclusive area in the output CRS (polygons), and its interior edges.

    Nothing assumes one uniform grid: tiles of different sizes and scales (sub-tiles of a finer grid whose
    cores partition their parent's core) merge alike, each with its own frame and `pixel`.
    """

    window: Polygon
    core: Polygon  # grown by one tile pixel
    exclusive: Polygon  # the part of the window no other tile sees (may be empty)
    pixel: float = 1.0  # one tile pixel in CRS units
    edges: object = None  # the window's edges that border another tile (lines), None when none do


def _poly(transform, x0, y0, x1, y1) -> Polygon:
    pts = [transform @ (x, y) for x, y in ((x0, y0), (x1, y0), (x1, y1), (x0, y1))]
    return Polygon(pts)


def tile_frame(tile: Tile, overlap: int) -> TileFrame:
    """Window, core (+1 px), exclusive area and interior edges of `tile` in CRS coordinates."""
    t = tile.transform
    vw, vh = tile.valid_wh
    cx0, cy0, cx1, cy1 = tile.core_tile_px
    left, top, right, bottom = tile.interior
    ex = (overlap if left else 0, overlap if top else 0, vw - (overlap if right else 0), vh - (overlap if bottom else 0))
    excl = _poly(t, *ex) if ex[2] > ex[0] and ex[3] > ex[1] else Polygon()
    segs = [s for s, on in (([(0, 0), (0, vh)], left), ([(0, 0), (vw, 0)], top), ([(vw, 0), (vw, vh)], right),
                            ([(0, vh), (vw, vh)], bottom)) if on]
    edges = MultiLineString([[t @ p for p in s] for s in segs]) if segs else None
    return TileFrame(window=_poly(t, 0, 0, vw, vh), core=_poly(t, cx0 - 1, cy0 - 1, cx1 + 1, cy1 + 1),
                     exclusive=excl, pixel=abs(t.a * t.e - t.b * t.d) ** 0.5, edges=edges)


class TileFrames(MutableMapping):
    """Tile index -> `TileFrame` of a grid's tiles, made when asked and not kept (four polygons, ~2 KB a
    tile: 200 MB for a 10^5-tile grid held for nothing); frames set here (a refined tile's shared frame,
    its sub-tiles') are kept."""

    def __init__(self, tiles: Mapping[int, Tile], overlap: int):
        self.tiles, self.overlap, self._set = tiles, overlap, {}

    def __getitem__(self, i: int) -> TileFrame:
        f = self._set.get(i)
        return f if f is not None else tile_frame(self.tiles[i], self.overlap)

    def __setitem__(self, i: int, frame: TileFrame) -> None:
        self._set[int(i)] = frame

    def __delitem__(self, i: int) -> None:
        raise TypeError("a tile's frame cannot be removed")

    def __iter__(self) -> Iterator[int]:
        yield from self.tiles
        yield from (i for i in self._set if i not in self.tiles)

    def __len__(self) -> int:
        return len(self.tiles) + sum(i not in self.tiles for i in self._set)
