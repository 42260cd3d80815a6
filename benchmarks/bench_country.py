"""Driver load at country scale: 10^4 - 10^5 tiles through the simulated backend (encode ~0 s), so what
is measured is the driver and the scheduler, not a model.

    python -m benchmarks.bench_country --tiles 10000
    python -m benchmarks.bench_country --tiles 100000      # ~ an hour of CPU on 2 cores
    python -m benchmarks.bench_country --smoke             # the smoke size the tests run (36 tiles)

The synthetic source is a GDAL VRT mosaic of R x R copies of one small generated scene (no big file is
written), read at a `--scale` chosen so the grid has about `--tiles` tiles. The job runs in a fresh
process against a LocalCluster whose worker is a separate process, so the process measured is the driver
(and the Dask scheduler, which lives in it): its peak RSS, its CPU per tile (the whole process, and the
main thread alone: submitting, checkpoints, merge bookkeeping, the object spool), and the scheduler's
tasks alive at peak, sampled every 0.25 s. The output is a partitioned GeoParquet dataset, with
checkpoints. The RSS curve shows whether memory stays flat while tiles run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from .common import ROOT, emit

SCENE = 2000  # side of the generated scene (pixels)
STRIDE = 752  # model pixels between tile origins at the default tile size and overlap


def make_source(folder: Path, tiles: int) -> tuple[Path, float]:
    """A VRT mosaic of copies of one scene and the scale that gives about `tiles` tiles."""
    from sam3tiles.testing.demo import write_scene

    scene = folder / "scene.tif"
    write_scene(scene, SCENE, SCENE, seed=11, crs=None)
    per_side = max(2, round(math.sqrt(tiles)))
    copies = max(1, math.ceil(per_side * STRIDE / (SCENE * 8)))  # at most 8x upsampling: objects stay small
    side = copies * SCENE
    scale = (per_side * STRIDE + (1008 - STRIDE)) / side
    bands = []
    for b in (1, 2, 3):
        srcs = "".join(
            f'<SimpleSource><SourceFilename relativeToVRT="1">scene.tif</SourceFilename><SourceBand>{b}</SourceBand>'
            f'<SrcRect xOff="0" yOff="0" xSize="{SCENE}" ySize="{SCENE}"/>'
            f'<DstRect xOff="{i * SCENE}" yOff="{j * SCENE}" xSize="{SCENE}" ySize="{SCENE}"/></SimpleSource>'
            for j in range(copies) for i in range(copies))
        bands.append(f'<VRTRasterBand dataType="Byte" band="{b}">{srcs}</VRTRasterBand>')
    vrt = folder / "country.vrt"
    vrt.write_text(f'<VRTDataset rasterXSize="{side}" rasterYSize="{side}">{"".join(bands)}</VRTDataset>')
    return vrt, scale




def measure(tiles: int, workers: int, threads: bool = False) -> dict:
    """`threads`: the worker runs in this process (no inter-process traffic: about twice the tiles per
    second on 2 cores); the RSS measured then includes the worker's (images in flight, the model), an
    upper bound of the driver's."""
    import psutil
    from distributed import Client, LocalCluster

    from sam3tiles.run.checkpoint import stored_rows
    from sam3tiles.run.pipeline import segment_job

    proc = psutil.Process()
    with tempfile.TemporaryDirectory(prefix="bench_country_") as tmp:
        src, scale = make_source(Path(tmp), tiles)
        cluster = LocalCluster(n_workers=1, threads_per_worker=workers, processes=not threads,
                               dashboard_address=":0", resources={"GPU": 1}, silence_logs=50)
        client = Client(cluster)
        peak = {"rss": 0, "tasks": 0}
        curve: list = []
        stop = threading.Event()

        db = Path(tmp) / "objects.parquet.sam3tiles-work" / "tiles.sqlite"

        def sample() -> None:
            t0 = time.perf_counter()
            said = t0
            while not stop.is_set():
                rss = proc.memory_info().rss
                n = len(cluster.scheduler.tasks)
                peak["rss"], peak["tasks"] = max(peak["rss"], rss), max(peak["tasks"], n)
                now = time.perf_counter()
                curve.append((round(now - t0, 1), round(rss / 2**20)))
                if now - said > 30:  # a progress line: a long run that is stopped still says something
                    said = now
                    print(f"progress: {now - t0:.0f} s, {stored_rows(db)} tile checkpoints, rss {rss / 2**20:.0f} MB, "
                          f"peak {peak['rss'] / 2**20:.0f} MB, tasks {n}", file=sys.stderr, flush=True)
                stop.wait(0.25)

        th = threading.Thread(target=sample, daemon=True)
        th.start()
        cpu0, main0, t0 = time.process_time(), time.thread_time(), time.perf_counter()
        try:
            _, report = segment_job(str(src), ["red"], backend="simulated", encode_seconds=0.0, decode_seconds=0.0,
                                    scale=scale, out=f"{tmp}/objects.parquet/", client=client,
                                    return_objects=False)
        finally:
            stop.set()
            th.join()
            client.close()
            cluster.close()
        wall = time.perf_counter() - t0
        cpu, main = time.process_time() - cpu0, time.thread_time() - main0
    n = report.tiles
    step = max(1, len(curve) // 12)
    from sam3tiles.run.engine import Engine

    return {"tiles": n, "objects": report.objects, "wall_s": round(wall, 1), "tiles_per_s": round(n / wall, 1),
            "peak_rss_mb": round(peak["rss"] / 2**20),
            "maxrss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "driver_cpu_ms_per_tile": round(1000 * cpu / n, 2),
            "main_thread_cpu_ms_per_tile": round(1000 * main / n, 2),
            "tasks_alive_peak": peak["tasks"],
            "max_in_flight": Engine(None, True, True, workers + 1, 1).in_flight(),
            "rss_curve_mb": curve[::step]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tiles", type=int, default=10_000)
    ap.add_argument("--workers", type=int, default=2, help="threads of the (one) worker process")
    ap.add_argument("--measure", action="store_true", help="(internal) measure in this process")
    ap.add_argument("--threads", action="store_true", help="the worker in this process (faster; the RSS "
                    "then includes the worker's)")
    ap.add_argument("--progress", action="store_true", help="progress lines on stderr every 30 s")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="36 tiles: seconds (what the tests run)")
    args = ap.parse_args(argv)
    if args.smoke:
        args.tiles = 36
    if args.measure:
        emit(measure(args.tiles, args.workers, args.threads), args.json)
        return 0
    cmd = [sys.executable, "-m", "benchmarks.bench_country", "--tiles", str(args.tiles), "--workers",
           str(args.workers), "--measure", "--json"] + (["--threads"] if args.threads else [])
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=None if args.progress else subprocess.PIPE,
                         text=True, env=env)
    if out.returncode != 0:
        print((out.stderr or "")[-4000:], file=sys.stderr)
        return out.returncode
    emit(json.loads(out.stdout.strip().splitlines()[-1]), args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
