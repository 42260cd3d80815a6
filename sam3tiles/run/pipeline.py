"""A run from its plan to its outputs: plan -> engine -> each input's tiles -> merge -> frames -> write.

`segment_job` checks everything first (`plan.plan_run`), then opens the engine (this process or a Dask
cluster) and runs each input (`runner.InputRun`: tiles in flight, checkpoints, the merge), whose
decided objects go to an `ObjectSpool` on disk as merge blocks finish (`writers.stream`), then writes the
outputs from the spool chunk by chunk, with the run report: driver memory does not grow with the objects.
The public, typed entry point is `sam3tiles.segment` (api.py); the CLI and job files call `segment_job`.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import time
from contextlib import ExitStack, contextmanager
from typing import Any, Sequence

import geopandas as gpd

from ..errors import TilesFailedError
from ..merge import MergeStats
from ..model.registry import runtime_stats
from ..options import Options
from ..prompts.prompt import GeoBox
from ..readers import gdal_env
from ..readers.remote import source_name
from ..wording import opt, spoken
from ..writers import output_lock, write_vector
from ..writers.atomic import Deferred, deferred_renames, disk_errors, remove_stale_temps
from ..writers.labels import write_labels
from ..writers.stream import ObjectSpool
from ..writers.vector import readers_note
from .executing.engine import Engine, open_engine
from .executing.frames import file_metadata
from .executing.quiet import run_filters
from .executing.runner import InputResult, InputRun
from .planning.maps import map_facts
from .planning.outputs import preview_path, side_files
from .planning.plan import InputPlan, RunPlan, plan_run
from .planning.preflight import check_out
from .planning.targets import Targets
from .recording.checkpoint import TileStore
from .recording.progress import progress_bar
from .recording.report import RunReport
from .recording.workfolder import clear_work_dir, record_outputs, replaceable

log = logging.getLogger(__name__)


def segment_job(inputs, text: Sequence[str] | str = (), *, boxes: Sequence[GeoBox | str] | GeoBox | str = (),
                box_file: str | None = None, example_images: Sequence[str] | str = (), points: Any = (),
                point_file: str | None = None, options: Options | None = None,
                client=None, fresh: bool = False, return_objects: bool = True,
                **kwargs: Any) -> tuple[gpd.GeoDataFrame | None, RunReport]:
    """`segment` plus its RunReport. The keywords `out`, `overwrite`, `labels`, `work_dir`, `checkpoint` and
    `report_path` say where it writes (`targets.Targets`; `labels`: also a uint32 instance label image, ids =
    the output's `id`, aligned with the (single) input); the other keywords set `Options` fields (on a copy:
    the caller's `options` are not changed).

    Objects go to disk as merge blocks finish (`writers.stream.ObjectSpool`), so memory does not grow
    with their number; `return_objects=False` returns (None, report) and never loads them all (huge jobs:
    read the output instead). With True (default) they are read back into one GeoDataFrame."""
    t_start = time.perf_counter()
    with run_filters():  # the inputs are opened while planning too
        targets, changes = Targets.split(kwargs)
        plan = plan_run(inputs, text, boxes=boxes, box_file=box_file, example_images=example_images, points=points,
                        point_file=point_file, targets=targets, options=with_options(options, changes))
        return execute(plan, client=client, fresh=fresh, t_start=t_start, return_objects=return_objects)


def with_options(options: Options | None, changes: dict) -> Options:
    """A copy of `options` (or the defaults) with `changes`; an unknown name is a TypeError, as for any
    unexpected keyword argument."""
    names = {f.name for f in dataclasses.fields(Options)}
    for k in changes:
        if k not in names:
            raise TypeError(f"segment() got an unexpected keyword argument {k!r}")
    return dataclasses.replace(options or Options(), **changes)


@gdal_env()
def _store(plan, fresh: bool, report: RunReport) -> TileStore | None:
    """The run's checkpoint store (None: none kept)."""
    if plan.work_dir is None:
        return None
    report.checkpoint["work_dir"] = str(plan.work_dir)
    return TileStore(plan.work_dir, fresh=fresh)


def execute(plan: RunPlan, *, client=None, fresh: bool = False, t_start: float | None = None,
            return_objects: bool = True) -> tuple[gpd.GeoDataFrame | None, RunReport]:
    """Run a checked plan: every input's tiles, the merge, the outputs and the report."""
    t_start = time.perf_counter() if t_start is None else t_start
    opts = plan.options
    report = RunReport(inputs=plan.paths, output=str(plan.combined or plan.out) if plan.out else None,
                       backend=plan.spec.backend, model=plan.model_identity, parameters=plan.parameters())
    report.files = written_files(plan)
    report.input_notes = list(plan.input_notes)
    if len(plan.paths) > 1 or any(i.member_ids for i in plan.inputs):  # the maps the files form (issues 38, 52)
        report.maps, report.map_notes = [map_facts(i) for i in plan.inputs], list(plan.map_notes)
    store = _store(plan, fresh, report)
    json_progress = opts.progress_format == "json"  # for programs driving the CLI: even with -q
    bar = progress_bar(opts.progress_format) if opts.progress or json_progress else None
    pending = Deferred()
    gdf = None
    spool = ObjectSpool(plan.work_dir)
    try:
        with run_filters(), _gc_frozen(), _locks(plan.outputs), open_engine(client=client, scheduler=opts.scheduler,
                                                             workers=opts.workers,
                                                             worker_timeout=opts.worker_timeout) as engine:
            for p in plan.outputs:  # again under the lock: a run that finished meanwhile wrote it
                check_out(p, plan.overwrite or replaceable(p, plan.work_dir), opts, plan.dataset)
            for _, p in side_files(plan.outputs, plan.labels, plan.report_path, opts):
                remove_stale_temps(p)  # temporary files a killed run left beside them
            if plan.work_dir is not None:
                remove_stale_temps(plan.work_dir / "outputs.json")
            _announce(engine, report, bar)
            results = [run_input(engine, plan, inp, report, store, bar, spool) for inp in plan.inputs]
            _points_report(plan, report)
            # every output is written under a temporary name; the report is written, then they are all
            # renamed into place: a run stopped before then leaves no output without its report, and its
            # rerun is not stopped by "output exists"
            with deferred_renames(pending):
                write_outputs(plan, results, report, spool)
            if not opts.no_preview:  # again before the outputs appear: the previews read the inputs too (without
                for inp in plan.inputs:  # them, nothing read the inputs since `run_input`'s own check)
                    check_unchanged(inp)
            report.runtime_counters = _counters(engine)
            _publish(plan, report, store, pending, t_start)
            if return_objects:
                gdf = spool.read(range(len(plan.inputs)))
                gdf.attrs["sam3tiles_report"] = report.as_dict()
    finally:
        spool.close()
        pending.discard()
        if bar is not None:
            bar.close()
        if store is not None:
            report.checkpoint["stored"] = store.puts
            store.close()
    if report.checkpoint.get("clean") and plan.work_dir is not None:
        _clean(plan, report)
        if gdf is not None:
            gdf.attrs["sam3tiles_report"] = report.as_dict()
    if opts.strict and report.failed:
        raise TilesFailedError(f"{report.failed} tile(s) failed (see the report); rerun to retry them")
    _saturation_advice(report, opts)
    return gdf, report


def _clean(plan: RunPlan, report: RunReport) -> None:
    """--clean: delete the files sam3tiles wrote in the work folder, then the folder if it is empty. A folder
    gone is listed as removed (`files.removed`), not as written; the JSON report, written before, is
    written again to say so."""
    clear_work_dir(plan.work_dir)  # only the files sam3tiles writes there, then the folder if it is empty
    removed = not plan.work_dir.exists()
    report.checkpoint["removed"] = removed
    if removed:
        report.files["work_dir"] = None
        report.files["removed"] = [str(plan.work_dir)]
    if plan.report_path is not None and plan.report_path.exists():
        with disk_errors(plan.report_path.parent, "the report"):
            report.write_json(plan.report_path)


def written_files(plan: RunPlan) -> dict:
    """Every path the run writes, for the report (`RunReport.files`): the vector outputs, the label image,
    the previews, the report, the work folder; `removed`: what the run deleted (--clean: the work folder)."""
    opts = plan.options
    return {"objects": [str(p) for p in plan.outputs], "labels": str(plan.labels) if plan.labels else None,
            "previews": [] if opts.no_preview else [str(preview_path(p, opts.layer)) for p in plan.outputs],
            "report": str(plan.report_path) if plan.report_path else None,
            "work_dir": str(plan.work_dir) if plan.work_dir else None, "removed": []}


def _publish(plan: RunPlan, report: RunReport, store: TileStore | None, pending: Deferred, t_start: float) -> None:
    """Write the report, record the outputs in the work folder, then rename the outputs into place."""
    if store is not None:
        report.checkpoint["stored"] = store.puts
        # --clean: the work folder goes after a run that needs no rerun (no failed tile; under --strict, none
        # saturated either); said in the report before it is written
        opts = plan.options
        report.checkpoint["clean"] = opts.clean and not report.failed and not (opts.strict and report.saturated)
    report.wall_seconds = time.perf_counter() - t_start
    wd = plan.work_dir if store is not None else None
    first = Deferred()  # the report: recorded as this run's before it appears (a rerun may replace it)
    try:
        if plan.report_path is not None:
            with disk_errors(plan.report_path.parent, "the report"), deferred_renames(first):
                report.write_json(plan.report_path)
        record_outputs(wd, first.files + pending.files, report.failed, "pending")
        first.commit()
    finally:
        first.discard()
    pending.commit()
    done = [*plan.outputs, *(p for _, p in side_files(plan.outputs, plan.labels, plan.report_path, plan.options))]
    record_outputs(wd, [(p, p) for p in done if p.exists()], report.failed, "done")


def _saturation_advice(report: RunReport, opts: Options) -> None:
    """Tiles still saturated (not refined): one line of advice on stderr; --strict makes it exit 5."""
    if not report.saturated:
        return
    from ..tiling.refine import advice

    if opts.squash:
        line = (f"{report.saturated} squashed image(s) hit SAM 3's 200-object cap, so objects are missing: run "
                f"without {opt('squash')} (tiles, zoomed in where dense)")
    else:
        line = advice(report.saturated, opts.refine, opts.refine_depth if opts.refine == "auto" else 0)
    if opts.strict:
        raise TilesFailedError(line + f" ({opt('strict')}: the output is written; exit 5)")
    log.warning(spoken(line))


def run_input(engine: Engine, plan: RunPlan, inp: InputPlan, report: RunReport, store: TileStore | None,
              progress_bar=None, spool: ObjectSpool | None = None) -> InputResult:
    """Segment one input of `plan` through `engine`; its merged objects go to `spool` block by block as
    the merge decides them (not yet written to any output)."""
    if plan.points is not None:  # point prompts: one object a point (`run.executing.points`), no merge
        from .executing.points import PointRun

        result = PointRun(engine, plan, inp, plan.inputs.index(inp), report, spool if spool is not None
                          else ObjectSpool(), store).run()
    else:
        result = InputRun(engine, plan, inp, report, store, progress_bar, spool).run()
    check_unchanged(inp)
    return result


def _points_report(plan: RunPlan, report: RunReport) -> None:
    """The run's points as given (per input counts come from `run.executing.points`)."""
    if plan.points is None:
        return
    pts = plan.points
    report.points.update(given=len(pts.points), positive=pts.positives, negative=len(pts.points) - pts.positives,
                         outside=sum(o < 0 and p.positive for p, o in zip(pts.points, pts.owner)))
    if pts.renamed:
        report.points["renamed"] = dict(pts.renamed)
    if report.points["outside"]:
        log.warning(spoken(f"{report.points['outside']} positive point(s) of {opt('point_file')} lie outside every "
                           "input: they are in no output"))


def check_unchanged(inp: InputPlan) -> None:
    """An input whose files changed while the run read them (a server replaced the file: a new ETag) mixes
    two versions' objects: exit 3 naming it, the checkpoints kept (a rerun recomputes the new version)."""
    from ..readers.identity import changed_error, changed_files

    changed = changed_files(inp.files, inp.stamps) if inp.stamps else []
    if changed:
        raise changed_error(inp.path, changed[0], kept=True)


def write_outputs(plan: RunPlan, results: list[InputResult], report: RunReport, spool: ObjectSpool) -> None:
    """Write every output of the run from the spool, chunk by chunk.

    Per-input outputs are written together at the end: a run killed before then leaves none of them, so
    its rerun resumes instead of stopping at an output that already exists."""
    merge_total = MergeStats()
    for r in results:
        merge_total.add(r.merge)
    report.objects = spool.objects()  # not the rows of points where nothing was found
    report.objects_by_prompt = spool.counts_by_prompt()
    report.merge = merge_total.as_dict() if plan.points is None else {}  # points are not merged
    if plan.points is None:
        report.merge["crossed_seams"] = spool.count_multi_tile()  # what a user calls the merge's work
    for i, (res, inp) in enumerate(zip(results, plan.inputs)):
        if inp.output is not None:
            with _timed(report, "write"), disk_errors(inp.output.parent):
                write_output(spool, [i], inp.output, plan, [res], report)
        for dest, member, chunks in member_outputs(spool, i, inp):
            with _timed(report, "write"), disk_errors(dest.parent):
                write_output(spool, [i], dest, plan, [member], report, chunks=chunks)
    if plan.combined is not None:
        with _timed(report, "write"), disk_errors(plan.combined.parent):
            write_output(spool, range(len(results)), plan.combined, plan, results, report, dataset=plan.dataset)
    if plan.labels is not None:
        inp = plan.inputs[0]
        with _timed(report, "write"), disk_errors(plan.labels.parent, "the label image"):
            f = inp.frame  # the files' extent, not an anchored grid's margin
            write_labels(spool, plan.labels, f.width, f.height, f.transform, inp.crs, levels=inp.levels or None,
                         pixel_size_um=inp.pixel_size_um)


def member_outputs(spool: ObjectSpool, index: int, inp: InputPlan):
    """A mosaic's per-file outputs (--out FOLDER/): (output, the file's `InputResult`, its objects' chunks) for
    each file: every object goes to the file that owns its centroid by the overlap rule (`readers.mosaic`),
    with the map's ids."""
    from ..readers.mosaic import Ownership, layout_of
    from ..units import Frame

    if not inp.member_outputs:
        return
    lay = layout_of(inp.path)
    own = Ownership(lay)
    for k, dest in enumerate(inp.member_outputs):
        if dest is None:
            continue
        m = lay.members[k]
        frame = Frame(inp.crs, inp.transform @ inp.transform.translation(m.col, m.row), m.width, m.height)
        chunks = spool.frames_in(index, lay.map_boxes[k],
                                 lambda gdf, k=k: own.owners(gdf.geometry.centroid.values) == k)
        yield dest, InputResult(m.path, index, frame=frame), chunks


def write_output(spool: ObjectSpool, inputs, dest, plan: RunPlan, results: list[InputResult], report: RunReport,
                 dataset: bool = False, chunks=None) -> None:
    """One output (by extension; `dataset`: a partitioned GeoParquet folder) of the objects of `inputs`,
    read from the spool a chunk at a time (or `chunks`: those given), and unless --no-preview its quicklook
    `OUT.preview.png`."""
    opts = plan.options
    frames = {source_name(r.source): r.frame for r in results if r.frame is not None}
    labels = [p.label for p in plan.prompts]
    crs = spool.crs_of(inputs)
    meta = file_metadata(report, gpd.GeoDataFrame(geometry=gpd.GeoSeries([], crs=crs)), frames)
    with ExitStack() as stack:
        n = spool.count(inputs) if chunks is None else float("inf")  # given chunks: their PNG after the last
        chunks = spool.frames(inputs) if chunks is None else chunks
        if not opts.no_preview:  # drawn from the same chunks, on a thread, while the output is written
            from ..writers.quicklook import Beside

            preview = stack.enter_context(Beside(preview_path(dest, opts.layer), results, labels, opts.bands))
            chunks = preview.passing(chunks, n)
        write_vector(chunks, dest, layer=opts.layer, metadata=meta, frames=frames,
                     geojson_crs=opts.geojson_crs, prompts=labels, dataset=dataset,
                     qupath_type=opts.qupath_type)
        if not opts.no_preview:
            preview.write()
    note = readers_note(dest)
    if note is not None:
        report.output_notes.append(note)


@contextmanager
def _gc_frozen():
    """The objects alive when the run starts (the modules, the caller's data) moved out of the cyclic
    garbage collector's sight while it runs (`gc.freeze`), back when it ends (`gc.unfreeze`): a full
    collection walks every one of them, 0.09-0.12 s each time a run's allocations trigger one (measured
    on bench_throughput's 4000 and 8000 px scenes: one a run, 5-7% of a 25-tile run's wall time).
    Cycles among them wait for the next collection after the run. A process that froze objects itself
    keeps them frozen: nothing is done then."""
    import gc

    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


class _timed:
    """Add the block's seconds to `report.seconds[stage]`."""

    def __init__(self, report: RunReport, stage: str):
        self.report, self.stage = report, stage

    def __enter__(self):
        self.t0 = time.perf_counter()

    def __exit__(self, *exc):
        self.report.seconds[self.stage] += time.perf_counter() - self.t0
        return False


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
