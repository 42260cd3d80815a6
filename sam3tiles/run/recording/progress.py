"""Progress: a tqdm bar (a widget in notebooks that have ipywidgets, else text), or JSON lines for GUIs.

* `tqdm_class()` picks the bar without `tqdm.auto`: in a Jupyter kernel without ipywidgets, tqdm.auto
  warns (TqdmWarning "IProgress not found") the moment it is imported, which is at `import sam3tiles`;
  here a kernel without ipywidgets quietly gets the text bar, one with them the widget.
* `--progress json` (`JsonProgress`): one JSON object a line on stderr per update, for programs that
  drive the command line (the QGIS Processing provider): `{"event": "progress", "done": 3, "total": 9,
  "percent": 33.3}`, `{"event": "message", "text": ...}`, and `{"event": "end", "done": .., "total": ..}`
  when the run ends. stdout is left alone. The same object stands in for a tqdm bar (total, update, write,
  close), so the pipeline drives either.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import threading
import time


def in_notebook() -> bool:
    """True inside a Jupyter kernel (IPython with an IPKernelApp), without importing IPython."""
    ipython = sys.modules.get("IPython")
    try:
        shell = ipython.get_ipython() if ipython is not None else None
        return shell is not None and "IPKernelApp" in shell.config
    except Exception:  # noqa: BLE001 - any doubt: not a notebook
        return False


def tqdm_class():
    """The tqdm to draw with: the notebook widget in a kernel with ipywidgets, else the text bar."""
    if in_notebook() and _has_ipywidgets():
        from tqdm.notebook import tqdm

        return tqdm
    from tqdm.std import tqdm

    return tqdm


def _has_ipywidgets() -> bool:
    try:
        return importlib.util.find_spec("ipywidgets") is not None
    except (ImportError, ValueError):  # a broken or blocked install: no widget
        return False


def progress_bar(fmt: str = "bar"):
    """A tile progress bar (`fmt` "bar") or JSON lines on stderr ("json")."""
    if fmt == "json":
        return JsonProgress()
    bar = tqdm_class()
    # a terminal bar waits a second (a short run leaves no bar behind); a notebook's widget shows from the
    # start, as the cell's record of the run (with a delay a short run showed none: issue 40)
    return bar(total=0, unit="tile", desc="tiles", dynamic_ncols=True, delay=0.0 if bar.__module__ == "tqdm.notebook"
               else 1.0)


class JsonProgress:
    """tqdm's interface as JSON lines on stderr (see the module docstring). Thread-safe; at most one
    progress line per `interval` seconds, and always the last one."""

    def __init__(self, stream=None, interval: float = 0.2):
        self.stream = stream
        self.total = 0
        self.n = 0
        self.interval = interval
        self._last = 0.0
        self._lock = threading.Lock()

    def _emit(self, record: dict) -> None:
        stream = self.stream or sys.stderr
        stream.write(json.dumps(record) + "\n")
        stream.flush()

    def update(self, n: int = 1) -> None:
        with self._lock:
            self.n += n
            now = time.monotonic()
            if now - self._last >= self.interval or (self.total and self.n >= self.total):
                self._last = now
                pct = round(100.0 * self.n / self.total, 1) if self.total else 0.0
                self._emit({"event": "progress", "done": self.n, "total": self.total, "percent": pct})

    def write(self, text: str, file=None) -> None:
        with self._lock:
            self._emit({"event": "message", "text": str(text)})

    def refresh(self) -> None:
        pass

    def close(self) -> None:
        with self._lock:
            self._emit({"event": "end", "done": self.n, "total": self.total})
