"""Driver load at country scale: 10^4 - 10^5 tiles through the simulated backend (encode ~0 s), so what
is measured is the driver and the scheduler, not a model.

    python -m benchmarks.bench_country --tiles 10000
    python -m benchmarks.bench_country --tiles 100000      # ~ an hour of CPU on 2 cores
    python -m benchmarks.bench_country --smoke             # the smoke size the tests run (36 tiles)

    python -m benchmarks.bench_country --tiles 10000 --compare   # also one tile per task: same output?

The synthetic source is a GDAL VRT mosaic of R x R copies of one small generated scene (no big file is
written), read at a `--scale` chosen so the grid has about `--tiles` tiles. The job runs in a fresh
process against a Dask scheduler and a worker (GPU=1) that are processes of their own (`dask scheduler`,
`dask worker`), so the driver (the `segment` process) and the scheduler are measured apart from the
worker: the driver's peak RSS and CPU per tile (the whole process, and the main thread alone: submitting,
checkpoints, merge bookkeeping, the object spool), the scheduler process's CPU per tile, their sum (what
one run costs beside its GPUs) and the scheduler's tasks alive at peak. The output is a partitioned
GeoParquet dataset, with checkpoints. The RSS curve shows whether memory stays flat while tiles run.
"""

from __future__ import annotations

import argparse
import json
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


def make_source(folder: Path, tiles: int) -> tuple[Path, float]:
    """A VRT mosaic of copies of one scene and the scale that gives about `tiles` tiles."""
    from sam3tiles.testing.demo import write_scene

    from .synthetic import copies_vrt

    scene = folder / "scene.tif"
    write_scene(scene, SCENE, SCENE, seed=11, crs=None)
    return copies_vrt(scene, SCENE, tiles, "country.vrt")




class Cluster:
    """A scheduler and one worker (resources GPU=1), each a process of its own: the driver measured is this
    process alone, the scheduler's CPU is read from its process (psutil)."""

    def __init__(self, folder: Path, threads: int):
        import psutil

        sched_file = folder / "scheduler.json"
        py = [sys.executable, "-m"]
        quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.scheduler = subprocess.Popen(py + ["distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port",
                                                "0", "--dashboard-address", ":0", "--scheduler-file",
                                                str(sched_file)], **quiet)
        deadline = time.monotonic() + 60
        while not sched_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        self.worker = subprocess.Popen(py + ["distributed.cli.dask_worker", "--scheduler-file", str(sched_file),
                                             "--nthreads", str(threads), "--resources", "GPU=1", "--no-nanny",
                                             "--dashboard-address", ":0"], **quiet)
        from distributed import Client

        self.client = Client(scheduler_file=str(sched_file), timeout="60s")
        self.client.wait_for_workers(1, timeout=60)
        self.sched_proc = psutil.Process(self.scheduler.pid)

    def scheduler_cpu(self) -> float:
        t = self.sched_proc.cpu_times()
        return t.user + t.system

    def tasks(self) -> int:
        return self.client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks))

    def close(self) -> None:
        self.client.close()
        for p in (self.worker, self.scheduler):
            p.terminate()
            p.wait(30)


def measure(tiles: int, workers: int, per_task: int | None = None, keep: str | None = None) -> dict:
    """One run of about `tiles` tiles against a scheduler and a worker in processes of their own;
    `per_task`: tiles per Dask task (None: the default); `keep`: copy the output dataset there."""
    import psutil

    from sam3tiles.run.recording.checkpoint import stored_rows
    from sam3tiles.run.pipeline import segment_job

    proc = psutil.Process()
    with tempfile.TemporaryDirectory(prefix="bench_country_") as tmp:
        src, scale = make_source(Path(tmp), tiles)
        cluster = Cluster(Path(tmp), workers)
        peak = {"rss": 0, "tasks": 0}
        curve: list = []
        stop = threading.Event()
        db = Path(tmp) / "objects.parquet.sam3tiles-work" / "tiles.sqlite"

        def sample() -> None:  # the driver's RSS 4 times a second, the scheduler's tasks every 5 s
            t0 = time.perf_counter()
            said = asked = t0
            while not stop.is_set():
                rss = proc.memory_info().rss
                now = time.perf_counter()
                peak["rss"] = max(peak["rss"], rss)
                if now - asked >= 5.0:  # a look costs the scheduler some work: not more often
                    asked = now
                    peak["tasks"] = max(peak["tasks"], cluster.tasks())
                curve.append((round(now - t0, 1), round(rss / 2**20)))
                if now - said > 30:  # a progress line: a long run that is stopped still says something
                    said = now
                    print(f"progress: {now - t0:.0f} s, {stored_rows(db)} tile checkpoints, rss {rss / 2**20:.0f} MB, "
                          f"peak {peak['rss'] / 2**20:.0f} MB", file=sys.stderr, flush=True)
                stop.wait(0.25)

        from sam3tiles.merge import BlockMerger

        finish, at_end = BlockMerger.finish, {}

        def timed_finish(self, *a, **k):  # the tiles are all in: the final merge pass and the outputs follow
            at_end.setdefault("main", time.thread_time())
            at_end.setdefault("cpu", time.process_time())
            return finish(self, *a, **k)

        BlockMerger.finish = timed_finish
        idle = idle_rates(cluster)  # what the processes spend per second with nothing to do
        th = threading.Thread(target=sample, daemon=True)
        th.start()
        cpu0, main0, sched0, t0 = time.process_time(), time.thread_time(), cluster.scheduler_cpu(), time.perf_counter()
        try:
            _, report = segment_job(str(src), ["red"], backend="simulated", encode_seconds=0.0, decode_seconds=0.0,
                                    scale=scale, out=f"{tmp}/objects.parquet/", client=cluster.client,
                                    return_objects=False, tiles_per_task=per_task)
        finally:
            stop.set()
            th.join()
            wall = time.perf_counter() - t0
            cpu, main, sched = time.process_time() - cpu0, time.thread_time() - main0, cluster.scheduler_cpu() - sched0
            cluster.close()
        if keep:
            import shutil

            shutil.copytree(f"{tmp}/objects.parquet", keep, dirs_exist_ok=True)
    n = report.tiles
    step = max(1, len(curve) // 12)
    return {"tiles": n, "objects": report.objects, "tiles_per_task": per_task or "auto", "wall_s": round(wall, 1),
            "tiles_per_s": round(n / wall, 1), "peak_rss_mb": round(peak["rss"] / 2**20),
            "maxrss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "driver_cpu_ms_per_tile": round(1000 * cpu / n, 3),
            "main_thread_cpu_ms_per_tile": round(1000 * main / n, 3),
            # the main thread while tiles run (to the merge's final pass) and after them (final pass, outputs)
            "main_thread_cpu_ms_per_tile_while_tiles_run": round(1000 * (at_end["main"] - main0) / n, 3),
            "main_thread_cpu_s_after_the_tiles": round(main - (at_end["main"] - main0), 2),
            "scheduler_cpu_ms_per_tile": round(1000 * sched / n, 3),
            "driver_and_scheduler_ms_per_tile": round(1000 * (cpu + sched) / n, 3),
            # the same less what both spend per second when idle (heartbeats, the system monitor): that part
            # follows the run's seconds, not its tiles, and is the same whatever the GPUs
            "idle_ms_per_s": {k: round(v, 2) for k, v in idle.items()},
            "driver_and_scheduler_ms_per_tile_net_of_idle": round(
                (1000 * (cpu + sched) - wall * (idle["driver"] + idle["scheduler"])) / n, 3),
            "tasks_alive_peak": peak["tasks"], "rss_curve_mb": curve[::step]}


def idle_rates(cluster: "Cluster", seconds: float = 5.0) -> dict:
    """CPU milliseconds per second the driver (this process) and the scheduler spend with a worker connected
    and nothing to do."""
    time.sleep(1.0)
    d0, s0 = time.process_time(), cluster.scheduler_cpu()
    time.sleep(seconds)
    return {"driver": 1000 * (time.process_time() - d0) / seconds,
            "scheduler": 1000 * (cluster.scheduler_cpu() - s0) / seconds}


def same_output(a: str, b: str) -> bool:
    """Whether two output datasets hold the same rows: ids, prompts, scores, areas and exact geometries."""
    import geopandas as gpd
    import shapely

    x, y = gpd.read_parquet(a).sort_values("id"), gpd.read_parquet(b).sort_values("id")
    cols = ["id", "prompt", "score", "n_tiles", "area_px"]
    return (len(x) == len(y) and all(x[c].tolist() == y[c].tolist() for c in cols)
            and bool(shapely.equals_exact(x.geometry.values, y.geometry.values, 0).all()))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tiles", type=int, default=10_000)
    ap.add_argument("--workers", type=int, default=2, help="threads of the (one) worker process")
    ap.add_argument("--tiles-per-task", type=int, default=None, help="tiles per Dask task (default: the run's)")
    ap.add_argument("--compare", action="store_true", help="also a run of one tile per task: its CPU per tile "
                    "and whether the outputs are identical")
    ap.add_argument("--measure", action="store_true", help="(internal) measure in this process")
    ap.add_argument("--keep", help="(internal) copy the output dataset to this folder")
    ap.add_argument("--progress", action="store_true", help="progress lines on stderr every 30 s")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="36 tiles: seconds (what the tests run)")
    args = ap.parse_args(argv)
    if args.smoke:
        args.tiles = 36
    if args.measure:
        emit(measure(args.tiles, args.workers, args.tiles_per_task, args.keep), args.json)
        return 0
    if not args.compare:
        res = _child(args, args.tiles_per_task)
    else:
        with tempfile.TemporaryDirectory(prefix="bench_country_cmp_") as tmp:
            res = _child(args, args.tiles_per_task, f"{tmp}/batched")
            one = _child(args, 1, f"{tmp}/one")
            res = {"batched": res, "one_tile_per_task": one,
                   "identical_output": same_output(f"{tmp}/batched", f"{tmp}/one"),
                   "cpu_ratio": round(res["driver_and_scheduler_ms_per_tile"]
                                      / one["driver_and_scheduler_ms_per_tile"], 3)}
    emit(res, args.json)
    return 0


def _child(args, per_task: int | None, keep: str | None = None) -> dict:
    """The measurement in a fresh process (nothing imported or warmed up by another run)."""
    cmd = [sys.executable, "-m", "benchmarks.bench_country", "--tiles", str(args.tiles), "--workers",
           str(args.workers), "--measure", "--json"]
    cmd += ["--tiles-per-task", str(per_task)] if per_task else []
    cmd += ["--keep", keep] if keep else []
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=None if args.progress else subprocess.PIPE,
                         text=True, env=env)
    if out.returncode != 0:
        raise SystemExit(f"bench_country: the measurement failed:\n{(out.stderr or '')[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    raise SystemExit(main())
