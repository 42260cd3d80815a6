"""Peak RSS of one whole `segment` run (reference backend, in-process engine) at a given image size.

    python -m benchmarks.bench_memory --size 8000
    python -m benchmarks.bench_memory --size 32000      # generates the scene once into benchmarks/.cache
    python -m benchmarks.bench_memory --size 12000 --cell 100 --cell 50   # 4x the objects, same image

With several --cell values, one run per value (one object per cell x cell px: halving the cell is 4x the
objects on the same image) and the ratio of their peak RSS: objects stream to the output as merge
blocks finish, so memory should not follow the number of objects.

The scene (`synthetic.cached_scene`: one object per 500 x 500 px, so the object count grows with the area)
is made in its own process first; then a fresh process runs `segment_job` with an output file and the
default checkpoints, and reports its own peak RSS (`ru_maxrss`). The bound is the pipeline's: a fixed
number of tiles in flight, whatever the image size; what grows is only the objects (the output).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time

from sam3tiles.run.pipeline import segment_job

from .common import ROOT, emit, smoke
from .synthetic import cached_scene


def measure(size: int, prompts: list[str], workers: int | None, cell: int = 500, refine: str = "auto") -> dict:
    path = cached_scene(size, size, cell)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        _, report = segment_job(str(path), prompts, backend="reference", out=f"{tmp}/out.gpkg",
                                workers=workers, refine=refine, return_objects=False)  # as the CLI runs it
        wall = time.perf_counter() - t0
    return {"size": size, "cell": cell, "refine": refine, "tiles": report.tiles, "saturated": report.saturated,
            "objects": report.objects, "wall_s": round(wall, 1),
            "tiles_per_s": round(report.tiles / wall, 2),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=8000)
    ap.add_argument("--text", action="append", default=None)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--cell", type=int, action="append", default=None,
                    help="one object per CELL x CELL px (default 500; repeat to compare densities)")
    ap.add_argument("--refine", default="auto", choices=("auto", "off"),
                    help="off: dense tiles are not refined (the same tiles at every density: memory against objects "
                         "alone; tiles over the 200 cap lose objects)")
    ap.add_argument("--measure", action="store_true", help="(internal) measure in this process")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="a 1500 px scene, in this process (checks the code)")
    args = ap.parse_args(argv)
    prompts = args.text or ["red", "blue"]
    if smoke(args.smoke):
        args.size, args.measure = 1500, True
    cells = args.cell or [500]
    if args.measure:
        emit(measure(args.size, prompts, args.workers, cells[0], args.refine), args.json)
        return 0
    runs = []
    for cell in cells:
        # the scene in its own process (generating it costs memory that is not the pipeline's)
        subprocess.run([sys.executable, "-c", "from benchmarks.synthetic import cached_scene; "
                        f"cached_scene({args.size}, {args.size}, {cell})"], cwd=ROOT, check=True)
        cmd = [sys.executable, "-m", "benchmarks.bench_memory", "--size", str(args.size), "--cell", str(cell),
               "--refine", args.refine, "--measure", "--json"]
        for t in prompts:
            cmd += ["--text", t]
        if args.workers:
            cmd += ["--workers", str(args.workers)]
        out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True)
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(json.dumps(runs[-1]), file=sys.stderr)  # each run as it ends
    if len(runs) == 1:
        emit(runs[0], args.json)
        return 0
    lo, hi = min(runs, key=lambda r: r["objects"]), max(runs, key=lambda r: r["objects"])
    emit({"runs": runs, "objects_ratio": round(hi["objects"] / max(lo["objects"], 1), 2),
          "peak_rss_ratio": round(hi["peak_rss_mb"] / lo["peak_rss_mb"], 3)}, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
