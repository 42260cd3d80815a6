"""Shared fixtures: rasters written by rasterio in tmp dirs, generated demo scenes."""

from __future__ import annotations

import numpy as np
import pytest
import rasterio
from affine import Affine
from rasterio.crs import CRS

UTM = CRS.from_epsg(32633)


def write_raster(path, data: np.ndarray, transform=None, crs=UTM, nodata=None, **profile):
    """Write `data` [bands, h, w] as a GeoTIFF (or whatever the extension's driver is)."""
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


@pytest.fixture
def raster_factory(tmp_path):
    counter = iter(range(10**6))

    def make(data, name=None, **kw):
        return write_raster(tmp_path / (name or f"r{next(counter)}.tif"), data, **kw)

    return make
