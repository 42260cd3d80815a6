"""`sam3tiles run JOB.yaml`: a whole run described by a job file, validated before any work."""

from __future__ import annotations

import click

from ..errors import EXIT_FAILED_TILES
from ..wording import speaking
from .options import handle_errors, quiet_opt, registry_options, verbose_opt

@click.command(short_help="Run a job file (YAML).")
@click.argument("job_file", metavar="JOB.yaml")
@click.option("--dry-run", is_flag=True, help="Validate the job, print the plan and cost estimate, write nothing.")
@click.option("--fresh", is_flag=True, help="Ignore checkpoints and start over.")
@registry_options("run")
@verbose_opt
@quiet_opt
@click.pass_context
@handle_errors
def run(ctx, job_file, dry_run, fresh, verbose, quiet, strict=None):
    """Run the job described by JOB.yaml: inputs (paths, globs), prompts, backend and model, tiling, output,
    scheduler. The file is validated before any work; a rerun resumes from the tiles already checkpointed.

    \b
    Exit codes: 0 done, 1 internal error, 2 usage or job-file error, 3 input data error, 4 model error,
    5 finished with failed tiles. The job file format is described in docs/jobs.md.

    \b
    Examples:
      sam3tiles run configs/buildings.yaml --dry-run
      sam3tiles run configs/buildings.yaml
    """
    from ..jobs import load_job, run_job  # pydantic, yaml, dask: when the command runs

    quiet = quiet + (ctx.obj or {}).get("quiet", 0)
    lj = load_job(job_file)
    if dry_run:
        lines = dry_run_lines(lj)  # errors in job keys: plan_job words them
        for line in lines:
            click.echo(line)
        return
    _, report = run_job(lj, fresh=fresh, strict=strict or None, progress=not quiet, return_objects=False)
    if not quiet:
        with speaking("job"):  # the report's advice names job keys (output.clean), as the job sets them
            click.echo(report.summary(), err=True)
    if report.failed:
        ctx.exit(EXIT_FAILED_TILES)


def dry_run_lines(lj) -> list[str]:
    """Everything a run checks before its first tile (`jobs.plan_job`, as the run itself), then the plan:
    inputs, tiles, prompts, model calls, estimated GPU time. Raises the run's own errors (same exit
    codes); writes nothing."""
    from ..jobs import plan_job

    plan = plan_job(lj, check_prompts=True)
    return [f"job: {lj.source}" + (f"  ({lj.job.description})" if lj.job.description else ""), *plan.describe(),
            "dry run: nothing was written"]
