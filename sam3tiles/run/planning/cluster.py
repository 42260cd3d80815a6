"""The cluster as a run plans it, before Dask is imported: the scheduler's address checked (`--scheduler`, or
the SAM3TILES_SCHEDULER variable), and the threads of the in-process cluster (`engine.open_engine` starts it;
`preflight.check_room` counts its threads)."""

from __future__ import annotations

import os
import re

from ...errors import UsageError
from ...wording import opt

SCHEDULER_ENV = "SAM3TILES_SCHEDULER"

_ADDRESS = re.compile(r"^(?:(?:tcp|tls|ucx|ws|wss|inproc)://)?(?:\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+)(?::\d{1,5})?/?$")


def check_scheduler(address: str | None) -> None:
    """A scheduler address must look like one (`tcp://HOST:PORT`, `HOST:PORT`, tls://...) before it is
    dialled: anything else is exit 2 naming the form (Dask's own error for it is an internal one)."""
    if address is None:
        return
    if not isinstance(address, str) or not (_ADDRESS.match(address.strip()) or re.match(r"^inproc://\S+$", address)):
        raise UsageError(f"{opt('scheduler', repr(address))} is not a Dask scheduler address: give tcp://HOST:PORT "
                         "(e.g. tcp://10.0.0.5:8786, as `dask scheduler` prints it), or leave it out to run in this "
                         "process")


def local_threads(workers: int | None) -> int:
    """The threads of the in-process cluster: `workers` (default: the cores, at most 4) and one for the model."""
    return (workers or max(1, min(4, os.cpu_count() or 1))) + 1
