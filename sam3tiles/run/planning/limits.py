"""Limits of the process a run needs room under: the address space (`ulimit -v`, RLIMIT_AS).

A run reserves far more address space than it touches, and under a low `ulimit -v` a native library
then fails an allocation deep inside C++ (`std::bad_alloc`: the process aborts, its lock left behind), a
thread cannot start, a library cannot be mapped, or Dask's event loop hangs on a MemoryError. What takes
the address space (measured, issue 36; `benchmarks/bench_address_space.py` repeats the measurement):

* what the process maps already when the run is planned: Python, numpy, GDAL (twice: rasterio's and
  pyogrio's), pyarrow, onnxruntime, OpenBLAS with a buffer per core: 0.59 GB on 2 cores (0.51 GB with
  one OpenBLAS thread);
* what the run adds: libraries loaded later, Dask's threads, the tiles in flight, the output writers;
* each thread: its stack (8 MB, `ulimit -s`) and a glibc malloc arena (up to 64 MB reserved a thread, up
  to 8 a core); onnxruntime runs a pool of (threads - 1) threads per graph, three graphs;
* GDAL's block cache (`readers.env.GDAL_OPTIONS`, filled as blocks are read);
* the ONNX model: its weights (the files' size) and onnxruntime's CPU arena for the activations;
* pyarrow's allocator (mimalloc) reserves 1 GiB at its first allocation (pandas' strings) whenever the
  limit leaves room for it: a run at 2.1 GB then failed (thread not started) where 1.5 GB finished.

Under a limit, sam3tiles shrinks the reservations it can: at import (`ease_reservations`: they are
read when numpy and pyarrow load) mimalloc's reserve to 64 MiB and OpenBLAS to one thread; when a run is
planned (`fewer_malloc_arenas`) at most MALLOC_ARENAS glibc arenas; onnxruntime's CPU arena is off
(`model.onnx`: it grew by doubling to twice the activations). Then `check_address_space` refuses (exit 4,
naming the limit, the need by part and the fix) a limit below `address_space_need`: what is mapped when the
run is planned + RUN_GROWTH + each thread's stack and THREAD_EXTRA + GDAL's cache (at most the inputs'
pixels) + the model's files and ONNX_GROWTH, plus MARGIN. So the need follows the machine (what is mapped:
the libraries), `--workers`, `--threads` (onnxruntime: default, a thread a core) and `ulimit -s`.

Measured (issue 36; 2 cores, 3000x2000 scene, 12 tiles; lowest limit at which 3 runs in 3 finished, to
50 MB; "need" is what the check asks for, with 0.51 GB mapped):

    run (threads in the need)           before: lowest  after: lowest   need  unlimited peak
    reference --workers 1 (2)                     1400            800    981          2.4 GB
    reference --workers 2 (3)                     1400            850    994          2.5 GB
    reference --workers 4 (5)                     1550            850   1022          2.6 GB
    reference --workers 8 (9)                    2650*            900   1077          2.8 GB
    onnx --workers 2 --threads 1 (3)              2100           1100   1283          3.1 GB
    onnx --workers 2 --threads 2 (6)              2300           1100   1325          3.4 GB
    onnx --workers 2 --threads 4 (12)             2600           1150   1407          3.5 GB
    onnx --workers 2 --threads 8 (24)             2750           1300   1573          3.6 GB

(*) before, failures were not monotonic in the limit: 2.1 GB failed 3 runs in 3 where 1.5 GB finished.
Below the lowest a run failed every way: bad_alloc (abort, lock left), a library not mapped, a thread not
started, an onnxruntime allocation failed, a hang. The real SAM 3 encoder's intermediate tensors are
larger than the contract graphs' outputs: ONNX_GROWTH is a floor for it. CUDA reserves far more address
space than any such limit: a GPU run under `ulimit -v` is not covered here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ...errors import ModelError
from ...wording import opt

MB = 1 << 20
#: What a run adds to the address space mapped when it is planned, threads, GDAL's cache and model aside:
#: libraries loaded later (pyogrio's GDAL, scipy), the tiles in flight, the merge, the writers (measured).
RUN_GROWTH = 300 * MB
#: Each thread beyond its stack (`ulimit -s`): its share of the malloc arenas, at most MALLOC_ARENAS (measured).
THREAD_EXTRA = 4 * MB
#: onnxruntime's activations beyond the weights (measured on the contract graphs, whose outputs have the
#: real model's shapes; the real encoder's intermediate tensors add to it).
ONNX_GROWTH = 250 * MB
#: What the need adds for what the measurements did not see (another machine's libraries, a busier run).
MARGIN = 0.15
#: glibc malloc arenas under a limit (`mallopt(M_ARENA_MAX)`); its default, 8 a core, reserves 64 MB each.
MALLOC_ARENAS = 2
#: mimalloc's (pyarrow's allocator) arena reserve under a limit; its default is 1 GiB.
MIMALLOC_RESERVE = "64MiB"


def address_space_limit() -> int | None:
    """The soft RLIMIT_AS in bytes, or None when unlimited (or not a POSIX system)."""
    try:
        import resource
    except ImportError:
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return None if soft == resource.RLIM_INFINITY or soft < 0 else int(soft)


def ease_reservations() -> None:
    """Under a limit, before numpy and pyarrow are loaded (`import sam3tiles` does this first; they read
    these variables once, when loaded; a value the user set wins): mimalloc's arena reserve to
    MIMALLOC_RESERVE, and one OpenBLAS thread (it maps a buffer of ~40 MB a core, numpy's and scipy's copy
    each; sam3tiles does no linear algebra worth a thread)."""
    if address_space_limit() is not None:
        os.environ.setdefault("MIMALLOC_ARENA_RESERVE", MIMALLOC_RESERVE)
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def fewer_malloc_arenas() -> None:
    """Under a limit: at most MALLOC_ARENAS glibc malloc arenas (`mallopt(M_ARENA_MAX)`, which, unlike the
    MALLOC_ARENA_MAX variable, acts after the start). No-op elsewhere (not glibc, no limit)."""
    if address_space_limit() is None:
        return
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").mallopt(-8, MALLOC_ARENAS)  # M_ARENA_MAX
    except (OSError, AttributeError):
        pass


def mapped_now() -> int:
    """The address space this process maps now (VmSize), in bytes; 0 where /proc does not say."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) << 10
    except OSError:
        pass
    return 0


def thread_stack() -> int:
    """The stack a new thread reserves (bytes): `ulimit -s` (glibc's default for threads), 8 MB when unlimited."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_STACK)
    except (ImportError, OSError):
        return 8 * MB
    return 8 * MB if soft == resource.RLIM_INFINITY or soft <= 0 else int(soft)


@dataclass(frozen=True)
class Need:
    """What a run needs of the address space, by where it goes (bytes)."""

    mapped: int  # mapped when the run is planned
    threads: int  # threads the run starts (Dask's in this process, onnxruntime's)
    gdal_cache: int
    model: int  # the ONNX model's weights and activations (0: the model runs elsewhere, or none)

    @property
    def total(self) -> int:
        per_thread = thread_stack() + THREAD_EXTRA
        return int((self.mapped + RUN_GROWTH + self.threads * per_thread + self.gdal_cache + self.model)
                   * (1 + MARGIN))

    def describe(self) -> str:
        per_thread = (thread_stack() + THREAD_EXTRA) // MB
        parts = [f"{self.mapped // MB} MB mapped already (libraries)", f"{self.threads} threads of {per_thread} MB",
                 f"GDAL's cache {self.gdal_cache // MB} MB"]
        if self.model:
            parts.append(f"the model {self.model // MB} MB")
        return ", ".join(parts) + f", {RUN_GROWTH // MB} MB for the tiles and outputs, {round(MARGIN * 100)}% margin"


def address_space_need(threads: int, model_bytes: int = 0, onnx: bool = False, pixels: int | None = None) -> Need:
    """The need of a run that starts `threads` threads in this process and loads a model of `model_bytes`
    here (`onnx`: its activations too); GDAL's cache holds at most the inputs' `pixels` (bytes; None: unknown)."""
    from ...readers.env import gdal_cache_bytes

    cache = gdal_cache_bytes() if pixels is None else min(gdal_cache_bytes(), pixels)
    return Need(mapped_now(), threads, cache, model_bytes + (ONNX_GROWTH if onnx else 0))


def check_address_space(threads: int, model_bytes: int = 0, onnx: bool = False, pixels: int | None = None) -> None:
    """Refuse (exit 4) to start a run under an address-space limit below what it needs (`address_space_need`);
    first shrink what can be (`fewer_malloc_arenas`)."""
    soft = address_space_limit()
    if soft is None:
        return
    fewer_malloc_arenas()
    need = address_space_need(threads, model_bytes, onnx, pixels)
    if soft < need.total:
        knobs = [opt("workers")] + ([opt("threads")] if onnx else [])
        fewer = f", or start fewer threads ({', '.join(knobs)})" if threads else ""
        raise ModelError(f"the address-space limit (ulimit -v) is {soft // MB} MB, below the {need.total // MB} MB "
                         f"this run needs ({need.describe()}): raise it (ulimit -v unlimited, or ulimit -v "
                         f"{need.total >> 10}){fewer}; nothing was written")
