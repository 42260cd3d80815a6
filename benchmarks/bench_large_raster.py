"""Peak memory of one segment run on a large generated GeoTIFF (reference backend).

    python benchmarks/bench_large_raster.py --size 20000 [--cache DIR] [--prompts red,blue]

Generates the scene once (strip by strip, cached), then runs `sam3tiles segment` in a fresh process and
prints its peak RSS, wall time and tiles per second. The whole image is never in memory: the figure
should stay far below the image's own size (3 bytes x width x height).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def scene_path(cache: Path, size: int) -> Path:
    from sam3tiles.demo import write_scene

    path = cache / f"scene-{size}.tif"
    if not path.exists():
        t0 = time.perf_counter()
        # few objects keep the generator quick; density does not change the memory bound
        write_scene(path, size, size, seed=size, n_cars=size * size // 400_000, n_buildings=size * size // 900_000,
                    n_fields=3)
        print(f"generated {path} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return path


def run(path: Path, prompts: str, out_dir: Path) -> dict:
    out = out_dir / f"{path.stem}.gpkg"
    cmd = [sys.executable, "-m", "sam3tiles", "-q", "segment", str(path), "--backend", "reference",
           "--out", str(out), "--overwrite", "--fresh"] + [a for p in prompts.split(",") for a in ("--text", p)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True)
    wall = time.perf_counter() - t0
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    import json

    rep = json.loads(Path(str(out) + ".report.json").read_text())
    return {"peak_rss_mb": peak_kb / 1024, "wall_s": wall, "tiles": rep["tiles"], "objects": rep["objects"],
            "tiles_per_s": rep["tiles"] / wall, "before_kb": before}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=20000)
    ap.add_argument("--cache", default=os.environ.get("SAM3TILES_BENCH_CACHE", "/tmp/sam3tiles-bench"))
    ap.add_argument("--prompts", default="red,blue,yellow")
    args = ap.parse_args()
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    path = scene_path(cache, args.size)
    with tempfile.TemporaryDirectory() as d:
        r = run(path, args.prompts, Path(d))
    image_mb = 3 * args.size * args.size / 2**20
    print(f"{args.size}x{args.size} px ({image_mb:.0f} MB as uint8 RGB): {r['tiles']} tiles, {r['objects']} objects, "
          f"peak RSS {r['peak_rss_mb']:.0f} MB, wall {r['wall_s']:.0f} s, {r['tiles_per_s']:.1f} tiles/s")


if __name__ == "__main__":
    main()
