"""Many files as one map (issue 38): planning time and driver memory for 100 / 1,000 / 2,000 input files, and a
run over 400 small files against the one-file run of the same scene.

    python -m benchmarks.bench_mosaic [--files 100,1000,2000] [--side 100] [--grid 20] [--cell 300] [--smoke]

* **Planning.** N files of `side` x `side` px (RGB uint8, one CRS, on one lattice: one mosaic), each N planned
  by `sam3tiles.run.planning.plan.plan_run` in a fresh process (`--plan N`): its wall time (headers read in threads,
  the grouping, the mosaic's stamps), the process's resident size before planning and its peak (ru_maxrss)
  after, and the ratios against the smallest N (linear: time and growth in proportion to N, or less); then
  the CPU a file of the headers and stamps read again on one thread (issue 48).
* **The run.** A `grid * cell` px scene (`sam3tiles.testing.demo.write_scene`) and its `grid` x `grid` split
  (`sam3tiles.testing.mosaic.split_raster`: files of `cell` x `cell` px), each segmented by `sam3tiles segment`
  (reference backend, three prompts) in a fresh process (`--run one|mosaic`): tiles encoded and wall time. The
  issue's bar: the mosaic encodes at most 5% more tiles and takes less than twice the one file's wall time (issue 38;
  issue 48's: at most 1.25 x).

Files are written once into the cache folder (`--cache`, `$SAM3TILES_BENCH_CACHE`). `--smoke`: 16 and 36 files,
a 4 x 4 split of a 1200 px scene, in this process (checks the code; its figures mean nothing).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import emit, run_child, smoke, table

PROMPTS = ("red", "blue", "yellow")


def plan_files(cache: Path, n: int, side: int) -> Path:
    """`n` files of `side` px on a square lattice, in a folder of their own (written once)."""
    import numpy as np
    import rasterio
    from affine import Affine

    folder = cache / f"mosaic-plan-{side}px" / f"n{n}"
    if (folder / "done").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    cols = math.ceil(math.sqrt(n))
    rng = np.random.default_rng(n)
    for k in range(n):
        r, c = divmod(k, cols)
        t = Affine(0.5, 0, 400000 + 0.5 * side * c, 0, -0.5, 5000000 - 0.5 * side * r)
        with rasterio.open(folder / f"f{k:05d}.tif", "w", driver="GTiff", width=side, height=side, count=3,
                           dtype="uint8", crs="EPSG:32633", transform=t) as ds:
            ds.write(rng.integers(1, 255, (3, side, side), dtype=np.uint8))
    (folder / "done").write_text("")
    return folder


def split_scene(cache: Path, grid: int, cell: int) -> tuple[Path, Path]:
    """The scene (`grid * cell` px) and the folder of its `grid` x `grid` split (written once)."""
    from sam3tiles.testing.demo import write_scene
    from sam3tiles.testing.mosaic import split_raster

    size = grid * cell
    folder = cache / f"mosaic-run-{grid}x{cell}"
    scene, files = folder / "scene.tif", folder / "files"
    if not (folder / "done").exists():
        folder.mkdir(parents=True, exist_ok=True)
        write_scene(scene, size, size, seed=7)
        split_raster(scene, files, cols=grid, rows=grid)
        (folder / "done").write_text("")
    return scene, files


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def measure_plan(folder: Path) -> dict:
    """Plan a run over every file of `folder` here; wall time and memory."""
    from sam3tiles.options import Options
    from sam3tiles.run.planning.plan import plan_run
    from sam3tiles.run.planning.targets import Targets

    start = rss_mb()
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        plan = plan_run(str(folder / "*.tif"), list(PROMPTS), targets=Targets(out=f"{d}/o.gpkg", checkpoint=False),
                        options=Options(backend="reference"))
        lines = plan.describe()
        wall = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"files": len(plan.paths), "maps": len(plan.inputs), "tiles": plan.n_tiles, "plan_s": wall,
            "start_mb": start, "peak_mb": peak, "plan_line": lines[0], "header_ms": header_cpu(folder)}


def header_cpu(folder: Path) -> float:
    """CPU ms a file of `read_headers` of every file of `folder` on one thread (the headers and stamps of
    the plan, without the threads' sharing of the GIL), best of three."""
    from sam3tiles.options import Options
    from sam3tiles.run.planning import maps

    files = sorted(str(p) for p in folder.glob("*.tif"))
    threads, maps.HEADER_THREADS = maps.HEADER_THREADS, 1
    try:
        best = math.inf
        for _ in range(3):
            c0 = time.process_time()
            maps.read_headers(files, Options())
            best = min(best, time.process_time() - c0)
    finally:
        maps.HEADER_THREADS = threads
    return 1000 * best / max(len(files), 1)


def measure_run(inputs: str) -> dict:
    """`sam3tiles segment` of `inputs` here (the reference backend): tiles encoded and wall time."""
    from sam3tiles.cli.main import cli

    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "o.gpkg"
        args = ["-q", "segment", inputs, "--backend", "reference", "--out", str(out), "--no-preview"]
        args += [a for p in PROMPTS for a in ("--text", p)]
        t0 = time.perf_counter()
        cli.main(args, standalone_mode=False)
        wall = time.perf_counter() - t0
        rep = json.loads(Path(f"{out}.report.json").read_text())
    return {"tiles": rep["tiles"], "encoded": rep["done"], "objects": rep["objects"], "wall_s": wall,
            "read_s": rep["seconds"]["read"]}


def report_plans(results: list[dict]) -> None:
    base = results[0]
    rows = []
    for r in results:
        grown, base_grown = r["peak_mb"] - r["start_mb"], max(base["peak_mb"] - base["start_mb"], 1e-9)
        rows.append([r["files"], r["maps"], r["tiles"], r["plan_s"], r["plan_s"] / base["plan_s"],
                     r["files"] / base["files"], r["start_mb"], r["peak_mb"], grown, grown / base_grown,
                     r["header_ms"]])
    print(table(rows, ["files", "maps", "tiles", "plan s", "time ratio", "files ratio", "start MB", "peak MB",
                       "grown MB", "grown ratio", "header CPU ms a file (1 thread)"]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", default="100,1000,2000", help="input counts to plan")
    ap.add_argument("--side", type=int, default=100, help="side of each planned file (px)")
    ap.add_argument("--grid", type=int, default=20, help="the run's split: grid x grid files")
    ap.add_argument("--cell", type=int, default=300, help="the run's files' side (px)")
    ap.add_argument("--cache", default=os.environ.get("SAM3TILES_BENCH_CACHE", "/tmp/sam3tiles-bench"))
    ap.add_argument("--plan", type=int, help=argparse.SUPPRESS)  # child: plan N files
    ap.add_argument("--run", choices=("one", "mosaic"), help=argparse.SUPPRESS)  # child: one run
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--smoke", action="store_true", help="16 and 36 files, a 4 x 4 split of 1200 px, in this process")
    args = ap.parse_args(argv)
    if smoke(args.smoke):
        args.files, args.grid = "16,36", 4
    cache = Path(args.cache)
    if args.plan:
        emit(measure_plan(plan_files(cache, args.plan, args.side)), args.json)
        return 0
    if args.run:
        scene, files = split_scene(cache, args.grid, args.cell)
        emit(measure_run(str(scene) if args.run == "one" else str(files / "*.tif")), args.json)
        return 0
    counts = [int(n) for n in args.files.split(",")]
    for n in counts:  # written before any measurement
        plan_files(cache, n, args.side)
    plans = [run_child("bench_mosaic", "--plan", n, "--side", args.side, "--cache", cache) for n in counts]
    print(f"planning {', '.join(map(str, counts))} files of {args.side} x {args.side} px (one map each):")
    report_plans(plans)
    split_scene(cache, args.grid, args.cell)
    common = ("--grid", args.grid, "--cell", args.cell, "--cache", cache)
    one = run_child("bench_mosaic", "--run", "one", *common)
    mosaic = run_child("bench_mosaic", "--run", "mosaic", *common)
    size = args.grid * args.cell
    print(f"\nthe run: one {size} x {size} px file against its {args.grid} x {args.grid} split "
          f"({args.grid ** 2} files of {args.cell} x {args.cell} px), reference backend, {len(PROMPTS)} prompts:")
    print(table([[name, r["tiles"], r["encoded"], r["objects"], r["wall_s"], r["read_s"]] for name, r in
                 (("one file", one), (f"{args.grid ** 2} files", mosaic))],
                ["input", "tiles", "encoded", "objects", "wall s", "read s (summed)"]))
    print(f"tiles encoded: {mosaic['encoded'] / max(one['encoded'], 1):.3f} x the one file's (bar: <= 1.05); "
          f"wall time: {mosaic['wall_s'] / one['wall_s']:.2f} x (bar: <= 1.25, issue 48)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
