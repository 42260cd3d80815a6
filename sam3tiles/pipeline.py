"""A run from its plan to its outputs: plan -> engine -> each input's tiles -> merge -> frames -> write.

`segment_job` checks everything first (`plan.plan_run`), then opens the engine (this process or a Dask
cluster) and runs each input (`runner.InputRun`: tiles in flight, checkpoints, the merge), builds the
output frames (`frames`) and writes them, with the run report. The public, typed entry point is
`sam3tiles.segment` (api.py); the CLI and job files call `segment_job`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Sequence

import geopandas as gpd

from .checkpoint import TileStore
from .engine import Engine, open_engine
from .errors import TilesFailedError
from .frames import combine, file_metadata, finish
from .merge import MergeStats
from .model.registry import runtime_stats
from .options import Options
from .plan import InputPlan, RunPlan, check_out, plan_run
from .prompts import GeoBox
from .report import RunReport
from .runner import InputResult, InputRun
from .writers import output_lock, write_vector
from .writers.labels import write_labels

log = logging.getLogger(__name__)


def segment_job(inputs, text: Sequence[str] | str = (), *, boxes: Sequence[GeoBox | str] = (),
                box_file: str | None = None, out: str | os.PathLike | None = None, overwrite: bool = False,
                options: Options | None = None, client=None, work_dir: str | os.PathLike | None = None,
                fresh: bool = False, checkpoint: bool = True, report_path: str | os.PathLike | None = None,
                labels: str | os.PathLike | None = None, **kwargs: Any) -> tuple[gpd.GeoDataFrame, RunReport]:
    """`segment` plus its RunReport. Keyword arguments not named here set `Options` fields (on a copy:
    the caller's `options` are not changed). `labels`: also write a uint32 instance label image (ids =
    the output's `id`) aligned with the (single) input."""
    t_start = time.perf_counter()
    plan = plan_run(inputs, text, boxes=boxes, box_file=box_file, out=out, overwrite=overwrite,
                    options=with_options(options, kwargs), labels=labels, work_dir=work_dir,
                    checkpoint=checkpoint, report_path=report_path)
    return execute(plan, client=client, fresh=fresh, t_start=t_start)


def with_options(options: Options | None, changes: dict) -> Options:
    """A copy of `options` (or the defaults) with `changes`; an unknown name is a TypeError, as for any
    unexpected keyword argument."""
    names = {f.name for f in dataclasses.fields(Options)}
    for k in changes:
        if k not in names:
            raise TypeError(f"segment() got an unexpected keyword argument {k!r}")
    return dataclasses.replace(options or Options(), **changes)


def execute(plan: RunPlan, *, client=None, fresh: bool = False, t_start: float | None = None
            ) -> tuple[gpd.GeoDataFrame, RunReport]:
    """Run a checked plan: every input's tiles, the merge, the outputs and the report."""
    t_start = time.perf_counter() if t_start is None else t_start
    opts = plan.options
    report = RunReport(inputs=plan.paths, output=str(plan.combined or plan.out) if plan.out else None,
                       backend=plan.spec.backend, model=plan.model_identity, parameters=plan.parameters())
    store = TileStore(plan.work_dir, fresh=fresh) if plan.work_dir is not None else None
    if store is not None:
        report.checkpoint["work_dir"] = str(plan.work_dir)
    bar = _progress_bar() if opts.progress else None
    try:
        with _locks(plan.outputs), open_engine(client=client, scheduler=opts.scheduler,
                                               workers=opts.workers) as engine:
            for p in plan.outputs:  # again under the lock: a run that finished meanwhile wrote it
                check_out(p, plan.overwrite, opts)
            _announce(engine, report, bar)
            results = [run_input(engine, plan, inp, report, store, bar) for inp in plan.inputs]
            gdf = write_outputs(plan, results, report)
            report.runtime_counters = _counters(engine)
    finally:
        if bar is not None:
            bar.close()
        if store is not None:
            report.checkpoint["stored"] = store.puts
            store.close()
    report.wall_seconds = time.perf_counter() - t_start
    if plan.report_path is not None:
        report.write_json(plan.report_path)
    gdf.attrs["sam3tiles_report"] = report.as_dict()
    if opts.strict and report.failed:
        raise TilesFailedError(f"{report.failed} tile(s) failed (see the report); rerun to retry them")
    _saturation_advice(report, opts)
    return gdf, report


def _saturation_advice(report: RunReport, opts: Options) -> None:
    """Tiles still saturated (not refined): one line of advice on stderr; --strict makes it exit 5."""
    if not report.saturated:
        return
    from .refine import advice

    if opts.squash:
        line = (f"{report.saturated} squashed image(s) hit SAM 3's 200-object cap, so objects are missing: run "
                "without --squash (tiles, zoomed in where dense)")
    else:
        line = advice(report.saturated, opts.refine, opts.refine_depth if opts.refine == "auto" else 0)
    if opts.strict:
        raise TilesFailedError(line + " (--strict: the output is written; exit 5)")
    log.warning(line)


def run_input(engine: Engine, plan: RunPlan, inp: InputPlan, report: RunReport, store: TileStore | None,
              progress_bar=None) -> InputResult:
    """Segment one input of `plan` through `engine`; returns its merged objects (not yet written)."""
    return InputRun(engine, plan, inp, report, store, progress_bar).run()


def write_outputs(plan: RunPlan, results: list[InputResult], report: RunReport) -> gpd.GeoDataFrame:
    """Write every output of the run; returns all objects in one frame.

    Per-input outputs are written together at the end: a run killed before then leaves none of them, so
    its rerun resumes instead of stopping at an output that already exists."""
    for res, inp in zip(results, plan.inputs):
        if inp.output is not None:
            with _timed(report, "write"):
                write_output(finish(res.gdf), inp.output, plan, [res], report)
    gdf = combine([r.gdf for r in results])
    merge_total = MergeStats()
    for r in results:
        merge_total.add(r.merge)
    report.objects = len(gdf)
    report.objects_by_prompt = ({str(k): int(v) for k, v in gdf["prompt"].value_counts().items()}
                                if len(gdf) else {})
    report.merge = merge_total.as_dict()
    if plan.combined is not None:
        with _timed(report, "write"):
            write_output(gdf, plan.combined, plan, results, report)
    if plan.labels is not None:
        inp = plan.inputs[0]
        with _timed(report, "write"):
            write_labels(gdf, plan.labels, inp.width, inp.height, inp.transform, inp.crs)
    return gdf


def write_output(gdf: gpd.GeoDataFrame, dest, plan: RunPlan, results: list[InputResult], report: RunReport) -> None:
    """One output file (by extension) and, unless --no-preview, its quicklook `OUT.preview.png`."""
    opts = plan.options
    frames = {os.path.basename(r.source): r.frame for r in results if r.frame is not None}
    labels = [p.label for p in plan.prompts]
    write_vector(gdf, dest, layer=opts.layer, metadata=file_metadata(report, gdf, frames), frames=frames,
                 geojson_crs=opts.geojson_crs, prompts=labels)
    if not opts.no_preview:
        from .quicklook import write_quicklook

        write_quicklook(preview_path(dest, opts.layer), gdf, results, labels, opts.bands)


def preview_path(out: str | os.PathLike, layer: str | None = None) -> Path:
    """`OUT.preview.png` (`OUT.LAYER.preview.png` for a --layer of a GeoPackage)."""
    return Path(f"{out}.{layer}.preview.png" if layer else f"{out}.preview.png")


class _timed:
    """Add the block's seconds to `report.seconds[stage]`."""

    def __init__(self, report: RunReport, stage: str):
        self.report, self.stage = report, stage

    def __enter__(self):
        self.t0 = time.perf_counter()

    def __exit__(self, *exc):
        self.report.seconds[self.stage] += time.perf_counter() - self.t0
        return False


def _progress_bar():
    from tqdm.auto import tqdm  # a widget in notebooks, a text bar in terminals

    return tqdm(total=0, unit="tile", desc="tiles", dynamic_ncols=True, delay=1.0)


def _announce(engine: Engine, report: RunReport, bar) -> None:
    report.dashboard = engine.dashboard_link
    if engine.dashboard_link:
        log.info("Dask dashboard: %s", engine.dashboard_link)
        if bar is not None:
            bar.write(f"Dask dashboard: {engine.dashboard_link}", file=sys.stderr)


def _counters(engine: Engine) -> dict:
    try:
        return engine.client.run(runtime_stats)
    except Exception:  # noqa: BLE001 - counters are informative only
        return {}


class _locks:
    """Hold the output lock of every path until the run ends."""

    def __init__(self, paths):
        self.stack = ExitStack()
        self.paths = paths

    def __enter__(self):
        for p in self.paths:
            self.stack.enter_context(output_lock(p))
        return self

    def __exit__(self, *exc):
        return self.stack.__exit__(*exc)
