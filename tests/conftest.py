"""Shared fixtures: rasters written by rasterio in tmp dirs, generated demo scenes."""

from __future__ import annotations

import pytest

from sam3tiles.testing import UTM, write_raster  # noqa: F401 - tests of other branches import them from here


@pytest.fixture
def raster_factory(tmp_path):
    counter = iter(range(10**6))

    def make(data, name=None, **kw):
        return write_raster(tmp_path / (name or f"r{next(counter)}.tif"), data, **kw)

    return make
