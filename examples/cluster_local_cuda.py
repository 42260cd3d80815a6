"""sam3tiles on every GPU of one machine: dask-cuda's LocalCUDACluster, one worker process per GPU.

    pip install dask-cuda
    python examples/cluster_local_cuda.py ortho.tif --text building --out buildings.gpkg

Each worker owns one GPU (LocalCUDACluster sets its CUDA_VISIBLE_DEVICES) and advertises the resource
GPU=1, so sam3tiles runs one model task at a time per GPU and loads the model once per worker; its
other threads read and vectorize tiles beside the model. `--cpu-dry-run` runs the same code on a plain
LocalCluster with the reference backend (no GPU, no dask-cuda), to try the setup anywhere.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path


def needs(module: str, package: str):
    """Import `module`, or end with one line naming the package to install (exit 2: the setup, not a fault)."""
    import importlib

    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name != module:  # the package is there but broken: its own error says more
            raise
        print(f"Error: {Path(__file__).name} needs {package}, which is not installed: pip install {package} "
              "(or try the setup with --cpu-dry-run)", file=sys.stderr)
        raise SystemExit(2) from None


def make_cluster(gpus: str | None, threads: int, cpu_dry_run: bool):
    if cpu_dry_run:
        from distributed import LocalCluster

        return LocalCluster(n_workers=2, threads_per_worker=threads, processes=True, resources={"GPU": 1},
                            dashboard_address=":0", silence_logs=logging.ERROR)
    LocalCUDACluster = needs("dask_cuda", "dask-cuda").LocalCUDACluster
    # resources= is passed to every worker: each has one GPU and says so
    return LocalCUDACluster(CUDA_VISIBLE_DEVICES=gpus, threads_per_worker=threads, resources={"GPU": 1})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("inputs", nargs="+", help="rasters or globs")
    ap.add_argument("--text", "-t", action="append", default=[], help="what to find (repeatable)")
    ap.add_argument("--out", "-o", required=True, help="output file, or a folder for one output per input")
    ap.add_argument("--gpus", default=None, help='GPUs to use, e.g. "0,1" (default: all)')
    ap.add_argument("--threads", type=int, default=4, help="threads per worker (reads and vectorizing)")
    ap.add_argument("--backend", default=None, help="sam3tiles backend (default: onnx; reference with "
                                                    "--cpu-dry-run)")
    ap.add_argument("--model", default=None, help="folder of the SAM 3 ONNX files")
    ap.add_argument("--cpu-dry-run", action="store_true", help="a CPU LocalCluster instead of the GPUs")
    ap.add_argument("--overwrite", action="store_true")
    args = ap.parse_args(argv)
    backend = args.backend or ("reference" if args.cpu_dry_run else "onnx")
    # a device is the onnx backend's (the reference backend refuses one: it would be ignored)
    device = ("cpu" if args.cpu_dry_run else "cuda") if backend == "onnx" else "auto"

    from distributed import Client

    import sam3tiles

    with make_cluster(args.gpus, args.threads, args.cpu_dry_run) as cluster, Client(cluster) as client:
        print(f"dashboard: {client.dashboard_link}")
        gdf = sam3tiles.segment(args.inputs, args.text or ["building"], out=args.out, overwrite=args.overwrite,
                                backend=backend, model=args.model,
                                device=device, client=client, progress=True)
        report = gdf.attrs["sam3tiles_report"]
        print(f"{len(gdf)} objects from {report['tiles']} tiles in {report['wall_seconds']:.1f} s "
              f"({report['tiles_per_second']:.2f} tiles/s) -> {args.out}")
        for worker, stats in report["runtime_counters"].items():
            print(f"  {worker}: {stats}")
    return 0


if __name__ == "__main__":  # LocalCUDACluster starts worker processes: keep this guard
    raise SystemExit(main())
