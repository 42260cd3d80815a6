"""Instance label images: the objects burnt into a uint32 raster aligned with the source, block by block.

Pixel value = the object's `id` (the same id as in the vector output), 0 = background. A pixel belongs to
an object when its centre lies inside the polygon (GDAL's rasterize rule), so a polygon that follows
pixel edges gives exactly its pixels. Where two objects overlap, the higher id wins.

The image is a tiled, deflate-compressed GeoTIFF (BigTIFF when large) with the source's transform and
CRS (none for slides: plain pixel grid). It is written one block at a time, each block rasterizing only
the polygons that reach it (an STRtree query), so memory stays flat whatever the image's size. The file
is written under a temporary name and renamed into place.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
import rasterio
import rasterio.features
import shapely
from affine import Affine
from rasterio.windows import Window

from ..errors import OutputError, OutputExistsError, UsageError
from .atomic import atomic_path

SUFFIXES = (".tif", ".tiff")
TIFF_BLOCK = 256


def check_labels(path: str | os.PathLike, overwrite: bool) -> Path:
    """Validate a --labels path before any work: .tif/.tiff, writable folder, no clash."""
    p = Path(path)
    if p.suffix.lower() not in SUFFIXES:
        raise UsageError(f"--labels {p}: a label image is a TIFF: end the name with .tif or .tiff")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise OutputError(f"--labels {p}: the folder {parent} does not exist: create it first")
    if not os.access(parent, os.W_OK):
        raise OutputError(f"--labels {p}: the folder {parent} is not writable: choose another path")
    if p.exists() and not overwrite:
        raise OutputExistsError(f"--labels {p} exists: pass --overwrite to replace it, or choose another name")
    return p


def write_labels(gdf, path: str | os.PathLike, width: int, height: int, transform: Affine = Affine.identity(),
                 crs=None, block: int = 1024, id_column: str = "id") -> Path:
    """Write `gdf`'s polygons as a uint32 instance label image of `width` x `height` pixels.

    Ids come from `id_column` (1, 2, ... in row order when the column is missing); they must fit uint32.
    `gdf` may also be anything with `query(minx, miny, maxx, maxy) -> (geometries, ids)` in id order (e.g.
    `writers.stream.ObjectSpool`), so the objects need not all be in memory.
    `block` (a multiple of 256) is the side of the pieces rasterized and written at a time.
    """
    p = Path(path)
    block = max(TIFF_BLOCK, int(block) // TIFF_BLOCK * TIFF_BLOCK)
    query = gdf.query if hasattr(gdf, "query") and not hasattr(gdf, "geometry") else _frame_query(gdf, id_column, p)
    profile = dict(driver="GTiff", width=int(width), height=int(height), count=1, dtype="uint32", nodata=None,
                   tiled=True, blockxsize=TIFF_BLOCK, blockysize=TIFF_BLOCK, compress="deflate", predictor=1,
                   BIGTIFF="IF_SAFER", transform=transform)
    if crs is not None:
        profile["crs"] = crs
    with atomic_path(p) as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore", rasterio.errors.NotGeoreferencedWarning)
        with rasterio.open(tmp, "w", **profile) as dst:
            for y0 in range(0, height, block):
                h = min(block, height - y0)
                for x0 in range(0, width, block):
                    w = min(block, width - x0)
                    win = Window(x0, y0, w, h)
                    wt = rasterio.windows.transform(win, transform)
                    out = np.zeros((h, w), np.uint32)
                    # all four corners: a rotated or sheared transform's window is no axis-aligned box
                    xs, ys = zip(*(transform * (c, r) for c in (x0, x0 + w) for r in (y0, y0 + h)))
                    geoms, ids = query(min(xs), min(ys), max(xs), max(ys))
                    if len(ids):
                        _check_ids(ids, p)
                        rasterio.features.rasterize(zip(geoms, ids.astype(np.uint32)), out=out,
                                                    transform=wt, dtype="uint32")
                    dst.write(out, 1, window=win)
    return p


def _check_ids(ids: np.ndarray, p: Path) -> None:
    if len(ids) and (ids.min() < 1 or ids.max() > np.iinfo(np.uint32).max):
        raise UsageError(f"--labels {p}: object ids must lie in 1..{np.iinfo(np.uint32).max} for a uint32 "
                         f"label image (got {ids.min()}..{ids.max()})")


def _frame_query(gdf, id_column: str, p: Path):
    """`query(minx, miny, maxx, maxy) -> (geometries, ids)` in id order over a GeoDataFrame (an STRtree)."""
    geoms = np.asarray(gdf.geometry.values, dtype=object) if len(gdf) else np.asarray([], dtype=object)
    ids = (np.asarray(gdf[id_column], dtype=np.int64) if id_column in gdf.columns
           else np.arange(1, len(gdf) + 1, dtype=np.int64))
    _check_ids(ids, p)
    keep = np.asarray([g is not None and not g.is_empty for g in geoms], bool) if len(geoms) else np.zeros(0, bool)
    geoms, ids = geoms[keep], ids[keep]
    order = np.argsort(ids, kind="stable")  # rasterize in id order: the higher id wins an overlap
    geoms, ids = geoms[order], ids[order]
    tree = shapely.STRtree(geoms) if len(geoms) else None

    def query(minx, miny, maxx, maxy):
        if tree is None:
            return geoms, ids
        hits = np.sort(tree.query(shapely.box(minx, miny, maxx, maxy)))
        return geoms[hits], ids[hits]

    return query
