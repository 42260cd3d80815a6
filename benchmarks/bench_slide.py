"""Whole-slide benchmark: segment a pyramidal OME-TIFF (default 40000 x 40000) with the reference backend in
a subprocess, and report its peak RSS and tiles per second.

    python -m benchmarks.bench_slide                      # makes benchmarks/.cache/slide-40000-s0.ome.tif once
    python -m benchmarks.bench_slide --size 10000         # a quicker estimate
    python -m benchmarks.bench_slide --path my.ome.tif --text indigo

Peak RSS is the largest sum of resident memory over the segmenting process and all its children, sampled
every 0.2 s with psutil; `ru_maxrss` of the children (the largest single process) is printed beside it.
The run writes the GeoPackage and the --labels image, so writing is measured too. One JSON line at the end
has every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import geopandas as gpd
import psutil
import rasterio

from sam3tiles.evaluate import evaluate, format_table
from sam3tiles.readers import open_source
from sam3tiles.testing.slidegen import write_slide

from .synthetic import cache_folder

ROOT = Path(__file__).resolve().parents[1]


def tree_rss(proc: psutil.Process) -> int:
    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return total


def make_slide(size: int, seed: int) -> Path:
    """The slide (and its truth) in the cache folder, made once, in this process (so the children's peak
    RSS is the segment run's alone)."""
    folder = cache_folder()
    path = folder / f"slide-{size}-s{seed}.ome.tif"
    if path.exists():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    slide = write_slide(path, size, size, seed)
    with warnings.catch_warnings():  # the truth is in pixel coordinates: no CRS, on purpose
        warnings.filterwarnings("ignore", message=".*crs.*was not provided", category=UserWarning)
        slide.truth.to_file(path.with_name(path.name.split(".")[0] + "-truth.gpkg"), driver="GPKG", layer="truth",
                            engine="pyogrio")
    print(f"made {path} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=40000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--path", default=None, help="an existing slide (default: make one of --size)")
    ap.add_argument("--text", action="append", default=None, help="prompts (default: indigo, crimson)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--out", default=None, help="output folder (default: a temporary one, deleted after)")
    ap.add_argument("--evaluate", action="store_true", help="compare with the slide's -truth.gpkg")
    ap.add_argument("--smoke", action="store_true", help="a 1200 px slide (checks the code)")
    args = ap.parse_args(argv)
    if args.smoke:
        args.size, args.evaluate = 1200, True

    slide = Path(args.path) if args.path else make_slide(args.size, args.seed)
    texts = args.text or ["indigo", "crimson"]
    tmp = None if args.out else tempfile.TemporaryDirectory(prefix="bench_slide_")
    out_dir = Path(args.out or tmp.name)
    out_dir.mkdir(parents=True, exist_ok=True)
    gpkg, labels = out_dir / "objects.gpkg", out_dir / "labels.tif"
    cmd = [sys.executable, "-c", "from sam3tiles.cli.main import cli; cli()", "segment", str(slide),
           *[a for t in texts for a in ("--text", t)], "--backend", "reference", "--workers", str(args.workers),
           "--scale", str(args.scale), "--out", str(gpkg), "--labels", str(labels), "--overwrite", "--fresh",
           "-q"]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env)
    ps = psutil.Process(proc.pid)
    peak, samples = 0, []
    while proc.poll() is None:
        rss = tree_rss(ps)
        peak = max(peak, rss)
        samples.append((round(time.perf_counter() - t0, 1), rss))
        time.sleep(0.2)
    wall = time.perf_counter() - t0
    maxrss_children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # KiB on Linux
    if proc.returncode != 0:
        print(f"segment failed with exit code {proc.returncode}", file=sys.stderr)
        return proc.returncode
    report = json.loads((out_dir / "objects.gpkg.report.json").read_text())
    tiles = report.get("tiles", 0)
    result = {
        "slide": str(slide), "tiles": tiles,
        "objects": report.get("objects"), "workers": args.workers, "scale": args.scale,
        "wall_s": round(wall, 1), "pipeline_wall_s": round(report.get("wall_seconds", 0.0), 1),
        "tiles_per_s": round(tiles / report["wall_seconds"], 2) if report.get("wall_seconds") else None,
        "peak_rss_mb": round(peak / 2**20), "maxrss_children_mb": round(maxrss_children / 2**20),
        "seconds": report.get("seconds"),
    }
    with open_source(slide) as src:  # size, for the record
        result["size"] = [src.width, src.height]
    with rasterio.open(labels) as ds:
        result["labels"] = {"width": ds.width, "height": ds.height, "dtype": ds.dtypes[0],
                            "bytes": labels.stat().st_size}
    if args.evaluate:
        truth = gpd.read_file(slide.with_name(slide.name.split(".")[0] + "-truth.gpkg"))
        table = evaluate(gpd.read_file(gpkg), truth)
        print(format_table(table), file=sys.stderr)
        result["evaluation"] = table.round(4).to_dict("records")
    # the memory curve, coarsely: does it stay flat while tiles run?
    step = max(1, len(samples) // 12)
    result["rss_curve_mb"] = [(t, round(r / 2**20)) for t, r in samples[::step]]
    print(json.dumps(result))
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
