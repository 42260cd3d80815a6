"""One input's run on an engine: its tiles in flight, their results, their checkpoint writes, the merge.

`InputRun` owns everything that lives while one input is segmented: the queue of tiles still to submit,
the tiles in flight (at most `max_in_flight`, so memory stays flat whatever the image size), each
tile's bookkeeping, the checkpoint parts it reused or must write, and the `BlockMerger` that takes a
tile's pieces as soon as it finishes. The tiles' work is the Dask graph of `tasks`: read -> infer ->
vectorize, one chain per tile.

Nothing is held per tile that waits or has finished: grid tiles are planned (their checkpoints looked
up) only as they are submitted, sub-tiles of refined tiles wait in a short queue in front of them,
checkpoint writes go in batches, and each merge block's decided objects go to the `ObjectSpool` (disk)
as soon as the block's merge is in. So driver memory is flat in the number of tiles and of objects.
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from concurrent.futures import CancelledError
from dataclasses import dataclass, field
from typing import Iterator, Mapping, Sequence

import numpy as np

from ...errors import ModelError, TilesFailedError
from ...merge import BlockMerger, GridBlocks, Merged, MergeStats, Packed
from ...model.registry import RuntimeSpec
from ...prompts.prompt import Prompt, TilePrompt, boxes_outside, prompts_for_tile
from ...readers.mosaic import Ownership, layout_of
from ...readers.remote import source_name
from ...tiling.frame import TileFrames
from ...tiling.grid import Tile
from ...tiling.refine import RefineHook, Refinement
from ...units import Frame
from ...wording import opt, spoken
from ...writers.stream import ObjectSpool, SpoolInput
from ...writers.thumbs import MAX_SIDE, Patch, Picture, panel_wh
from ..planning.anchor import on_lattice
from ..planning.area import InputArea
from ..planning.plan import InputPlan, RunPlan
from ..recording.checkpoint import (TileResult, TileStore, _BatchedPuts, fitted, join_parts, prompt_part, tile_key,
                                    tile_place)
from ..recording.report import RunReport
from .engine import MAX_CLUSTER_BATCH, Engine, _count, settled
from .frames import objects_frame
from .submit import (_gather_on, _results_on, _submit_on, batch_size, model_info, result_of, short_error,
                     submit_sealed)
from .tasks import SourceSpec, close_spares, open_spares, tile_batch_task

log = logging.getLogger(__name__)

#: Seconds between looks for workers that joined a distributed run since it started.
RECOUNT_SECONDS = 10.0
#: Merge blocks' decided objects go to the spool together once this many objects or blocks are held.
SPOOL_OBJECTS, SPOOL_BLOCKS = 4096, 64


@dataclass
class InputResult:
    source: str
    index: int  # the input's index in the ObjectSpool that holds its objects
    merge: MergeStats = field(default_factory=MergeStats)
    frame: Frame | None = None  # the input's frame (units, pixel grid)
    marks: list = field(default_factory=list)  # [("failed" | "saturated", source-pixel Window)] for the preview
    picture: object = None  # the preview's picture from the tiles (`thumbs.Picture.image`), when they covered it
    selection: object = None  # the tiles run and skipped (`tiling.selection.TileSelection`), None: all ran
    #: the frame's first pixel in the grid's pixels (marks, selection): `run.planning.anchor`'s margin
    origin: tuple = (0, 0)


@dataclass
class _TileWork:
    """A tile's checkpoint parts: reused ones, and the (prompt index, text, key) still to compute."""

    found: list = field(default_factory=list)
    todo: list = field(default_factory=list)


class InputRun:
    """Segment one planned input through `engine`; its merged objects go to `spool` block by block (not
    yet written to any output); `run()` returns the input's merge statistics and spool index.

    Counts go into `report` as tiles finish; finished tiles go to `store` (when checkpointing, in
    batches) and their pieces to the merger at once, so a killed run keeps its finished tiles."""

    def __init__(self, engine: Engine, plan: RunPlan, inp: InputPlan, report: RunReport,
                 store: TileStore | None, progress_bar=None, spool: ObjectSpool | None = None):
        self.engine, self.plan, self.inp = engine, plan, inp
        self.report, self.store, self.bar = report, store, progress_bar
        self.spool = spool if spool is not None else ObjectSpool()
        self.puts = _BatchedPuts(store)
        self.opts = plan.options
        self.spec: RuntimeSpec = plan.spec
        self.source = SourceSpec(inp.path, inp.bands, inp.stretch, inp.identity)
        self.tiles: Mapping[int, Tile] = {}  # the grid's tiles by index, made when asked (`tiling.frame.GridTiles`)
        self.work: dict[int, _TileWork] = {}  # tiles planned and not finished only
        self.queue: deque = deque()  # sub-tiles to submit next: (tile, [TilePrompt], pasted exemplars or None)
        self.planned: Iterator = iter(())  # the grid tiles to submit after them, planned lazily
        self.skipped = 0  # grid tiles that were all nodata
        self.exemplars: dict = {}  # --box-scope image: tile scale -> the example boxes' patches (InputExemplars)
        self.merger: BlockMerger | None = None
        self.hook: RefineHook | None = None  # refinement: sub-tiles of tiles that hit the object cap
        self.slots = 1
        self.picture: Picture | None = None  # the preview's picture, filled by the grid tiles as they finish
        lay = layout_of(inp.path)
        self.ownership = Ownership(lay) if lay is not None else None  # a mosaic's files, for `source`
        self.area: InputArea | None = None  # the tiles it skips (area of interest, tissue) and grows into
        self.unspooled: list = []  # merge blocks' decided objects not yet in the spool: (Packed, first)
        self.unspooled_n = 0

    def run(self) -> InputResult:
        all_boxes = [b for p in self.plan.prompts for b in p.boxes]
        self.report.boxes_outside += len(boxes_outside(all_boxes, self.inp.bounds))
        self.slots, prompt_seconds = model_info(self.engine, self.spec, self.plan.prompts)
        self.report.seconds["prompt"] += prompt_seconds
        grid = self.inp.grid
        # the grid's tiles and their frames made when asked (none held per tile: 10^6 tiles took 1.7 GB)
        frames = TileFrames(grid) if grid is not None else TileFrames(None, {0: next(self.inp.tiles())})
        self.tiles = frames.tiles
        self.report.tiles += len(self.tiles)
        self.area = InputArea(self.inp, self.opts, self.report, frames)  # tiles skipped (area, tissue), grown
        runs = len(self.tiles) if self.area.to_run is None else self.area.to_run
        if self.bar is not None:
            self.bar.total = (self.bar.total or 0) + runs
            # no refresh(): a bar drawn before its delay is not closed with a newline, so an error message
            # would follow it on the same line
        mb = self.opts.merge_block
        blocks = self.area.blocks(GridBlocks(grid.shape, mb) if grid is not None else {0: 0})  # by index
        index = self._begin_spool()
        if not self.opts.no_preview and (self.inp.output is not None or self.plan.combined is not None):
            f = self.inp.frame
            self.picture = Picture(f.width, f.height, panel_wh(f.width, f.height, MAX_SIDE), self.inp.margin)
        # decided objects go to the spool as each block's merge comes in: memory does not follow them
        self.merger = BlockMerger(frames, blocks, submit=_submit_on(self.engine, self.opts.retries),
                                  on_block=lambda objects, first: self._spool_block(index, objects, first),
                                  early=not self.engine.distributed, remote_final=True)
        for skipped in self.area.never():  # skipped for good (no tissue): no pieces, as an all-nodata tile
            self.merger.add(skipped, None)
        self.hook = RefineHook(self.inp.grid, self.opts.refine, self.opts.refine_depth, self.plan.prompts,
                               self.inp.path)
        self.left = runs  # grid tiles still to plan (a cluster's batches shrink as they run out)
        self.planned = self._plan_tiles()
        spares = not self.engine.distributed and bool(self.tiles)  # worker threads of this process
        if spares:
            open_spares(self.source, min(self.engine.threads, len(self.tiles)))
        try:
            self._run_queue()
        finally:
            if spares:
                close_spares(self.source)
        self.work.clear()
        self._report_exemplars(set(self.exemplars))  # grid tiles' and sub-tiles' zooms, counted as planned
        self.hook.stats.add_to(self.report.refine)
        if runs and self.skipped == runs:
            log.warning("%s: every pixel is nodata (masked, alpha 0 or NaN): nothing to segment", self.inp.path)
        t0 = time.perf_counter()
        _, mstats = self.merger.finish(gather=_gather_on(self.engine))
        self._spool(index)
        mstats.coverage = {self.plan.prompts[int(k)].label: c for k, c in mstats.coverage.items()}
        self.report.seconds["merge"] += time.perf_counter() - t0
        self.area.finish()
        return InputResult(self.inp.path, index, mstats, self.inp.frame, self._marks(),
                           self.picture.image() if self.picture is not None else None, self.area.selection,
                           self.inp.margin)

    def _plan_tiles(self) -> Iterator[tuple]:
        """The grid tiles to run, admitted one by one as they are submitted (`admit`)."""
        for index in self.area.to_plan(len(self.tiles)):
            self.left -= 1
            item = self.admit(self.tiles[index])
            if item is not None:
                yield item

    def _begin_spool(self) -> int:
        crs = self.inp.crs.to_wkt() if self.inp.crs else None
        return self.spool.begin_input(SpoolInput(source_name(self.inp.path), crs, self.inp.frame))

    def _spool_block(self, index: int, objects: Packed, first) -> None:
        """One merge block's decided objects, to the spool with the next blocks' (`_spool`): one table a few
        thousand objects, not one a block (each cost the driver ~25 ms whatever its objects)."""
        self.unspooled.append((objects, first))
        self.unspooled_n += len(first)
        if self.unspooled_n >= SPOOL_OBJECTS or len(self.unspooled) >= SPOOL_BLOCKS:
            self._spool(index)

    def _spool(self, index: int) -> None:
        """The merge blocks' decided objects held -> output rows (`frames.objects_frame`: areas in the
        output's units, --simplify, --min-score, --min-area, --max-area; each row on its own, so many blocks
        at once give the rows of each alone) -> the spool."""
        if not self.unspooled:
            return
        objects = Packed.concat([p for p, _ in self.unspooled])
        first = np.concatenate([np.asarray(f, dtype=np.int64) for _, f in self.unspooled])
        self.unspooled, self.unspooled_n = [], 0
        o = self.opts
        gdf = objects_frame(objects.unpack(Merged), [p.label for p in self.plan.prompts], frame=self.inp.frame,
                            source=source_name(self.inp.path), backend=self.spec.backend,
                            model=self.plan.model_identity, simplify=o.simplify, min_area=o.min_area,
                            max_area=o.max_area, min_score=o.min_score, order=first, area=self.area.filter)
        if self.ownership is not None and len(gdf):  # a mosaic: the files each object's pixels came from
            gdf["source"] = self.ownership.sources(on_lattice(gdf.geometry.values, self.inp.transform))
        self.spool.add(index, gdf)

    def _marks(self) -> list:
        """Failed and saturated tiles of this input as source-pixel windows, for the quicklook."""
        path, tiles = self.inp.path, self.tiles
        marks = [("failed", tiles[f["tile"]].src_window) for f in self.report.failed_tiles
                 if f.get("source") == path and f.get("tile") in tiles]
        return marks + [("saturated", tiles[f["tile"]].src_window) for f in self.report.saturated_tiles
                        if f.get("source") == path and f.get("tile") in tiles]

    def _report_exemplars(self, scales: set) -> None:
        for scale in scales & set(self.exemplars):
            _report_exemplars(self.report, self.exemplars[scale], self.inp.overlap, self.inp.path)
        if self.exemplars and any(v is not None for v in self.exemplars.values()):
            from ...prompts.exemplars import report_by_prompt

            report_by_prompt(self.report, self.inp, self.plan.prompts)

    # -- before: what each tile needs ------------------------------------------------------------------

    def admit(self, tile: Tile, only: set | None = None) -> tuple | None:
        """Look the tile's (tile, prompt) parts up in the checkpoints; return what is missing as an item to
        submit, or None when the checkpoints hold it all (the tile is delivered at once). `only`: the
        prompt indices the tile runs (a sub-tile: the refined ones). Grid tiles are admitted as they are
        submitted (`self.planned` is a generator), so nothing is held for tiles still waiting.

        Checkpoints hold one result per (tile, prompt): a changed or added prompt recomputes only its part."""
        ex = self._exemplars_at(tile)
        tx = ex.for_tile(tile) if ex is not None else None
        tps = prompts_for_tile(self.plan.prompts, tile, self.slots, tx.pasted if tx is not None else None)
        if only is not None:
            tps = [tp for tp in tps if tp.index in only]
        entries = self._entries(tile, tps, tx.key if tx is not None else None)
        hits = {k: self.store.get(k) for _, _, k in entries} if self.store is not None else {}
        margin = self.opts.edge_margin
        work = self.work[tile.index] = _TileWork(found=[(i, fitted(hits[k], tile, margin)) for i, _, k in entries
                                                        if hits.get(k) is not None],
                                                 todo=[e for e in entries if hits.get(e[2]) is None])
        self.report.checkpoint["reused"] = self.report.checkpoint.get("reused", 0) + len(work.found)
        if not work.todo:
            del self.work[tile.index]
            res = join_parts(tile.index, work.found)
            if not res.skipped:
                self.report.resumed += 1
            self._tick()
            self._deliver(tile, res, computed=False)
            return None
        if work.found:
            self.report.checkpoint["partial_tiles"] = self.report.checkpoint.get("partial_tiles", 0) + 1
        todo = {i for i, _, _ in work.todo}
        return (tile, [tp for tp in tps if tp.index in todo], tx.task if tx is not None else None)

    def _exemplars_at(self, tile: Tile):
        """The example boxes' patches at the tile's scale (read once per scale: sub-tiles zoom in), or None."""
        scale = tile.scale_xy
        if scale not in self.exemplars:
            self.exemplars[scale] = _exemplars_of(self.inp, self.plan.prompts, self.opts, scale)
        return self.exemplars[scale]

    def _entries(self, tile: Tile, tps: list[TilePrompt], pastes: list | None = None
                 ) -> list[tuple[int | None, str | None, str]]:
        """(prompt index, model text, checkpoint key) per prompt of the tile; one entry without a prompt
        for a tile no prompt applies to. `pastes`: the exemplars pasted into the tile (in every key)."""
        base = {"source": self.inp.identity_at(tile.src_window),  # a mosaic's: the files the tile reads
                "place": tile_place(tile),  # not its grid's offsets: a grown map's tiles keep their keys
                "model": self.plan.model_identity, "edge_margin": self.opts.edge_margin,
                "stretch": str(self.source.stretch), "bands": self.source.bands, **self.hook.key_part(tile)}
        if pastes is not None:  # the pasted exemplars are part of every prompt's input
            base["exemplars"] = pastes
        entries = [(tp.index, tp.text, tile_key({**base, "prompt": _prompt_key(tp)})) for tp in tps]
        return entries or [(None, None, tile_key({**base, "prompt": None}))]

    # -- during: tiles in flight -----------------------------------------------------------------------

    def _run_queue(self) -> None:
        """Submit tiles as earlier ones finish, at most `limit` in flight; failed tiles are counted (or stop
        the run with --strict); a model error stops it at once."""
        from distributed import as_completed  # heavy: loaded when a run starts, not on `import sam3tiles`

        client = self.engine.client
        self.limit = self.opts.max_in_flight or self.engine.in_flight()
        self.batch = batch_size(self.engine, self.limit)
        self.ac = as_completed(loop=client.loop)
        self.in_flight: dict = {}  # future key -> (its items, the futures to release with it)
        self.tiles_in_flight = 0
        self.more = True
        self.alone: deque = deque()  # the tiles of a batch that failed as a whole, to run one at a time
        self.alone_key = None  # the one such tile in flight
        self._fill()
        recount_at = time.monotonic() + RECOUNT_SECONDS
        try:
            for fut in self.ac:
                if not settled(fut):  # lost with its worker after it finished: computed again
                    self.ac.add(fut)
                    continue
                items, chain = self.in_flight.pop(fut.key)
                self.tiles_in_flight -= len(items)
                if fut.key == self.alone_key:
                    self.alone_key = None
                tiles = [t for t, _, _ in items]
                if fut.status == "finished":
                    self._outcomes(tiles, result_of(self.engine, fut))
                elif fut.status == "cancelled":  # the run's own stop (a lost worker): never a failed tile
                    raise CancelledError(f"tile {tiles[0].index} of {self.source.path} was cancelled")
                elif len(items) > 1:  # the batch as a whole failed (its worker died each try): tile by tile
                    self.alone.extend(items)
                else:
                    self._failed(tiles[0], fut.exception())
                    self._tick()
                for f in chain:
                    f.release()
                self._fill()  # the finished tiles' places, and their sub-tiles' when they were refined
                if (self.more or self.queue) and time.monotonic() > recount_at:
                    self._recount()
                    recount_at = time.monotonic() + RECOUNT_SECONDS
        finally:
            self.puts.flush()
            for _, chain in self.in_flight.values():
                for f in chain:
                    f.cancel()

    def _outcomes(self, tiles: list[Tile], result) -> None:
        """A finished batch task's tiles: its outcomes in order, each a TileResult or the exception its tile
        raised. The results are delivered before any failure is counted: a failure that stops the run
        (--strict, a model error) leaves them checkpointed."""
        outs = result if isinstance(result, list) else [result]
        for tile, out in zip(tiles, outs):
            if not isinstance(out, BaseException):
                self._finished(tile, out)
                self._tick()
        for tile, out in zip(tiles, outs):
            if isinstance(out, BaseException):
                self._failed(tile, out)
                self._tick()

    def _fill(self) -> None:
        """Submit batches while there is room: in process `limit` tiles in flight; on a cluster two batch
        tasks for each one the model workers run at once (`Engine.task_slots`), each of `_batch_size()`.
        The tiles of a batch that failed as a whole go alone, one at a time: a worker that dies then
        names its tile (Dask blames every task it was running for the death)."""
        if self.alone and self.alone_key is None:
            self.alone_key = self._submit([self.alone.popleft()])
        while self._room():
            size = self._batch_size()
            batch: list = []
            while len(batch) < size:
                item = self.queue.popleft() if self.queue else next(self.planned, None)
                if item is None:  # planning delivers resumed tiles, whose sub-tiles may join the queue
                    if not self.queue:
                        self.more = False  # no grid tile left to plan (sub-tiles may still come)
                        break
                    continue
                batch.append(item)
            if not batch:
                return
            self._submit(batch)

    def _room(self) -> bool:
        if self.tiles_in_flight >= self.limit or not (self.more or self.queue):
            return False
        return not self.engine.distributed or len(self.in_flight) < 2 * self.engine.task_slots()

    def _batch_size(self) -> int:
        """Tiles for the next task. In process `batch` (at most the room left). On a cluster a task carries
        as many tiles as keep the driver's and the scheduler's work per tile small (`MAX_CLUSTER_BATCH`),
        and fewer as the tiles left run out, so the last tasks end together (four tasks per slot left)."""
        room = self.limit - self.tiles_in_flight
        if not self.engine.distributed:
            return max(1, min(self.batch, room))
        if self.opts.tiles_per_task:
            return max(1, min(self.opts.tiles_per_task, room))
        left = self.left + len(self.queue)
        return max(1, min(MAX_CLUSTER_BATCH, room, left // (4 * self.engine.task_slots())))

    def _submit(self, items: list) -> str:
        """Submit tiles [(tile, prompts, pasted exemplars or None)] as ONE task (`tasks.tile_batch_task`:
        read, encode, decode and vectorize each in turn; the embedding never leaves it). On a cluster it
        runs on a model worker, which runs `Engine.pipelines()` such tasks at once."""
        client, retries = self.engine.client, self.opts.retries
        # grid tiles bring the preview their patch of it, cut on the worker (sub-tiles lie inside them)
        sampling = self.picture.sampling if self.picture is not None else 0
        work = [(t, tps, pastes, sampling if t.index in self.tiles else 0) for t, tps, pastes in items]
        self.tiles_in_flight += len(items)
        args = (self.source, self.spec, work, self.opts.edge_margin, retries)
        if self.engine.distributed:  # pickled once here: the scheduler passes bytes on (`submit_sealed`)
            ft = submit_sealed(client, tile_batch_task, args, resources=self.engine.batch_resources())
        else:
            ft = client.submit(tile_batch_task, *args, pure=False)
        self.in_flight[ft.key] = (items, (ft,))
        self.ac.add(ft)
        return ft.key

    def _recount(self) -> None:
        """Workers that joined since the start (a SLURM job starting late) get tiles too."""
        if self.engine.distributed and not self.opts.max_in_flight:
            threads, gpus, gpu_threads = _count(self.engine.client)
            self.engine.threads, self.engine.gpu_workers = threads, gpus
            self.engine.gpu_threads = min(self.engine.gpu_threads, gpu_threads)
            self.limit = max(self.limit, self.engine.in_flight())
            self._fill()

    def _finished(self, tile: Tile, res: TileResult) -> None:
        thumb, res.thumb = res.thumb, None  # the preview's copy of the tile: placed, never stored
        if isinstance(thumb, Patch):
            self.picture.paste(thumb)
        elif self.picture is not None and tile.index in self.tiles and (thumb is not None or res.skipped):
            self.picture.add(tile, thumb, self.picture.step(tile))
        for k, v in res.seconds.items():
            self.report.seconds[k] = self.report.seconds.get(k, 0.0) + v
        if not res.skipped:
            self.report.done += 1
        work = self.work.pop(tile.index)
        if self.store is not None:
            self.puts.add([(k, prompt_part(res, i, text)) for i, text, k in work.todo])
        if work.found:  # a tile computed for some prompts only: join the stored parts in prompt order
            parts = work.found + [(i, prompt_part(res, i, text)) for i, text, _ in work.todo]
            res = join_parts(tile.index, sorted(parts, key=lambda e: -1 if e[0] is None else e[0]))
        self._deliver(tile, res, computed=True)

    def _failed(self, tile: Tile, exc: BaseException | None) -> None:
        self.work.pop(tile.index, None)
        if isinstance(exc, (ModelError, MemoryError)):  # out of memory: not this tile's fault, stop the run
            raise exc
        path, retries = self.source.path, self.opts.retries
        if self.opts.strict:
            raise TilesFailedError(f"tile {tile.index} (row {tile.row}, col {tile.col}) of {path} failed "
                                   f"after {retries} retries: {short_error(exc)}. {opt('strict')} stops the run "
                                   "there: the finished tiles are checkpointed, so a rerun retries the rest")
        self.report.failed += 1
        self.report.failed_tiles.append({"source": path, "tile": tile.index, "row": tile.row, "col": tile.col,
                                         "error": short_error(exc)})
        log.warning("tile %d (row %d, col %d) of %s failed: %s", tile.index, tile.row, tile.col, path,
                    short_error(exc))

    def _deliver(self, tile: Tile, res: TileResult, computed: bool) -> None:
        """A finished tile (computed, or whole from the checkpoints): when it saturated, its sub-tiles are
        admitted at the front of the queue (in index order); then its pieces go to the merger."""
        if self.inp.anchored and res.pieces is not None and len(res.pieces):
            # (on the lattice: a tile reused from a run on a map of another origin gives a fresh run's outlines)
            res.pieces.geometry = list(on_lattice(res.pieces.geometry, self.inp.transform))
        # a tile's frame only where it is refined: framing every tile here cost the driver ~0.5 ms a tile
        frame = self.merger.frames[tile.index] if res.saturated_prompts else None
        refinement = self.hook.arrived(tile, res, computed, frame)
        if refinement.sub_tiles:
            self._refine(tile, refinement)
        for index in self.area.arrived(tile, res.pieces):  # an object of the area crosses into skipped tiles
            self._grow(self.tiles[index])
        self.merger.add(tile.index, res.pieces)
        res.pieces = None
        self.merger.drain(_results_on(self.engine))  # merged blocks' objects to the spool, as they come
        # the tile's flags into the report: no result is kept
        self._account(tile, res, tile.index in self.tiles, refinement.saturated)

    def _refine(self, tile: Tile, r: Refinement) -> None:
        """A refined tile's sub-tiles join its merge block (all registered before any is admitted: a
        resumed one is delivered at once) and go to the front of the queue, in index order."""
        block = self.merger.blocks[tile.index]
        self.merger.expect(tile.index, r.frame, block)
        for sub, frame in zip(r.sub_tiles, r.sub_frames):
            self.merger.expect(sub.index, frame, block)
        self.report.tiles += len(r.sub_tiles)
        if self.bar is not None:
            self.bar.total = (self.bar.total or 0) + len(r.sub_tiles)
        for sub in reversed(r.sub_tiles):
            item = self.admit(sub, set(r.prompts))
            if item is not None:
                self.queue.appendleft(item)

    def _grow(self, tile: Tile) -> None:
        """A skipped tile the area grew into (`run.planning.area.InputArea.arrived`): to the front of the queue."""
        if self.bar is not None:
            self.bar.total = (self.bar.total or 0) + 1
        item = self.admit(tile)
        if item is not None:
            self.queue.appendleft(item)

    def _tick(self) -> None:
        if self.bar is not None:
            self.bar.update(1)

    # -- after: the report -----------------------------------------------------------------------------

    def _account(self, tile: Tile, r: TileResult, grid_tile: bool, saturated: bool) -> None:
        """A delivered tile's flags into the report; `saturated`: it hit the object cap and was not refined."""
        report = self.report
        if saturated:
            report.saturated += 1
            report.saturated_tiles.append({"source": self.inp.path, "tile": tile.index,
                                           "depth": self.hook.depth_of(tile.index)})
        for name in r.unusable_prompts:
            note = f"{name!r}: the {self.spec.backend} backend cannot find it"
            if note not in report.unusable_prompts:
                report.unusable_prompts.append(note)
        if r.skipped:
            report.skipped += 1
            self.skipped += grid_tile
            self.area.nodata()
        for k, v in r.exemplars.items():
            report.exemplars[k] = report.exemplars.get(k, 0) + v
        for k, v in r.passes.items():
            report.decoder_passes[k] = report.decoder_passes.get(k, 0) + v


def _prompt_key(tp: TilePrompt) -> list:
    """A prompt's share of its checkpoint key: the text and each decoder pass's boxes. Several passes are
    one answer (`vectorize.merge_passes`), marked so, so that a row an earlier version stored for them (every
    pass's objects) is never taken for it; a prompt of one pass keeps the key it always had."""
    key = [tp.text, [[(b.cxcywh, b.positive) for b in ps] for ps in tp.passes]]
    return key + ["passes: one answer"] if len(tp.passes) > 1 else key


def _exemplars_of(inp, prompts: Sequence[Prompt], opts, scale_xy: tuple[float, float]):
    """`--box-scope image`: the example boxes' patches at `scale_xy` (a tile's), read from this input
    (None: nothing to paste)."""
    boxes = opts.box_scope != "tile"  # example images are pasted whatever the box scope
    if inp.grid is None or not any(p.images or (boxes and p.boxes) for p in prompts):
        return None
    from ...prompts.exemplars import input_exemplars
    from ...readers import open_source

    with open_source(inp.path, bands=inp.bands, stretch=inp.stretch) as src:
        return input_exemplars(src, prompts, scale_xy, {im: (f, b) for im, f, b in inp.chips}, boxes=boxes)


def _report_exemplars(report: RunReport, exemplars, overlap: int, path: str) -> None:
    if exemplars is None:
        return
    for k, v in exemplars.counts.items():
        report.exemplars[k] = report.exemplars.get(k, 0) + v
    for line in map(spoken, exemplars.warnings(overlap)):
        log.warning("%s: %s", path, line)
        report.exemplar_notes.append(f"{os.path.basename(path)}: {line}")
