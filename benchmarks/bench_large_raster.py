"""Peak memory of one segment run on a large generated GeoTIFF (reference backend).

    python -m benchmarks.bench_large_raster --size 20000 [--cache DIR] [--prompts red,blue]

Generates the scene once (strip by strip, cached), then runs `sam3tiles segment` in a fresh process and
prints its peak RSS, wall time and tiles per second. The whole image is never in memory: the figure
should stay far below the image's own size (3 bytes x width x height).
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
from pathlib import Path

from sam3tiles.cli.main import cli
from sam3tiles.testing.demo import write_scene


def scene_path(cache: Path, size: int) -> Path:
    path = cache / f"scene-{size}.tif"
    if not path.exists():
        t0 = time.perf_counter()
        # few objects keep the generator quick; density does not change the memory bound
        write_scene(path, size, size, seed=size, n_cars=size * size // 400_000, n_buildings=size * size // 900_000,
                    n_fields=3)
        print(f"generated {path} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return path


def run(path: Path, prompts: str, out_dir: Path, in_process: bool = False) -> dict:
    out = out_dir / f"{path.stem}.gpkg"
    args = ["-q", "segment", str(path), "--backend", "reference", "--out", str(out), "--overwrite",
            "--fresh"] + [a for p in prompts.split(",") for a in ("--text", p)]
    who = resource.RUSAGE_SELF if in_process else resource.RUSAGE_CHILDREN
    before = resource.getrusage(who).ru_maxrss
    t0 = time.perf_counter()
    if in_process:  # a smoke run: the same command, without a fresh process (its peak RSS means nothing)
        cli.main(args, standalone_mode=False)
    else:
        subprocess.run([sys.executable, "-m", "sam3tiles", *args], check=True)
    wall = time.perf_counter() - t0
    peak_kb = resource.getrusage(who).ru_maxrss
    rep = json.loads(Path(str(out) + ".report.json").read_text())
    return {"peak_rss_mb": peak_kb / 1024, "wall_s": wall, "tiles": rep["tiles"], "objects": rep["objects"],
            "tiles_per_s": rep["tiles"] / wall, "before_kb": before}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=20000)
    ap.add_argument("--cache", default=os.environ.get("SAM3TILES_BENCH_CACHE", "/tmp/sam3tiles-bench"))
    ap.add_argument("--prompts", default="red,blue,yellow")
    ap.add_argument("--smoke", action="store_true", help="a 1500 px scene, in this process (checks the code)")
    args = ap.parse_args(argv)
    if args.smoke:
        args.size = 1500
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    path = scene_path(cache, args.size)
    with tempfile.TemporaryDirectory() as d:
        r = run(path, args.prompts, Path(d), in_process=args.smoke)
    image_mb = 3 * args.size * args.size / 2**20
    print(f"{args.size}x{args.size} px ({image_mb:.0f} MB as uint8 RGB): {r['tiles']} tiles, {r['objects']} objects, "
          f"peak RSS {r['peak_rss_mb']:.0f} MB, wall {r['wall_s']:.0f} s, {r['tiles_per_s']:.1f} tiles/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
