"""Small faults, each with the test that showed it: what `--clean` removed is not listed as written; the napari
reader refuses what it cannot read and opens an RGB GeoTIFF as RGB; `evaluate` says why nothing met; the
cluster examples name the package they need; no run or test grabs the dashboard port 8787."""

from __future__ import annotations

import json

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
