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
from typing import Any, Sequence

import geopandas as gpd

from .checkpoint import TileStore
from .engine import Engine, open_engine
from .errors import TilesFailedError
from .frames import file_metadata
from .merge import MergeStats
from .model.registry import runtime_stats
from .options import Options
from .plan import InputPlan, RunPlan, check_out, plan_run
from .prompts import GeoBox
from .report import RunReport
from .runner import InputResult, InputRun
from .writers import output_lock
from .writers.stream import ObjectSpool, write_streamed
from .writers.labels import write_labels

log = logging.getLogger(__name__)


def segment_job(inputs, text: Sequence[str] | str = (), *, boxes: Sequence[GeoBox | str] = (),
                box_file: str | None = None, out: str | os.PathLike | None = None, overwrite: bool = False,
                options: Options | None = None, client=None, work_dir: str | os.PathLike | None = None,
                fresh: bool = False, checkpoint: bool = True, report_path: str | os.PathLike | None = None,
                labels: str | os.PathLike | None = None, return_objects: bool = True,
                **kwargs: Any) -> tuple[gpd.GeoDataFrame | None, RunReport]:
    """`segment` plus its RunReport. Keyword arguments not named here set `Options` fields (on a copy:
    the caller's `options` are not changed). `labels`: also write a uint32 instance label image (ids =
    the output's `id`) aligned with the (single) input.

    Objects go to disk as merge blocks finish (`writers.stream.ObjectSpool`), so memory does not grow
    with their number; `return_objects=False` returns (None, report) and never loads them all (huge jobs:
    read the output instead). With True (default) they are read back into one GeoDataFrame."""
    t_start = time.perf_counter()
    plan = plan_run(inputs, text, boxes=boxes, box_file=box_file, out=out, overwrite=overwrite,
                    options=with_options(options, kwargs), labels=labels, work_dir=work_dir,
                    checkpoint=checkpoint, report_path=report_path)
    return execute(plan, client=client, fresh=fresh, t_start=t_start, return_objects=return_objects)


def with_options(options: Options | None, changes: dict) -> Options:
    """A copy of `options` (or the defaults) with `changes`; an unknown name is a TypeError, as for any
    unexpected keyword argument."""
    names = {f.name for f in dataclasses.fields(Options)}
    for k in changes:
        if k not in names:
            raise TypeError(f"segment() got an unexpected keyword argument {k!r}")
    return dataclasses.replace(options or Options(), **changes)


def execute(plan: RunPlan, *, client=None, fresh: bool = False, t_start: float | None = None,
            return_objects: bool = True) -> tuple[gpd.GeoDataFrame | None, RunReport]:
    """Run a checked plan: every input's tiles, the merge, the outputs and the report."""
    t_start = time.perf_counter() if t_start is None else t_start
    opts = plan.options
    report = RunReport(inputs=plan.paths, output=str(plan.combined or plan.out) if plan.out else None,
                       backend=plan.spec.backend, model=plan.model_identity, parameters=plan.parameters())
    store = TileStore(plan.work_dir, fresh=fresh) if plan.work_dir is not None else None
    if store is not None:
        report.checkpoint["work_dir"] = str(plan.work_dir)
    bar = _progress_bar() if opts.progress else None
    gdf = None
    spool = ObjectSpool(plan.work_dir, simplify=opts.simplify, min_area=opts.min_area)
    try:
        with _locks(plan.outputs), open_engine(client=client, scheduler=opts.scheduler,
                                               workers=opts.workers) as engine:
            for p in plan.outputs:  # again under the lock: a run that finished meanwhile wrote it
                check_out(p, plan.overwrite, plan.dataset)
            _announce(engine, report, bar)
            results = [run_input(engine, plan, inp, report, store, bar, spool) for inp in plan.inputs]
            write_outputs(plan, results, report, spool)
            if return_objects:
                gdf = spool.read(range(len(plan.inputs)))
            report.runtime_counters = _counters(engine)
    finally:
        spool.close()
        spool.close()
        if bar is not None:
            bar.close()
        if store is not None:
            report.checkpoint["stored"] = store.puts
            store.close()
    report.wall_seconds = time.perf_counter() - t_start
    if plan.report_path is not None:
        report.write_json(plan.report_path)
    if gdf is not None:
        gdf.attrs["sam3tiles_report"] = report.as_dict()
    if opts.strict and report.failed:
        raise TilesFailedError(f"{report.failed} tile(s) failed (see the report); rerun to retry them")
    return gdf, report


def run_input(engine: Engine, plan: RunPlan, inp: InputPlan, report: RunReport, store: TileStore | None,
              progress_bar=None, spool: ObjectSpool | None = None) -> InputResult:
    """Segment one input of `plan` through `engine`; its merged objects go to `spool` block by block as
    the merge decides them (not yet written to any output)."""
    return InputRun(engine, plan, inp, report, store, progress_bar, spool if spool is not None else ObjectSpool()).run()


def write_outputs(plan: RunPlan, results: list[InputResult], report: RunReport, spool: ObjectSpool) -> None:
    """Write every output of the run from the spool, chunk by chunk (`writers.stream`).

    Per-input outputs are written together at the end: a run killed before then leaves none of them, so
    its rerun resumes instead of stopping at an output that already exists."""
    merge_total = MergeStats()
    for r in results:
        merge_total.add(r.merge)
    report.objects = spool.count()
    report.objects_by_prompt = spool.counts_by_prompt()
    report.merge = merge_total.as_dict()
    for i, inp in enumerate(plan.inputs):
        if inp.output is not None:
            with _timed(report, "write"):
                write_streamed(spool.frames([i]), inp.output, metadata=_metadata(report, spool.crs_of([i])))
    everything = range(len(plan.inputs))
    if plan.combined is not None:
        with _timed(report, "write"):
            write_streamed(spool.frames(everything), plan.combined,
                           metadata=_metadata(report, spool.crs_of(everything)), dataset=plan.dataset)
    if plan.labels is not None:
        inp = plan.inputs[0]
        with _timed(report, "write"):
            write_labels(spool, plan.labels, inp.width, inp.height, inp.transform, inp.crs)


def _metadata(report: RunReport, crs) -> dict:
    """`frames.file_metadata` for an output of CRS `crs` (WKT or None)."""
    return file_metadata(report, gpd.GeoDataFrame(geometry=gpd.GeoSeries([], crs=crs)))


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
