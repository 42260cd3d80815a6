"""`sam3tiles plan --point / --point-file`: what a point run will cost, before it runs (issue 51)."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

import sam3tiles
from sam3tiles.cli.main import cli
from sam3tiles.run.executing.points import ZOOM_OUT_DEPTH
from sam3tiles.testing.treescene import write_tree_scene


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    d = tmp_path_factory.mktemp("plan")
    s = write_tree_scene(d / "trees.tif", 2400, 2000, seed=6, n_trees=80, n_fields=1, n_background=2)
    s.points.to_file(d / "points.gpkg")
    return s, d / "points.gpkg"


def _number(text: str, pattern: str) -> int:
    m = re.search(pattern, text)
    assert m, text
    return int(m.group(1))


def test_plan_prints_what_the_points_will_cost_and_the_run_keeps_to_it(scene):
    s, layer = scene
    r = CliRunner().invoke(cli, ["plan", str(s.path), "--point-file", str(layer)])
    assert r.exit_code == 0, r.output
    n = len(s.points)
    home = _number(r.output, r"tiles holding points: (\d+) \(")
    assert _number(r.output, r"decoder calls: (\d+) ") == 2 * n
    assert _number(r.output, r"zoom-outs: up to (\d+) encodes") == ZOOM_OUT_DEPTH * n
    assert "model calls:" not in r.output and "refinement" not in r.output  # the text prompts' lines
    got = sam3tiles.segment(str(s.path), point_file=str(layer), backend="reference", checkpoint=False)
    p = got.attrs["sam3tiles_report"]["points"]
    assert p["home_tiles"] == home and 0 < p["zoom_encodes"] <= ZOOM_OUT_DEPTH * n
    assert p["encodes"] == home + p["zoom_encodes"] + p["follow_encodes"]


def test_plan_points_are_checked_as_segment_checks_them(scene):
    s, layer = scene
    r = CliRunner().invoke(cli, ["plan", str(s.path), "--point", "1,2"])
    assert r.exit_code == 2 and "lies outside every input" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(cli, ["plan", str(s.path), "--point-file", str(layer), "--box", "400000,4999000,400100,"
                                 "4999100"])
    assert r.exit_code == 2 and "prompts of their own" in r.output
    x, y = s.points.geometry.iloc[0].x, s.points.geometry.iloc[0].y
    r = CliRunner().invoke(cli, ["plan", str(s.path), "--point", f"{x},{y}", "--point", f"{x + 5},{y},neg"])
    assert r.exit_code == 0 and "points: 1 positive" in r.output and "decoder calls: 2 " in r.output
