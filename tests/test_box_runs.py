"""Box-only runs as a user starts them: checkpoints on, killed and resumed; verbosity flags on either side of
the subcommand; the forms `boxes=` takes from Python. Scenes from `test_exemplars._scene` (3x3 tiles)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import geopandas as gpd
import pytest
import shapely
from click.testing import CliRunner

from sam3tiles.cli.main import cli
from sam3tiles.errors import UsageError
from sam3tiles.prompts.prompt import GeoBox
from sam3tiles.run.recording.checkpoint import _BatchedPuts, stored_rows
from sam3tiles.run.pipeline import segment_job
from test_exemplars import _box_arg, _crs, _far_exemplar, _scene


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    return _scene(tmp_path_factory.mktemp("boxruns") / "scene.tif")


def test_box_only_run_with_checkpoints_survives_a_flush_after_delivery(scene, tmp_path, monkeypatch):
    """The checkpoint batch is written only when the tiles end (long after each tile was delivered and its
    pieces handed to the merger): the rows written must still be the tiles' whole results."""
    monkeypatch.setattr(_BatchedPuts, "BATCH", 10**9)
    monkeypatch.setattr(_BatchedPuts, "SECONDS", 1e9)
    path, truth = scene
    box = _box_arg(_far_exemplar(truth, "blue"))
    out = tmp_path / "b.gpkg"
    gdf, rep = segment_job(str(path), [], boxes=[box], backend="reference", out=out, box_scope="tile")
    assert rep.tiles == 9 and rep.failed == 0
    again, rep2 = segment_job(str(path), [], boxes=[box], backend="reference", out=out, box_scope="tile",
                              overwrite=True)
    assert rep2.resumed == 9 and rep2.done == 0  # every row decodes to the tile's result
    assert sorted(g.wkb for g in again.geometry) == sorted(g.wkb for g in gdf.geometry) and len(gdf) > 0


def _cli(tmp, *args) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.Popen([sys.executable, "-m", "sam3tiles.cli", *args], cwd=tmp, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _rows(db) -> int:
    return stored_rows(db) or 0


def test_box_only_cli_run_killed_midway_resumes_to_the_same_output(scene, tmp_path):
    path, truth = scene
    box = _box_arg(_far_exemplar(truth, "blue"))
    args = ["-q", "segment", str(path), "--box", box, "--backend", "simulated", "--workers", "1"]
    segment_job(str(path), [], boxes=[box], backend="simulated", workers=1, out=tmp_path / "whole.gpkg",
                return_objects=False)  # the uninterrupted run (in this process: one interpreter start less)
    killed = _cli(tmp_path, *args, "--out", "k.gpkg")
    db = tmp_path / "k.gpkg.sam3tiles-work" / "tiles.sqlite"
    t0 = time.monotonic()
    while _rows(db) < 1 and killed.poll() is None and time.monotonic() - t0 < 120:
        time.sleep(0.05)
    assert killed.poll() is None, killed.stderr.read()
    killed.send_signal(signal.SIGKILL)
    killed.wait(timeout=30)
    assert not (tmp_path / "k.gpkg").exists() and 0 < _rows(db) < 9
    resumed = _cli(tmp_path, *args, "--out", "k.gpkg")
    _, err = resumed.communicate(timeout=240)
    assert resumed.returncode == 0, err
    a, b = gpd.read_file(tmp_path / "whole.gpkg"), gpd.read_file(tmp_path / "k.gpkg")
    assert len(a) > 0 and sorted(a.geometry.to_wkb()) == sorted(b.geometry.to_wkb())


@pytest.fixture
def logging_levels():
    """-v/-vv set process-wide logger levels: put them back for the tests that follow."""
    import logging

    names = ["", "distributed", "distributed.worker", "rasterio", "fiona", "pyogrio", "tornado", "asyncio"]
    saved = {n: logging.getLogger(n).level for n in names}
    yield
    for n, level in saved.items():
        logging.getLogger(n).setLevel(level)


def test_verbosity_flags_mean_the_same_before_and_after_the_subcommand(tmp_path, monkeypatch, logging_levels):
    import sam3tiles.run.pipeline as pipeline

    def boom(*a, **k):
        raise RuntimeError("planted bug")

    monkeypatch.setattr(pipeline, "segment_job", boom)
    base = ["segment", "x.tif", "--text", "a", "--backend", "reference", "--out", str(tmp_path / "o.gpkg")]
    for args in (["-vv", *base], [*base, "-vv"], [*base, "-v", "-v"]):
        r = CliRunner().invoke(cli, args)
        assert isinstance(r.exception, RuntimeError) and "planted bug" in str(r.exception), args  # the traceback
    for args in (base, ["-v", *base], [*base, "-v"]):
        r = CliRunner().invoke(cli, args)
        assert r.exit_code == 1 and "internal error" in r.output and "-vv" in r.output, args


def test_boxes_take_tuples_shapely_geometries_and_geoboxes(scene):
    path, truth = scene
    rect = _far_exemplar(truth, "blue")
    g = _crs(rect)
    forms = [tuple(g.bounds), list(g.bounds), g, GeoBox(*g.bounds), _box_arg(rect), (*g.bounds, True)]
    assert all(GeoBox.coerce(f) == GeoBox(*g.bounds) for f in forms)
    assert GeoBox.coerce((*g.bounds, False)) == GeoBox(*g.bounds, positive=False) == GeoBox.coerce((*g.bounds, "neg"))
    results = []
    for form in (tuple(g.bounds), _box_arg(rect)):  # a tuple runs as its text does
        gdf, _ = segment_job(str(path), [], boxes=[form], backend="reference", checkpoint=False, box_scope="tile")
        results.append(sorted(x.wkb for x in gdf.geometry))
    assert results[0] and results[0] == results[1]
    for bad in ([1, 2, 3], "x", object(), (3, 2, 1, 0), shapely.Point(1, 1), ("a", 1, 2, 3)):
        with pytest.raises(UsageError, match="box"):
            segment_job(str(path), [], boxes=[bad], backend="reference", checkpoint=False)
