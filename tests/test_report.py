"""The end-of-run report in a user's words (issue 40): units on every quantity, the merge as "N objects crossed
tile seams, M duplicates removed", the work folder's purpose, and last every file written with its size; the
JSON beside it holds every figure and every path written. `--clean` (`output.clean`, `clean=`) removes the
work folder after a run with no failed tile; it is kept by default, for the rerun. Real runs of the CLI on a
GeoTIFF written here (reference backend); the files are read back."""

from __future__ import annotations

import json
import re
from pathlib import Path

import geopandas as gpd
import pytest
import yaml
from click.testing import CliRunner

import sam3tiles
from sam3tiles.cli.main import cli
from sam3tiles.run.recording.report import human_size
from sam3tiles.testing.demo import write_scene

INTERNALS = ("largest group", "rule violations", "tiles own", "links", "pieces", "uncovered", "stitched")


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    return write_scene(tmp_path_factory.mktemp("report") / "scene.tif", 1500, 1100, seed=11)


def _segment(*args):
    r = CliRunner().invoke(cli, ["segment", *map(str, args)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r.stderr


def test_the_text_speaks_a_users_words_and_ends_with_every_file_written(scene, tmp_path):
    out, labels = tmp_path / "objects.gpkg", tmp_path / "objects-labels.tif"
    text = _segment(scene.path, "--text", "red", "--text", "blue", "--backend", "reference", "--workers", "1",
                    "--out", out, "--labels", labels)
    lines = text.strip().splitlines()
    report = json.loads((tmp_path / "objects.gpkg.report.json").read_text())
    # the merge in a user's words, the same figures as the JSON's
    merge = next(ln for ln in lines if ln.startswith("merge: "))
    m = re.fullmatch(r"merge: (\d+) objects? crossed tile seams \(joined from the tiles that saw them\), (\d+) "
                     r"duplicates? removed(?:, (\d+) slivers? \(thin cut edges\) removed)?", merge)
    assert m, merge
    crossed, dups = int(m.group(1)), int(m.group(2))
    assert crossed == report["merge"]["crossed_seams"] and dups == report["merge"]["duplicates_dropped"]
    assert int(m.group(3) or 0) == report["merge"]["slivers_dropped"]
    gdf = gpd.read_file(out)
    assert crossed == int((gdf["n_tiles"] > 1).sum()) > 0 and dups > 0
    assert not [w for w in INTERNALS if w in text.lower()], text  # the internals stay in the JSON
    assert {"links", "largest_group", "rule_violations", "coverage"} <= set(report["merge"])
    # every time with its unit
    timing = next(ln for ln in lines if ln.startswith("time: "))
    assert re.match(r"time: \d+\.\d\d s \(\d+\.\d\d tiles/s\); by stage ", timing), timing
    assert all(re.fullmatch(r"[a-z]+ \d+\.\d\d s", part) for part in
               timing.split("by stage ", 1)[1].split(" (")[0].split(", ")), timing
    # the work folder: what it is for, when it may go, and how to have it removed
    work = tmp_path / "objects.gpkg.sam3tiles-work"
    line = next(ln for ln in lines if ln.startswith("work folder "))
    assert str(work) in line and "rerun resumes" in line and "delete it once" in line and "--clean" in line
    # last: the output, then every file written with its size
    at = lines.index(f"wrote {len(gdf)} objects to {out}")
    files = [out, tmp_path / "objects.gpkg.preview.png", labels, tmp_path / "objects.gpkg.report.json"]
    assert lines[at + 1:] == [f"  {p}  {human_size(p.stat().st_size)}" for p in files]
    # the JSON records every path written
    assert report["files"] == {"objects": [str(out)], "labels": str(labels),
                               "previews": [str(tmp_path / "objects.gpkg.preview.png")],
                               "report": str(tmp_path / "objects.gpkg.report.json"), "work_dir": str(work),
                               "removed": []}
    assert all(Path(p).exists() for p in (*report["files"]["objects"], report["files"]["labels"], work))
    assert report["units"]["seconds"].startswith("s") and report["units"]["wall_seconds"] == "s"
    assert report["checkpoint"]["clean"] is False and work.is_dir()  # kept by default, for the rerun


def test_human_sizes():
    assert [human_size(n) for n in (0, 999, 1000, 12_400, 3_100_000, 2_500_000_000)] == \
        ["0 B", "999 B", "1.0 kB", "12.4 kB", "3.1 MB", "2.5 GB"]


def test_clean_removes_the_work_folder_after_a_run_with_no_failed_tile(scene, tmp_path):
    out = tmp_path / "o.gpkg"
    text = _segment(scene.path, "--text", "red", "--backend", "reference", "--workers", "1", "--out", out, "--clean")
    work = tmp_path / "o.gpkg.sam3tiles-work"
    assert not work.exists() and f"work folder {work}: removed after the run (--clean)" in text
    report = json.loads((tmp_path / "o.gpkg.report.json").read_text())
    assert report["checkpoint"]["clean"] is True and report["files"]["work_dir"] is None
    assert report["files"]["removed"] == [str(work)]  # deleted, so not listed as written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.gpkg", "o.gpkg.preview.png", "o.gpkg.report.json"]


def test_clean_leaves_what_the_run_did_not_write(scene, tmp_path):
    """A --work-dir the user named, holding a file of theirs by the end of the run: sam3tiles' own files go,
    theirs and the folder stay."""
    work = tmp_path / "w"
    rep = sam3tiles.segment_report(scene.path, "red", backend="reference", workers=1, out=tmp_path / "o.gpkg",
                                   work_dir=work, clean=False)
    assert (work / "tiles.sqlite").exists() and rep.checkpoint["clean"] is False
    (work / "notes.txt").write_text("mine")
    rep = sam3tiles.segment_report(scene.path, "red", backend="reference", workers=1, out=tmp_path / "o.gpkg",
                                   work_dir=work, clean=True, overwrite=True)
    assert rep.checkpoint["clean"] is True and rep.checkpoint["removed"] is False
    assert sorted(p.name for p in work.iterdir()) == ["notes.txt", "sam3tiles-work.json"]


def test_clean_is_a_job_key(scene, tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({"inputs": [str(scene.path)], "prompts": {"text": ["red"]},
                                   "backend": {"name": "reference"}, "run": {"workers": 1},
                                   "output": {"path": str(tmp_path / "o.gpkg"), "clean": True}}))
    r = CliRunner().invoke(cli, ["run", str(job)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert not (tmp_path / "o.gpkg.sam3tiles-work").exists() and "(output.clean)" in r.stderr
    # without it the folder stays, and the advice names the job key
    job.write_text(job.read_text().replace("clean: true", "clean: false").replace("o.gpkg", "p.gpkg"))
    r = CliRunner().invoke(cli, ["run", str(job)], catch_exceptions=False)
    assert r.exit_code == 0 and (tmp_path / "p.gpkg.sam3tiles-work").is_dir()
    assert "(output.clean deletes it after a run that had no failed tile)" in r.stderr
