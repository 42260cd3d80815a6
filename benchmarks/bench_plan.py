"""Planning at country scale: `sam3tiles plan` and a run's own planning (`run.planning.plan.plan_run`, what `segment`
does before any tile) on a grid of 10^5 - 10^6 tiles, each in a fresh process: seconds and peak RSS.

    python -m benchmarks.bench_plan --tiles 1000000
    python -m benchmarks.bench_plan --smoke             # the smoke size the tests run (10^4 tiles)
    python -m benchmarks.bench_plan --tiles 1000000 --start-only   # a segment's start: time and RSS to its 1st tile

The source is a GDAL VRT mosaic of copies of one small noise scene (no big file is written), read at the
`--scale` that gives about `--tiles` tiles (up to 8x upsampling, as `bench_country`). Neither step reads a
pixel of it: the plan's cost is the grid's, and should stay flat in the tiles (no object per tile).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .common import ROOT, emit

SCENE = 1000  # side of the scene the mosaic copies (pixels)


def make_source(folder: Path, tiles: int) -> tuple[Path, float]:
    """A VRT mosaic of copies of one noise scene and the scale that gives about `tiles` tiles."""
    import warnings

    import numpy as np
    import rasterio
    from rasterio.errors import NotGeoreferencedWarning

    scene = folder / "scene.tif"
    data = np.random.default_rng(0).integers(0, 255, (3, SCENE, SCENE), dtype=np.uint8)
    with warnings.catch_warnings():  # pixel coordinates, as meant
        warnings.simplefilter("ignore", NotGeoreferencedWarning)
        with rasterio.open(scene, "w", driver="GTiff", width=SCENE, height=SCENE, count=3, dtype="uint8") as ds:
            ds.write(data)
    from .synthetic import copies_vrt

    return copies_vrt(scene, SCENE, tiles, "grid.vrt")


def _peak_mb() -> float:
    import psutil

    try:
        import resource
    except ImportError:  # Windows
        return psutil.Process().memory_info().peak_wset / 2**20
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


def measure_run(src: str, scale: float) -> dict:
    """`plan_run` of a simulated run writing a dataset (as `segment` plans it), in this process."""
    from sam3tiles.options import Options
    from sam3tiles.run.planning.plan import plan_run
    from sam3tiles.run.planning.targets import Targets

    with tempfile.TemporaryDirectory(prefix="bench_plan_") as tmp:
        t0 = time.perf_counter()
        plan = plan_run(src, ["red"], options=Options(backend="simulated", scale=scale),
                        targets=Targets(out=f"{tmp}/objects.parquet/"))
        seconds = time.perf_counter() - t0
    return {"tiles": plan.inputs[0].n_tiles, "seconds": round(seconds, 2), "peak_rss_mb": round(_peak_mb())}


def measure_start(src: str, scale: float) -> dict:
    """A `segment` of the source (simulated backend, encode 0 s, in-process engine, a GeoParquet dataset with
    checkpoints) from its call to its first finished tile: seconds and peak RSS there; the process then ends
    (the run is not finished: `os._exit` after the figures are printed)."""
    from sam3tiles.run.executing import runner
    from sam3tiles.run.pipeline import segment_job

    deliver = runner.InputRun._deliver
    t0 = time.perf_counter()

    def first(self, tile, res, computed):  # the first tile delivered: its figures, then the process ends
        took = time.perf_counter() - t0
        deliver(self, tile, res, computed)
        emit({"tiles": self.inp.n_tiles, "first_tile_s": round(took, 2), "peak_rss_mb": round(_peak_mb())}, True)
        sys.stdout.flush()
        os._exit(0)

    runner.InputRun._deliver = first
    with tempfile.TemporaryDirectory(prefix="bench_start_") as tmp:
        segment_job(src, ["red"], backend="simulated", encode_seconds=0.0, decode_seconds=0.0, scale=scale,
                    out=f"{tmp}/objects.parquet/", return_objects=False)
    raise RuntimeError("the run ended without delivering a tile")


def start(tiles: int) -> dict:
    """`measure_start` in a fresh process on a grid of about `tiles` tiles."""
    with tempfile.TemporaryDirectory(prefix="bench_plan_") as tmp:
        src, scale = make_source(Path(tmp), tiles)
        t0 = time.perf_counter()
        out = _child("-m", "benchmarks.bench_plan", "--measure-start", str(src), repr(scale))
        wall = time.perf_counter() - t0
    res = json.loads(out.splitlines()[-1])
    return {**res, "process_s": round(wall, 1)}


def _child(*args: str) -> str:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, *args], check=False, cwd=ROOT, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{out.stderr[-4000:]}")
    return out.stdout


def measure(tiles: int) -> dict:
    """`sam3tiles plan` (its own line: 'planned in X s, peak memory Y MB') and `plan_run`, each in a fresh
    process, on a grid of about `tiles` tiles."""
    with tempfile.TemporaryDirectory(prefix="bench_plan_") as tmp:
        src, scale = make_source(Path(tmp), tiles)
        t0 = time.perf_counter()
        said = _child("-m", "sam3tiles.cli", "plan", str(src), "--scale", repr(scale)).splitlines()
        wall = time.perf_counter() - t0
        run = json.loads(_child("-m", "benchmarks.bench_plan", "--measure-run", str(src), repr(scale)).splitlines()[-1])
    n = next(int(x.split()[1]) for x in said if x.startswith("tiles: "))
    took = next(x for x in said if x.startswith("planned in "))  # "planned in 0.5 s, peak memory 250 MB"
    return {"tiles": n, "plan_s": float(took.split()[2]), "plan_peak_rss_mb": int(took.split()[-2]),
            "plan_process_s": round(wall, 1), "plan_run_s": run["seconds"],
            "plan_run_peak_rss_mb": run["peak_rss_mb"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tiles", type=int, default=100_000)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="10^4 tiles: seconds (what the tests run)")
    ap.add_argument("--start-only", action="store_true", help="a segment's start instead: seconds and peak RSS "
                    "to its first finished tile (then the run is stopped)")
    ap.add_argument("--measure-run", nargs=2, metavar=("SRC", "SCALE"), help="(internal) plan_run here")
    ap.add_argument("--measure-start", nargs=2, metavar=("SRC", "SCALE"), help="(internal) a segment's start here")
    args = ap.parse_args(argv)
    if args.measure_run:
        emit(measure_run(args.measure_run[0], float(args.measure_run[1])), True)
        return 0
    if args.measure_start:
        measure_start(args.measure_start[0], float(args.measure_start[1]))
        return 0
    tiles = 10_000 if args.smoke else args.tiles
    emit(start(tiles) if args.start_only else measure(tiles), args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
