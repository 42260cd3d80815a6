"""Where the Dask graph runs: this process (default) or a dask.distributed cluster (`--scheduler`).

Both are a `distributed.Client`; the pipeline's code is the same. Locally the client drives an in-process
cluster (threads, no worker processes) whose single worker has the resource `GPU=1`, so model tasks
run one at a time while reads and vectorizing run beside them, and the model is loaded once.
"""

from __future__ import annotations

import logging
import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass

from ...errors import UsageError
from ...wording import opt, render, spoken
from ..planning.cluster import SCHEDULER_ENV, check_scheduler, local_threads

log = logging.getLogger(__name__)

WAIT_FOR_WORKERS = 60  # seconds a scheduler without workers gets for its first one
#: Tiles per task on a cluster at most: Dask's own work per task (submission, the scheduler's transitions,
#: the result's way back; ~10 ms of the driver's and the scheduler's CPU) is then paid once for that many
#: tiles, and a task's result (polygons and numbers) stays a few MB.
MAX_CLUSTER_BATCH = 64


@dataclass
class Engine:
    client: object  # distributed.Client
    distributed: bool
    gpu_resource: bool  # whether some worker advertises the GPU resource
    threads: int
    gpu_workers: int = 1  # workers that advertise the GPU resource (model tasks run on those only)
    gpu_threads: int = 1  # threads of the smallest such worker (a cluster: batch tasks that share its model)
    direct: bool = False  # results fetched from the workers, not relayed by the scheduler (`reaches_workers`)

    @property
    def dashboard_link(self) -> str | None:
        return getattr(self.client, "dashboard_link", None) if self.distributed else None

    def model_resources(self) -> dict | None:
        return {"GPU": 1} if self.gpu_resource else None

    def in_flight(self, threads: int | None = None, gpu_workers: int | None = None) -> int:
        """Tiles to keep in flight: enough to queue a few tiles at every model worker while the other
        threads read and vectorize, few enough that memory stays flat (~5 MB per tile)."""
        threads = self.threads if threads is None else threads
        gpus = self.gpu_workers if gpu_workers is None else gpu_workers
        if self.distributed:  # bounded by the batch tasks (`task_slots`): the most their tiles may be
            return 2 * self.task_slots() * MAX_CLUSTER_BATCH
        return max(4, 2 * threads + 4 * max(gpus, 1))

    def pipelines(self) -> int:
        """Batch tasks a model worker runs at once (a cluster): each reads, encodes and vectorizes its tiles
        one after the other, the model calls of all of them in turn (`tasks.MODEL_LOCK`), so one task reads
        or vectorizes while another's tile is on the GPU. The worker's threads, as a power of two (its share
        of the GPU resource is then exact in binary floating point), at most 8."""
        k = 1
        while k * 2 <= min(self.gpu_threads, 8):
            k *= 2
        return k

    def batch_resources(self) -> dict | None:
        """A batch task's share of a model worker's GPU resource: `pipelines()` of them run there at once."""
        return {"GPU": 1 / self.pipelines()} if self.gpu_resource else None

    def task_slots(self) -> int:
        """Batch tasks the cluster runs at once: `pipelines()` on each model worker (every worker's threads
        when none advertises the GPU resource)."""
        if not self.gpu_resource:
            return max(1, self.threads)
        return max(1, self.gpu_workers) * self.pipelines()


def settled(fut) -> bool:
    """Whether a future `distributed.as_completed` gave back is done: finished, failed or cancelled. False:
    its result was lost with its worker after it finished, and the scheduler computes it again; give it
    back to the `as_completed` (`add`) and take it when it returns."""
    return fut.status in ("finished", "error", "cancelled")


def _count(client) -> tuple[int, int, int]:
    """(threads of all workers, workers with the GPU resource, threads of the smallest of those)."""
    info = client.scheduler_info(n_workers=-1)  # every worker: the default lists 5
    workers = info.get("workers", {})
    threads = sum(w.get("nthreads", 1) for w in workers.values())
    gpus = [w.get("nthreads", 1) for w in workers.values() if (w.get("resources") or {}).get("GPU", 0) > 0]
    return max(threads, 1), len(gpus), max(1, min(gpus, default=1))


#: Seconds a worker gets to answer `reaches_workers`' connection.
REACH_S = 3.0


def reaches_workers(client) -> bool:
    """Whether this process opens a connection to every worker within REACH_S seconds: then a run's results
    come straight from the workers (`Engine.direct`), not through the scheduler. A driver behind a firewall
    or NAT keeps the relay: a direct fetch would wait for Dask's connect timeout (then fall back) each time."""
    from distributed.comm import connect

    workers = list((client.scheduler_info(n_workers=-1).get("workers") or {}))

    async def probe() -> None:
        for address in workers:
            comm = await connect(address, timeout=REACH_S, **client.connection_args)
            await comm.close()

    try:
        client.sync(probe)
    except Exception:  # noqa: BLE001 - unreachable (refused, timed out, another protocol): the relay
        return False
    return bool(workers)


def _quiet_if_interrupted() -> None:
    """Ctrl-C or SIGTERM (not an Exception) while the main thread waited on a future: the wait is
    abandoned, and closing the client ends its coroutine with AllExit, which asyncio would log with a
    traceback after the run's own one-line message. Silence asyncio's logger, as the process is ending."""
    from ...errors import WorkerLostError

    exc = sys.exc_info()[1]
    if exc is not None and (not isinstance(exc, Exception) or isinstance(exc, WorkerLostError)):
        logging.getLogger("asyncio").setLevel(logging.CRITICAL)


#: How often the worker watch asks the scheduler for its workers (seconds) at most: a tenth of the wait it
#: watches for, so a run waits at most 10% past it (each look costs the scheduler a listing of every worker).
WATCH_POLL_S = 5.0


class WorkerWatch:
    """Watches a cluster's workers while a run waits on it: when no worker that can run the model (one with
    the GPU resource, when some had it; else any) is left for `timeout` seconds, the run's futures are
    cancelled (its waits end) and `open_engine` turns that into `WorkerLostError` (exit 4; the runner's
    cleanup keeps the finished tiles' checkpoints). A worker that joins in time resets the wait: the
    scheduler reruns the lost worker's tasks there and the run goes on. A worker the scheduler dropped also
    loses this process's connections to it (`_forget`)."""

    def __init__(self, client, address: str, gpu: bool, timeout: float):
        import threading

        self.client, self.address, self.gpu, self.timeout = client, address, gpu, float(timeout)
        self.lost: str | None = None
        self._seen = set(self._listing() or ())  # the workers' addresses at the last look
        self._before = set(self._keys())  # a caller's client may hold futures of its own: never touched
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="sam3tiles-worker-watch", daemon=True)

    def __enter__(self) -> "WorkerWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _listing(self) -> dict | None:
        """The scheduler's workers by address; None when it does not answer."""
        try:
            return self.client.scheduler_info(n_workers=-1).get("workers") or {}
        except Exception:  # noqa: BLE001 - the scheduler does not answer: no worker either
            return None

    def _workers(self) -> int | None:
        if (workers := self._listing()) is None:
            return None
        self._forget(self._seen - set(workers))
        self._seen = set(workers)
        if not self.gpu:
            return len(workers)
        return sum((w.get("resources") or {}).get("GPU", 0) > 0 for w in workers.values())

    def _forget(self, gone: set[str]) -> None:
        """Drop this process's connections to workers the scheduler dropped, and end its attempts to open one:
        a direct fetch from a worker killed after the scheduler named it as the holder would retry the refused
        connection for Dask's connect timeout (20-30 s), whatever the run's worker timeout. Ended, the fetch
        asks the scheduler, which reruns the task or waits for a worker (as Dask's workers do with a peer)."""
        for address in gone:
            try:
                self.client.loop.add_callback(self.client.rpc.remove, address)
            except Exception:  # noqa: BLE001 - a closing client: nothing left to fetch
                return

    def _waiting(self) -> bool:
        """Whether the run waits on the cluster (holds futures): writing the outputs at the end needs no
        worker, and a cluster that shrank meanwhile must not stop it."""
        return bool(set(self._keys()) - self._before)

    def _keys(self) -> list:
        try:
            return list(self.client.futures)
        except Exception:  # noqa: BLE001 - a closing client
            return []

    def _watch(self) -> None:
        import time

        since = None
        kind = "with the GPU resource " if self.gpu else ""
        while not self._stop.wait(min(WATCH_POLL_S, max(0.2, self.timeout / 10))):
            n = self._workers()
            if n or not self._waiting():
                if n and since is not None:
                    log.warning("a Dask worker %sjoined %s: the run goes on", kind, self.address)
                since = None
                continue
            if since is None:
                since = time.monotonic()
                log.warning(spoken(f"no Dask worker %sis left at %s: waiting up to %g s ({opt('worker_timeout')}) "
                                    "for one to join"),
                            kind, self.address, self.timeout)
            elif time.monotonic() - since >= self.timeout:
                what = "the scheduler does not answer" if n is None else f"no Dask worker {kind}is left"
                self.lost = (f"{opt('scheduler', self.address)}: {what}, and none joined within "
                             f"{opt('worker_timeout', format(self.timeout, 'g'))} s: start one (`dask worker "
                             f"{self.address}{' --resources GPU=1' if self.gpu else ''}`), then rerun the same "
                             f"command (the finished tiles are checkpointed), or raise {opt('worker_timeout')}")
                self._cancel()  # the run's waits end now; `_watched` names the reason
                return

    def _cancel(self) -> None:
        """Cancel every future the run holds: its waits on them return (a signal would not reach a run
        whose SIGINT is ignored, as under `nohup ... &`), and `_watched` raises WorkerLostError."""
        try:
            from distributed import Future

            futures = [Future(k, self.client) for k in self._keys() if k not in self._before]
            self.client.cancel(futures, reason="sam3tiles: no worker left", msg=self.lost)
        except Exception:  # noqa: BLE001 - a client closing meanwhile: the run ends anyway
            log.error("%s", render(self.lost))


@contextmanager
def _watched(client, address: str, gpu: bool, timeout: float | None):
    """`WorkerWatch` around the block; the errors of the futures it cancelled become `WorkerLostError`."""
    from ...errors import WorkerLostError

    if timeout is None:
        yield
        return
    with WorkerWatch(client, address, gpu, timeout) as watch:
        try:
            yield
        except Exception:  # the cancelled futures' errors, wherever the run waited on them
            if watch.lost is not None:
                raise WorkerLostError(watch.lost) from None
            raise


@contextmanager
def open_engine(client=None, scheduler: str | None = None, workers: int | None = None,
                worker_timeout: float | None = None):
    """Yield an Engine. `client` (an existing distributed.Client) wins, then `scheduler` (an address, or
    the SAM3TILES_SCHEDULER variable), else an in-process cluster with `workers` CPU threads. On a cluster,
    `worker_timeout` (seconds; None: wait forever) bounds the wait for a model worker when none is left
    (`WorkerWatch`)."""
    if client is not None:
        engine = _client_engine(client, worker_timeout)
    elif scheduler := scheduler or os.environ.get(SCHEDULER_ENV) or None:
        engine = _cluster_engine(scheduler, worker_timeout)
    else:
        engine = _local_engine(workers)
    with engine as e, _short_sent_log(e.client):
        yield e


#: Payloads of what a client sent its scheduler that Dask keeps for its developers (`BatchedSend`'s
#: `recent_message_log`, `distributed.admin.low-level-log-length`: 1,000, each up to 1 MB) while a run holds
#: the client. A cluster run's merge tasks carry their pieces (`submit.submit_sealed`): the driver held the last
#: 1,000 batches of them, +105 MB over a 10^5 tile run (`benchmarks.bench_country`; up to 1 GB of larger ones).
SENT_LOG = 16


@contextmanager
def _short_sent_log(client):
    """The client's log of sent messages cut to its last SENT_LOG for the block, then given back its length
    (a caller's client keeps its setting); a stream the client opens again meanwhile (a reconnection) starts
    with the short log too."""
    from collections import deque

    import dask

    stream = getattr(client, "scheduler_comm", None)
    kept = getattr(stream, "recent_message_log", None)
    if not isinstance(kept, deque) or (kept.maxlen is not None and kept.maxlen <= SENT_LOG):
        yield
        return
    stream.recent_message_log = deque(kept, maxlen=SENT_LOG)
    try:
        with dask.config.set({"distributed.admin.low-level-log-length": SENT_LOG}):
            yield
    finally:
        stream.recent_message_log = deque(stream.recent_message_log, maxlen=kept.maxlen)


@contextmanager
def _client_engine(client, worker_timeout: float | None):
    """An Engine on a caller's client: it stays open (the caller's), its workers counted and watched."""
    threads, gpu, gpu_threads = _count(client)
    if not gpu:
        log.warning("no worker of the given client advertises the GPU resource: model tasks run on any "
                    "worker (give GPU workers resources={'GPU': 1})")
    with _watched(client, str(getattr(client.scheduler, "address", "the client's scheduler")), gpu > 0,
                  worker_timeout):
        yield Engine(client, distributed=True, gpu_resource=gpu > 0, threads=threads, gpu_workers=gpu,
                     gpu_threads=gpu_threads, direct=reaches_workers(client))


def _connect(scheduler: str):
    """A client of the scheduler at `scheduler` that has a worker (a scheduler started a moment ago gets
    WAIT_FOR_WORKERS seconds for its first); none answering, or no worker joining, is exit 2."""
    # dask.distributed takes about a second to import: commands that run no tiles (`model`, `plan`,
    # `--help`) do not pay for it
    from distributed import Client

    check_scheduler(scheduler)
    try:
        c = Client(scheduler, timeout="20s")
    except (OSError, TimeoutError) as e:
        raise UsageError(f"{opt('scheduler', scheduler)}: no Dask scheduler answers there ({e}): start one with "
                         f"`dask scheduler`, or leave {opt('scheduler')} out to run in this process") from None
    try:
        if not (c.scheduler_info().get("workers") or {}):
            # a scheduler started a moment ago: let its first worker join before choosing placements
            try:
                c.wait_for_workers(1, timeout=WAIT_FOR_WORKERS)
            except TimeoutError:
                raise UsageError(f"{opt('scheduler', scheduler)}: no worker joined in {WAIT_FOR_WORKERS} s: start "
                                 f"one with `dask worker {scheduler} --resources GPU=1`") from None
    except BaseException:
        _quiet_if_interrupted()
        c.close()
        raise
    return c


@contextmanager
def _cluster_engine(scheduler: str, worker_timeout: float | None):
    """An Engine on the cluster at `scheduler`, closed with the block; its model workers watched."""
    c = _connect(scheduler)
    try:
        threads, gpu, gpu_threads = _count(c)
        if not gpu:
            log.warning("no worker of %s advertises the GPU resource: model tasks run on any worker "
                        "(start GPU workers with `dask worker ADDRESS --resources GPU=1`)", scheduler)
        log.info("Dask dashboard: %s", c.dashboard_link)
        with _watched(c, scheduler, gpu > 0, worker_timeout):
            yield Engine(c, distributed=True, gpu_resource=gpu > 0, threads=threads, gpu_workers=gpu,
                         gpu_threads=gpu_threads, direct=reaches_workers(c))
    finally:
        _quiet_if_interrupted()
        c.close()


#: The in-process cluster's Dask configuration. It has no dashboard and one worker: its statistical profiler
#: (a walk of every thread's stack each 10 ms), its 0.5 s system monitor, the 20 ms event-loop tick and work
#: stealing fed nobody, and took a good part of the event loop's CPU (the GIL the tiles' work needs).
LOCAL_CONFIG = {"distributed.worker.daemon": False, "distributed.admin.tick.limit": "60s",
                "distributed.logging.distributed": "error", "distributed.worker.profile.enabled": False,
                "distributed.admin.system-monitor.interval": "5s",
                "distributed.admin.system-monitor.disk": False, "distributed.admin.tick.interval": "1s",
                "distributed.scheduler.work-stealing": False,
                "distributed.worker.memory.monitor-interval": "1s"}


#: Where the in-process cluster's scheduler serves HTTP (its /health page; it has no dashboard).
LOCAL_HTTP = "127.0.0.1:0"


@contextmanager
def _local_engine(workers: int | None):
    """An Engine on an in-process cluster (threads): `workers` threads and one for the model, whose single
    worker has the resource GPU=1; closed with the block."""
    import dask
    from distributed import Client, LocalCluster

    n = local_threads(workers) - 1
    dlog = logging.getLogger("distributed")
    if dlog.level == logging.NOTSET or dlog.level < logging.WARNING:
        dlog.setLevel(logging.WARNING)
    with dask.config.set(LOCAL_CONFIG):
        # no dashboard, but the scheduler still serves /health over HTTP, by default on 8787: the port of
        # the user's own Dask dashboard. Any free port on this machine's loopback instead
        cluster = LocalCluster(n_workers=1, threads_per_worker=n + 1, processes=False, dashboard_address=None,
                               scheduler_kwargs={"dashboard_address": LOCAL_HTTP}, resources={"GPU": 1},
                               silence_logs=logging.ERROR)
        c = Client(cluster, set_as_default=False)
        try:
            yield Engine(c, distributed=False, gpu_resource=True, threads=n + 1)
        finally:
            _quiet_if_interrupted()
            c.close()
            cluster.close()
