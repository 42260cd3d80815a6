"""How a run hands work to its engine and takes it back: the model loaded once on a model worker with every
prompt checked there (`model_info`), tiles per in-process task (`batch_size`), a merge block's task
(`_submit_on`: scattered in process, pickled into the task on a cluster: `submit_sealed`) and its results gathered
(`result_of`, `_results_on`, `_gather_on`), and a failed tile's error as one line (`short_error`).
"""

from __future__ import annotations

from typing import Sequence

from ...errors import PromptError, Sam3TilesError, shippable
from ...model.registry import RuntimeSpec, get_runtime
from ...prompts.prompt import Prompt
from .engine import Engine
from .tasks import prepared_prompt


@shippable
def _model_info_task(spec: RuntimeSpec, texts: tuple[str, ...]) -> tuple[int, list[tuple[str, bool, str, float]]]:
    rt = get_runtime(spec)
    checks = []
    for t in texts:
        p, seconds = prepared_prompt(spec, t)
        checks.append((t, p.usable, p.note, seconds))
    return int(rt.box_slots), checks


def model_info(engine: Engine, spec: RuntimeSpec, prompts: Sequence[Prompt]) -> tuple[int, float]:
    """Load the model on a model worker (where it stays), encode every prompt once there, and return the
    box slots per decoder pass and the seconds spent. A prompt the backend can never find is an error
    before any tile runs."""
    texts = tuple(dict.fromkeys(p.model_text for p in prompts))
    fut = submit_sealed(engine.client, _model_info_task, (spec, texts), resources=engine.model_resources())
    try:
        slots, checks = fut.result()
    finally:
        fut.release()
    bad = [(t, note) for t, ok, note, _ in checks if not ok]
    if bad:
        raise PromptError("; ".join(note or f"{t!r} cannot be found by the {spec.backend} backend"
                                    for t, note in bad))
    return slots, sum(c[3] for c in checks)


def _call(fn, job):
    return fn(*job)


class _Call:
    """`fn(*args)`, made by unpickling: `pickle.loads` of its pickle runs it (`__reduce__`)."""

    __slots__ = ("fn", "args")

    def __init__(self, fn, args: tuple):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return self.fn, self.args


def submit_sealed(client, fn, args: tuple, **kwargs):
    """`client.submit(fn, *args)` with the call pickled once here into bytes, run on the worker by
    `pickle.loads` (a builtin): the scheduler unpickles a task's graph, and would otherwise import sam3tiles
    (and pandas, geopandas: seconds of its CPU, and sam3tiles installed where it runs) and unpickle, then
    pickle again, each task's tiles; bytes it passes on as they are. The key keeps `fn`'s name (the
    dashboard, `key_split`). It keeps a task's arguments, so a task whose worker is lost reruns elsewhere."""
    import pickle
    import uuid

    import dask

    blob = pickle.dumps(_Call(fn, tuple(args)), protocol=pickle.HIGHEST_PROTOCOL)
    # a block's pieces (a few MB) are no slowdown for the scheduler: not what the warning is about
    with dask.config.set({"distributed.admin.large-graph-warning-threshold": max(len(blob) * 2, 10 << 20)}):
        return client.submit(pickle.loads, blob, key=f"{fn.__name__}-{uuid.uuid4().hex}", pure=False, **kwargs)


#: Tiles per in-process task at most (`tasks.tile_batch_task`).
MAX_BATCH = 4


def batch_size(engine: Engine, limit: int) -> int:
    """Tiles per in-process task: as many as leave every thread a task and one more queued within the
    tiles in flight (`limit`), at most MAX_BATCH (a cluster's: `InputRun._batch_size`)."""
    return max(1, min(MAX_BATCH, limit // (engine.threads + 1)))


def _submit_on(engine: Engine, retries: int):
    """`submit` for `BlockMerger`: a block's merge is a task on the engine's workers (CPU; any model worker),
    started as soon as the block's last tile is in.

    In process its pieces are scattered (handed to the worker as they are, never pickled). On a cluster they
    go in the task itself, pickled once here (`submit_sealed`: the scheduler neither unpickles nor walks
    them): the scheduler keeps a task's arguments, so a merge whose worker is lost reruns on one that joins,
    or waits for the worker timeout like any tile. Scattered, they would live on that worker only: the scheduler
    forgets data it cannot recompute, and cancels the merge "already forgotten" (issue 36)."""

    # where tile tasks need the GPU resource, a merge asks for none of it (GPU=0): a restriction every model
    # worker meets whatever its tiles hold. Unrestricted, once more merges wait than twice the cluster's threads
    # the scheduler takes them for "root-ish" tasks and queues them while its workers are busy, and tile tasks
    # (restricted: never queued) kept them busy to the last tile, so every block's merge waited for the end of
    # the run, its pieces held by the scheduler (bench_country, 10^5 tiles: 1,434 merges queued). A restriction
    # to the workers by name would do it too, but a merge whose named workers all died waits for ever for them
    # when another joins (Dask re-checks such tasks against their names).
    place = {"resources": {"GPU": 0}} if engine.gpu_resource else {}

    def submit(fn, job):
        client = engine.client
        if not engine.distributed:
            (data,) = client.scatter([job], hash=False)
            return client.submit(_call, fn, data, pure=False, retries=retries, **place)
        return submit_sealed(client, fn, job, retries=retries, **place)

    return submit


def result_of(engine: Engine, fut):
    """A finished future's result: on a cluster whose workers this process reaches (`Engine.direct`),
    fetched from its worker, not relayed by the scheduler (a batch's few MB through its event loop)."""
    return engine.client.gather([fut], direct=engine.direct or None)[0]


def _results_on(engine: Engine):
    def results(futs) -> list:
        """The results of finished futures, one by one (no gather task: a SIGTERM arriving meanwhile leaves
        no orphaned gather behind to log a traceback when the client closes), each released once read."""
        out = []
        for f in futs:
            try:
                out.append(result_of(engine, f))
            finally:
                f.release()
        return out

    return results


def _gather_on(engine: Engine):
    def gather(futs):
        try:
            return engine.client.gather(futs, direct=engine.direct or None)
        finally:
            for f in futs:
                f.release()

    return gather


def short_error(exc: BaseException | None) -> str:
    """One line for a failed tile: the error's type and first line (a sam3tiles error's own text)."""
    if exc is None:
        return "unknown error"
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if not isinstance(exc, Sam3TilesError) else text
