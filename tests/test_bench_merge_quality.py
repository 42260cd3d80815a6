"""Smoke size of benchmarks/bench_merge_quality.py: the same misbehaving per-tile answers through each
merge (SAHI's columns only where sahi is installed: it is a benchmark-only extra)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_merge_quality_benchmark_smoke(capsys):
    sys.path.insert(0, str(ROOT))
    try:
        from benchmarks import bench_merge_quality as bench
    finally:
        sys.path.remove(str(ROOT))
    assert bench.main(["--smoke", "--json", "--onnx-n1"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    rows = {(b, m): f1 for b, m, f1, *_ in out["tables"]["blue"]}
    assert rows[("reference", "sam3tiles")] >= 0.97 and rows[("semantic", "sam3tiles")] >= 0.97
    assert rows[("semantic", "centre")] < 0.5  # one mask per tile: naive tiling keeps a tile's blob
    assert ("reference", "sahi-gnmm") in rows or not out["sahi"]
    assert out["violations"]["reference"] == 0
    # the band oracle (the truth voting over the views in the bands) is printed beside the floors
    assert ("reference", "band oracle") in rows
    # against what the owning tiles said, the merge loses and adds nothing
    assert rows[("reference", "vs-floor")] == rows[("semantic", "vs-floor")] == 1.0
    # N = 1 contract graphs: what the tiles said inside their cores comes out (union IoU per class)
    for seed, cls, got, floor in out["onnx_n1"]:
        assert got >= floor - 0.01, cls
        assert cls == "red" or got >= 0.9, cls


def test_behaviours_combine_and_hard_scenes_hold_their_objects():
    from sam3tiles.testing.misbehaving import BEHAVIOURS, behaviour

    both = behaviour("grow+miss")
    assert both.grow == BEHAVIOURS["grow"].grow and both.miss == BEHAVIOURS["miss"].miss and both.split == 0
    assert behaviour("short+split=0.2").split == 0.2
    sys.path.insert(0, str(ROOT))
    try:
        from benchmarks.bench_merge_quality import pairs
        from benchmarks.synthetic import hard_objects
    finally:
        sys.path.remove(str(ROOT))
    assert len(pairs()) == 36 and "grow+short" in pairs()
    objs = hard_objects(4000, 3500, seed=5)
    kinds = {k: [p for c, p in objs if c == k] for k in ("red", "blue", "yellow")}
    assert len(kinds["blue"]) >= 10 and kinds["yellow"] and len(kinds["red"]) >= 3
    # fields cross at least 4 tiles (> 1.5 tiles across); parcels 150-600 px; thin objects long
    assert all(min(f.bounds[2] - f.bounds[0], f.bounds[3] - f.bounds[1]) > 1.5 * 1008 for f in kinds["yellow"])
    assert all(140 <= max(p.bounds[2] - p.bounds[0], p.bounds[3] - p.bounds[1]) <= 600 for p in kinds["blue"])
    assert all(p.length > 2400 for p in kinds["red"])


def test_long_scene_under_independent_boundary_noise(capsys):
    """`--scene long` (rivers, roads, field strips, each longer than a tile) under `wobble` (each tile moves
    every boundary by a cell or two on its own): every object comes out once and whole."""
    import numpy as np

    from sam3tiles.testing.misbehaving import _Inst, _wobble

    sys.path.insert(0, str(ROOT))
    try:
        from benchmarks import bench_merge_quality as bench
        from benchmarks.synthetic import long_objects
    finally:
        sys.path.remove(str(ROOT))
    objs = long_objects(2600, 2000, seed=2)
    assert {c for c, _ in objs} == {"red", "blue", "yellow"}
    assert all(max(p.bounds[2] - p.bounds[0], p.bounds[3] - p.bounds[1]) > 1008 for _, p in objs)
    mask = np.zeros((288, 288), np.float32)
    mask[100:180, 50:250] = 0.9
    moved = _wobble(_Inst(mask, 0.9), np.random.default_rng(0), 1.0).mask > 0.5
    diff = moved ^ (mask > 0.5)
    assert (moved & ~(mask > 0.5)).any() and (~moved & (mask > 0.5)).any()  # out in places, in in others
    assert not diff[:93].any() and not diff[187:].any()  # never more than 2 cells (plus rounding)
    assert bench.main(["--scene", "long", "--size", "2600", "2000", "--seeds", "2", "--behaviours", "wobble",
                       "--methods", "sam3tiles", "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for cls, rows in out["tables"].items():
        f1, dups, frags = next(r[2:5] for r in rows if r[1] == "sam3tiles")
        assert (f1, dups, frags) == (1.0, 0, 0), cls


def test_the_band_oracle_is_a_vote_in_the_bands_and_the_owners_outline_elsewhere(tmp_path):
    """Issue 49's bar for boundary noise: the best per-pixel vote over the views in the overlap bands (the
    truth as the voter). Outside the bands it keeps the owners' outline as the tiles drew it: built on the
    merge's smoothed outline it counted the smoothing's gains there, which no vote makes, and moved with the
    merge it is the bar for (long scene under `wobble`, where the smoothing moves outlines outside the bands)."""
    import shapely

    from sam3tiles.testing.demo import write_scene

    sys.path.insert(0, str(ROOT))
    try:
        from benchmarks import bench_merge_quality as bench
    finally:
        sys.path.remove(str(ROOT))
    w, h = 2600, 2000
    sc = write_scene(tmp_path / "s.tif", w, h, seed=2, objects=bench.scene_objects("long", w, h, 2))
    per_tile, frames, tiles, transform, _ = bench.tile_pieces(sc.path, "wobble")
    truth = {k: list(sc.truth.geometry[sc.truth["class"] == c]) for k, c in enumerate(bench.PROMPTS)}
    extent = tiles[0].size * abs(transform.a)
    wins = [f.window for f in frames.values()]
    bands = shapely.union_all([a.intersection(b) for i, a in enumerate(wins) for b in wins[i + 1:]])
    oracle = bench.band_oracle(per_tile, frames, truth, extent)
    voted = bench.merge_voted(per_tile, frames)
    smoothed = bench.merge_sam3tiles(per_tile, frames)[0]

    def best(preds, k, t):  # the prediction standing for object t
        return max((g for c, g in preds if c == k), key=lambda g: g.intersection(t).area / g.union(t).area)

    moved = 0
    for k, ts in truth.items():
        for t in (t for t in ts if max(t.bounds[2] - t.bounds[0], t.bounds[3] - t.bounds[1]) > extent):
            own = best(voted, k, t).difference(bands)
            assert best(oracle, k, t).difference(bands).symmetric_difference(own).area <= 1e-6 * t.area
            moved += best(smoothed, k, t).difference(bands).symmetric_difference(own).area > 0.001 * t.area
    assert moved >= 3  # (the smoothing did move outlines there: the two oracles differ on this scene)
