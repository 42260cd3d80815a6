"""The refinement benchmark at its smoke size: the real 200-object cap, a real dense scene."""

from __future__ import annotations


def test_benchmark_smoke():
    """The benchmark's smoke size with the real cap and real density."""
    from benchmarks.bench_refine import bench

    rows = {r["run"]: r for r in bench(1300, [0], kinds=("uniform",), scale2=False)}
    auto, off = rows["auto"], rows["off"]
    assert auto["recall"] >= 0.99 and auto["precision"] >= 0.99 and off["recall"] < 0.95
    assert auto["encodes"] <= auto["bound"] and off["encodes"] == off["base_tiles"]
