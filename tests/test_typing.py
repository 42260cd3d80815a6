"""Typed callers: mypy on the README's use of the API, and mypy finding the package as the README installs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mypy")

ROOT = Path(__file__).resolve().parents[1]

#: the README's Python usage, as a typed caller writes it (no plotting: mypy, not a display, is the judge)
USAGE = '''
from pathlib import Path

import geopandas as gpd
import pandas as pd

import sam3tiles
from sam3tiles.run.recording.report import RunReport

gdf = sam3tiles.segment("ortho.tif", "building", out="buildings.gpkg", scale=1.0)
n: int = len(gdf)
areas: pd.Series = gdf["area_m2"]
total: float = float(areas.sum())
objects: gpd.GeoDataFrame = gdf
first = gdf.iloc[0]
report: RunReport = sam3tiles.segment_report("ortho.tif", ["building", "car"], out="all.parquet", scale=1.0)
written: str | None = report.output
# one example image, one box: each one item (issue 36); the box type is the package's own
one = sam3tiles.segment("slide.tif", [], example_images=Path("chip.png"), boxes=sam3tiles.GeoBox(0, 0, 10, 10))
'''


def _mypy(script: Path, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    # --no-site-packages: geopandas/pandas untyped (Any), which keeps mypy at seconds (pandas-stubs took
    # 20-40 s) and still refuses len(), [] and attribute use on a `GeoDataFrame | RunReport` union
    cmd = [sys.executable, "-m", "mypy", "--no-incremental", "--cache-dir", os.devnull, "--strict",
           "--follow-imports=silent", "--no-site-packages", "--ignore-missing-imports", "--no-error-summary",
           str(script)]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=300)


def test_readme_usage_type_checks(tmp_path):
    """`segment` is typed GeoDataFrame (a union with RunReport made len(gdf), gdf[...] and the assignment
    errors); `segment_report` is typed RunReport, with segment's own keywords: a misspelt one is an
    error (--strict warns on an unused ignore, so the ignore below proves the check ran)."""
    script = tmp_path / "usage.py"
    script.write_text(USAGE + "sam3tiles.segment_report('a.tif', 'x', tile_sise=512)  # type: ignore[call-arg]\n")
    r = _mypy(script, {**os.environ, "MYPYPATH": str(ROOT)}, tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr


def test_editable_install_is_a_path_type_checkers_follow(tmp_path):
    """`pip install -e .` (the README's install) must put the package where mypy looks: a .pth naming the
    repository root. setuptools' default for a flat layout, an import-hook finder module, is invisible to
    type checkers ("Cannot find implementation or library stub for module named 'sam3tiles'")."""
    import zipfile

    code = ("import sys; from setuptools import build_meta as b; "
            "print(b.build_editable(sys.argv[1]))")
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    with zipfile.ZipFile(tmp_path / r.stdout.strip().splitlines()[-1]) as wheel:
        names = wheel.namelist()
        pth = [n for n in names if n.endswith(".pth")]
        assert not [n for n in names if n.endswith("_finder.py")], names
        assert len(pth) == 1 and Path(wheel.read(pth[0]).decode().strip()).resolve() == ROOT
