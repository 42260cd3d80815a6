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
    # against what the owning tiles said, the merge loses and adds nothing
    assert rows[("reference", "vs-floor")] == rows[("semantic", "vs-floor")] == 1.0
    # N = 1 contract graphs: what the tiles said inside their cores comes out (union IoU per class)
    for seed, cls, got, floor in out["onnx_n1"]:
        assert got >= floor - 0.01, cls
        assert cls == "red" or got >= 0.9, cls
