"""Warnings sam3tiles' own worker threads would print, filtered once per run, thread-safely.

`warnings.catch_warnings()` is not thread-safe: it swaps the process-wide filter list on entry and puts
the saved one back on exit, so when worker threads enter and leave it concurrently one thread's exit
restores a list without another's filter (a rasterio NotGeoreferencedWarning then reached a notebook
cell) or drops a filter the user set meanwhile. Here the thread that starts a run adds the filters once,
and removes exactly those entries when the run ends; nested and concurrent runs each add and remove
their own. Plain images and slides are read in pixel space on purpose, so rasterio's
NotGeoreferencedWarning says nothing the output does not already say (its "no CRS" note).
"""

from __future__ import annotations

import threading
import warnings
from contextlib import contextmanager

_LOCK = threading.Lock()


def _entries() -> list[tuple]:
    from rasterio.errors import NotGeoreferencedWarning

    return [("ignore", None, NotGeoreferencedWarning, None, 0)]


@contextmanager
def run_filters():
    """Filter the run's expected warnings (see the module docstring) while the block runs."""
    entries = _entries()
    with _LOCK:
        for e in entries:
            warnings.filters.insert(0, e)
        warnings._filters_mutated()  # noqa: SLF001 - what warnings.filterwarnings itself calls
    try:
        yield
    finally:
        with _LOCK:
            for e in entries:
                try:
                    warnings.filters.remove(e)  # one entry: a concurrent run keeps its own
                except ValueError:
                    pass  # the user reset the filters meanwhile
            warnings._filters_mutated()  # noqa: SLF001
