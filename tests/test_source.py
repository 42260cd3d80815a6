"""Reading: band choice, one global stretch for non-uint8 data, nodata/alpha masks, skipped tiles."""

from __future__ import annotations

import numpy as np
import pytest
from affine import Affine

from sam3tiles.errors import BandError, RasterReadError
from sam3tiles.readers import RasterSource, parse_bands
from sam3tiles.run.pipeline import segment_job
from sam3tiles.tiling.grid import TileGrid


def test_band_selection(raster_factory):
    data = np.stack([np.full((50, 60), v, np.uint8) for v in (10, 20, 30, 40, 50)])
    path = raster_factory(data)
    with pytest.raises(BandError, match=r"with bands, e\.g\. bands=3,2,1$"):
        RasterSource(path)
    with RasterSource(path, bands=parse_bands("4,3,2")) as src:
        rgb, valid = src.read_window(TileGrid(60, 50).tile(0, 0).src_window, (60, 50))
        assert rgb[:, 0, 0].tolist() == [40, 30, 20] and valid.all()
    with RasterSource(path, bands=parse_bands("5")) as src:
        rgb, _ = src.read_window(TileGrid(60, 50).tile(0, 0).src_window, (60, 50))
        assert rgb[:, 0, 0].tolist() == [50, 50, 50]  # one band becomes grey RGB
    with pytest.raises(BandError, match="band 7 does not exist"):
        RasterSource(path, bands=(7, 1, 2))
    with pytest.raises(BandError):
        parse_bands("1,2")


def test_global_stretch_is_the_same_for_every_tile(raster_factory):
    rng = np.random.default_rng(0)
    data = rng.normal(3000, 400, (3, 1500, 2000)).astype(np.uint16)
    data[:, :, 1200:] += 4000  # the right part is much brighter: a per-tile stretch would differ
    path = raster_factory(data)
    with RasterSource(path) as src:
        assert src.stretch is not None
        grid = TileGrid(2000, 1500)
        a = src.read_tile(grid.tile(0, 0)).rgb
        b = src.read_tile(grid.tile(0, 1)).rgb
    # pixel value v maps to the same byte in both tiles: compare the overlap band, read by both
    ov_a = a[:, :500, 752:1008]
    ov_b = b[:, :500, 0:256]
    assert np.array_equal(ov_a, ov_b)
    assert a.mean() < b.mean()


@pytest.mark.parametrize("dtype", ["int16", "float32"])
def test_signed_and_float_data_with_negatives_and_nan(raster_factory, dtype):
    data = np.linspace(-500, 500, 3 * 200 * 300).reshape(3, 200, 300).astype(dtype)
    if dtype == "float32":
        data[:, :20, :20] = np.nan
    path = raster_factory(data)
    with RasterSource(path) as src:
        img = src.read_tile(TileGrid(300, 200).tile(0, 0))
    assert img.rgb.dtype == np.uint8
    if dtype == "float32":
        assert not img.valid[:20, :20].any() and img.valid[30:200, 30:300].all()
    assert img.rgb[:, 150:200, 250:300].mean() > img.rgb[:, 30:60, 30:60].mean()


def test_nodata_tiles_are_skipped_and_counted(raster_factory):
    data = np.zeros((3, 1000, 2600), np.uint8)
    data[:, :, :900] = 120
    data[:, 100:200, 100:300] = (np.array([20, 20, 235], np.uint8))[:, None, None]
    path = raster_factory(data, nodata=0, transform=Affine(1, 0, 0, 0, -1, 1000))
    gdf, rep = segment_job(str(path), ["blue"], backend="reference", checkpoint=False)
    assert rep.tiles == 4 and rep.skipped == 2 and rep.done == 2  # tiles at x0 = 0, 752 | 1504, 2256
    assert len(gdf) == 1


def test_alpha_band_masks_pixels(raster_factory):
    data = np.full((4, 300, 300), 235, np.uint8)
    data[0:2] = 20  # blue everywhere
    data[3, :, 150:] = 0  # alpha: the right half is transparent
    path = raster_factory(data, photometric="RGB", alpha="YES")
    with RasterSource(path) as src:
        assert src.bands == (1, 2, 3)
    gdf, _ = segment_job(str(path), ["blue"], backend="reference", checkpoint=False)
    (geom,) = gdf.geometry
    assert geom.area == pytest.approx(150 * 300 * 0.25, rel=0.03)  # 0.5 m pixels


def test_plain_png_without_crs(tmp_path):
    from PIL import Image

    img = np.full((400, 500, 3), 100, np.uint8)
    img[50:90, 60:140] = (250, 10, 10)
    Image.fromarray(img).save(tmp_path / "p.png")
    gdf, _ = segment_job(str(tmp_path / "p.png"), ["red"], backend="reference", checkpoint=False)
    assert gdf.crs is None
    x0, y0, x1, y1 = gdf.geometry.iloc[0].bounds
    # pixel coordinates, y down
    assert (round(x0), round(y0), round(x1), round(y1)) == pytest.approx((60, 50, 140, 90), abs=2)


@pytest.mark.parametrize("content", [b"", b"this is not an image\n" * 10])
def test_unreadable_files(tmp_path, content):
    p = tmp_path / "bad.tif"
    p.write_bytes(content)
    with pytest.raises(RasterReadError):
        RasterSource(p)


_GDAL_CACHE = """
import os, sys
import rasterio
from rasterio.env import get_gdal_config

before = get_gdal_config("GDAL_CACHEMAX")
import sam3tiles, sam3tiles.run.pipeline, sam3tiles.readers  # noqa: E401,F401  importing configures nothing
from sam3tiles.readers import gdal_env
assert ("GDAL_CACHEMAX" in os.environ) == (sys.argv[1] == "user"), os.environ.get("GDAL_CACHEMAX")
assert get_gdal_config("GDAL_CACHEMAX") == before
with gdal_env():
    inside = get_gdal_config("GDAL_CACHEMAX")
print(before, inside, get_gdal_config("GDAL_CACHEMAX"))
"""


@pytest.mark.parametrize("who", ["run", "user"])
def test_gdal_is_configured_by_the_run_not_by_importing(who):
    # importing sam3tiles leaves GDAL and the environment alone; the run's context caps GDAL's block cache
    # at 256 MB for its duration, and a GDAL_CACHEMAX the user set wins
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "GDAL_CACHEMAX"}
    if who == "user":
        env["GDAL_CACHEMAX"] = "100"
    run = subprocess.run([sys.executable, "-c", _GDAL_CACHE, who], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    before, inside, after = (int(v) for v in run.stdout.split())
    assert after == before
    assert inside == (100 * 2**20 if who == "user" else 256 * 2**20)


def test_every_read_of_a_run_is_in_the_run_s_gdal_configuration(raster_factory, monkeypatch):
    from rasterio.env import get_gdal_config

    seen = []
    read = RasterSource.read_window

    def recording(self, window, out_wh):
        seen.append(get_gdal_config("GDAL_CACHEMAX"))
        return read(self, window, out_wh)

    monkeypatch.delenv("GDAL_CACHEMAX", raising=False)
    monkeypatch.setattr(RasterSource, "read_window", recording)
    data = np.full((3, 1200, 1500), 120, np.uint8)
    data[:, 100:200, 100:300] = np.array([20, 20, 235], np.uint8)[:, None, None]
    segment_job(str(raster_factory(data)), ["blue"], backend="reference", checkpoint=False)
    assert len(seen) >= 4 and set(seen) == {256 * 2**20}  # the tiles' reads, on the engine's worker threads




def test_trim_heap_waits_until_the_resident_size_has_grown():
    """A trim before every tile's read faulted its pages in again (3-4 ms of a 9 ms read): one is due only
    once the process has grown by TRIM_GROWTH since the last, and never more than TRIM_SHARE of the time."""
    from sam3tiles.readers.base import TRIM_GROWTH, TRIM_SHARE, trim_heap_due

    last = {"last": 100.0, "cost": 0.01, "rss": 500 << 20}
    later = 100.0 + 0.01 / TRIM_SHARE + 1
    assert not trim_heap_due(later, (500 << 20) + TRIM_GROWTH - 1, last)  # grown less: the pages are reused
    assert trim_heap_due(later, (500 << 20) + TRIM_GROWTH, last)
    assert not trim_heap_due(100.0 + 0.01 / TRIM_SHARE / 2, (500 << 20) + 2 * TRIM_GROWTH, last)  # too soon
    assert trim_heap_due(later, None, last)  # resident size unknown: the time share alone
