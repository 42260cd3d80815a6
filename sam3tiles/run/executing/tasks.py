"""The per-tile tasks of the Dask graph: read -> infer (encode once, decode every prompt) -> vectorize.

Module-level functions with small picklable arguments, so they run in this process or on any
dask.distributed worker. The image embedding never leaves `infer_task`: it is computed, used for every
prompt and dropped there; what travels on is a few kilobytes of cropped masks per object.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ...errors import ModelError, shippable
from ...model.registry import RuntimeSpec, get_runtime
from ...model.runtime import MAX_QUERIES, PreparedPrompt, TileImage
from ...prompts.prompt import TilePrompt
from ...readers import RasterSource, Stretch, gdal_env, open_source
from ...readers.identity import forget_cached
from ...readers.mosaic import layout_of
from ...tiling.grid import Tile
from ...vectorize.pieces import (EDGE_MARGIN, InstanceCrop, Pieces, crop_detections, merge_passes,
                                pieces_from_crops)
from ...writers.thumbs import Sampling, take
from ..recording.checkpoint import TileResult

#: A tile whose decoder pass returns at least this many objects is reported as saturated (SAM 3 keeps
#: at most 200 queries per input).
SATURATION = int(0.95 * MAX_QUERIES)


@dataclass(frozen=True)
class SourceSpec:
    """How to open one input on any worker. `identity`: the input's checkpoint identity when planned (size,
    time, content samples: `readers.identity`), so a worker's open dataset is reused only for the same
    file content (a long-lived client runs many jobs: a file changed between them is opened anew)."""

    path: str
    bands: tuple[int, ...]
    stretch: Stretch | None
    identity: str = ""


@dataclass
class InferResult:
    crops: list[InstanceCrop] = field(default_factory=list)
    skipped: bool = False
    saturated: bool = False
    seconds: dict = field(default_factory=dict)
    unusable_prompts: tuple[str, ...] = ()
    saturated_prompts: tuple[int, ...] = ()
    exemplars: dict = field(default_factory=dict)  # pasted / dropped / clipped (see exemplars.PasteScreen)
    thumb: np.ndarray | None = None  # the quicklook's copy of the tile (`thumbs.take`), when asked for
    passes: dict = field(default_factory=dict)  # decoder passes past each prompt's first: extra / folded


_local = threading.local()


def _open_source(spec: SourceSpec) -> RasterSource:
    # one open dataset per thread: GDAL handles must not be shared across threads. A thread of a client that
    # outlives the run keeps it for the next run of the same input, so the key holds the input's identity:
    # a dataset opened on the file before it changed (renamed over, or rewritten in place) is closed, never
    # read again (it would read the old file, or GDAL's cached blocks of it)
    cache = getattr(_local, "sources", None)
    if cache is None:
        cache = _local.sources = {}
    src = cache.get(spec)
    if src is None:
        for old in [k for k in cache if k.path == spec.path and k.identity != spec.identity]:
            cache.pop(old).close()
        _forget_if_changed(spec)
        with _spare_lock:
            spare = _spare.get(spec)
            src = spare.pop() if spare else None
        if src is None:
            src = open_source(spec.path, bands=spec.bands, stretch=spec.stretch, identity=spec.identity)
        cache[spec] = src
    return src


#: The identity each input was last opened with in this process (see `_forget_if_changed`).
_opened_as: dict[str, str] = {}


def _forget_if_changed(spec: SourceSpec) -> None:
    """A remote input opened before in this process with another identity (a long-lived worker, the file
    replaced on the server since): GDAL's cache of it, which outlives the closed datasets, is dropped, so
    the header and blocks are read as they are now (the driver's own cache: `readers.identity.opening_stamp`)."""
    with _spare_lock:
        before = _opened_as.get(spec.path)
        _opened_as[spec.path] = spec.identity
    if before is not None and before != spec.identity:
        forget_cached(spec.path)


#: Datasets opened by the thread that plans a run, for this process's worker threads to take on their first
#: read (each is then that thread's own: one thread at a time uses a GDAL handle). A thread's first open of
#: a georeferenced file costs 10-15 ms of CPU (PROJ sets up a context per thread and looks the CRS up in
#: its database), a thread that has opened one before 1-3 ms: three worker threads opening at once held the
#: first tile's read 50-60 ms instead of 10, the GPU waiting.
_spare: dict[SourceSpec, list] = {}
_spare_lock = threading.Lock()


def open_spares(spec: SourceSpec, n: int) -> None:
    """Open `n` datasets of `spec` here for worker threads of this process to take (`_open_source`)."""
    with gdal_env():
        opened = [open_source(spec.path, bands=spec.bands, stretch=spec.stretch, identity=spec.identity)
                  for _ in range(n)]
    with _spare_lock:
        _spare.setdefault(spec, []).extend(opened)


def close_spares(spec: SourceSpec) -> int:
    """Close the datasets of `spec` that no thread took; returns how many."""
    with _spare_lock:
        left = _spare.pop(spec, [])
    for src in left:
        src.close()
    return len(left)


@shippable
def read_task(spec: SourceSpec, tile: Tile) -> tuple[TileImage | None, float]:
    """The tile's model input, or None when every pixel is nodata (the tile is skipped)."""
    t0 = time.perf_counter()
    # a distributed worker is another process: the run's GDAL configuration goes with the read (a mosaic's members:
    # their folder not listed on each open, `readers.env.MANY_FILES`; nor looked in, where the plan saw nothing
    # beside them, `env.NO_SIBLINGS`: a small GeoTIFF's open 0.28 -> 0.14 ms)
    lay = layout_of(spec.path)
    with gdal_env(many_files=lay is not None, no_siblings=lay is not None and lay.no_siblings):
        image = _open_source(spec).read_tile(tile)
    if not image.valid.any():
        return None, time.perf_counter() - t0
    return image, time.perf_counter() - t0


_prep_lock = threading.Lock()
#: Held by a tile's encode and decodes: a process runs one tile on its model at a time (the Dask GPU
#: resource does the same across tasks; with `tile_batch_task` this lock alone does), so one embedding at a
#: time is alive and the reads and vectorizing of other tiles run beside it in other threads.
MODEL_LOCK = threading.Lock()
_prepared: dict[tuple[RuntimeSpec, str], PreparedPrompt] = {}


def prepared_prompt(spec: RuntimeSpec, text: str) -> tuple[PreparedPrompt, float]:
    """The prompt's encoding, computed once per process and reused for every tile."""
    key = (spec, text)
    p = _prepared.get(key)
    if p is not None:
        return p, 0.0
    with _prep_lock:
        p = _prepared.get(key)
        if p is not None:
            return p, 0.0
        t0 = time.perf_counter()
        p = get_runtime(spec).prepare_prompt(text)
        _prepared[key] = p
        return p, time.perf_counter() - t0


@shippable
def infer_task(spec: RuntimeSpec, read: tuple[TileImage | None, float], prompts: Sequence[TilePrompt],
               valid_wh: tuple[int, int], pastes=None, thumb_step: int = 0) -> InferResult:
    """Encode the tile once, decode every prompt (and box pass) on that embedding, crop the masks.
    `pastes` (`exemplars.TilePastes`): exemplars pasted into the input; detections on them are dropped.
    `thumb_step` > 0: also every such pixel of the tile for the quicklook (`thumbs.take`)."""
    image, read_s = read
    res = InferResult(seconds={"read": read_s, "encode": 0.0, "prompt": 0.0, "decode": 0.0})
    if image is None:
        res.skipped = True
        return res
    if thumb_step > 0:
        res.thumb = take(image.rgb, valid_wh, thumb_step)
    runtime = get_runtime(spec)
    unusable = []
    todo = []
    for tp in prompts:
        prep, s = prepared_prompt(spec, tp.text)
        res.seconds["prompt"] += s
        if not prep.usable:
            unusable.append(tp.text)
            continue
        todo.append((tp, prep))
    res.unusable_prompts = tuple(unusable)
    if not todo:
        return res
    holes = None if image.valid[: valid_wh[1], : valid_wh[0]].all() else image.valid
    screen = None
    if pastes is not None:  # one input for every prompt: the pasted exemplars are in it for all of them
        image, screen = pastes.compose(image)
    with MODEL_LOCK:  # one tile on the model at a time; the embedding is dropped before the next
        t0 = time.perf_counter()
        emb = runtime.encode(image)
        res.seconds["encode"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        crop = crop_detections if screen is None else screen.crops
        todo = _decode_batched(runtime, emb, todo, lambda det, i, pi: crop(det, i, pi, valid_wh, holes), res)
        for tp, prep in todo:
            _decode_passes(runtime, emb, tp, prep, lambda det, i, pi: crop(det, i, pi, valid_wh, holes), res)
        res.seconds["decode"] = time.perf_counter() - t0
        del emb
    res.exemplars = screen.stats() if screen is not None else {}
    return res


def _decode_batched(runtime, emb, todo: list, crop, res: InferResult) -> list:
    """With a batched decoder (`OnnxRuntime.batched`), every text-only prompt of the tile in ONE decoder call
    (their crops added to `res`); returns the prompts left (those with boxes: one call each pass)."""
    text = [(tp, prep) for tp, prep in todo if tp.passes == ((),)] if getattr(runtime, "batched", False) else []
    if len(text) < 2:
        return todo
    res.passes["calls"] = res.passes.get("calls", 0) + 1
    for (tp, _), det in zip(text, runtime.decode_batch(emb, [prep for _, prep in text])):
        if len(det) >= SATURATION and tp.index not in res.saturated_prompts:
            res.saturated = True
            res.saturated_prompts += (tp.index,)
        res.crops.extend(crop(det, tp.index, 0))
    return [x for x in todo if x not in text]


def _decode_passes(runtime, emb, tp: TilePrompt, prep: PreparedPrompt, crop, res: InferResult) -> None:
    """Decode every pass of one prompt and add its crops to `res` as ONE answer (`vectorize.merge_passes`):
    each pass with a positive box returns every object like it, so passes find the same objects again.
    `crop(det, prompt index, pass index)`: a pass's crops (the paste screen drops detections on pastes)."""
    per_pass = []
    res.passes["calls"] = res.passes.get("calls", 0) + len(tp.passes)
    for pi, boxes in enumerate(tp.passes):
        det = runtime.decode(emb, prep, boxes)
        if len(det) >= SATURATION and tp.index not in res.saturated_prompts:
            res.saturated = True
            res.saturated_prompts += (tp.index,)
        per_pass.append(crop(det, tp.index, pi))
        del det
    crops, folded = merge_passes(per_pass)
    res.crops.extend(crops)
    if len(per_pass) > 1:
        for k, v in (("extra", len(per_pass) - 1), ("folded", folded)):
            res.passes[k] = res.passes.get(k, 0) + v


@shippable
def vectorize_task(infer: InferResult, tile: Tile, edge_margin: int = EDGE_MARGIN) -> TileResult:
    """Polygons in the source CRS for one tile's crops."""
    t0 = time.perf_counter()
    pieces = pieces_from_crops(infer.crops, tile, edge_margin) if infer.crops else Pieces()
    seconds = dict(infer.seconds)
    seconds["vectorize"] = time.perf_counter() - t0
    return TileResult(tile.index, pieces, infer.skipped, infer.saturated, seconds, infer.unusable_prompts,
                      saturated_prompts=infer.saturated_prompts, exemplars=infer.exemplars, thumb=infer.thumb,
                      passes=infer.passes, interior=tuple(tile.interior))


def tile_batch_task(src: SourceSpec, spec: RuntimeSpec, items: Sequence[tuple], edge_margin: int = EDGE_MARGIN,
                    retries: int = 0) -> list:
    """read -> infer -> vectorize of several tiles [(tile, prompts, pastes, thumb_step)], one after the
    other, as ONE task: the in-process engine's (nothing travels between the stages there, model calls
    hold `MODEL_LOCK`), so that Dask's own work per task (submission, transitions, the result's
    way back: ~5 ms of the event loop's and the driver's CPU, under the GIL the tiles' work needs) is
    paid once for several tiles. Each tile's outcome in order: its TileResult, or the exception it
    raised after `retries` more tries (a model error or lack of memory is not retried and ends the batch:
    the run stops on it)."""
    out: list = []
    for tile, prompts, pastes, step in items:
        for attempt in range(retries + 1):
            try:
                out.append(run_tile_inline(src, spec, tile, prompts, edge_margin, pastes, step))
                break
            except (ModelError, MemoryError) as e:
                out.append(e)
                return out
            except Exception as e:  # noqa: BLE001 - the tile's failure, counted by the runner
                if attempt == retries:
                    out.append(e)
    return out


def run_tile_inline(src: SourceSpec, spec: RuntimeSpec, tile: Tile, prompts: Sequence[TilePrompt],
                    edge_margin: int = EDGE_MARGIN, pastes=None, thumb_step: "int | Sampling" = 0) -> TileResult:
    """All three tasks in a row, no Dask (used by tests and by the plain-loop benchmark). `thumb_step` a
    picture's `Sampling`: the result's thumb is the tile's patch of it (`Sampling.patch`), cut here."""
    sampling = thumb_step if isinstance(thumb_step, Sampling) else None
    step = sampling.step(tile) if sampling is not None else thumb_step
    infer = infer_task(spec, read_task(src, tile), prompts, tile.valid_wh, pastes, step)
    if sampling is not None and infer.thumb is not None:
        infer.thumb = sampling.patch(tile, infer.thumb, step)
    return vectorize_task(infer, tile, edge_margin)

