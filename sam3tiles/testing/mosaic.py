"""A raster cut into many files, as orthophoto deliveries come: adjacent, overlapping, with a file missing,
with a file on another whole-pixel origin (the tests and benchmarks of mosaics, issue 38), a file
re-projected into another CRS or pixel size (`warp_file`, issue 52).

`split_raster` copies windows of one GeoTIFF into files of their own (same CRS, pixel size and bands, each
with its window's transform), so a mosaic of them holds exactly the pixels of the one file: a run on the
mosaic can be compared with the run on the one file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import rasterio
from affine import Affine
from rasterio.windows import Window


@dataclass(frozen=True)
class Piece:
    """One file of a split: its window of the whole raster (pixels) and its path."""

    path: Path
    window: Window


def cuts(extent: int, n: int) -> list[int]:
    """`n + 1` cut positions 0 .. `extent`, evenly spaced (whole pixels)."""
    return [round(k * extent / n) for k in range(n + 1)]


def split_windows(width: int, height: int, cols: int, rows: int, overlap: int = 0,
                  grow: dict | None = None) -> dict[tuple[int, int], Window]:
    """The window of each file (row, col) of a `rows` x `cols` split of a `width` x `height` raster: the
    cells between even cuts, each widened by `overlap` px into its neighbours (half on each side, inside
    the raster); `grow` {(row, col): (left, top, right, bottom)} widens a cell further (whole pixels: a
    file on another origin of the same pixel lattice)."""
    xs, ys = cuts(width, cols), cuts(height, rows)
    out = {}
    for r in range(rows):
        for c in range(cols):
            left, top, right, bottom = (grow or {}).get((r, c), (0, 0, 0, 0))
            x0 = max(0, xs[c] - overlap // 2 - left)
            y0 = max(0, ys[r] - overlap // 2 - top)
            x1 = min(width, xs[c + 1] + overlap - overlap // 2 + right)
            y1 = min(height, ys[r + 1] + overlap - overlap // 2 + bottom)
            out[(r, c)] = Window(x0, y0, x1 - x0, y1 - y0)
    return out


def split_raster(src: str | Path, folder: str | Path, cols: int = 3, rows: int = 3, overlap: int = 0,
                 missing: tuple = (), grow: dict | None = None, name: str = "r{row}c{col}.tif",
                 **profile) -> list[Piece]:
    """Cut `src` into `rows` x `cols` GeoTIFFs in `folder` (see `split_windows`); `missing`: (row, col)
    cells left out (a hole in the delivery). `profile` overrides the files' creation options."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    pieces = []
    with rasterio.open(src) as ds:
        base = dict(ds.profile)
        base.update(profile)
        h, w = ds.height, ds.width
        for (r, c), win in split_windows(w, h, cols, rows, overlap, grow).items():
            if (r, c) in missing:
                continue
            path = folder / name.format(row=r, col=c)
            at = ds.transform @ Affine.translation(win.col_off, win.row_off)
            prof = dict(base, width=int(win.width), height=int(win.height), transform=at)
            if prof.get("tiled") and (win.width < 16 or win.height < 16):
                prof["tiled"] = False
            with rasterio.open(path, "w", **prof) as dst:
                dst.write(ds.read(window=win))
            pieces.append(Piece(path, win))
    return pieces


def with_hole(src: str | Path, dest: str | Path, window: Window, nodata: int = 0) -> Path:
    """A copy of `src` whose `window` is nodata (`nodata` set on the file): the one-file equivalent of a
    split with that file missing."""
    with rasterio.open(src) as ds:
        prof = dict(ds.profile, nodata=nodata)
        data = ds.read()
    r0, c0 = int(window.row_off), int(window.col_off)
    data[:, r0:r0 + int(window.height), c0:c0 + int(window.width)] = np.asarray(nodata, data.dtype)
    with rasterio.open(dest, "w", **prof) as dst:
        dst.write(data)
    return Path(dest)


def warp_file(src: str | Path, dest: str | Path, crs=None, pixel: float | None = None,
              resampling: str = "nearest", nodata: int = 0) -> Path:
    """`src` re-projected as gdalwarp does (`gdalwarp -t_srs CRS [-tr PIXEL PIXEL] -r RESAMPLING -dstnodata 0`):
    into `crs` (default: its own) at GDAL's suggested pixel size or `pixel` (in `crs`'s units), the pixels
    outside the footprint `nodata` (issue 52: a delivery re-projected by a vendor, a file at another pixel
    size). Returns `dest`."""
    from rasterio.enums import Resampling
    from rasterio.warp import calculate_default_transform, reproject

    with rasterio.open(src) as ds:
        to = rasterio.crs.CRS.from_user_input(crs) if crs is not None else ds.crs
        res = (pixel, pixel) if pixel else None
        transform, width, height = calculate_default_transform(ds.crs, to, ds.width, ds.height, *ds.bounds,
                                                               resolution=res)
        prof = dict(ds.profile, crs=to, transform=transform, width=width, height=height, nodata=nodata)
        if prof.get("tiled") and (width < 16 or height < 16):
            prof["tiled"] = False
        with rasterio.open(dest, "w", **prof) as dst:
            for b in range(1, ds.count + 1):
                reproject(rasterio.band(ds, b), rasterio.band(dst, b), resampling=Resampling[resampling],
                          dst_nodata=nodata)
    return Path(dest)
