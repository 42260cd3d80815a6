"""Synthetic inputs that the tests and the benchmarks share: rasters, scenes, merge pieces, ONNX graphs.

Everything is generated in code (no binaries in the repository):

* `write_raster`: an array written as a GeoTIFF (or any GDAL format) by rasterio;
* `blob_image`, `write_demo_raster`: one coloured block on a plain background, in the demo's frame (the
  small scenes of the resume and fault tests);
* `grid_objects`: objects for `sam3tiles.testing.demo.write_scene` on a jittered lattice, fast at any size;
* `grid_pieces`: what the tiles of a large image would hand the merge, without running a model;
* `sam3tiles.testing.graphs`: small ONNX graphs that keep the SAM 3 contract and really segment, by colour
  (needs the `onnx` package, from the `test` extra);
* `demo`: the demo's georeferenced scene with objects of known extent (`sam3tiles demo` runs on it);
* `slidegen`: whole-slide images (OME-TIFF pyramids) with objects of known extent;
* `misbehaving`: a backend that misbehaves the way a real SAM 3 does, around any other backend.

Only the command line (`sam3tiles demo`), the tests and the benchmarks import this folder.
"""

from __future__ import annotations

import math

import numpy as np
import rasterio
import shapely
from affine import Affine
from rasterio.crs import CRS
from shapely import affinity
from shapely.geometry import box

from ..tiling.frame import TileFrames
from ..tiling.grid import DEFAULT_OVERLAP, TILE_SIZE, TileGrid
from ..tiling.piecekey import piece_key
from ..vectorize.pieces import EDGE_MARGIN, Pieces, tile_key

UTM = CRS.from_epsg(32633)


def write_raster(path, data: np.ndarray, transform=None, crs=UTM, nodata=None, **profile):
    """Write `data` [bands, h, w] (or [h, w]) as a GeoTIFF (or whatever `driver=` names); returns `path`.
    Without `transform`, 0.5 m pixels at (400000, 5000000) of `crs` (UTM 33N)."""
    if data.ndim == 2:
        data = data[None]
    count, h, w = data.shape
    prof = dict(driver=profile.pop("driver", "GTiff"), width=w, height=h, count=count, dtype=data.dtype)
    if crs is not None:
        prof.update(crs=crs, transform=transform or Affine(0.5, 0, 400000, 0, -0.5, 5000000))
    if nodata is not None:
        prof["nodata"] = nodata
    prof.update(profile)
    with rasterio.open(path, "w", **prof) as dst:
        dst.write(data)
    return path


#: The blob scenes' colours: the reference backend finds BLUE for "blue" and RED for "red", never BG.
BLUE, RED, BG = (18, 22, 232), (230, 20, 25), (92, 112, 84)


def other_file(src, dst):
    """A copy of the raster `src` at `dst` that is another file: its top-left pixel's first band differs by one
    (a byte-identical copy is the same input, segmented once). Returns `dst`."""
    with rasterio.open(src) as ds:
        profile, data = ds.profile, ds.read()
    data[0, 0, 0] ^= 1
    with rasterio.open(dst, "w", **profile) as out:
        out.write(data)
    return dst


def blob_image(colour=BLUE, h: int = 400, w: int = 500, at: tuple[int, int] = (120, 100)) -> np.ndarray:
    """RGB uint8 [3, h, w]: BG with one 60 x 80 px block of `colour` whose top-left is at (row, col) `at`."""
    data = np.zeros((3, h, w), np.uint8)
    for b in range(3):
        data[b] = BG[b]
        data[b, at[0]:at[0] + 60, at[1]:at[1] + 80] = colour[b]
    return data


def write_demo_raster(path, data: np.ndarray, transform=None, **profile):
    """`write_raster` in the demo scene's CRS and pixel grid (`sam3tiles.testing.demo`) unless `transform`
    says."""
    from .demo import CRS_DEMO, ORIGIN, PIXEL

    return write_raster(path, data, transform=transform or Affine(PIXEL, 0, ORIGIN[0], 0, -PIXEL, ORIGIN[1]),
                        crs=CRS_DEMO, **profile)


def grid_pieces(n_pieces: int, per_tile: int = 100, seed: int = 0, tile_size: int = TILE_SIZE,
                overlap: int = DEFAULT_OVERLAP, size: tuple[float, float] = (8.0, 20.0)):
    """About `n_pieces` pieces, about `per_tile` per tile window -> (Pieces, frames, TileGrid, objects).

    Small square objects (side in `size`, px) on a jittered lattice, so they never overlap, each cut into
    one piece per tile window that sees it, with the seam flags `pieces_from_crops` would set (complete /
    distance to the nearest interior tile edge). The merge's cost depends only on those pieces."""
    rng = np.random.default_rng(seed)
    stride = tile_size - overlap
    # pieces ~ objects * (window / stride)^2; pick the number of tiles, then the object lattice
    n_tiles = max(1, round(n_pieces / per_tile))
    side = max(1, round(math.sqrt(n_tiles)))
    extent = side * stride + overlap
    grid = TileGrid(extent, extent, tile_size=tile_size, overlap=overlap, transform=Affine.identity())
    n_objects = n_pieces * (stride / tile_size) ** 2
    cell = extent / math.sqrt(n_objects)
    ncell = int(extent // cell)
    gy, gx = np.mgrid[0:ncell, 0:ncell]
    w = rng.uniform(*size, gx.size)
    h = rng.uniform(*size, gx.size)
    x0 = gx.ravel() * cell + rng.uniform(0, np.maximum(cell - w, 0))
    y0 = gy.ravel() * cell + rng.uniform(0, np.maximum(cell - h, 0))
    x1, y1 = x0 + w, y0 + h
    rows, cols = grid.shape

    def span(a0, a1, n):
        lo = np.maximum(0, np.floor((a0 - tile_size) / stride).astype(int) + 1)
        hi = np.minimum(n - 1, np.floor((a1 - 1e-9) / stride).astype(int))
        return lo, hi

    clo, chi = span(x0, x1, cols)
    rlo, rhi = span(y0, y1, rows)
    obj, tr, tc = [], [], []
    for dr in range(3):
        for dc in range(3):
            r, c = rlo + dr, clo + dc
            ok = (r <= rhi) & (c <= chi)
            obj.append(np.flatnonzero(ok))
            tr.append(r[ok])
            tc.append(c[ok])
    obj, tr, tc = np.concatenate(obj), np.concatenate(tr), np.concatenate(tc)
    order = np.lexsort((obj, tr * cols + tc))  # tile order, as the pipeline concatenates them
    obj, tr, tc = obj[order], tr[order], tc[order]
    wx0, wy0 = tc * stride, tr * stride
    wx1 = np.minimum(wx0 + tile_size, extent)
    wy1 = np.minimum(wy0 + tile_size, extent)
    px0, py0 = np.maximum(x0[obj], wx0), np.maximum(y0[obj], wy0)
    px1, py1 = np.minimum(x1[obj], wx1), np.minimum(y1[obj], wy1)
    geoms = shapely.box(px0, py0, px1, py1)
    inf = np.full(len(obj), np.inf)
    d = np.minimum.reduce([np.where(tc > 0, px0 - wx0, inf), np.where(tr > 0, py0 - wy0, inf),
                           np.where(tc < cols - 1, wx1 - px1, inf), np.where(tr < rows - 1, wy1 - py1, inf)])
    tile_index = tr * cols + tc
    pieces = Pieces(geometry=list(geoms), score=rng.uniform(0.5, 1.0, len(obj)).tolist(),
                    prompt=[0] * len(obj), tile_key=piece_key(tile_index).tolist(),
                    complete=(d >= EDGE_MARGIN).tolist(), edge_dist=d.tolist())
    frames = dict(TileFrames(grid))
    return pieces, frames, grid, len(x0)


def grid_objects(width: int, height: int, cell: int = 500, seed: int = 0):
    """Objects for `sam3tiles.testing.demo.write_scene` on a jittered lattice (fast at any size, never
    overlapping): one per `cell` x `cell` block, alternately a 'blue' building (20-120 px, smaller in small
    cells) and a 'red' vehicle (10 x 20 px)."""
    rng = np.random.default_rng(seed)
    big = max(21.0, min(120.0, cell - 40.0))
    out = []
    for j in range(height // cell):
        for i in range(width // cell):
            if (i + j) % 2 == 0:
                w, h = rng.uniform(min(40.0, big - 1), big, 2)
                x, y = i * cell + rng.uniform(10, cell - w - 10), j * cell + rng.uniform(10, cell - h - 10)
                out.append(("blue", box(x, y, x + w, y + h)))
            else:
                lo, hi = 20, max(21, cell - 40)  # small cells: the vehicle still fits its cell
                x, y = i * cell + rng.uniform(lo, hi), j * cell + rng.uniform(lo, hi)
                out.append(("red", affinity.rotate(box(x, y, x + 10, y + 20), rng.uniform(0, 180))))
    return out


def frames_and_pieces(grid: TileGrid, placed, complete_edge_dist: float = 10.0):
    """Merge input by hand: `placed` is [(tile (row, col), geometry in CRS, complete)]; returns the grid's
    frames and the Pieces (score 0.9, prompt 0; a complete piece lies `complete_edge_dist` px from its edge)."""
    frames = dict(TileFrames(grid))
    p = Pieces()
    for (r, c), geom, complete in placed:
        t = grid.tile(r, c)
        p.geometry.append(geom)
        p.score.append(0.9)
        p.prompt.append(0)
        p.tile_key.append(tile_key(t))
        p.complete.append(complete)
        p.edge_dist.append(complete_edge_dist if complete else 0.0)
    return frames, p
