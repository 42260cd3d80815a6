"""Notebooks: examples/notebook.ipynb run through nbclient in a real kernel prints nothing but the progress
widget and what its cells ask for (no warning, no stderr), `gdf.explore()` included; `import sam3tiles` in
a kernel without ipywidgets prints nothing (tqdm.auto warned there); the per-run warning filters are
thread-safe where warnings.catch_warnings in worker threads was not."""

from __future__ import annotations

import os
import threading
import warnings
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

ROOT = Path(__file__).resolve().parents[1]


def _execute(nb, tmp_path):
    env_path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), env_path]) if env_path else str(ROOT)
    try:  # the kernel imports this checkout's sam3tiles
        client = nbclient.NotebookClient(nb, timeout=180, kernel_name="python3",
                                         resources={"metadata": {"path": str(tmp_path)}})
        client.execute()
    finally:
        os.environ["PYTHONPATH"] = env_path
        if not env_path:
            del os.environ["PYTHONPATH"]
    return nb


def _noise(nb) -> list[str]:
    """Every stderr stream, warning text or error in the executed cells' outputs."""
    bad = []
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            text = (out.get("text", "") if out.output_type == "stream"
                    else str(out.get("data", {}).get("text/plain", "")))
            if out.output_type == "error" or (out.output_type == "stream" and out.get("name") == "stderr") \
                    or "Warning" in text:
                bad.append(f"cell {i}: {out.output_type} {out.get('name', '')}: {text or out.get('evalue', '')}"[:400])
    return bad


WIDGET = "application/vnd.jupyter.widget-view+json"


def test_example_notebook_prints_only_what_it_asks_for(tmp_path):
    """Its text says what a run shows: each `segment` cell a progress widget (even a run of a second: issue
    40, the widget waited a second and a short run never showed it), then what the cells ask for."""
    nb = _execute(nbformat.read(ROOT / "examples" / "notebook.ipynb", as_version=4), tmp_path)
    assert _noise(nb) == []
    intro = nb.cells[0].source
    assert "progress widget" in intro and "each run" in intro.lower()
    outputs = {i: c.outputs for i, c in enumerate(nb.cells) if c.cell_type == "code"}
    runs = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and "sam3tiles.segment(" in c.source]
    assert len(runs) == 2
    for i in outputs:
        widgets = [o for o in outputs[i] if WIDGET in o.get("data", {})]
        assert len(widgets) == (1 if i in runs else 0), (i, outputs[i])
    count = next(o for o in outputs[2] if o.output_type == "execute_result")["data"]["text/plain"]
    assert int(count) > 10
    explored = next(o for o in outputs[5] if o.output_type == "execute_result")["data"]
    assert "folium" in explored.get("text/html", "") or "leaflet" in explored.get("text/html", "").lower()


def test_import_in_a_kernel_without_ipywidgets_is_silent(tmp_path):
    """tqdm.auto, imported by `import sam3tiles`, warned 'IProgress not found' (TqdmWarning) there."""
    from nbformat.v4 import new_code_cell, new_notebook

    nb = new_notebook(cells=[new_code_cell("import sys\nsys.modules['ipywidgets'] = None  # not installed"),
                             new_code_cell("import sam3tiles\nfrom sam3tiles.run.recording.progress import tqdm_class\n"
                                           "tqdm_class().__module__")],
                      metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    nb = _execute(nb, tmp_path)
    assert _noise(nb) == []
    assert nb.cells[1].outputs[-1]["data"]["text/plain"] == "'tqdm.std'"  # the text bar, quietly


def test_run_filters_survive_concurrent_threads():
    """catch_warnings() in worker threads restored each other's filter lists: a filter one thread set was
    gone while another still ran. run_filters is entered once per run; threads see it throughout."""
    from rasterio.errors import NotGeoreferencedWarning

    from sam3tiles.run.executing.quiet import run_filters

    before = list(warnings.filters)
    seen: list[int] = []

    def worker():
        for _ in range(200):
            with warnings.catch_warnings(record=True) as caught:  # a library's own use, as in rasterio's callers
                warnings.warn("x", NotGeoreferencedWarning)
            seen.append(len(caught))

    with run_filters():
        threads = [threading.Thread(target=worker) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        with warnings.catch_warnings(record=True) as caught:
            warnings.warn("not georeferenced", NotGeoreferencedWarning)
        assert not [w for w in caught if issubclass(w.category, NotGeoreferencedWarning)]
    assert seen == [0] * 800 and warnings.filters == before  # none leaked; exactly our entries removed
