"""A real trained network end to end: the PP-OCRv4 DB text detector (inside the rapidocr-onnxruntime wheel,
run by onnxruntime) as the example third-party backend examples/sam3tiles-dbtext, pip-installed offline
here and found through the `sam3tiles.backends` entry point, on generated text sheets.

It is a text detector, not SAM 3: what it proves is that a trained network's own per-tile answers (its
boundaries, scores and misses on words and lines cut by the seams) come out of the tiling and the merge
once each and whole, where the published squash-to-1008 caller loses them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import shapely

import sam3tiles
from sam3tiles.evaluate import evaluate_class
from sam3tiles.model import registry

pytest.importorskip("rapidocr_onnxruntime", reason="the DB network ships in rapidocr-onnxruntime (test extra)")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.bench_real_network import IOU, make_sheet  # noqa: E402

sys.path.remove(str(ROOT))


@pytest.fixture(scope="module")
def dbtext(tmp_path_factory):
    """examples/sam3tiles-dbtext built and installed offline into a folder put on sys.path: the entry point
    `dbtext` is then what `backend="dbtext"` finds."""
    site = tmp_path_factory.mktemp("dbtext") / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--no-index", "--target", str(site), str(ROOT / "examples" / "sam3tiles-dbtext")],
                   check=True, timeout=300, capture_output=True)
    sys.path.insert(0, str(site))
    registry.installed_backends.cache_clear()
    try:
        yield "dbtext"
    finally:
        sys.path.remove(str(site))
        registry.installed_backends.cache_clear()
        sys.modules.pop("sam3tiles_dbtext", None)


def _check(gdf, truth, f1_min: float = 0.99) -> dict:
    preds = list(gdf.geometry)
    r = evaluate_class(preds, truth, iou_min=IOU)
    assert r["f1"] >= f1_min, r
    assert r["duplicates"] == 0 and r["fragments"] == 0, r
    # each drawn line or word once and whole: exactly one output object overlaps most of it
    tree = shapely.STRtree(preds)
    for t in truth:
        over = [j for j in tree.query(t, predicate="intersects")
                if preds[j].intersection(t).area >= 0.25 * t.area]
        assert len(over) == 1, (t.bounds, [preds[j].bounds for j in over])
    return r


def test_entry_point_backend_is_the_real_network(dbtext, tmp_path):
    assert dbtext in registry.available_backends()
    sheet = make_sheet(tmp_path / "a.tif", 2512, 1760, seed=7, sizes=(11, 26), density=3)
    gdf = sam3tiles.segment(str(sheet.path), ["text"], backend=dbtext, device="cpu", checkpoint=False,
                            workers=1)
    assert set(gdf["backend"]) == {"dbtext"} and gdf["model"].iloc[0].startswith("dbtext:ch_PP-OCRv4_det")
    assert (gdf["n_tiles"] > 1).sum() >= 10  # many lines crossed a seam and were joined
    assert len(sheet.truth) >= 100
    _check(gdf, sheet.truth)
    with pytest.raises(Exception, match="text detector"):
        sam3tiles.segment(str(sheet.path), ["cat"], backend=dbtext, checkpoint=False, workers=1)


def test_tall_sheet_tiled_against_squash(dbtext, tmp_path):
    """1008 x 4768 (six tiles, five seams across the lines' height): the published caller squashes it
    1 x 0.21 into one input and the lines fuse; the tiles see it at full size."""
    sheet = make_sheet(tmp_path / "b.tif", 1008, 4768, seed=11, sizes=(11, 20), density=4)
    tiled = sam3tiles.segment(str(sheet.path), ["text"], backend=dbtext, checkpoint=False, workers=1)
    r = _check(tiled, sheet.truth)
    squashed = sam3tiles.segment(str(sheet.path), ["text"], backend=dbtext, squash=True, checkpoint=False,
                                 workers=1)
    s = evaluate_class(list(squashed.geometry), sheet.truth, iou_min=IOU)
    assert s["f1"] <= 0.2 < r["f1"], (s, r)
    assert np.isfinite(tiled["score"]).all() and (tiled["score"] > 0.5).all()


def test_lines_lists_what_the_merge_lost_beside_the_floor(capsys):
    """`bench_real_network --lines` at its smoke size: per sheet the merge, the floor and what was lost."""
    import json

    sys.path.insert(0, str(ROOT))
    try:
        from benchmarks import bench_real_network as bench
    finally:
        sys.path.remove(str(ROOT))
    assert bench.main(["--smoke", "--lines", "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    (sheet,) = out["sheets"]
    assert sheet["merge"]["truth"] == sheet["floor"]["truth"] > 10
    assert sheet["lost"] == 0 and out["worst_vs_floor"] >= -0.001
