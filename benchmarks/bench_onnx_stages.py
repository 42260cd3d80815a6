"""Per-stage time per tile through the ONNX backend on the contract-faithful test graphs (CPU).

    python -m benchmarks.bench_onnx_stages [--size 4000x3000] [--prompts 3]

The graphs are tiny, so this measures sam3tiles's own overhead around the model (reading, session
calls, I/O binding, cropping, vectorizing, merging), not SAM 3's compute. For the real model's figures
see the contract (~0.35 s encode + ~0.07 s per prompt on a desktop GPU).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from sam3tiles.run.pipeline import segment_job
from sam3tiles.testing.demo import write_scene
from sam3tiles.testing.graphs import build_contract_models


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="4000x3000")
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--smoke", action="store_true", help="a 1500x1000 scene, 2 prompts (checks the code)")
    args = ap.parse_args(argv)
    if args.smoke:
        args.size, args.prompts = "1500x1000", 2
    w, h = (int(v) for v in args.size.split("x"))
    prompts = ["red", "blue", "yellow", "green", "white", "magenta"][: args.prompts]
    with tempfile.TemporaryDirectory() as d:
        model = build_contract_models(Path(d) / "model", decoder="colour", grid=4)
        scene = write_scene(Path(d) / "scene.tif", w, h, seed=1)
        t0 = time.perf_counter()
        gdf, rep = segment_job(str(scene.path), prompts, backend="onnx", model=str(model), checkpoint=False,
                               workers=args.workers)
        wall = time.perf_counter() - t0
    n = rep.done
    print(f"scene {w}x{h}, {rep.tiles} tiles, {len(prompts)} prompts, {len(gdf)} objects, wall {wall:.2f} s, "
          f"{n / wall:.2f} tiles/s")
    print(f"{'stage':<10} {'total s':>9} {'ms/tile':>9}")
    for stage in ("read", "encode", "prompt", "decode", "vectorize", "merge", "write"):
        s = rep.seconds.get(stage, 0.0)
        print(f"{stage:<10} {s:>9.3f} {1000 * s / max(n, 1):>9.1f}")
    counters = [c["onnx"] for c in rep.runtime_counters.values() if "onnx" in c]
    print("runtime counters:", counters)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
