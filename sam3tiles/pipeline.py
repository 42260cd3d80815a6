"""The pipeline as the data flows: source -> tile grid -> encode -> prompt -> vectorize -> merge -> write.

`segment` is the public entry point (the CLI is a thin layer over it). Tiles go through a Dask graph
of per-tile tasks (see `tasks`), submitted with a bounded number in flight so memory stays flat
whatever the image size; finished tiles are checkpointed, then merged across seams and written.
"""

from __future__ import annotations

import glob
import logging
import os
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import geopandas as gpd
import numpy as np

from .model.registry import RuntimeSpec, spec_identity
from .checkpoint import TileStore, join_parts, prompt_part, tile_key
from .engine import Engine, _count, open_engine
from .errors import ModelError, PromptError, Sam3TilesError, TilesFailedError, UsageError, shippable
from .grid import DEFAULT_OVERLAP, TILE_SIZE, TileGrid, scale_for_gsd, squash_tile
from .merge import BlockMerger, MergeStats, tile_blocks, tile_frame
from .writers import NO_CRS_NOTE, check_output, output_lock, write_vector
from .prompts import GeoBox, Prompt, box_passes, boxes_outside, build_prompts, raster_bounds, read_box_file, tile_boxes
from .report import RunReport
from .readers import RasterSource, open_source, parse_bands
from .tasks import SourceSpec, TilePrompt, TileResult, infer_task, read_task, vectorize_task
from .vectorize import EDGE_MARGIN

log = logging.getLogger(__name__)

COLUMNS = ["id", "prompt", "score", "area", "area_px", "n_tiles", "source", "backend", "model"]


@dataclass
class Options:
    """Everything that shapes a run besides inputs and prompts."""

    backend: str = "onnx"
    model: str | None = None
    device: str = "auto"
    tile_size: int = TILE_SIZE
    overlap: int = DEFAULT_OVERLAP
    scale: float = 1.0
    gsd: float | None = None
    bands: tuple[int, ...] | None = None
    squash: bool = False
    min_area: float = 0.0
    simplify: float = 0.0
    edge_margin: int = EDGE_MARGIN
    workers: int | None = None
    scheduler: str | None = None
    retries: int = 2
    strict: bool = False
    progress: bool = False
    max_in_flight: int | None = None
    threads: int = 0  # onnxruntime intra-op threads (0: its default)
    encode_seconds: float = 0.1  # simulated backend only
    decode_seconds: float = 0.01
    merge_block: int = 8  # tiles per side of a merge block (blocks merge in parallel; 0: one merge)

    def runtime_spec(self) -> RuntimeSpec:
        return RuntimeSpec(backend=self.backend, model_dir=self.model, device=self.device,
                           intra_op_threads=self.threads, encode_seconds=self.encode_seconds,
                           decode_seconds=self.decode_seconds)


@dataclass
class InputResult:
    source: str
    gdf: gpd.GeoDataFrame
    merge: MergeStats = field(default_factory=MergeStats)


def expand_inputs(inputs: str | os.PathLike | Iterable[str | os.PathLike]) -> list[str]:
    """Paths and globs -> a sorted list of paths; a glob that matches nothing is an error."""
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    out: list[str] = []
    for item in inputs:
        s = str(item)
        if any(ch in s for ch in "*?["):
            hits = sorted(glob.glob(s, recursive=True))
            if not hits:
                raise UsageError(f"{s}: the pattern matches no file: check the path")
            out.extend(hits)
        else:
            out.append(s)
    if not out:
        raise UsageError("no input given: name one or more rasters")
    return list(dict.fromkeys(out))


def build_grid(src: RasterSource, opts: Options) -> TileGrid:
    scale = scale_for_gsd(src.transform, opts.gsd) if opts.gsd else opts.scale
    return TileGrid(src.width, src.height, scale=scale, tile_size=opts.tile_size, overlap=opts.overlap,
                    transform=src.transform)


def tiles_of(src: RasterSource, opts: Options):
    if opts.squash:
        return [squash_tile(src.width, src.height, src.transform, opts.tile_size)], opts.overlap
    grid = build_grid(src, opts)
    return list(grid), grid.overlap


def _prompts_for_tile(prompts: Sequence[Prompt], tile, slots: int) -> list[TilePrompt]:
    out = []
    for i, p in enumerate(prompts):
        boxes = tile_boxes(p.boxes, tile) if p.boxes else []
        if p.text is None and not any(b.positive for b in boxes):
            continue  # a box-only prompt finds nothing where it has no example
        passes = tuple(tuple(c) for c in box_passes(boxes, slots)) if boxes else ((),)
        out.append(TilePrompt(i, p.model_text, passes))
    return out


@shippable
def _model_info_task(spec: RuntimeSpec, texts: tuple[str, ...]) -> tuple[int, list[tuple[str, bool, str]]]:
    from .model.registry import get_runtime
    from .tasks import prepared_prompt

    rt = get_runtime(spec)
    checks = []
    for t in texts:
        p, seconds = prepared_prompt(spec, t)
        checks.append((t, p.usable, p.note, seconds))
    return int(rt.box_slots), checks


def model_info(engine: Engine, spec: RuntimeSpec, prompts: Sequence[Prompt]) -> tuple[int, float]:
    """Load the model on a model worker (where it stays), encode every prompt once there, and return the
    box slots per decoder pass. A prompt the backend can never find is an error before any tile runs."""
    texts = tuple(dict.fromkeys(p.model_text for p in prompts))
    fut = engine.client.submit(_model_info_task, spec, texts, pure=False, resources=engine.model_resources())
    try:
        slots, checks = fut.result()
    finally:
        fut.release()
    bad = [(t, note) for t, ok, note, _ in checks if not ok]
    if bad:
        raise PromptError("; ".join(note or f"{t!r} cannot be found by the {spec.backend} backend"
                                    for t, note in bad))
    return slots, sum(c[3] for c in checks)


def run_input(engine: Engine, path: str, prompts: Sequence[Prompt], opts: Options, report: RunReport,
              store: TileStore | None, progress_bar=None) -> InputResult:
    """Segment one raster through `engine`; returns its merged objects (not yet written)."""
    spec = opts.runtime_spec()
    with open_source(path, bands=opts.bands) as src:
        source = SourceSpec(src.path, src.bands, src.stretch)
        tiles, overlap = tiles_of(src, opts)
        crs = src.crs
        pixel_area = abs(src.transform.a * src.transform.e - src.transform.b * src.transform.d)
        identity = src.identity
        all_boxes = [b for p in prompts for b in p.boxes]
        report.boxes_outside += len(boxes_outside(all_boxes, raster_bounds(src.transform, src.width, src.height)))
    slots, prompt_seconds = model_info(engine, spec, prompts)
    report.seconds["prompt"] += prompt_seconds
    model_identity = report.model
    report.tiles += len(tiles)
    if progress_bar is not None:
        progress_bar.total = (progress_bar.total or 0) + len(tiles)
        # no refresh(): a bar drawn before its delay is not closed with a newline, so an error message
        # would follow it on the same line

    results: dict[int, TileResult] = {}  # bookkeeping only: each tile's pieces go straight to the merger
    frames = {t.index: tile_frame(t, overlap) for t in tiles}
    blocks = tile_blocks(tiles, opts.merge_block) if opts.merge_block > 0 else {t.index: 0 for t in tiles}
    merger = BlockMerger(frames, blocks, submit=_submit_on(engine, opts.retries))
    # checkpoints hold one result per (tile, prompt): a changed or added prompt recomputes only its own part
    keys: dict[int, list] = {}  # tile index -> [(prompt index or None, text, key)] still to compute and store
    found: dict[int, list] = {}  # tile index -> [(prompt index or None, stored part)] reused from the store
    queue: deque = deque()
    for tile in tiles:
        tps = _prompts_for_tile(prompts, tile, slots)
        base = {"source": identity, "tile": [tile.x0, tile.y0, tile.size, tile.valid_wh, tile.scale_xy,
                                             list(tile.src_transform)[:6], tile.interior],
                "model": model_identity, "edge_margin": opts.edge_margin, "stretch": str(source.stretch),
                "bands": source.bands}
        entries = [(tp.index, tp.text, tile_key({**base, "prompt": [tp.text, [[(b.cxcywh, b.positive) for b in ps]
                                                                             for ps in tp.passes]]}))
                   for tp in tps] or [(None, None, tile_key({**base, "prompt": None}))]
        hits = {e[2]: store.get(e[2]) for e in entries} if store is not None else {}
        found[tile.index] = [(i, hits[k]) for i, _, k in entries if hits.get(k) is not None]
        keys[tile.index] = [e for e in entries if hits.get(e[2]) is None]
        report.checkpoint["reused"] = report.checkpoint.get("reused", 0) + len(found[tile.index])
        if not keys[tile.index]:
            results[tile.index] = join_parts(tile.index, found[tile.index])
            merger.add(tile.index, results[tile.index].pieces)
            results[tile.index].pieces = None
            if not results[tile.index].skipped:
                report.resumed += 1
            if progress_bar is not None:
                progress_bar.update(1)
            continue
        if found[tile.index]:
            report.checkpoint["partial_tiles"] = report.checkpoint.get("partial_tiles", 0) + 1
        todo = {i for i, _, _ in keys[tile.index]}
        queue.append((tile, [tp for tp in tps if tp.index in todo]))

    _run_tiles(engine, source, spec, queue, opts, report, store, keys, results, progress_bar, found, merger)
    found.clear()
    for r in results.values():
        if r.saturated:
            report.saturated += 1
            report.saturated_tiles.append({"source": path, "tile": r.tile_index})
        for name in r.unusable_prompts:
            note = f"{name!r}: the {spec.backend} backend cannot find it"
            if note not in report.unusable_prompts:
                report.unusable_prompts.append(note)
        if r.skipped:
            report.skipped += 1
    if tiles and all(i in results and results[i].skipped for i in (t.index for t in tiles)):
        log.warning("%s: every pixel is nodata (masked, alpha 0 or NaN): nothing to segment", path)

    t0 = time.perf_counter()
    merged, mstats = merger.finish(gather=_gather_on(engine))
    report.seconds["merge"] += time.perf_counter() - t0

    labels = _labels(prompts, mstats)
    geoms = merged.geometry
    if opts.simplify > 0 and geoms:
        geoms = list(gpd.GeoSeries(geoms).simplify(opts.simplify, preserve_topology=True))
    gdf = gpd.GeoDataFrame({
        "prompt": [labels[i] for i in merged.prompt],
        "score": np.asarray(merged.score, dtype=np.float32),
        "n_tiles": np.asarray(merged.n_tiles, dtype=np.int32),
    }, geometry=gpd.GeoSeries(geoms, crs=crs.to_wkt() if crs else None), crs=crs.to_wkt() if crs else None)
    if crs is not None:
        gdf = gdf.set_crs(crs.to_wkt(), allow_override=True)
    gdf["area"] = gdf.geometry.area
    gdf["area_px"] = gdf["area"] / pixel_area
    if opts.min_area > 0:
        gdf = gdf[gdf["area"] >= opts.min_area]
    gdf["source"] = os.path.basename(path)
    gdf["backend"] = spec.backend
    gdf["model"] = model_identity
    gdf = gdf.reset_index(drop=True)
    return InputResult(path, gdf, mstats)


def _labels(prompts: Sequence[Prompt], mstats: MergeStats) -> list[str]:
    """The prompts' labels; the merge's per-prompt coverage figures keyed by them (not by index)."""
    labels = [p.label for p in prompts]
    mstats.coverage = {labels[int(k)]: c for k, c in mstats.coverage.items()}
    return labels


def _run_tiles(engine: Engine, source: SourceSpec, spec: RuntimeSpec, queue: deque, opts: Options,
               report: RunReport, store: TileStore | None, keys: dict, results: dict, progress_bar,
               found: dict, merger: BlockMerger) -> None:
    from distributed import as_completed

    client = engine.client
    limit = opts.max_in_flight or engine.in_flight()
    resources = engine.model_resources()
    ac = as_completed(loop=client.loop)
    in_flight: dict = {}

    def submit_next() -> None:
        tile, tps = queue.popleft()
        fr = client.submit(read_task, source, tile, pure=False, retries=opts.retries)
        fi = client.submit(infer_task, spec, fr, tps, tile.valid_wh, pure=False, retries=opts.retries,
                           resources=resources)
        fv = client.submit(vectorize_task, fi, tile, opts.edge_margin, pure=False, retries=opts.retries)
        in_flight[fv.key] = (tile, (fr, fi, fv))
        ac.add(fv)

    while queue and len(in_flight) < limit:
        submit_next()
    recount_at = time.monotonic() + 10.0
    try:
        for fut in ac:
            tile, chain = in_flight.pop(fut.key)
            if fut.status == "finished":
                res: TileResult = fut.result()
                results[tile.index] = res
                for k, v in res.seconds.items():
                    report.seconds[k] = report.seconds.get(k, 0.0) + v
                if not res.skipped:
                    report.done += 1
                if store is not None:
                    store.put_many([(k, prompt_part(res, i, text)) for i, text, k in keys[tile.index]])
                parts = found.get(tile.index)
                if parts:  # a tile computed for some prompts only: join the stored parts in prompt order
                    parts = parts + [(i, prompt_part(res, i, text)) for i, text, _ in keys[tile.index]]
                    res = join_parts(tile.index, sorted(parts, key=lambda e: -1 if e[0] is None else e[0]))
                    results[tile.index] = res
                merger.add(tile.index, res.pieces)
                res.pieces = None
            else:
                exc = fut.exception()
                if isinstance(exc, ModelError):
                    raise exc
                if opts.strict:
                    raise TilesFailedError(f"tile {tile.index} (row {tile.row}, col {tile.col}) of {source.path} failed "
                                           f"after {opts.retries} retries: {_short(exc)}. --strict stops the run "
                                           "there: the finished tiles are checkpointed, so a rerun retries the rest")
                report.failed += 1
                report.failed_tiles.append({"source": source.path, "tile": tile.index, "row": tile.row,
                                            "col": tile.col, "error": _short(exc)})
                log.warning("tile %d (row %d, col %d) of %s failed: %s", tile.index, tile.row, tile.col,
                            source.path, _short(exc))
            for f in chain:
                f.release()
            if progress_bar is not None:
                progress_bar.update(1)
            if queue:
                submit_next()
            if queue and engine.distributed and not opts.max_in_flight and time.monotonic() > recount_at:
                # workers that joined since the start (a SLURM job starting late) get tiles too
                limit = max(limit, engine.in_flight(*_count(client)))
                recount_at = time.monotonic() + 10.0
                while queue and len(in_flight) < limit:
                    submit_next()
    finally:
        for _, chain in in_flight.values():
            for f in chain:
                f.cancel()


def _call(fn, job):
    return fn(*job)


def _submit_on(engine: Engine, retries: int):
    """`submit` for `BlockMerger`: a block's merge is a task on the engine's workers (CPU, any worker),
    started as soon as the block's last tile is in; its pieces are scattered, not put in the graph."""

    def submit(fn, job):
        client = engine.client
        (data,) = client.scatter([job], hash=False)
        return client.submit(_call, fn, data, pure=False, retries=retries)

    return submit


def _gather_on(engine: Engine):
    def gather(futs):
        try:
            return engine.client.gather(futs)
        finally:
            for f in futs:
                f.release()

    return gather


def _short(exc: BaseException | None) -> str:
    if exc is None:
        return "unknown error"
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if not isinstance(exc, Sam3TilesError) else text


def resolve_outputs(inputs: list[str], out: str | os.PathLike | None) -> tuple[list[Path | None], Path | None]:
    """Per-input outputs (out is a folder) or one combined output (out is a file), or none (API use)."""
    if out is None:
        return [None] * len(inputs), None
    p = Path(out)
    if p.suffix:
        return [None] * len(inputs), p
    if not p.is_dir():
        raise UsageError(f"--out {p}: for several inputs give an existing folder (one .gpkg each) or a file "
                         "name ending in .gpkg/.parquet/.fgb/.geojson (one combined output)")
    return [p / (Path(i).stem + ".gpkg") for i in inputs], None


def segment_job(inputs, text: Sequence[str] = (), *, boxes: Sequence[GeoBox | str] = (),
                box_file: str | None = None, out: str | os.PathLike | None = None, overwrite: bool = False,
                options: Options | None = None, client=None, work_dir: str | os.PathLike | None = None,
                fresh: bool = False, checkpoint: bool = True, report_path: str | os.PathLike | None = None,
                labels: str | os.PathLike | None = None,
                **kwargs) -> tuple[gpd.GeoDataFrame, RunReport]:
    """`segment` plus its RunReport. Keyword arguments not named here set `Options` fields. `labels`: also
    write a uint32 instance label image (ids = the output's `id`) aligned with the (single) input."""
    opts = options or Options()
    for k, v in kwargs.items():
        if not hasattr(opts, k):
            raise TypeError(f"segment() got an unexpected keyword argument {k!r}")
        setattr(opts, k, v)
    if opts.bands is not None and not isinstance(opts.bands, tuple):
        opts.bands = parse_bands(opts.bands)
    t_start = time.perf_counter()
    paths = expand_inputs(inputs)
    per_input, combined = resolve_outputs(paths, out)
    for p in [combined, *per_input]:
        if p is not None:
            check_output(p, overwrite)
    if labels is not None:
        from .writers.labels import check_labels

        if len(paths) != 1:
            raise UsageError(f"--labels writes the label image of one input, but {len(paths)} were given: "
                             "segment one image per run to get its labels")
        check_labels(labels, overwrite)
    spec = opts.runtime_spec()
    if spec.backend == "onnx":
        from .model.files import require_model

        spec = RuntimeSpec(**{**spec.__dict__, "model_dir": str(require_model(opts.model))})
        opts.model = spec.model_dir
    geo_boxes = [GeoBox.parse(b) if isinstance(b, str) else b for b in boxes]
    # open every input once before any work: bad files fail fast with their own message
    crs0 = None
    bounds = []
    for i, path in enumerate(paths):
        with open_source(path, bands=opts.bands) as src:
            if i == 0:
                crs0 = src.crs
                label_grid = (src.width, src.height, src.transform, src.crs)
            bounds.append(raster_bounds(src.transform, src.width, src.height))
    n_given = len(geo_boxes)
    if box_file:
        geo_boxes += read_box_file(box_file, crs0)
    _check_boxes_inside(geo_boxes, n_given, bounds, crs0, box_file)
    prompts = build_prompts(list(text), geo_boxes)
    report = RunReport(inputs=paths, output=str(combined or out) if out else None, backend=spec.backend,
                       model=spec_identity(spec),
                       parameters={"scale": opts.scale, "gsd": opts.gsd, "tile_size": opts.tile_size,
                                   "overlap": opts.overlap, "squash": opts.squash, "bands": opts.bands,
                                   "min_area": opts.min_area, "simplify": opts.simplify,
                                   "prompts": [p.label for p in prompts], "boxes": len(geo_boxes)})
    if work_dir is None and checkpoint and out is not None:
        work_dir = Path(str(combined or out).rstrip("/") + ".sam3tiles-work")
    store = TileStore(work_dir, fresh=fresh) if (checkpoint and work_dir is not None) else None
    if store is not None:
        report.checkpoint["work_dir"] = str(work_dir)

    bar = None
    if opts.progress:
        from tqdm import tqdm

        bar = tqdm(total=0, unit="tile", desc="tiles", dynamic_ncols=True, delay=1.0)
    frames: list[gpd.GeoDataFrame] = []
    merge_total = MergeStats()
    locks = [p for p in [combined, *per_input] if p is not None]
    try:
        with _locks(locks), open_engine(client=client, scheduler=opts.scheduler, workers=opts.workers) as engine:
            for p in locks:  # again under the lock: a run that finished meanwhile wrote it
                check_output(p, overwrite)
            report.dashboard = engine.dashboard_link
            if engine.dashboard_link:
                log.info("Dask dashboard: %s", engine.dashboard_link)
                if bar is not None:
                    bar.write(f"Dask dashboard: {engine.dashboard_link}", file=sys.stderr)
            for path in paths:
                res = run_input(engine, path, prompts, opts, report, store, bar)
                merge_total.add(res.merge)
                frames.append(res.gdf)
            # per-input outputs are written together at the end: a run killed before then leaves none of
            # them, so its rerun resumes instead of stopping at an output that already exists
            for frame, dest in zip(frames, per_input):
                if dest is not None:
                    t0 = time.perf_counter()
                    write_vector(_finish(frame), dest, metadata=_meta(report, frame))
                    report.seconds["write"] += time.perf_counter() - t0
            report.runtime_counters = _counters(engine)
            gdf = _combine(frames)
            report.objects = len(gdf)
            report.objects_by_prompt = {str(k): int(v) for k, v in gdf["prompt"].value_counts().items()} if len(gdf) else {}
            report.merge = merge_total.as_dict()
            if combined is not None:
                t0 = time.perf_counter()
                write_vector(gdf, combined, metadata=_meta(report, gdf))
                report.seconds["write"] += time.perf_counter() - t0
            if labels is not None:
                from .writers.labels import write_labels

                t0 = time.perf_counter()
                write_labels(gdf, labels, *label_grid)
                report.seconds["write"] += time.perf_counter() - t0
    finally:
        if bar is not None:
            bar.close()
        if store is not None:
            report.checkpoint["stored"] = store.puts
            store.close()
    report.wall_seconds = time.perf_counter() - t_start
    if report_path is None and (combined or out) is not None:
        report_path = Path(str(combined or out).rstrip("/") + ".report.json")
    if report_path is not None:
        report.write_json(report_path)
    gdf.attrs["sam3tiles_report"] = report.as_dict()
    if opts.strict and report.failed:
        raise TilesFailedError(f"{report.failed} tile(s) failed (see the report); rerun to retry them")
    return gdf, report


def _check_boxes_inside(boxes: list[GeoBox], n_given: int, bounds: list, crs, box_file: str | None) -> None:
    """An example box that misses every input is an error (usually coordinates in another CRS)."""
    lost = [i for i, b in enumerate(boxes) if all(boxes_outside([b], bd) for bd in bounds)]
    if not lost:
        return
    where = (f"the raster's CRS ({crs.to_string()})" if crs is not None
             else "pixel coordinates (the raster has no CRS)")
    extent = "; ".join(",".join(f"{v:.10g}" for v in bd) for bd in bounds[:3]) + ("; ..." if len(bounds) > 3 else "")
    given = [i for i in lost if i < n_given]
    if given:
        b = boxes[given[0]]
        raise PromptError(f"--box {b.minx:g},{b.miny:g},{b.maxx:g},{b.maxy:g} lies outside every input (bounds "
                          f"{extent}): give MINX,MINY,MAXX,MAXY in {where}")
    if len(lost) < len(boxes) - n_given:
        return  # some of the file's boxes are used; the others are counted in the report
    from .errors import InputDataError

    raise InputDataError(f"--box-file {box_file}: all its {len(lost)} box(es) lie outside every input (bounds "
                         f"{extent}): draw the boxes over the raster")


def segment(inputs, text: Sequence[str] = (), **kwargs) -> gpd.GeoDataFrame:
    """Segment one or more rasters (paths or globs) with text prompts and/or example boxes.

    Returns a GeoDataFrame, one row per object, in the source CRS (no CRS for plain images: pixel
    coordinates, y down), with columns prompt, score, area, area_px, n_tiles, source, backend, model.
    Writes `out` (by extension: .gpkg, .parquet, .fgb, .geojson) when given. See `Options` for the rest;
    the run report is in `gdf.attrs["sam3tiles_report"]`.
    """
    gdf, _ = segment_job(inputs, text, **kwargs)
    return gdf


def _finish(gdf: gpd.GeoDataFrame) -> gpd.GeoDataFrame:
    gdf = gdf.copy()
    gdf.insert(0, "id", np.arange(1, len(gdf) + 1, dtype=np.int64))
    cols = [c for c in COLUMNS if c in gdf.columns] + [c for c in gdf.columns if c not in COLUMNS]
    return gdf[cols]


def _combine(frames: list[gpd.GeoDataFrame]) -> gpd.GeoDataFrame:
    if not frames:
        return gpd.GeoDataFrame(columns=COLUMNS + ["geometry"], geometry="geometry")
    crs = frames[0].crs
    if any(f.crs != crs for f in frames[1:]):
        raise UsageError("the inputs are in different CRSs, so they cannot share one output: give --out a "
                         "folder (one output per input)")
    import pandas as pd

    gdf = gpd.GeoDataFrame(pd.concat(frames, ignore_index=True), geometry="geometry", crs=crs)
    return _finish(gdf)


def _meta(report: RunReport, gdf: gpd.GeoDataFrame) -> dict:
    meta = {"version": report.version, "backend": report.backend, "model": report.model,
            "parameters": report.parameters}
    if gdf.crs is None:
        meta["crs"] = NO_CRS_NOTE
    return meta


def _counters(engine: Engine) -> dict:
    from .model.registry import runtime_stats

    try:
        per_worker = engine.client.run(runtime_stats)
    except Exception:  # noqa: BLE001 - counters are informative only
        return {}
    return per_worker


class _locks:
    def __init__(self, paths):
        from contextlib import ExitStack

        self.stack = ExitStack()
        self.paths = paths

    def __enter__(self):
        for p in self.paths:
            self.stack.enter_context(output_lock(p))
        return self

    def __exit__(self, *exc):
        return self.stack.__exit__(*exc)
