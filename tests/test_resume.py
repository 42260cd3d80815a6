"""Checkpoints and resume: a job killed partway (SIGKILL, SIGTERM) and rerun produces exactly the output of
an uninterrupted run and recomputes no checkpointed tile; changed parameters invalidate only what they
affect; --fresh starts over; the lock keeps a second run off the same output."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import geopandas as gpd
import numpy as np
import pandas as pd
import pytest

from sam3tiles.model.registry import clear_cache
from sam3tiles.run.recording.checkpoint import stored_rows
from sam3tiles.run.pipeline import segment_job
from sam3tiles.testing.demo import write_scene

# -- the killed job --------------------------------------------------------------------------------------

JOB = """\
inputs: [scene.tif]
prompts: {text: [blue, red]}
# the reference backend plus 0.75 s per encode: 18 s of encodes on 2 workers, so each kill below lands while
# tiles are still running however fast the CPU work around them is (0.1 s let a run finish all 48 tiles
# while a second, refused run was still starting on a loaded machine)
backend: {name: simulated, encode_seconds: 0.75}
tiling: {scale: 2.0}
output: {path: out/objects.gpkg}
run: {workers: 2}
"""
PROMPTS = 2
TILES = 48


def _rows(db) -> int:
    return stored_rows(db) or 0


def _start(tmp: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "sam3tiles.cli", "-q", "run", "job.yaml"], cwd=tmp,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_rows(proc: subprocess.Popen, db: Path, n: int, timeout: float = 60) -> int:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        rows = _rows(db)
        if rows >= n:
            return rows
        if proc.poll() is not None:
            pytest.fail(f"the run ended (exit {proc.returncode}) before {n} checkpoint rows:\n{proc.stderr.read()}")
        time.sleep(0.05)
    proc.kill()
    pytest.fail(f"no {n} checkpoint rows after {timeout} s")


def _table(path) -> pd.DataFrame:
    """The output's rows as a sortable table: geometry as WKB, every column but `model`."""
    gdf = gpd.read_file(path)
    df = pd.DataFrame(gdf.drop(columns=["geometry", "id", "model"]))
    df["wkb"] = gdf.geometry.to_wkb()
    return df.sort_values(["prompt", "wkb"]).reset_index(drop=True)


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    d = tmp_path_factory.mktemp("resume")
    write_scene(d / "scene.tif", 3000, 2200, seed=4)  # at scale 2: 8 x 6 = 48 tiles
    return d / "scene.tif"


def test_killed_job_resumes_to_the_uninterrupted_output(scene, tmp_path):
    (tmp_path / "scene.tif").symlink_to(scene)
    (tmp_path / "out").mkdir()
    (tmp_path / "job.yaml").write_text(JOB)
    out = tmp_path / "out" / "objects.gpkg"
    db = tmp_path / "out" / "objects.gpkg.sam3tiles-work" / "tiles.sqlite"

    # 1. start the job; while it runs, a second run of the same job is refused by the lock
    first = _start(tmp_path)
    _wait_rows(first, db, 2 * PROMPTS)
    second = _start(tmp_path)
    _, err = second.communicate(timeout=120)
    assert second.returncode == 2, err
    assert "is being written by another run" in err and "Traceback" not in err

    # 2. SIGKILL partway: the store is intact, holds whole tiles only (one transaction per tile), no output
    assert first.poll() is None, "the job finished before it could be killed"
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    assert first.returncode == -signal.SIGKILL
    killed_rows = _rows(db)
    assert killed_rows % PROMPTS == 0
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()
    assert not out.exists()
    tiles_after_kill = killed_rows // PROMPTS

    # 3. rerun, stopped by SIGTERM (a walltime limit): a clean exit 143, the lock released, nothing half-written
    third = _start(tmp_path)
    _wait_rows(third, db, killed_rows + 4 * PROMPTS)
    third.send_signal(signal.SIGTERM)
    _, err = third.communicate(timeout=60)
    assert third.returncode == 143, err
    assert "rerun the same command to resume" in err and "Traceback" not in err
    assert not out.exists() and not (tmp_path / "out" / "objects.gpkg.lock").exists()
    termed_rows = _rows(db)
    assert termed_rows % PROMPTS == 0 and termed_rows > killed_rows
    tiles_after_term = termed_rows // PROMPTS

    # 4. rerun to the end: checkpointed tiles are resumed, only the rest computed
    final = _start(tmp_path)
    _, err = final.communicate(timeout=120)
    assert final.returncode == 0, err
    report = json.loads((tmp_path / "out" / "objects.gpkg.report.json").read_text())
    assert report["tiles"] == TILES and report["failed"] == 0 and report["skipped"] == 0
    assert report["resumed"] == tiles_after_term
    assert report["done"] == TILES - tiles_after_term
    encodes = sum(w["simulated"]["encodes"] for w in report["runtime_counters"].values())
    assert encodes == TILES - tiles_after_term  # the model ran on the missing tiles only
    assert report["checkpoint"]["reused"] == termed_rows
    assert report["checkpoint"]["stored"] == (TILES - tiles_after_term) * PROMPTS
    assert _rows(db) == TILES * PROMPTS
    left = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert left == ["objects.gpkg", "objects.gpkg.preview.png", "objects.gpkg.report.json",
                    "objects.gpkg.sam3tiles-work"], left
    assert 0 < tiles_after_kill < tiles_after_term < TILES

    # 5. the same output as one uninterrupted run
    clear_cache()
    # the same input as the job gave it (`source` is the input as given: the symlink beside the job file)
    segment_job(str(tmp_path / "scene.tif"), ["blue", "red"], backend="simulated", encode_seconds=0.0,
                decode_seconds=0.0, scale=2.0, workers=2, out=tmp_path / "uninterrupted.gpkg", checkpoint=False)
    a, b = _table(out), _table(tmp_path / "uninterrupted.gpkg")
    assert len(a) == len(b) > 100
    pd.testing.assert_frame_equal(a, b)


# -- what invalidates what -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def small(tmp_path_factory):
    d = tmp_path_factory.mktemp("invalidate")
    return write_scene(d / "small.tif", 2200, 1800, seed=7)  # 3 x 3 tiles


def _run(path, texts, tmp, **kw):
    clear_cache()  # fresh runtime counters
    kw.setdefault("out", tmp / "o.gpkg")
    kw.setdefault("overwrite", True)
    gdf, rep = segment_job(path if isinstance(path, list) else str(path), list(texts), backend="reference",
                           workers=2, **kw)
    counters = {}
    for w in rep.runtime_counters.values():
        for k, v in w.get("reference", {}).items():
            counters[k] = counters.get(k, 0) + v
    return gdf, rep, counters


def _same(a: gpd.GeoDataFrame, b: gpd.GeoDataFrame) -> None:
    def table(g):
        df = pd.DataFrame(g.drop(columns=["geometry"]))
        df["wkb"] = g.geometry.to_wkb()
        return df.sort_values(["prompt", "wkb"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(table(a), table(b))


def test_rerun_resumes_everything_and_postprocessing_changes_recompute_nothing(small, tmp_path):
    first, rep, c = _run(small.path, ["red"], tmp_path)
    assert (rep.tiles, rep.done, rep.resumed, c["encodes"]) == (9, 9, 0, 9)
    again, rep, c = _run(small.path, ["red"], tmp_path)
    assert (rep.done, rep.resumed, c.get("encodes", 0)) == (0, 9, 0)
    _same(first, again)
    _, rep, c = _run(small.path, ["red"], tmp_path, min_area=2.0, simplify=0.1)
    assert (rep.done, rep.resumed, c.get("encodes", 0)) == (0, 9, 0)


def test_added_prompt_computes_only_that_prompt(small, tmp_path):
    _run(small.path, ["red"], tmp_path)
    both, rep, c = _run(small.path, ["red", "blue"], tmp_path)
    # every tile runs again (encoded once more) but decodes only the new prompt; red comes from the store
    assert (rep.done, rep.resumed) == (9, 0)
    assert rep.checkpoint["reused"] == 9 and rep.checkpoint["partial_tiles"] == 9
    assert (c["encodes"], c["decodes"]) == (9, 9)
    fresh, _, _ = _run(small.path, ["red", "blue"], tmp_path, out=None, checkpoint=False)
    _same(both, fresh)
    # and the prompts in another order, or one dropped: all from the store
    _, rep, c = _run(small.path, ["blue", "red"], tmp_path)
    assert (rep.done, rep.resumed, c.get("encodes", 0)) == (0, 9, 0)
    _, rep, c = _run(small.path, ["blue"], tmp_path)
    assert (rep.done, rep.resumed, c.get("encodes", 0)) == (0, 9, 0)


def test_example_box_invalidates_only_the_tiles_it_lies_in(small, tmp_path):
    """--box-scope tile: a box reaches the tiles it lies in; image: also every tile it is pasted into, and a
    changed exemplar invalidates exactly the tiles it reached."""
    from sam3tiles.options import Options
    from sam3tiles.prompts.exemplars import input_exemplars
    from sam3tiles.prompts.prompt import GeoBox, Prompt, tile_boxes
    from sam3tiles.readers import open_source
    from sam3tiles.run.planning.plan import plan_input

    _run(small.path, ["blue"], tmp_path)
    blue = small.truth[small.truth["class"] == "blue"]
    building = blue.loc[blue.geometry.area.idxmin()]  # small enough to be pasted into interior tiles
    x0, y0, x1, y1 = building.geometry.bounds
    gb = GeoBox(x0 + 1, y0 + 1, x1 - 1, y1 - 1)
    text = f"{gb.minx},{gb.miny},{gb.maxx},{gb.maxy}"
    tiles = list(plan_input(str(small.path), Options()).tiles())
    with open_source(small.path) as src:
        ex = input_exemplars(src, [Prompt("blue", (gb,))], tiles[0].scale_xy)
    touched = sum(1 for t in tiles if tile_boxes([gb], t))
    pasted = sum(1 for t in tiles if ex.plan(t).pastes)
    assert 1 <= touched < 9 and touched + pasted == 9
    _, rep, c = _run(small.path, ["blue"], tmp_path, boxes=[text], box_scope="tile")
    assert (rep.done, rep.resumed, c["encodes"]) == (touched, 9 - touched, touched)
    # image scope: the tiles it lies in are the same as in tile scope; the others get the pasted copy
    _, rep, c = _run(small.path, ["blue"], tmp_path, boxes=[text])
    assert (rep.done, rep.resumed, c["encodes"]) == (pasted, 9 - pasted, pasted)
    assert rep.exemplars["pasted"] == pasted and rep.exemplars["in_place"] == touched
    _, rep, c = _run(small.path, ["blue"], tmp_path, boxes=[text])
    assert (rep.done, rep.resumed) == (0, 9)
    # the exemplar moved by a pixel: every tile it reached recomputes
    moved = f"{gb.minx + small_pixel(small)},{gb.miny},{gb.maxx + small_pixel(small)},{gb.maxy}"
    _, rep, c = _run(small.path, ["blue"], tmp_path, boxes=[moved])
    assert (rep.done, rep.resumed) == (9, 0)


def small_pixel(scene) -> float:
    import rasterio

    with rasterio.open(scene.path) as ds:
        return abs(ds.transform.a)


def test_fresh_scale_and_changed_input_recompute(small, tmp_path):
    from sam3tiles.testing import other_file

    other = other_file(small.path, tmp_path / "other.tif")
    _run([small.path, other], ["red"], tmp_path, out=tmp_path / "both.gpkg")
    _, rep, c = _run([small.path, other], ["red"], tmp_path, out=tmp_path / "both.gpkg", fresh=True)
    assert (rep.done, rep.resumed, c["encodes"]) == (18, 0, 18) and rep.checkpoint["reused"] == 0
    os.utime(other, ns=(time.time_ns(), time.time_ns() + 10**9))  # the file changed: its tiles only
    _, rep, c = _run([small.path, other], ["red"], tmp_path, out=tmp_path / "both.gpkg")
    assert (rep.done, rep.resumed, c["encodes"]) == (9, 9, 9)
    _, rep, c = _run([small.path, other], ["red"], tmp_path, out=tmp_path / "both.gpkg", scale=0.5)
    assert rep.resumed == 0 and rep.done == rep.tiles == c["encodes"] == 4  # 1100 x 900 px: 2 tiles each


def test_stale_lock_and_temp_files_of_a_killed_run_are_cleaned(small, tmp_path):
    out = tmp_path / "o.gpkg"
    (tmp_path / "o.gpkg.lock").write_text(json.dumps({"pid": 2**22 + 12345, "host": os.uname().nodename}))
    (tmp_path / ".o.0123abcd.tmp.gpkg").write_bytes(b"half a file")
    (tmp_path / ".o.0123abcd.tmp.gpkg-journal").write_bytes(b"")
    _, rep, _ = _run(small.path, ["yellow"], tmp_path, out=out, overwrite=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.gpkg", "o.gpkg.preview.png", "o.gpkg.report.json",
                                                          "o.gpkg.sam3tiles-work"]


def test_folder_output_is_written_at_the_end(small, tmp_path):
    """Per-input outputs appear together when the run ends, so a run killed before then leaves none and
    its rerun is not stopped by 'output exists'."""
    import sam3tiles.run.pipeline as pl
    from sam3tiles.testing import other_file

    other = other_file(small.path, tmp_path / "other.tif")
    (tmp_path / "out").mkdir()
    seen = []
    orig = pl.run_input

    def spy(engine, path, *a, **k):
        seen.append(sorted(p.name for p in (tmp_path / "out").iterdir() if not p.name.endswith(".lock")))
        return orig(engine, path, *a, **k)

    pl.run_input = spy
    try:
        _run([small.path, other], ["red"], tmp_path, out=tmp_path / "out")
    finally:
        pl.run_input = orig
    assert seen == [[], []]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["other.gpkg", "other.gpkg.preview.png",
                                                                    "small.gpkg", "small.gpkg.preview.png"]


def test_report_json(small, tmp_path):
    _, rep, _ = _run(small.path, ["red", "blue"], tmp_path, min_area=1.0)
    d = json.loads((tmp_path / "o.gpkg.report.json").read_text())
    import sam3tiles

    assert d["version"] == sam3tiles.__version__
    assert d["inputs"] == [str(small.path)] and d["backend"] == "reference" and d["model"].startswith("reference:")
    assert d["parameters"]["prompts"] == ["red", "blue"] and d["parameters"]["min_area"] == 1.0
    assert d["tiles"] == d["done"] + d["resumed"] + d["skipped"] + d["failed"] == 9
    assert d["objects"] == sum(d["objects_by_prompt"].values()) > 0
    for k in ("saturated", "merge", "seconds", "wall_seconds", "checkpoint"):
        assert k in d
    assert set(d["seconds"]) >= {"read", "encode", "decode", "vectorize", "merge", "write"}
    assert d["merge"]["objects"] == d["objects"] or d["parameters"]["min_area"] > 0
    assert np.isfinite(d["wall_seconds"]) and d["wall_seconds"] > 0
