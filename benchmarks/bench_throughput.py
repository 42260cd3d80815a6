"""Is the GPU kept busy? The pipeline against the plain read-infer-write loop, on a simulated GPU.

    python -m benchmarks.bench_throughput [--size 8000] [--encode 0.1] [--decode 0.01]

The simulated backend makes each encode last `--encode` s and each decode `--decode` s (sleeping, so the
GIL is free, as during a GPU call). One prompt, so one tile costs the "GPU" encode + decode = 110 ms and
no schedule can beat 1 / 0.11 s = 9.1 tiles/s. Both variants run in fresh processes on the same tiles and
write the same merged GeoPackage. The scene has one object per `--cell` px square (150: about 20 'red'
vehicles per tile window, so vectorizing is real work):

* plain loop: for each tile, read -> encode -> decode -> vectorize, one after the other (what a script
  around a model does today; `sam3tiles.run.executing.tasks.run_tile_inline`), then the merge and the write;
* pipeline: `segment_job` with the in-process engine (reads and vectorizing of other tiles run while the
  model task waits on the GPU; checkpoints on, as the CLI runs).

`--behaviour B` wraps the simulated backend in the misbehaving one of `sam3tiles.testing.misbehaving`
(preset B such as `wobble` or `all+wobble`): the masks, their vectorizing and the merge are then what a
real model's answers cost, not the reference backend's clean instances.

tiles/s counts every second from the call to the written file (engine start, model load, merge, write);
module imports (distributed's take about a second; those either variant does lazily: `warm_imports`) are
done before the clock starts, in both variants. The pipeline also writes its report, checkpoints and
quicklook (the CLI's defaults), which the plain loop does not.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time

import geopandas as gpd

from sam3tiles.merge import merge_pieces
from sam3tiles.model.registry import RuntimeSpec, get_runtime
from sam3tiles.readers import open_source
from sam3tiles.run.pipeline import segment_job  # imports distributed before any clock starts
from sam3tiles.run.executing.tasks import SourceSpec, TilePrompt, run_tile_inline
from sam3tiles.tiling.frame import TileFrames
from sam3tiles.tiling.grid import TileGrid
from sam3tiles.vectorize.pieces import Pieces

from .common import emit, run_child, smoke
from .synthetic import cached_scene


def warm_imports() -> None:
    """The modules either variant imports lazily on its first tile or at its end (the merge's scipy,
    the writers' pyogrio and pyarrow, the quicklook's PIL, distributed's cluster): imported before either
    clock starts, as the module docstring says, so that neither pays a one-off import inside its time."""
    import importlib

    for name in ("scipy.sparse.csgraph", "pyogrio", "pyarrow.parquet", "tifffile", "PIL.Image", "PIL.ImageDraw",
                 "PIL.ImageFont", "sam3tiles.writers.quicklook", "distributed.deploy.local",
                 "importlib_metadata"):
        try:
            importlib.import_module(name)
        except ImportError:  # an optional module this environment lacks: neither variant uses it then
            pass


def _backend(encode: float, decode: float, behaviour: str | None):
    """The simulated GPU, its answers changed by a misbehaving preset where one is given."""
    if not behaviour:
        return None
    import functools

    from sam3tiles.model.simulated import SimulatedGpuRuntime
    from sam3tiles.testing.misbehaving import MisbehavingRuntime

    return functools.partial(MisbehavingRuntime, SimulatedGpuRuntime(encode, decode), behaviour)


def plain_loop(path: str, encode: float, decode: float, text: str, behaviour: str | None = None) -> dict:
    warm_imports()
    t0, c0 = time.perf_counter(), _cpu()
    backend = _backend(encode, decode, behaviour)
    spec = (RuntimeSpec(backend="simulated", encode_seconds=encode, decode_seconds=decode) if backend is None
            else RuntimeSpec.of(backend))
    get_runtime(spec)
    with open_source(path) as src:
        source = SourceSpec(src.path, src.bands, src.stretch)
        grid = TileGrid(src.width, src.height, transform=src.transform)
        crs = src.crs
    tiles = list(grid)
    results = [run_tile_inline(source, spec, t, [TilePrompt(0, text)]) for t in tiles]
    merged, _ = merge_pieces(Pieces.concat([r.pieces for r in results]),
                             dict(TileFrames(grid)))
    with tempfile.TemporaryDirectory() as tmp:
        gpd.GeoDataFrame({"score": merged.score}, geometry=merged.geometry, crs=crs).to_file(f"{tmp}/o.gpkg")
    wall = time.perf_counter() - t0
    gpu = sum(r.seconds.get("encode", 0) + r.seconds.get("decode", 0) for r in results)
    return {"variant": "plain loop", "tiles": len(tiles), "objects": len(merged.geometry), "wall_s": wall,
            "tiles_per_s": len(tiles) / wall, "gpu_busy": gpu / wall,
            "cpu_ms_per_tile": 1000 * (_cpu() - c0) / len(tiles)}


def pipeline(path: str, encode: float, decode: float, text: str, workers: int | None,
             behaviour: str | None = None) -> dict:
    warm_imports()
    backend = _backend(encode, decode, behaviour)
    model = ({"backend": "simulated", "encode_seconds": encode, "decode_seconds": decode} if backend is None
             else {"backend": backend})
    with tempfile.TemporaryDirectory() as tmp:
        t0, c0 = time.perf_counter(), _cpu()
        gdf, rep = segment_job(path, [text], **model, out=f"{tmp}/o.gpkg", workers=workers)
        wall = time.perf_counter() - t0
    gpu = rep.seconds["encode"] + rep.seconds["decode"]
    return {"variant": "pipeline", "tiles": rep.tiles, "objects": len(gdf), "wall_s": wall,
            "tiles_per_s": rep.tiles / wall, "gpu_busy": gpu / wall,
            "cpu_ms_per_tile": 1000 * (_cpu() - c0) / rep.tiles}


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=8000)
    ap.add_argument("--cell", type=int, default=150, help="one object per CELL x CELL px (150: ~20 red per tile)")
    ap.add_argument("--encode", type=float, default=0.1)
    ap.add_argument("--decode", type=float, default=0.01)
    ap.add_argument("--text", default="red")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--variant", choices=["plain", "pipeline"], default=None, help="(internal) run one here")
    ap.add_argument("--behaviour", default=None,
                    help="a preset of sam3tiles.testing.misbehaving ('wobble', 'all+wobble'): the model's answers")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="a 1500 px scene, in this process (checks the code)")
    args = ap.parse_args(argv)
    if smoke(args.smoke):
        args.size, args.encode, args.decode = 1500, 0.01, 0.001
    path = str(cached_scene(args.size, args.size, cell=args.cell))
    if args.variant == "plain":
        emit(plain_loop(path, args.encode, args.decode, args.text, args.behaviour), args.json)
        return 0
    if args.variant == "pipeline":
        emit(pipeline(path, args.encode, args.decode, args.text, args.workers, args.behaviour), args.json)
        return 0
    given = ["--size", args.size, "--cell", args.cell, "--encode", args.encode, "--decode", args.decode,
             "--text", args.text, *(["--behaviour", args.behaviour] if args.behaviour else [])]
    plain = run_child("bench_throughput", *given, "--variant", "plain")
    pipe = run_child("bench_throughput", *given, "--variant", "pipeline",
                     *(["--workers", args.workers] if args.workers else []))
    ideal = 1.0 / (args.encode + args.decode)
    assert plain["objects"] == pipe["objects"], (plain, pipe)
    emit({"ideal_tiles_per_s": ideal, "plain": plain, "pipeline": pipe,
          "pipeline_vs_ideal": pipe["tiles_per_s"] / ideal,
          "pipeline_vs_plain": pipe["tiles_per_s"] / plain["tiles_per_s"]}, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
