"""sam3tiles on an HPC cluster: dask-jobqueue's SLURMCluster, one GPU per SLURM job.

    pip install dask-jobqueue
    python examples/cluster_slurm.py '/scratch/ortho/*.tif' --text building --out /scratch/out/ \\
        --jobs 4 --partition gpu --account myproject
    python examples/cluster_slurm.py x.tif --out x.gpkg --print-job-script   # look before submitting

Run it on a login node (or in a small CPU job): this process is the Dask client and scheduler and does
the merge's final pass; each SLURM job is one worker that asks SLURM for one GPU (`--gres=gpu:1` in the
job script) and tells Dask it has one (`--resources GPU=1`), so model tasks run only there, one at a time,
and the model is loaded once per job. Inputs and outputs must be on a file system every node sees.
"""

from __future__ import annotations

import argparse
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
        print(f"Error: {Path(__file__).name} needs {package}, which is not installed: pip install {package}",
              file=sys.stderr)
        raise SystemExit(2) from None


def make_cluster(args):
    SLURMCluster = needs("dask_jobqueue", "dask-jobqueue").SLURMCluster

    return SLURMCluster(
        queue=args.partition,
        account=args.account,
        cores=args.cores,  # CPU threads of the worker: reads and vectorizing beside the model
        processes=1,  # one worker process per job, so one model per GPU
        memory=args.memory,
        walltime=args.walltime,
        job_extra_directives=["--gres=gpu:1"] + ([f"--constraint={args.constraint}"] if args.constraint else []),
        worker_extra_args=["--resources", "GPU=1"],
        job_script_prologue=args.prologue,
        log_directory=args.log_directory,
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("inputs", nargs="+", help="rasters or globs (on a shared file system)")
    ap.add_argument("--text", "-t", action="append", default=[], help="what to find (repeatable)")
    ap.add_argument("--out", "-o", required=True, help="output file, or a folder for one output per input")
    ap.add_argument("--jobs", type=int, default=2, help="SLURM jobs = GPU workers")
    ap.add_argument("--partition", default=None, help="SLURM partition (queue) with GPUs")
    ap.add_argument("--account", default=None)
    ap.add_argument("--cores", type=int, default=8, help="CPU cores per job")
    ap.add_argument("--memory", default="32GB", help="memory per job")
    ap.add_argument("--walltime", default="02:00:00")
    ap.add_argument("--constraint", default=None, help="SLURM --constraint (a GPU model, e.g. a100)")
    ap.add_argument("--prologue", action="append", default=[],
                    help="shell line run before the worker starts, e.g. 'module load cuda' (repeatable)")
    ap.add_argument("--log-directory", default=None, help="folder for the jobs' logs")
    ap.add_argument("--model", default=None, help="folder of the SAM 3 ONNX files (on the shared file system)")
    ap.add_argument("--wait", type=float, default=3600, help="seconds to wait for the first job to start")
    ap.add_argument("--wait-all", type=float, default=300, help="then seconds to wait for all of them")
    ap.add_argument("--print-job-script", action="store_true", help="print the job script and exit")
    ap.add_argument("--overwrite", action="store_true")
    args = ap.parse_args(argv)

    cluster = make_cluster(args)
    if args.print_job_script:
        print(cluster.job_script())
        cluster.close()
        return 0

    from distributed import Client

    import sam3tiles

    with cluster, Client(cluster) as client:
        cluster.scale(jobs=args.jobs)
        print(f"dashboard: {client.dashboard_link}; waiting for the {args.jobs} GPU jobs to start")
        client.wait_for_workers(1, timeout=args.wait)
        try:  # start with the jobs SLURM has started by then; the others join the run when they start
            client.wait_for_workers(args.jobs, timeout=args.wait_all)
        except TimeoutError:
            running = len(client.scheduler_info(n_workers=-1)["workers"])
            print(f"{running} of {args.jobs} jobs running: starting with those")
        gdf = sam3tiles.segment(args.inputs, args.text or ["building"], out=args.out, overwrite=args.overwrite,
                                backend="onnx", model=args.model, device="cuda", client=client, progress=True)
        report = gdf.attrs["sam3tiles_report"]
        print(f"{len(gdf)} objects from {report['tiles']} tiles in {report['wall_seconds']:.1f} s "
              f"({report['tiles_per_second']:.2f} tiles/s) -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
