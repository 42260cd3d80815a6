"""`sam3tiles run JOB.yaml`: a whole run described by a job file, validated before any work."""

from __future__ import annotations

import os

import click

from ..errors import EXIT_FAILED_TILES
from .options import handle_errors, quiet_opt, verbose_opt

#: Rough desktop-GPU costs for the estimate (SAM 3 at 1008x1008): seconds per encode and per decode.
ENCODE_S, DECODE_S = 0.35, 0.07


@click.command(short_help="Run a job file (YAML).")
@click.argument("job_file", metavar="JOB.yaml")
@click.option("--dry-run", is_flag=True, help="Validate the job, print the plan and cost estimate, write nothing.")
@click.option("--fresh", is_flag=True, help="Ignore checkpoints and start over.")
@click.option("--strict", is_flag=True, default=None, help="Exit with an error when any tile failed (also "
                                                             "`run: {strict: true}` in the job).")
@verbose_opt
@quiet_opt
@click.pass_context
@handle_errors
def run(ctx, job_file, dry_run, fresh, strict, verbose, quiet):
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
    from ..jobs import load_job, run_job

    quiet = quiet + (ctx.obj or {}).get("quiet", 0)
    lj = load_job(job_file)
    if dry_run:
        from ..jobs import job_words

        with job_words(lj):
            lines = dry_run_lines(lj)
        for line in lines:
            click.echo(line)
        return
    gdf, report = run_job(lj, fresh=fresh, strict=strict or None, progress=not quiet)
    if not quiet:
        click.echo(report.summary(), err=True)
        click.echo(f"wrote {len(gdf)} objects to {lj.output}", err=True)
    if report.failed:
        ctx.exit(EXIT_FAILED_TILES)


def dry_run_lines(lj) -> list[str]:
    """Everything a run checks before its first tile, then the plan: inputs, tiles, prompts, model calls,
    estimated GPU time. Raises the run's own errors (same exit codes); writes nothing."""
    from ..model.registry import get_runtime
    from ..errors import PromptError
    from ..jobs import job_options
    from ..writers import check_output
    from ..pipeline import expand_inputs, resolve_outputs, tiles_of
    from ..prompts import GeoBox, build_prompts, raster_bounds, read_box_file
    from ..readers import open_source

    j = lj.job
    opts = job_options(lj)
    paths = expand_inputs(lj.inputs)
    per_input, combined = resolve_outputs(paths, lj.output)
    out_lines = []
    for p in [combined, *per_input]:
        if p is not None:
            check_output(p, j.output.overwrite)
            out_lines.append(f"  {p}" + ("  (exists: will be replaced)" if p.exists() else ""))
    if lj.labels is not None:
        from ..jobs import job_call

        job_call(lj)  # refuses output.labels where this build cannot write label images
        from ..writers.labels import check_labels

        if len(paths) > 1:
            from ..errors import UsageError

            raise UsageError(f"--labels writes the label image of one input, but {len(paths)} were given: "
                             "segment one image per job to get its labels")
        check_labels(lj.labels, j.output.overwrite)
        out_lines.append(f"  {lj.labels}  (label image)" + ("  (exists: will be replaced)"
                                                           if os.path.exists(lj.labels) else ""))
    spec = opts.runtime_spec()
    model_line = f"backend: {spec.backend}"
    if spec.backend == "onnx":
        from ..model.files import require_model

        model_line += f", model {require_model(opts.model)}, device {spec.device}"
    boxes = [GeoBox.parse(b) for b in j.prompts.boxes]
    lines = [f"job: {lj.source}" + (f"  ({j.description})" if j.description else ""), f"inputs: {len(paths)}"]
    total_tiles, crs0, bounds = 0, None, []
    for i, path in enumerate(paths):
        with open_source(path, bands=opts.bands) as src:
            if i == 0:
                crs0 = src.crs
            tiles, _ = tiles_of(src, opts)
            bounds.append(raster_bounds(src.transform, src.width, src.height))
            crs = src.crs.to_string() if src.crs else "no CRS (pixel coordinates)"
            stretch = "" if src.stretch is None else f", stretched {src.stretch.lo[0]:g}..{src.stretch.hi[0]:g}"
            lines.append(f"  {path}: {src.width} x {src.height} px, bands {','.join(map(str, src.bands))} "
                         f"{src.dtype}{stretch}, {crs}: {len(tiles)} tile(s)")
            total_tiles += len(tiles)
    n_given = len(boxes)
    if lj.box_file:
        boxes += read_box_file(lj.box_file, crs0)
    from ..pipeline import _check_boxes_inside

    _check_boxes_inside(boxes, n_given, bounds, crs0, lj.box_file)
    prompts = build_prompts(list(j.prompts.text), boxes)
    if spec.backend in ("reference", "simulated"):
        rt = get_runtime(spec)
        bad = [rt.prepare_prompt(p.model_text) for p in prompts]
        notes = [b.note or repr(b.text) for b in bad if not b.usable]
        if notes:
            raise PromptError("; ".join(notes))
    lines.append("prompts: " + ", ".join(repr(p.label) for p in prompts)
                 + (f" ({len(boxes)} example box(es))" if boxes else ""))
    lines.append(model_line)
    t = j.tiling
    lines.append(f"tiling: {'squash (one tile per input)' if t.squash else f'{t.tile_size} px tiles, overlap {t.overlap}'}"
                 + (f", gsd {t.gsd:g}" if t.gsd else f", scale {t.scale:g}" if not t.squash else ""))
    lines.append(refine_line(opts))
    lines.append("output:")
    lines.extend(out_lines)
    work = lj.work_dir or (str(combined or lj.output).rstrip("/") + ".sam3tiles-work")
    lines.append(f"checkpoints: {work}" + ("  (exists: a run resumes from it; --fresh starts over)"
                                          if os.path.isdir(work) else ""))
    decodes = total_tiles * len(prompts)
    gpu_min = (total_tiles * ENCODE_S + decodes * DECODE_S) / 60
    lines.append(f"tiles: {total_tiles} (all-nodata tiles are skipped at run time, checkpointed ones resumed)")
    lines.append(f"model calls: {total_tiles} encodes, {decodes} decodes (more when a tile holds more example "
                 f"boxes than a pass takes, or refinement adds sub-tiles)")
    lines.append(f"estimated GPU time: ~{gpu_min:.1f} min at ~{ENCODE_S} s per encode + {DECODE_S} s per decode "
                 "on a desktop GPU")
    lines.append("dry run: nothing was written")
    return lines


def refine_line(opts) -> str:
    """What refinement may add to a run (plan, dry run): it is decided per tile while the run goes."""
    if opts.squash or opts.refine == "off" or opts.refine_depth == 0:
        return "refinement: off (tiles that hit SAM 3's 200-object cap are reported, not re-run)"
    return (f"refinement: auto, depth {opts.refine_depth}: a tile where a prompt hits SAM 3's 200-object cap is "
            f"re-run as up to 4 sub-tiles at twice the zoom (that prompt only), so the run may add tiles: at most "
            f"4 per saturated tile per level (9 for an image of one tile)")
