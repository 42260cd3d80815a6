"""Every benchmark runs at its smoke size (`--smoke`: seconds, in this process), so none can rot unnoticed.

The figures are printed (`pytest -s` shows them; otherwise they are captured, shown only for a failing
test), never asserted: they mean nothing at these sizes.
What is asserted is that each benchmark runs to the end and prints its figures.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import pytest

import benchmarks
from benchmarks import common

BENCHMARKS = sorted(m.name for m in pkgutil.iter_modules(benchmarks.__path__) if m.name.startswith("bench_"))


def test_every_benchmark_is_smoked():
    """A new benchmark module is picked up here by its name; it must take `--smoke`."""
    assert len(BENCHMARKS) >= 9
    for name in BENCHMARKS:
        assert "--smoke" in Path(benchmarks.__path__[0], f"{name}.py").read_text(), name


@pytest.fixture(autouse=True)
def bench_cache(tmp_path_factory, monkeypatch):
    # scenes go to a temporary cache shared by this module's runs, not benchmarks/.cache
    monkeypatch.setenv("SAM3TILES_BENCH_CACHE", str(tmp_path_factory.getbasetemp() / "bench-cache"))
    monkeypatch.setattr(common, "IN_PROCESS", True)


@pytest.mark.parametrize("name", BENCHMARKS)
def test_benchmark_smoke(name, capsys, request):
    if name == "bench_gpu_encoder" or name == "bench_onnx_stages":
        pytest.importorskip("onnxruntime")
    module = importlib.import_module(f"benchmarks.{name}")
    if name == "bench_qgis" and not module.has_qgis():  # (as tests/test_qgis.py: a machine without QGIS skips)
        pytest.skip("/usr/bin/python3 cannot import qgis (apt-get install python3-qgis qgis-providers)")
    assert module.main(["--smoke"]) == 0
    out = capsys.readouterr().out
    figures = f"\n[{name} --smoke]\n{out.strip()[-1500:]}"
    if request.config.getoption("capture") == "no":  # pytest -s: shown, as asked
        with capsys.disabled():
            print(figures)
    else:  # captured: a quiet run stays quiet; a failing test shows them
        print(figures)
    assert out.strip(), f"{name} printed no figures"


def test_run_all_merge_smoke(capsys):
    """`python -m benchmarks.run_all --only merge` (it failed on an import removed from the pipeline)."""
    from benchmarks import run_all

    assert run_all.main(["--only", "merge", "--smoke"]) == 0
    assert "merge single" in capsys.readouterr().out
