"""The CPU work around the model, per tile, on one core: how many CPU cores does one GPU need?

    python -m benchmarks.bench_cpu_per_tile [--objects 10 100]

For each density a 4016 x 4016 scene (5 x 5 tiles) gets objects on a lattice sized so that a tile window
sees about N objects (vehicles and buildings, both prompted). Pinned to one core, per tile:

* read: `read_task` (windowed read, band stretch, validity mask);
* post-process: `crop_detections` (on the model worker: each mask cropped to its box, float16);
* vectorize: `vectorize_task` (upsample, threshold, polygonize, seam flags);
* merge share: the whole scene's merge (`merge_pieces`) divided by its tiles.

The model calls themselves (reference backend here; `--behaviour B`: wrapped in the misbehaving backend of
`sam3tiles.testing.misbehaving`, preset B such as `wobble` or `all+wobble`, so the masks and the merge's
work are those a real model's answers make) are not timed. Medians over the tiles, milliseconds of
CPU time of the benchmark's thread (`time.thread_time`: the figures hold on a loaded machine, where wall
time would count other processes' turns); the merge's lazy imports are done before its clock starts.
cores/GPU = CPU ms per tile / GPU ms per tile, for the simulated 110 ms GPU tile.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time

from sam3tiles.merge import merge_pieces
from sam3tiles.model.registry import RuntimeSpec, get_runtime
from sam3tiles.readers import open_source
from sam3tiles.run.executing.tasks import InferResult, SourceSpec, prepared_prompt, read_task, vectorize_task
from sam3tiles.tiling.frame import TileFrames
from sam3tiles.tiling.grid import TileGrid
from sam3tiles.vectorize.pieces import Pieces, crop_detections

from . import common
from .common import emit, run_child, smoke
from .synthetic import cached_scene

SIZE = 4016  # 5 x 5 tiles of 1008 with 256 overlap


def measure(objects: int, gpu_ms: float, size: int = SIZE, behaviour: str | None = None) -> dict:
    if hasattr(os, "sched_setaffinity") and not common.IN_PROCESS:  # a smoke run must not pin its caller
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    cell = max(60, round(1008 / math.sqrt(objects)))
    path = cached_scene(size, size, cell=cell)
    spec = RuntimeSpec(backend="reference")
    rt = get_runtime(spec)
    preps = [prepared_prompt(spec, t)[0] for t in ("red", "blue")]
    if behaviour:
        from sam3tiles.testing.misbehaving import MisbehavingRuntime

        rt = MisbehavingRuntime(rt, behaviour)
        preps = [rt.prepare_prompt(t) for t in ("red", "blue")]
    with open_source(path) as src:
        source = SourceSpec(src.path, src.bands, src.stretch)
        grid = TileGrid(src.width, src.height, transform=src.transform)
    tiles = list(grid)
    read_ms, post_ms, vec_ms, per_tile, all_pieces = [], [], [], [], []
    import scipy.sparse.csgraph  # noqa: F401 - the merge's lazy import: once per process, not per tile

    cpu = time.thread_time  # CPU seconds of this thread: the figure does not move with the machine's load
    for tile in tiles:
        t0 = cpu()
        image, _ = read_task(source, tile)
        read_ms.append(1000 * (cpu() - t0))
        emb = rt.encode(image)
        dets = [rt.decode(emb, p) for p in preps]
        t0 = cpu()
        crops = [c for i, d in enumerate(dets) for c in crop_detections(d, i, 0, tile.valid_wh, None)]
        post_ms.append(1000 * (cpu() - t0))
        t0 = cpu()
        res = vectorize_task(InferResult(crops=crops, seconds={}), tile)
        vec_ms.append(1000 * (cpu() - t0))
        per_tile.append(len(res.pieces))
        all_pieces.append(res.pieces)
    t0 = cpu()
    merge_pieces(Pieces.concat(all_pieces), dict(TileFrames(grid)))
    merge_ms = 1000 * (cpu() - t0) / len(tiles)
    med = statistics.median
    cpu = med(read_ms) + med(post_ms) + med(vec_ms) + merge_ms
    return {"objects_per_tile": med(per_tile), "tiles": len(tiles), "read_ms": med(read_ms),
            "postprocess_ms": med(post_ms), "vectorize_ms": med(vec_ms), "merge_share_ms": merge_ms,
            "cpu_ms_per_tile": cpu, "cores_per_gpu": cpu / gpu_ms, "gpu_ms": gpu_ms, "behaviour": behaviour}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--objects", type=int, nargs="+", default=[10, 100])
    ap.add_argument("--gpu-ms", type=float, default=110.0, help="GPU time per tile for cores/GPU")
    ap.add_argument("--size", type=int, default=SIZE, help="scene side in px")
    ap.add_argument("--behaviour", default=None,
                    help="a preset of sam3tiles.testing.misbehaving ('wobble', 'all+wobble'): the model's answers")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="a 2 x 2 tile scene, in this process (checks the code)")
    args = ap.parse_args(argv)
    if smoke(args.smoke):
        args.size, args.objects = 1800, [10]
    if len(args.objects) == 1:
        emit(measure(args.objects[0], args.gpu_ms, args.size, args.behaviour), args.json)
        return 0
    beh = ["--behaviour", args.behaviour] if args.behaviour else []
    rows = [run_child("bench_cpu_per_tile", "--objects", n, "--gpu-ms", args.gpu_ms, "--size", args.size, *beh)
            for n in args.objects]
    emit({"runs": rows}, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
