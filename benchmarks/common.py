"""Helpers shared by the distributed-pipeline benchmarks: a quiet machine, child processes, tables."""

from __future__ import annotations

import importlib
import io
import json
import os
import subprocess
import sys
import time
from contextlib import redirect_stdout
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def load() -> float:
    return os.getloadavg()[0]


def wait_for_quiet(max_load: float | None = None, timeout: float = 300.0) -> float:
    """Wait (up to `timeout` s) until the 1-minute load average is below `max_load` (default: half the
    cores); returns the load when the measurement starts, which the tables print beside each figure."""
    max_load = max_load if max_load is not None else max(0.5, 0.5 * (os.cpu_count() or 1))
    deadline = time.monotonic() + timeout
    while load() > max_load and time.monotonic() < deadline:
        time.sleep(5)
    return load()


#: Set by `--smoke`: `run_child` runs the benchmark in this process (the smoke runs check that the code
#: works, in seconds; their figures mean nothing).
IN_PROCESS = False


def smoke(enabled: bool) -> bool:
    """Switch this process to smoke runs when `enabled` (a benchmark's `--smoke`); returns `enabled`."""
    global IN_PROCESS
    IN_PROCESS = IN_PROCESS or enabled
    return enabled


def run_child(module: str, *args: str, timeout: float = 3600) -> dict:
    """Run `python -m benchmarks.<module> ARGS --json` in a fresh process; its last stdout line is JSON.
    In smoke runs, in this process."""
    if IN_PROCESS:
        buf = io.StringIO()
        with redirect_stdout(buf):
            importlib.import_module(f"benchmarks.{module}").main([*map(str, args), "--json"])
        return json.loads(buf.getvalue().strip().splitlines()[-1])
    cmd = [sys.executable, "-m", f"benchmarks.{module}", *map(str, args), "--json"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def table(rows: list[list], header: list[str]) -> str:
    cells = [header] + [[_fmt(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    line = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths))
    return "\n".join([line(cells[0]), line(["-" * w for w in widths])] + [line(r) for r in cells[1:]])


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}"
    return str(v)


def emit(result: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(result, default=str))
    else:
        print(json.dumps(result, indent=2, default=str))
