"""Scale-out: tiles per second with two simulated-GPU workers against one.

    python -m benchmarks.bench_scaleout [--size 8000] [--threads 2]

A dask.distributed LocalCluster of N worker processes, each with the resource GPU=1 (so each runs one
model task at a time, like one worker per GPU) and `--threads` threads; the job goes to it through
`segment(..., client=client)`, exactly as with `--scheduler`. The simulated backend makes each encode last
0.1 s and each decode 0.01 s (sleeping: one "GPU" per worker, no CPU used). tiles/s is measured from the
call to the written output; the cluster is started and warmed up before (a small job, so that every
worker has imported sam3tiles and loaded the model, as a long-lived cluster has). Each N runs in a fresh
process. The default scene
is sparse (`--cell 500`): two workers at ~18 tiles/s would need more than this machine's 2 cores for a
dense one (see bench_cpu_per_tile for the CPU work per tile).
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time

from distributed import Client, LocalCluster

from sam3tiles.model.registry import runtime_stats
from sam3tiles.run.pipeline import segment_job

from . import common
from .common import emit, run_child, smoke
from .synthetic import cached_scene


def one(size: int, cell: int, workers: int, threads: int, encode: float, decode: float, text: str) -> dict:
    path = str(cached_scene(size, size, cell=cell))
    # smoke runs: worker threads in this process (the same calls; the figures mean nothing)
    with LocalCluster(n_workers=workers, threads_per_worker=threads, processes=not common.IN_PROCESS,
                      resources={"GPU": 1}, dashboard_address=":0", silence_logs=logging.ERROR) as cluster, \
            Client(cluster) as client:
        client.wait_for_workers(workers)
        # warm up: a small job imports sam3tiles and loads the model on every worker (a cluster is
        # long-lived; this is what its first job pays once)
        warm = cached_scene(*(2 * [min(size, 2000)]))
        client.run(_import)
        segment_job(str(warm), [text], backend="simulated", encode_seconds=encode, decode_seconds=decode,
                    client=client, checkpoint=False)
        before = _encodes(client)
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            gdf, rep = segment_job(path, [text], backend="simulated", encode_seconds=encode, decode_seconds=decode,
                                   out=f"{tmp}/o.gpkg", client=client)
            wall = time.perf_counter() - t0
            encodes = {w: n - before.get(w, 0) for w, n in _encodes(client).items()}
    ideal = workers / (encode + decode)  # every GPU busy all the time: one prompt, one decode a tile
    return {"gpu_workers": workers, "tiles": rep.tiles, "objects": len(gdf), "wall_s": wall,
            "tiles_per_s": rep.tiles / wall, "of_ideal": rep.tiles / wall / ideal,
            "encodes_per_worker": sorted(encodes.values())}


def _encodes(client) -> dict:
    return {w: s.get("simulated", {}).get("encodes", 0) for w, s in client.run(runtime_stats).items()}


def _import() -> None:
    import sam3tiles.run.pipeline  # noqa: F401


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=8000)
    ap.add_argument("--cell", type=int, default=500, help="one object per CELL x CELL px (500: ~2 red per tile, "
                                                          "so the 2 cores here are not the limit)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--encode", type=float, default=0.1)
    ap.add_argument("--decode", type=float, default=0.01)
    ap.add_argument("--text", default="red")
    ap.add_argument("--workers", type=int, default=None, help="(internal) run one cluster size here")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="a 1500 px scene, worker threads (checks the code)")
    args = ap.parse_args(argv)
    if smoke(args.smoke):
        args.size, args.encode, args.decode = 1500, 0.01, 0.001
    if args.workers:
        emit(one(args.size, args.cell, args.workers, args.threads, args.encode, args.decode, args.text), args.json)
        return 0
    given = ["--size", args.size, "--cell", args.cell, "--threads", args.threads, "--encode", args.encode,
             "--decode", args.decode, "--text", args.text]
    r1 = run_child("bench_scaleout", *given, "--workers", 1)
    r2 = run_child("bench_scaleout", *given, "--workers", 2)
    assert r1["objects"] == r2["objects"]
    emit({"one": r1, "two": r2, "speedup": r2["tiles_per_s"] / r1["tiles_per_s"]}, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
