"""A point run killed with SIGKILL part way, then the same command again: it resumes from the checkpoints and
writes the same rows (issue 51). The kill comes at a forced point (`run.recording.pointstore.KILL_AFTER`: the
process kills itself once that many point tasks are stored), so nothing depends on timing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import geopandas as gpd
import pytest

from sam3tiles.run.recording.checkpoint import stored_rows
from sam3tiles.run.recording.pointstore import KILL_AFTER
from sam3tiles.testing.treescene import write_tree_scene


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    d = tmp_path_factory.mktemp("resume")
    s = write_tree_scene(d / "trees.tif", 2400, 2000, seed=4, n_trees=150, n_fields=1, n_background=2)
    s.points.to_file(d / "points.gpkg")
    return d / "trees.tif", d / "points.gpkg"


def _cli(cwd, *args, env=None) -> subprocess.CompletedProcess:
    env = {**os.environ, **(env or {}), "PYTHONPATH": os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "sam3tiles.cli", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def test_a_point_run_killed_part_way_resumes_to_the_same_rows(scene, tmp_path):
    raster, layer = scene
    args = ["segment", raster, "--point-file", layer, "--backend", "reference", "--workers", "1", "--no-preview"]
    whole = _cli(tmp_path, *args, "--out", "whole.gpkg")
    assert whole.returncode == 0, whole.stderr

    points = json.loads((tmp_path / "whole.gpkg.report.json").read_text())["points"]
    assert points["zoomed"] == 1 and points["follow_encodes"] > 0  # the field: zoomed out, then followed
    kill_at = points["home_tiles"] + 2  # in the zoom-out round: the home tiles' answers stored, the rest not
    killed = _cli(tmp_path, *args, "--out", "k.gpkg", env={KILL_AFTER: str(kill_at)})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    db = tmp_path / "k.gpkg.sam3tiles-work" / "tiles.sqlite"
    assert not (tmp_path / "k.gpkg").exists() and stored_rows(db) == kill_at
    again = _cli(tmp_path, *args, "--out", "k.gpkg")
    assert again.returncode == 0, again.stderr
    report = json.loads((tmp_path / "k.gpkg.report.json").read_text())
    assert report["resumed"] == kill_at and report["done"] == report["tiles"] - kill_at
    a, b = gpd.read_file(tmp_path / "whole.gpkg"), gpd.read_file(tmp_path / "k.gpkg")
    n = len(gpd.read_file(layer))  # crowns, the field, 2 on bare ground
    assert len(a) == len(b) == n and a["found"].sum() == n - 2
    assert list(a.geometry.to_wkb()) == list(b.geometry.to_wkb())
    cols = [c for c in a.columns if c != "geometry"]
    assert a[cols].equals(b[cols])
