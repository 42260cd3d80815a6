"""Merge scaling: 100,000 and 1,000,000 polygon pieces on a grid of tiles.

    python -m benchmarks.bench_merge [--sizes 100000 1000000] [--per-tile 100] [--block 8]

`synthetic.grid_pieces` cuts small squares (8-20 px, never overlapping) into one piece per tile window
that sees them, about 100 pieces per tile, so the number of tiles grows with the pieces (1,000 tiles for
100k, 10,000 for 1M) as in a larger image. Each (size, mode) runs in a fresh process, which reports the
merge's seconds and its own peak RSS:

* single: `merge_pieces` over every piece at once (one process, one thread);
* blocked: `merge_blocked` with blocks of `--block` x `--block` tiles, one after the other in this process;
* blocked-2w: the same blocks as tasks on a LocalCluster of 2 worker processes (as the pipeline runs them
  on its engine), then the final pass here. Its peak RSS is this process's only.
"""

from __future__ import annotations

import argparse
import logging
import resource
import time

from distributed import Client, LocalCluster

from sam3tiles.merge import merge_blocked, merge_pieces, tile_blocks
from sam3tiles.testing import grid_pieces

from . import common
from .common import emit, run_child, smoke


def _on(client):
    """`map_blocks` for `merge_blocked`: each block's merge a task on the cluster, as the pipeline runs them."""

    def map_blocks(fn, jobs):
        futs = [client.submit(fn, *client.scatter(list(job), hash=False), pure=False) for job in jobs]
        return client.gather(futs)

    return map_blocks


def one(n: int, mode: str, per_tile: int, block: int, processes: bool = True) -> dict:
    pieces, frames, grid, n_objects = grid_pieces(n, per_tile=per_tile)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    client = cluster = None
    mapper = None
    if mode == "blocked-2w":
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=processes, dashboard_address=":0",
                               silence_logs=logging.ERROR)
        client = Client(cluster)
        mapper = _on(client)
    t0, c0 = time.perf_counter(), time.process_time()
    if mode == "single":
        merged, stats = merge_pieces(pieces, frames)
    else:
        merged, stats = merge_blocked(pieces, frames, tile_blocks(list(grid), block), map_blocks=mapper)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    if client is not None:
        client.close()
        cluster.close()
    return {"pieces": len(pieces), "tiles": len(grid), "mode": mode, "objects": len(merged.geometry),
            "expected_objects": n_objects, "seconds": seconds, "cpu_seconds": cpu, "rss_before_mb": rss0,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "violations": stats.rule_violations}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--modes", nargs="+", default=["single", "blocked", "blocked-2w"])
    ap.add_argument("--per-tile", type=int, default=100)
    ap.add_argument("--block", type=int, default=8)
    ap.add_argument("--one", nargs=2, default=None, metavar=("N", "MODE"), help="(internal) one run here")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, all in this process (checks the code)")
    args = ap.parse_args(argv)
    if smoke(args.smoke):
        args.sizes, args.per_tile, args.block = [1500, 3000], 60, 2
    if args.one:
        emit(one(int(args.one[0]), args.one[1], args.per_tile, args.block, processes=not common.IN_PROCESS), args.json)
        return 0
    rows = []
    for mode in args.modes:
        for n in args.sizes:
            rows.append(run_child("bench_merge", "--one", n, mode, "--per-tile", args.per_tile,
                                  "--block", args.block))
    ratios = {}
    for mode in args.modes:
        r = [x for x in rows if x["mode"] == mode]
        if len(r) >= 2:
            ratios[mode] = r[-1]["seconds"] / r[0]["seconds"]
    emit({"runs": rows, "time_ratio": ratios}, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
