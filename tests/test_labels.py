"""Label images as pyramids: COG GeoTIFF (georeferenced), pyramidal OME-TIFF (slides), OME-Zarr (NGFF 0.4).

Real files: slides written by tifffile, GeoTIFFs by rasterio, read back by tifffile, rasterio (GDAL),
zarr and ome-zarr-py; gdalinfo too where it is installed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time

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
from sam3tiles.testing.slidegen import PIXEL_UM, Pyramid, write_slide
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


# -- a full disk while writing labels (issue 36, case 9) --------------------------------------------------------

@contextlib.contextmanager
def small_disk(folder, kib: int):
    """A real tmpfs of `kib` KiB mounted at `folder` (root only: skips the test otherwise)."""
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={kib}k", "tmpfs", str(folder)],
                                           capture_output=True).returncode != 0:
        pytest.skip("needs root to mount a small tmpfs")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


#: disk sizes (KiB) that fill while writing the metadata, the first chunks, the middle, the overviews, or not at all
DISK_SIZES = (8, 24, 40, 56, 64, 72, 80, 96, 112, 128, 144, 160, 192, 224, 256, 512)


@pytest.mark.parametrize("name, levels", [("lab.ome.tif", [(1300, 1100), (650, 550), (325, 275)]),
                                          ("lab.ome.zarr", [(1300, 1100), (650, 550), (325, 275)]),
                                          ("lab.tif", None)])
def test_a_full_disk_while_writing_labels_leaves_nothing_and_never_a_wrong_file(tmp_path, name, levels):
    """A real full disk (a small tmpfs) at every stage of each format: the writer fails with an error that says
    so (or succeeds, and then the file holds the labels), and nothing of it stays on the disk: no temporary
    file, no scratch pyramid, no temporary store that zarr's writer threads still wrote after the failure."""
    from sam3tiles.writers.atomic import is_disk_full

    gdf = discs(300, 1300, 1100, seed=3)
    want = burnt(gdf, 1300, 1100)
    outcomes = []
    for kib in DISK_SIZES:
        with small_disk(tmp_path / f"disk{kib}", kib) as disk:
            try:
                write_labels(gdf, disk / name, 1300, 1100, levels=levels)
            except Exception as e:  # noqa: BLE001 - what the run turns into exit 2
                assert is_disk_full(e, disk), (kib, repr(e))
                time.sleep(0.1)  # writer threads of zarr still running would show their files by now
                assert sorted(os.listdir(disk)) == [], (kib, sorted(p.name for p in disk.rglob("*"))[:5])
                outcomes.append("full")
                continue
            assert sorted(os.listdir(disk)) == [name], kib
            if name.endswith(".zarr"):
                import zarr
                got = np.asarray(zarr.open_group(str(disk / name), mode="r")["labels/lab/0"])
            elif levels:
                got = tifffile.imread(disk / name)
            else:
                with rasterio.open(disk / name) as ds:
                    got = ds.read(1)
            assert (got == want).all(), kib
            outcomes.append("ok")
    assert "full" in outcomes and outcomes[-1] == "ok", outcomes  # both seen: the sizes still span the writes


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    from sam3tiles.testing.demo import write_scene

    return write_scene(tmp_path_factory.mktemp("scene") / "scene.tif", 1300, 1100, 5)


@pytest.mark.parametrize("kind, sizes", [("slide.tif", (16, 48, 96, 128)), ("slide.ome.zarr", (16, 48, 96, 128)),
                                         ("scene.tif", (16, 32, 40, 48))])  # its COG holds 24 KiB
def test_a_full_disk_while_the_run_writes_its_labels_is_exit_2_and_leaves_nothing(slide, scene, tmp_path, kind, sizes):
    """Through the command line (the label image renamed with the run's other outputs): exit 2 naming the full
    folder, no temporary file or folder left there, no output of the run in place."""
    src = slide.path if kind.startswith("slide") else scene.path
    name = "lab." + kind.split(".", 1)[1]
    out = tmp_path / "o.gpkg"
    full = []
    for kib in sizes:
        with small_disk(tmp_path / f"disk{kib}", kib) as disk:
            res = run_cli(src, "--text", "indigo" if kind.startswith("slide") else "blue", "--out", out,
                          "--labels", disk / name, "--overwrite")
            time.sleep(0.2)  # writer threads still running after the failure would show their files by now
            assert "Traceback" not in res.output
            if res.exit_code == 0:  # it fitted: then it is the whole label image
                gdf = gpd.read_file(out)
                with rasterio.open(disk / name) as ds:
                    got, t = ds.read(1), ds.transform
                assert (got == burnt(gdf, got.shape[1], got.shape[0], t)).mean() > 0.999, kib
                assert sorted(os.listdir(disk)) == [name], kib
                out.unlink()
                continue
            assert sorted(os.listdir(disk)) == [], (kib, res.output)
            assert res.exit_code == 2 and "no space left writing the label image" in res.output, (kib, res.output)
            assert not out.exists()
            full.append(kib)
    assert full[:2] == list(sizes[:2]), full


# -- --overwrite of an OME-Zarr holding files sam3tiles did not write (issue 36, case 7) ------------------------

def files_of(folder):
    """Every file and folder under `folder` with its bytes (None: a folder)."""
    return {str(p.relative_to(folder)): (None if p.is_dir() else p.read_bytes()) for p in sorted(folder.rglob("*"))}


def add_foreign(store):
    """What a user or another tool adds to a label store: a note, another tool's label group, an empty folder."""
    (store / "notes.txt").write_text("mine")
    cells = store / "labels" / "cells"
    cells.mkdir()
    (cells / ".zgroup").write_text('{"zarr_format": 2}')
    (store / "labels" / "lab" / "0" / "scratch").mkdir()
    (store / "labels" / "lab" / "0" / "0").mkdir(exist_ok=True)
    (store / "labels" / "lab" / "0" / "0" / "77").write_bytes(b"x")  # a chunk's name, outside level 0's grid


def test_overwrite_refuses_an_ome_zarr_holding_files_sam3tiles_did_not_write(slide, tmp_path):
    out, labels = tmp_path / "o.gpkg", tmp_path / "lab.ome.zarr"
    assert run_cli(slide.path, "--text", "indigo", "--out", out, "--labels", labels).exit_code == 0
    add_foreign(labels)
    before, gpkg = files_of(labels), out.read_bytes()
    with pytest.raises(OutputError) as e:  # planning: before any tile runs
        check_labels(labels, overwrite=True)
    for shown in ("notes.txt", "labels/cells/", "labels/lab/0/scratch/", "labels/lab/0/0/77"):
        assert shown in str(e.value)
    res = run_cli(slide.path, "--text", "indigo", "--out", out, "--labels", labels, "--overwrite")
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    assert "notes.txt" in res.output and "move them out" in res.output and "nothing was deleted" in res.output
    assert files_of(labels) == before and out.read_bytes() == gpkg
    assert sorted(p.name for p in tmp_path.iterdir() if ".tmp" in p.name or ".old" in p.name) == []
    # the store as sam3tiles wrote it (its chunks, its levels' metadata) is replaced: only what it wrote
    for p in ("notes.txt", "labels/cells/.zgroup"):
        (labels / p).unlink()
    (labels / "labels" / "cells").rmdir()
    (labels / "labels" / "lab" / "0" / "scratch").rmdir()
    (labels / "labels" / "lab" / "0" / "0" / "77").unlink()
    assert check_labels(labels, overwrite=True) == labels
    assert run_cli(slide.path, "--text", "indigo", "--out", out, "--labels", labels, "--overwrite").exit_code == 0


def test_files_added_to_the_ome_zarr_while_the_run_writes_stop_its_replacement(tmp_path):
    """Checked again when the new store is written and just before the rename (the timing forced: the files
    are added while the label image is burnt, or while the rename waits for the run's report)."""
    from sam3tiles.writers.atomic import Deferred, deferred_renames

    labels = tmp_path / "lab.ome.zarr"
    write_labels(discs(40, 700, 500), labels, 700, 500)
    check_labels(labels, overwrite=True)
    gdf = discs(60, 700, 500, seed=1)
    query = gdf_query(gdf)

    class Adding:  # the objects as the run's spool hands them; the user adds a file meanwhile
        def query(self, *box):
            if not (labels / "notes.txt").exists():
                (labels / "notes.txt").write_text("mine")
            return query(*box)

    before = files_of(labels)
    with pytest.raises(OutputError, match="notes.txt"):
        write_labels(Adding(), labels, 700, 500)
    assert (labels / "notes.txt").read_text() == "mine" and len(files_of(labels)) == len(before) + 1
    (labels / "notes.txt").unlink()
    before = files_of(labels)
    pending = Deferred()
    with deferred_renames(pending):
        write_labels(gdf, labels, 700, 500)
    (labels / "labels" / "more").mkdir()
    try:
        with pytest.raises(OutputError, match="labels/more"):
            pending.commit()
    finally:
        pending.discard()
    assert {k: v for k, v in files_of(labels).items() if k != "labels/more"} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lab.ome.zarr"]


def gdf_query(gdf):
    from sam3tiles.writers.labels import _frame_query

    return _frame_query(gdf, "id", None)
