"""`bench_cpu_per_tile --behaviour`: the CPU per tile measured on a misbehaving model's answers."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_cpu_per_tile_takes_a_misbehaving_preset(capsys):
    sys.path.insert(0, str(ROOT))
    try:
        from benchmarks import bench_cpu_per_tile as bench
    finally:
        sys.path.remove(str(ROOT))
    assert bench.main(["--smoke", "--json", "--behaviour", "wobble"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["behaviour"] == "wobble" and out["tiles"] == 9 and out["merge_share_ms"] > 0
