"""Small faults, each with the test that showed it: what `--clean` removed is not listed as written; the napari
reader refuses what it cannot read and opens an RGB GeoTIFF as RGB; `evaluate` says why nothing met; the
cluster examples name the package they need; no run or test grabs the dashboard port 8787."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import sam3tiles
from sam3tiles.cli.main import cli
from sam3tiles.testing.demo import write_scene


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    return write_scene(tmp_path_factory.mktemp("small") / "scene.tif", 700, 500, seed=5)


# -- --clean: the removed work folder is listed as removed, not as written ---------------------------------
def test_clean_lists_the_work_folder_as_removed_not_written(scene, tmp_path):
    out = tmp_path / "o.gpkg"
    r = CliRunner().invoke(cli, ["segment", str(scene.path), "--text", "red", "--backend", "reference",
                                 "--workers", "1", "--out", str(out), "--clean"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    work = tmp_path / "o.gpkg.sam3tiles-work"
    assert not work.exists()
    report = json.loads((tmp_path / "o.gpkg.report.json").read_text())
    assert report["files"]["work_dir"] is None and report["files"]["removed"] == [str(work)]
    assert report["checkpoint"]["removed"] is True
    # the text names it once, as removed; never among the files written
    assert [ln for ln in r.stderr.splitlines() if str(work) in ln] == \
        [f"work folder {work}: removed after the run (--clean)"]
    # the report the API hands back says the same
    gdf = sam3tiles.segment(str(scene.path), ["red"], backend="reference", workers=1, out=tmp_path / "p.gpkg",
                            clean=True)
    files = gdf.attrs["sam3tiles_report"]["files"]
    assert files["work_dir"] is None and files["removed"] == [str(tmp_path / "p.gpkg.sam3tiles-work")]


# -- the napari reader: None for what it cannot read, layers that look like the file ----------------------
@pytest.fixture(scope="module")
def plugin():
    npe2 = pytest.importorskip("npe2")
    manifest = npe2.PluginManifest.from_file(Path(sam3tiles.__file__).parent / "integrations" / "napari.yaml")
    pm = npe2.PluginManager.instance()
    if manifest.name not in pm:
        pm.register(manifest)
    yield npe2
    pm.unregister(manifest.name)


def _ours(path) -> list:
    """The layers our reader gives `path` (what `integrations.napari.add_to` opens: the manifest no longer
    offers a plain .tif or a folder to the plugin)."""
    from sam3tiles.integrations.napari import get_reader

    return get_reader(str(path))(str(path))


def _refused(npe2, path) -> None:
    """get_reader leaves the file to napari's other readers; asked by name, the plugin refuses it (npe2's
    ValueError), and nothing of tifffile's or zarr's comes out."""
    from sam3tiles.integrations.napari import get_reader

    assert get_reader(str(path)) is None and get_reader([str(path)]) is None
    # napari 0.9's manifest match: a plain .tif or a folder is not offered to the plugin at all (issue 53)
    with pytest.raises(ValueError, match="refused the file|not a compatible reader"):
        npe2.read([str(path)], stack=False, plugin_name="sam3tiles")


@pytest.mark.parametrize("compress", ["none", "deflate"])
def test_a_truncated_geotiff_is_refused(plugin, tmp_path, compress):
    from sam3tiles.integrations.napari import read_raster

    whole = write_scene(tmp_path / "whole.tif", 600, 400, seed=2, compress=compress).path
    data = whole.read_bytes()
    cut = tmp_path / "cut.tif"
    cut.write_bytes(data[: len(data) // 2])  # a copy cut short: its header and tile index whole, half its tiles
    _refused(plugin, cut)
    assert read_raster(str(cut)) is None


def test_a_band_interleaved_rgb_geotiff_opens_as_rgb(plugin, tmp_path):
    import rasterio
    from affine import Affine
    from rasterio.enums import Resampling

    rgb = np.random.default_rng(0).integers(0, 255, (3, 300, 400), dtype=np.uint8)
    path = tmp_path / "planar.tif"
    with rasterio.open(path, "w", driver="GTiff", width=400, height=300, count=3, dtype="uint8", crs="EPSG:32633",
                       transform=Affine(0.3, 0, 500000, 0, -0.3, 4100000), interleave="band", photometric="RGB",
                       tiled=True, blockxsize=256, blockysize=256) as ds:
        ds.write(rgb)
    with rasterio.open(path, "r+") as ds:
        ds.build_overviews([2], Resampling.average)
    [(levels, kw, kind)] = _ours(path)
    assert kind == "image" and kw.get("rgb") is True and kw["multiscale"]
    assert [tuple(lvl.shape) for lvl in levels] == [(300, 400, 3), (150, 200, 3)]
    assert np.array_equal(np.asarray(levels[0][10:20, 30:50]), rgb[:, 10:20, 30:50].transpose(1, 2, 0))


def test_an_ome_zarr_without_its_labels_group_is_refused(plugin, tmp_path):
    import geopandas as gpd
    import shapely

    from sam3tiles.writers.labels import write_labels

    objects = gpd.GeoDataFrame({"id": [1, 2]}, geometry=[shapely.box(10, 10, 60, 40), shapely.box(100, 80, 150, 120)])
    path = write_labels(objects, tmp_path / "l.ome.zarr", 256, 200, levels=[(256, 200), (128, 100)])
    assert [kind for _, _, kind in _ours(path)] == ["labels"]
    shutil.rmtree(path / "labels")  # the root still names it
    _refused(plugin, path)


# -- evaluate: prompts that meet no truth class are named, with the classes they were compared with --------
def _box_run_and_truth(d: Path) -> tuple[Path, Path]:
    """A box-prompt run's objects (prompt `visual`) and a truth of the same objects, class `solar panel`."""
    import geopandas as gpd
    import shapely

    boxes = [shapely.box(500000 + 10 * i, 4100000, 500006 + 10 * i, 4100004) for i in range(4)]
    gpd.GeoDataFrame({"id": range(1, 5), "prompt": "visual", "score": 0.9}, geometry=boxes,
                     crs="EPSG:32633").to_file(d / "pred.gpkg")
    gpd.GeoDataFrame({"class": "solar panel", "kind": "roof"}, geometry=boxes, index=range(4),
                     crs="EPSG:32633").to_file(d / "truth.gpkg")
    return d / "pred.gpkg", d / "truth.gpkg"


def test_evaluate_names_prompts_that_meet_no_truth_class(tmp_path):
    pred, truth = _box_run_and_truth(tmp_path)
    r = subprocess.run([sys.executable, "-m", "sam3tiles.cli", "evaluate", str(pred), str(truth), "--class-col",
                        "class"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "visual" in r.stdout and "solar panel" in r.stdout  # the table: each scored apart, F1 0
    [line] = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert "prompts (visual)" in line and "classes in truth column 'class' (solar panel)" in line, line
    assert "--class-col" in line and "Traceback" not in r.stderr


def test_evaluate_names_the_truth_column_holding_the_prompts(tmp_path, caplog):
    import geopandas as gpd

    from sam3tiles.evaluate import evaluate

    pred, truth = _box_run_and_truth(tmp_path)
    truth_gdf = gpd.read_file(truth).assign(label="Visual")
    with caplog.at_level("WARNING", logger="sam3tiles.evaluate"):
        table = evaluate(gpd.read_file(pred), truth_gdf, class_col="class")
    assert table["f1"].max() == 0
    [record] = caplog.records
    said = record.getMessage()
    assert "prompts (visual)" in said and "its column 'label' holds them: --class-col label (class_col='label'" in said
    caplog.clear()
    with caplog.at_level("WARNING", logger="sam3tiles.evaluate"):  # classes that meet: nothing to say
        assert evaluate(gpd.read_file(pred), truth_gdf, class_col="label")["f1"].min() == 1
    assert not caplog.records


# -- the cluster examples without their cluster package: one line naming it --------------------------------
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.parametrize("script, module, package", [("cluster_slurm.py", "dask_jobqueue", "dask-jobqueue"),
                                                     ("cluster_local_cuda.py", "dask_cuda", "dask-cuda")])
def test_a_cluster_example_names_the_package_it_needs(tmp_path, script, module, package):
    import importlib.util

    if importlib.util.find_spec(module) is not None:
        pytest.skip(f"{package} is installed here")
    r = subprocess.run([sys.executable, str(EXAMPLES / script), "x.tif", "--out", "x.gpkg"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    [line] = r.stderr.strip().splitlines()
    assert line.startswith(f"Error: {script} needs {package}") and f"pip install {package}" in line, line


# -- the dashboard port: a run in this process leaves 8787 to whoever owns it ------------------------------
DASHBOARD = 8787


def _listening(port: int) -> bool:
    import psutil

    return any(c.status == psutil.CONN_LISTEN and c.laddr.port == port
               for c in psutil.Process().net_connections(kind="tcp"))


def test_a_run_in_this_process_neither_takes_nor_warns_about_port_8787(scene):
    import socket
    import warnings

    from sam3tiles.run.executing.engine import open_engine

    with socket.socket() as held:
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            held.bind(("0.0.0.0", DASHBOARD))
            held.listen()
        except OSError:
            pass  # taken already, which is the case under test
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            rep = sam3tiles.segment_report(str(scene.path), "red", backend="reference", workers=1, checkpoint=False)
    assert rep.objects > 0
    assert not [str(w.message) for w in caught if "in use" in str(w.message) or str(DASHBOARD) in str(w.message)]
    # its scheduler serves its health page on a free port of the loopback, whether 8787 is free or not
    with open_engine(client=None, scheduler=None, workers=1) as engine:
        http = engine.client.cluster.scheduler.http_server
        assert not engine.distributed and http.address == "127.0.0.1" and http.port != DASHBOARD
        assert not _listening(DASHBOARD)
