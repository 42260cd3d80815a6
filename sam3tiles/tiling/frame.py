"""A tile's frame in map coordinates: its window, core and exclusive area as polygons in the output CRS.

`sam3tiles.tiling.grid` lays tiles out in pixels (grid, tile and source frames); a `TileFrame` is the same
tile in the CRS the pieces are in, which is where the merge compares them, the plan measures its overlap and
refinement shares a parent's area with its sub-tiles. (Not `sam3tiles.run.executing.frames`: those are output tables.)

The grid answers its tiles' frames, `TileFrames(grid)[index]` (or `.frame(tile)` for any tile of it, its
sub-tiles too), as odc-geo's `GeoboxTiles[i, j]` answers a georeferenced tile: the overlap a frame needs is
the grid's, so no caller carries it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Mapping, MutableMapping, Sequence

import numpy as np
import shapely
from shapely.geometry import Polygon

from .grid import Tile, TileGrid


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


def _poly(t: tuple, x0, y0, x1, y1) -> Polygon:
    """The rectangle's corners through the affine coefficients `t` (a, b, c, d, e, f), with
    `Affine.__matmul__`'s arithmetic (x * a + y * b + c), so the same floats."""
    return shapely.polygons(_corners(t, np.array([[x0, y0, x1, y1]], dtype=float)))[0]


def _corners(t: tuple, xyxy: np.ndarray) -> np.ndarray:
    """[n, 4, 2] corners of n rectangles (x0, y0, x1, y1 in tile pixels) in `_poly`'s order, through `t` with
    `Affine.__matmul__`'s arithmetic (x * a + y * b + c, in that order), so the same floats."""
    a, b, c, d, e, f = t
    x = xyxy[:, [0, 2, 2, 0]]
    y = xyxy[:, [1, 1, 3, 3]]
    return np.stack([x * a + y * b + c, x * d + y * e + f], axis=2)


def _tile_frame(tile: Tile, overlap: int) -> TileFrame:
    """Window, core (+1 px), exclusive area and interior edges of `tile` in CRS coordinates, `overlap` being
    its grid's. The arithmetic, for `TileFrames`: callers ask the grid's frames, which hold the overlap. The
    shapes are made in one call each (a run frames every tile it merges: `Polygon(...)` one by one, and
    `Affine @` per corner, cost ten times as much)."""
    t = tuple(tile.transform)[:6]
    a, b, c, d, e, f = t
    vw, vh = tile.valid_wh
    cx0, cy0, cx1, cy1 = tile.core_tile_px
    left, top, right, bottom = tile.interior
    ex = (overlap if left else 0, overlap if top else 0,
          vw - (overlap if right else 0), vh - (overlap if bottom else 0))
    has_excl = ex[2] > ex[0] and ex[3] > ex[1]
    rects = [(0, 0, vw, vh), (cx0 - 1, cy0 - 1, cx1 + 1, cy1 + 1)] + ([ex] if has_excl else [])
    window, core, *rest = shapely.polygons(_corners(t, np.array(rects, dtype=float)))
    segs = [s for s, on in (((0, 0, 0, vh), left), ((0, 0, vw, 0), top), ((vw, 0, vw, vh), right),
                            ((0, vh, vw, vh), bottom)) if on]
    edges = None
    if segs:
        p = np.array(segs, dtype=float).reshape(-1, 2, 2)
        px, py = p[..., 0], p[..., 1]
        lines = shapely.linestrings(np.stack([px * a + py * b + c, px * d + py * e + f], axis=2))
        edges = shapely.multilinestrings(lines)
    return TileFrame(window=window, core=core, exclusive=rest[0] if has_excl else Polygon(),
                     pixel=abs(a * e - b * d) ** 0.5, edges=edges)


def tile_affines(x0, y0, sx, sy, src) -> tuple[np.ndarray, ...]:
    """`Tile.transform` of many tiles at once, as arrays (a, b, c, d, e, f): `src @ translation(x0 / sx, y0 / sy)
    @ scale(1 / sx, 1 / sy)` by the very float operations, in the order, of affine's product (the zero and
    unit terms included), so every coefficient is the one the `Affine` gives, to the bit, without making one
    `Affine` per tile (three of them, ~0.1 ms a tile: minutes on a 10^6-tile grid)."""
    sa, sb, sc, sd, se, sf = tuple(src)[:6]
    x0, y0, sx, sy = (np.asarray(v, dtype=float) for v in (x0, y0, sx, sy))
    tx, ty, ix, iy = x0 / sx, y0 / sy, 1 / sx, 1 / sy
    ma, mb, mc = sa * 1.0 + sb * 0.0, sa * 0.0 + sb * 1.0, sa * tx + sb * ty + sc  # src @ translation
    md, me, mf = sd * 1.0 + se * 0.0, sd * 0.0 + se * 1.0, sd * tx + se * ty + sf
    out = (ma * ix + mb * 0.0, ma * 0.0 + mb * iy, ma * 0.0 + mb * 0.0 + mc,  # ... @ scale
           md * ix + me * 0.0, md * 0.0 + me * iy, md * 0.0 + me * 0.0 + mf)
    return tuple(np.broadcast_arrays(*out))  # one value per tile, where one scale is given for all


def boxes_at(aff: tuple[np.ndarray, ...], x0, y0, x1, y1) -> np.ndarray:
    """Polygons of the tile-pixel boxes [x0, x1] x [y0, y1] under each tile's transform `aff` (`tile_affines`),
    corners as `_poly` orders them and computed as `Affine @ (x, y)` is: x * a + y * b + c."""
    a, b, c, d, e, f = aff
    x = np.stack(np.broadcast_arrays(x0, x1, x1, x0), axis=1).astype(float)
    y = np.stack(np.broadcast_arrays(y0, y0, y1, y1), axis=1).astype(float)
    px = x * a[:, None] + y * b[:, None] + c[:, None]
    py = x * d[:, None] + y * e[:, None] + f[:, None]
    return shapely.polygons(np.stack([px, py], axis=2))


def tile_windows(tiles: Sequence[Tile]) -> tuple[np.ndarray, np.ndarray]:
    """The windows of many tiles at once (polygons with `_tile_frame(t, ...).window`'s coordinates, made by
    the same arithmetic) and their `pixel` sizes: what the block merge needs of every tile up front, without
    the other three shapes of each frame (a tenth of the time)."""
    n = len(tiles)
    if not n:
        return np.zeros(0, dtype=object), np.zeros(0)
    src = tiles[0].src_transform
    if any(t.src_transform is not src and t.src_transform != src for t in tiles):  # of several rasters
        return _windows_each(tiles)
    num = np.empty((n, 6))
    for i, t in enumerate(tiles):
        num[i] = (t.x0, t.y0, *t.scale_xy, *t.valid_wh)
    aff = tile_affines(num[:, 0], num[:, 1], num[:, 2], num[:, 3], src)
    a, b, _, d, e, _ = aff
    return boxes_at(aff, 0.0, 0.0, num[:, 4], num[:, 5]), np.abs(a * e - b * d) ** 0.5


def _windows_each(tiles: Sequence[Tile]) -> tuple[np.ndarray, np.ndarray]:
    parts = [tile_windows([t]) for t in tiles]
    return np.concatenate([w for w, _ in parts]), np.concatenate([p for _, p in parts])


def _grid_boxes(grid: TileGrid, ids: np.ndarray) -> tuple:
    """Row, col, x0, y0, valid_w, valid_h and `tile_affines` of the grid tiles `ids`, as `TileGrid.tile`
    computes them, without making a `Tile`."""
    cols = grid.shape[1]
    r, c = np.divmod(np.asarray(ids, dtype=np.int64), cols)
    w, h = grid.scaled_wh
    x0, y0 = c * grid.stride, r * grid.stride
    vw = np.maximum(1, np.minimum(grid.tile_size, np.ceil(w - x0 - 1e-9))).astype(np.int64)
    vh = np.maximum(1, np.minimum(grid.tile_size, np.ceil(h - y0 - 1e-9))).astype(np.int64)
    return r, c, x0, y0, vw, vh, tile_affines(x0, y0, grid.scale, grid.scale, grid.transform)


def grid_frames(grid: TileGrid) -> dict[str, np.ndarray]:
    """Every tile of `grid` at once, in index order, as arrays, without making a `Tile`: row, col, x0, y0,
    valid_w, valid_h (as `TileGrid.tile` computes them), window (polygons, as `tile_windows`) and core (the
    core grown by one tile pixel, as `TileFrame.core`)."""
    r, c, x0, y0, vw, vh, aff = _grid_boxes(grid, np.arange(len(grid)))
    bx, by = (np.asarray(v, dtype=float) for v in grid.core_bounds)
    core = boxes_at(aff, (bx[c] - x0) - 1, (by[r] - y0) - 1, (bx[c + 1] - x0) + 1, (by[r + 1] - y0) + 1)
    return {"row": r, "col": c, "x0": x0, "y0": y0, "valid_w": vw, "valid_h": vh,
            "window": boxes_at(aff, 0.0, 0.0, vw, vh), "core": core}


def grid_windows(grid: TileGrid, ids) -> tuple[np.ndarray, np.ndarray]:
    """`tile_windows` of the grid tiles `ids` (the same polygons and pixel sizes, to the bit), without making
    a `Tile`."""
    ids = np.asarray(ids, dtype=np.int64)
    if not len(ids):
        return np.zeros(0, dtype=object), np.zeros(0)
    *_, vw, vh, aff = _grid_boxes(grid, ids)
    a, b, _, d, e, _ = aff
    return boxes_at(aff, 0.0, 0.0, vw, vh), np.abs(a * e - b * d) ** 0.5


def grid_near(grid: TileGrid, ids, distance: float) -> np.ndarray:
    """The grid tiles (ascending) whose windows lie within `distance` (CRS units) of the window of one of
    the grid tiles `ids`: what an STRtree of every window answers (`query(..., predicate="dwithin")`), from
    the tiles a few rows and columns around them only (none of the grid's other windows is made)."""
    return GridNear(grid).near(ids, distance)


class GridNear:
    """`grid_near` for many questions about one grid: the windows are made a strip of `CHUNK` tiles of a
    row at a time and the last `KEEP` strips kept (a run asks about the tiles in flight, near each other),
    so a tile's question costs a lookup and a small tree, not the arithmetic of its neighbours' windows."""

    CHUNK, KEEP = 128, 256

    def __init__(self, grid: TileGrid):
        self.grid = grid
        self.rows, self.cols = grid.shape
        t = grid.transform
        m = np.array([[t.a, t.b], [t.d, t.e]], dtype=float) / grid.scale  # a tile pixel in CRS units
        self.smin = float(np.linalg.svd(m, compute_uv=False).min())  # CRS distance >= smin x pixel distance
        self._strips: dict[tuple[int, int], np.ndarray] = {}

    def span(self, distance: float) -> int:
        """Rows and columns either side within which a window can lie within `distance` of another's."""
        if not (self.smin > 0 and np.isfinite(self.smin) and np.isfinite(distance)):
            return max(self.rows, self.cols)
        reach = distance / self.smin * (1 + 1e-9) + 1e-6  # tile pixels, a hair over for the floats
        return int(np.ceil((reach + self.grid.tile_size) / self.grid.stride))  # a gap of k strides less a tile

    def _strip(self, r: int, k: int) -> np.ndarray:
        w = self._strips.pop((r, k), None)
        if w is None:
            c0 = k * self.CHUNK
            w = grid_windows(self.grid, r * self.cols + np.arange(c0, min(self.cols, c0 + self.CHUNK)))[0]
            if len(self._strips) >= self.KEEP:
                del self._strips[next(iter(self._strips))]  # the strip asked about least recently
        self._strips[(r, k)] = w
        return w

    def windows(self, r: int, c0: int, c1: int) -> np.ndarray:
        """The windows of row `r`'s tiles in columns [c0, c1)."""
        n = self.CHUNK
        out = [self._strip(r, k)[max(c0, k * n) - k * n: min(c1, (k + 1) * n) - k * n]
               for k in range(c0 // n, (c1 - 1) // n + 1)]
        return out[0] if len(out) == 1 else np.concatenate(out)

    def windows_of(self, ids) -> np.ndarray:
        """The windows of the grid tiles `ids` (`grid_windows`'s polygons)."""
        out = np.empty(len(ids), dtype=object)
        rows, cols = np.divmod(np.asarray(ids, np.int64), self.cols)
        out[:] = [self.windows(y, x, x + 1)[0] for y, x in zip(rows.tolist(), cols.tolist())]
        return out

    def near(self, ids, distance: float) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        if not len(ids):
            return ids
        k = self.span(distance)
        r, c = np.divmod(ids, self.cols)
        c0, c1 = max(0, int(c.min()) - k), min(self.cols, int(c.max()) + k + 1)
        rr = range(max(0, int(r.min()) - k), min(self.rows, int(r.max()) + k + 1))
        cand = np.concatenate([self.windows(y, c0, c1) for y in rr])
        hit = np.unique(shapely.STRtree(cand).query(self.windows_of(ids), predicate="dwithin", distance=distance)[1])
        return (rr.start + hit // (c1 - c0)) * self.cols + c0 + hit % (c1 - c0)


class GridTiles(Mapping):
    """Tile index -> `Tile` of a grid, made when asked (a grid of a huge image is not held as a dict)."""

    def __init__(self, grid: TileGrid):
        self.grid = grid

    def __getitem__(self, i: int) -> Tile:
        if i not in self:
            raise KeyError(i)
        return self.grid.tile(*divmod(int(i), self.grid.shape[1]))

    def __contains__(self, i: object) -> bool:  # without making the tile
        return isinstance(i, (int, np.integer)) and 0 <= i < len(self.grid)

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.grid)))

    def __len__(self) -> int:
        return len(self.grid)


#: Frames a `TileFrames` keeps of those it made (all dropped when full: a merge asks a tile's frame once for each of
#: its parts, and made anew each time they cost the in-process run ~5 ms of CPU a tile).
KEPT_FRAMES = 512


class TileFrames(MutableMapping):
    """Tile index -> `TileFrame` of a grid's tiles, made when asked; of those made at most
    `KEPT_FRAMES` are kept (four polygons, ~2 KB a tile: 200 MB for a 10^5-tile grid held for nothing);
    frames set here (a refined tile's shared frame, its sub-tiles') are kept.

    `grid`: the grid the tiles are of, whose overlap their frames leave (None: a squashed image's one tile,
    which borders no other); `tiles`: its tiles by index when the caller holds them (default: the grid's,
    made when asked)."""

    def __init__(self, grid: TileGrid | None, tiles: Mapping[int, Tile] | None = None):
        self.grid, self._set = grid, {}
        self._made: dict[int, TileFrame] = {}  # frames made (at most `KEPT_FRAMES`)
        self.tiles = tiles if tiles is not None else GridTiles(grid) if grid is not None else {}

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_made": {}}  # the frames it made are not sent

    def frame(self, tile: Tile) -> TileFrame:
        """The frame of any tile of the grid, its sub-tiles too (`TileGrid.split`), made now, not kept."""
        if self.grid is None:
            if any(tile.interior):  # its exclusive area would take the whole window
                raise ValueError(f"tile {tile.index} borders another tile: its frame needs their grid")
            return _tile_frame(tile, 0)
        return _tile_frame(tile, self.grid.overlap)

    def __getitem__(self, i: int) -> TileFrame:
        f = self._set.get(i)
        if f is None:
            f = self._made.get(i)
        if f is None:
            f = self.frame(self.tiles[i])
            if len(self._made) >= KEPT_FRAMES:  # one dict operation each: safe from several threads
                self._made.clear()
            self._made[i] = f
        return f

    def view(self, ids: Sequence[int]) -> "FrameView":
        """The frames of tiles `ids`, made where they are used (a block's merge task takes this, not the
        frames: the driver frames no tile it hands on)."""
        ids = [int(i) for i in ids]
        return FrameView(self.grid, {i: self.tiles[i] for i in ids if i not in self._set},
                         {i: self._set[i] for i in ids if i in self._set})

    def __setitem__(self, i: int, frame: TileFrame) -> None:
        self._set[int(i)] = frame
        self._made.pop(int(i), None)

    def windows(self, ids: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """`tile_windows` of the tiles `ids`, frames set here taken as they are."""
        windows, pixels = tile_windows([self.tiles[i] for i in ids if i not in self._set])
        if len(windows) == len(ids):
            return windows, pixels
        out, pix, k = np.empty(len(ids), dtype=object), np.empty(len(ids)), 0
        for j, i in enumerate(ids):
            f = self._set.get(i)
            if f is None:
                out[j], pix[j], k = windows[k], pixels[k], k + 1
            else:
                out[j], pix[j] = f.window, f.pixel
        return out, pix

    def __delitem__(self, i: int) -> None:
        raise TypeError("a tile's frame cannot be removed")

    def __iter__(self) -> Iterator[int]:
        yield from self.tiles
        yield from (i for i in self._set if i not in self.tiles)

    def __len__(self) -> int:
        return len(self.tiles) + sum(i not in self.tiles for i in self._set)


class FrameView(Mapping):
    """Some tiles' frames (`TileFrames.view`): small to pickle (the tiles, not their polygons), each frame
    made on first use where it is read and kept while the view lives."""

    def __init__(self, grid: TileGrid | None, tiles: dict[int, Tile], given: dict[int, TileFrame]):
        self.grid, self.tiles, self.given = grid, tiles, given
        self._made: dict[int, TileFrame] = {}

    def __getstate__(self) -> tuple:
        return self.grid, self.tiles, self.given

    def __setstate__(self, state: tuple) -> None:
        self.grid, self.tiles, self.given = state
        self._made = {}

    def __getitem__(self, i: int) -> TileFrame:
        f = self.given.get(i) or self._made.get(i)
        if f is None:
            f = self._made[i] = TileFrames(self.grid).frame(self.tiles[i])
        return f

    def __iter__(self) -> Iterator[int]:
        yield from self.tiles
        yield from self.given

    def __len__(self) -> int:
        return len(self.tiles) + len(self.given)
