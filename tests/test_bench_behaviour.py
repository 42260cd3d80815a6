"""`bench_cpu_per_tile --behaviour`: the CPU per tile measured on a misbehaving model's answers."""

from __future__ import annotations

import json

from benchmarks import bench_cpu_per_tile as bench  # the repository root is on pytest's path (pyproject.toml)


def test_cpu_per_tile_takes_a_misbehaving_preset(capsys):
    assert bench.main(["--smoke", "--json", "--behaviour", "wobble"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["behaviour"] == "wobble" and out["tiles"] == 9 and out["merge_share_ms"] > 0
