"""Label images as pyramids: COG GeoTIFF (georeferenced), pyramidal OME-TIFF (slides), OME-Zarr (NGFF 0.4).

Real files: slides written by tifffile, GeoTIFFs by rasterio, read back by tifffile, rasterio (GDAL),
zarr and ome-zarr-py; gdalinfo too where it is installed.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import geopandas as gpd
import numpy as np
import pytest
import rasterio
import rasterio.features
import shapely
import shapely.affinity
import tifffile
from affine import Affine
from click.testing import CliRunner

from sam3tiles.errors import OutputError, UsageError
from sam3tiles.slidegen import PIXEL_UM, Pyramid, write_slide
from sam3tiles.writers.labels import check_labels, write_labels
from sam3tiles.writers.pyramid import Levels


def discs(n: int, width: int, height: int, seed: int = 0, crs=None, transform=Affine.identity()):
    rng = np.random.default_rng(seed)
    xy = rng.uniform([20, 20], [width - 20, height - 20], (n, 2))
    geoms = [shapely.affinity.affine_transform(shapely.Point(x, y).buffer(rng.uniform(3, 15)),
                                               transform.to_shapely()) for x, y in xy]
    return gpd.GeoDataFrame({"id": np.arange(1, n + 1)}, geometry=geoms, crs=crs)


def burnt(gdf, width, height, transform=Affine.identity()):
    """The reference label image: the whole frame rasterized at once (higher id wins)."""
    return rasterio.features.rasterize(zip(gdf.geometry, gdf["id"]), out_shape=(height, width), transform=transform,
                                       dtype="uint32")


@pytest.fixture(scope="module")
def slide(tmp_path_factory):
    return write_slide(tmp_path_factory.mktemp("slide") / "s.ome.tif", 1300, 1100, seed=2, pyramid=Pyramid(levels=3))


def run_cli(*args):
    from sam3tiles.cli.main import cli

    return CliRunner().invoke(cli, ["segment", *map(str, args), "--backend", "reference", "--workers", "2", "-q"])


def test_level_steps_follow_the_source():
    lv = Levels.of(3000, 2500, [(3000, 2500), (1500, 1250), (750, 625), (375, 313)])
    assert lv.factors(3) == (8, 8)
    rows, cols = lv.index(3)
    assert rows[-1] == 624 and cols[-1] == 748  # 313 rows of a 625-row level: every second one
    floor = Levels.of(1001, 1001, [(1001, 1001), (500, 500)])  # halved rounding down
    assert floor.index(1)[0][-1] == 998
    odd = Levels.of(900, 900, [(900, 900), (300, 300), (200, 200)])  # 3x, then 1.5x
    assert odd.factors(2) == (4.5, 4.5) and list(odd.index(2)[0][:4]) == [0, 1, 3, 4]
    assert [s for s in Levels.of(5000, 300).sizes] == [(5000, 300), (2500, 150), (1250, 75), (625, 38)]


def test_slide_labels_are_an_ome_tiff_pyramid_of_the_slides_levels(slide, tmp_path):
    out, labels = tmp_path / "o.gpkg", tmp_path / "labels.tif"
    res = run_cli(slide.path, "--text", "indigo", "--out", out, "--labels", labels)
    assert res.exit_code == 0, res.output
    gdf = gpd.read_file(out)
    with tifffile.TiffFile(labels) as tf:
        assert tf.is_ome
        series = tf.series[0]
        levels = [lvl.asarray() for lvl in series.levels]
        pixels = tf.ome_metadata
    assert [(a.shape[1], a.shape[0]) for a in levels] == slide.levels == [(1300, 1100), (650, 550), (325, 275)]
    assert all(a.dtype == np.uint32 for a in levels)
    for k, a in enumerate(levels):
        assert (a == levels[0][:: 2 ** k, :: 2 ** k]).all(), k  # nearest, at the slide's factors
    assert f'PhysicalSizeX="{PIXEL_UM}"' in pixels and 'PhysicalSizeXUnit="µm"' in pixels
    assert set(np.unique(levels[0])) - {0} == set(gdf["id"])
    assert (levels[0] == burnt(gdf, 1300, 1100)).mean() > 0.999


def test_ome_zarr_labels_read_by_ome_zarr_py(slide, tmp_path):
    from ome_zarr.io import parse_url
    from ome_zarr.reader import Label, Multiscales, Reader

    out, labels = tmp_path / "o.gpkg", tmp_path / "nuclei.ome.zarr"
    res = run_cli(slide.path, "--text", "indigo", "--out", out, "--labels", labels)
    assert res.exit_code == 0, res.output
    nodes = [n for n in Reader(parse_url(str(labels)))() if n.load(Label)]
    assert len(nodes) == 1 and nodes[0].load(Multiscales)
    node = nodes[0]
    assert [tuple(d.shape) for d in node.data] == [(h, w) for w, h in slide.levels]
    assert [a["unit"] for a in node.metadata["axes"]] == ["micrometer"] * 2
    scales = [t[0]["scale"] for t in node.metadata["coordinateTransformations"]]
    assert scales == [[PIXEL_UM * 2 ** k] * 2 for k in range(3)]
    attrs = json.loads((labels / "labels" / "nuclei" / ".zattrs").read_text())
    assert attrs["multiscales"][0]["version"] == "0.4" and "image-label" in attrs
    gdf = gpd.read_file(out)
    level0 = np.asarray(node.data[0])
    assert set(np.unique(level0)) - {0} == set(gdf["id"])
    assert (np.asarray(node.data[2]) == level0[::4, ::4]).all()
    # run again: the folder is ours, so --overwrite replaces it; a folder of someone else's is never replaced
    assert run_cli(slide.path, "--text", "indigo", "--out", out, "--labels", labels, "--overwrite").exit_code == 0
    other = tmp_path / "theirs.ome.zarr"
    other.mkdir()
    (other / ".zattrs").write_text("{}")
    with pytest.raises(OutputError, match="not an OME-Zarr sam3tiles wrote"):
        check_labels(other, overwrite=True)
    assert (other / ".zattrs").exists()


def test_ome_zarr_without_pixel_size_is_in_pixels(tmp_path):
    gdf = discs(40, 700, 500)
    write_labels(gdf, tmp_path / "x.ome.zarr", 700, 500)
    ms = json.loads((tmp_path / "x.ome.zarr" / "labels" / "x" / ".zattrs").read_text())["multiscales"][0]
    assert all("unit" not in a for a in ms["axes"])
    assert [d["coordinateTransformations"][0]["scale"] for d in ms["datasets"]] == [[1.0, 1.0]]


def test_georeferenced_labels_are_a_cog_with_nodata_and_overviews(tmp_path):
    t = Affine(0.5, 0, 500000, 0, -0.5, 6000000)
    gdf = discs(300, 2100, 1700, seed=3, crs="EPSG:32633", transform=t)
    path = write_labels(gdf, tmp_path / "l.tif", 2100, 1700, transform=t, crs="EPSG:32633", block=512)
    with rasterio.open(path) as ds:
        assert ds.nodata == 0 and ds.crs.to_epsg() == 32633 and ds.transform == t
        assert ds.overviews(1) == [2, 4, 8, 16]  # until the longer side fits one 256 px tile
        assert ds.tags(ns="IMAGE_STRUCTURE")["LAYOUT"] == "COG" and ds.block_shapes[0] == (256, 256)
        data = ds.read(1)
    with rasterio.open(path, overview_level=0) as ov:
        half = ov.read(1)
    assert half.shape == (850, 1050) and set(np.unique(half)) <= set(np.unique(data))
    assert (data == burnt(gdf, 2100, 1700, t)).all()
    # the COG layout as rio-cogeo / GDAL's validator check it: every IFD before any tile data, tiles of the
    # smallest overview first, full resolution last
    with tifffile.TiffFile(path) as tf:
        ifds = [pg.offset for pg in tf.pages]
        first = [min(o for o in pg.dataoffsets if o) for pg in tf.pages]
    assert len(ifds) == 5 and max(ifds) < min(first) and first == sorted(first, reverse=True)
    if shutil.which("gdalinfo"):
        info = subprocess.run(["gdalinfo", str(path)], capture_output=True, text=True, check=True).stdout
        assert "NoData Value=0" in info and "Overviews: 1050x850" in info and "LAYOUT=COG" in info


def test_ome_labels_of_a_georeferenced_raster_are_refused(tmp_path):
    path = tmp_path / "geo.tif"
    with rasterio.open(path, "w", driver="GTiff", width=300, height=200, count=3, dtype="uint8", crs="EPSG:32633",
                       transform=Affine(1, 0, 500000, 0, -1, 6000000)) as ds:
        ds.write(np.zeros((3, 200, 300), np.uint8))
    for name in ("l.ome.zarr", "l.ome.tif"):
        res = run_cli(path, "--text", "red", "--out", tmp_path / "o.gpkg", "--labels", tmp_path / name)
        assert res.exit_code == UsageError.exit_code and "hold no CRS" in res.output and "l.tif" in res.output
        assert not (tmp_path / name).exists() and not (tmp_path / "o.gpkg").exists()
