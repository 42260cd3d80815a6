"""Limits of the process a run needs room under: the address space (`ulimit -v`, RLIMIT_AS).

A run reserves far more address space than it touches: each thread's stack, glibc's per-thread malloc
arenas, GDAL's block cache, the model runtime's memory pools. Under a low `ulimit -v` a native library
then fails an allocation deep inside C++ (`std::bad_alloc`: the process aborts, its lock left behind) or
GDAL reports "out of memory" on a small read. Measured with the reference backend on a 3000x2000 scene
(2 worker threads): 1000 MB aborts, 1500 MB finishes; an unlimited run peaked at 2.2 GB of address space.
So a limit below MIN_ADDRESS_SPACE is refused before any work (exit 4, naming the limit and the fix).
"""

from __future__ import annotations

from .errors import ModelError

#: The smallest address-space limit a run is started under (bytes).
MIN_ADDRESS_SPACE = 2 << 30


def address_space_limit() -> int | None:
    """The soft RLIMIT_AS in bytes, or None when unlimited (or not a POSIX system)."""
    try:
        import resource
    except ImportError:
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return None if soft == resource.RLIM_INFINITY or soft < 0 else int(soft)


def check_address_space(need: int = MIN_ADDRESS_SPACE) -> None:
    """Refuse (exit 4) to start a run under an address-space limit below `need` bytes."""
    soft = address_space_limit()
    if soft is not None and soft < need:
        raise ModelError(f"the address-space limit (ulimit -v) is {soft >> 20} MB, below the {need >> 20} MB a run "
                         "needs (threads, GDAL's cache and the model runtime reserve address space they may never "
                         f"touch): raise it (ulimit -v unlimited, or ulimit -v {need >> 10}) and rerun; nothing was "
                         "written")
