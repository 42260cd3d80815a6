"""The QGIS door: `sam3tiles qgis install` writes the plugin; Debian's headless QGIS 3.22 (/usr/bin/python3
with python3-qgis, QT_QPA_PLATFORM=offscreen) runs `processing.run("sam3tiles:segment", ...)`, which runs
our command line as a subprocess: the same objects as the CLI, progress streamed, a cancel leaving no
output. Skipped where /usr/bin/python3 cannot import qgis (CI installs python3-qgis)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import geopandas as gpd
import pytest
import shapely
from click.testing import CliRunner

from sam3tiles.cli.main import cli
from sam3tiles.cli.qgis import PLUGIN, plugin_source
from sam3tiles.testing.demo import write_scene

ROOT = Path(__file__).resolve().parents[1]
SYSTEM_PYTHON = "/usr/bin/python3"


def _has_qgis() -> bool:
    if not Path(SYSTEM_PYTHON).exists():
        return False
    r = subprocess.run([SYSTEM_PYTHON, "-c", "import qgis.core"], capture_output=True, env=_env(), timeout=120)
    return r.returncode == 0


def _env() -> dict:
    """For QGIS's python: our checkout's sam3tiles for the CLI it starts (SAM3TILES_CLI, this venv)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME",)}
    env.update(PYTHONPATH=str(ROOT), QT_QPA_PLATFORM="offscreen", SAM3TILES_CLI=f"{sys.executable} -m sam3tiles")
    return env


needs_qgis = pytest.mark.skipif(not _has_qgis(), reason="/usr/bin/python3 cannot import qgis "
                                                        "(apt-get install python3-qgis qgis-providers)")


def test_install_writes_the_plugin_folder_and_refuses_to_clobber(tmp_path):
    r = CliRunner().invoke(cli, ["qgis", "install", "--dest", str(tmp_path)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    folder = tmp_path / PLUGIN
    meta = (folder / "metadata.txt").read_text()
    assert "name=sam3tiles" in meta and "qgisMinimumVersion=3.22" in meta and "hasProcessingProvider=yes" in meta
    tree = ast.parse((folder / "__init__.py").read_text())
    assert {"classFactory", "provider"} <= {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    again = CliRunner().invoke(cli, ["qgis", "install", "--dest", str(tmp_path)])
    assert again.exit_code != 0 and "--overwrite" in again.output
    assert CliRunner().invoke(cli, ["qgis", "install", "--dest", str(tmp_path), "--overwrite"]).exit_code == 0
    (tmp_path / "other" / PLUGIN).mkdir(parents=True)  # a folder of that name that is not ours: kept
    r = CliRunner().invoke(cli, ["qgis", "install", "--dest", str(tmp_path / "other"), "--overwrite"])
    assert r.exit_code != 0 and "not the sam3tiles plugin" in r.output


def test_the_plugin_offers_sam3tiles_own_devices_and_backends_read_without_sam3tiles(tmp_path):
    """One source for the device and backend lists (`model.providers.DEVICES`, the backend registry): the
    install writes them into the plugin, which reads them in a Python that cannot import sam3tiles, and
    keeps no list of its own (it lacked tensorrt). A plugin folder without them names the fix."""
    from sam3tiles.model.providers import DEVICES
    from sam3tiles.model.registry import available_backends

    CliRunner().invoke(cli, ["qgis", "install", "--dest", str(tmp_path)], catch_exceptions=False)
    code = ("import importlib.util, json, sys; sys.path.insert(0, sys.argv[1]); "
            "assert importlib.util.find_spec('sam3tiles') is None, 'sam3tiles importable'; "
            "from sam3tiles_qgis.choices import choices; print(json.dumps(choices()))")
    r = subprocess.run([sys.executable, "-I", "-S", "-c", code, str(tmp_path)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    backends, devices = json.loads(r.stdout)
    assert devices == list(DEVICES) and "tensorrt" in devices
    assert backends == list(available_backends()) and backends[:2] == ["onnx", "reference"]  # BACKEND 1: reference
    src = ast.parse((tmp_path / PLUGIN / "algorithm.py").read_text())
    own = [n.value for n in ast.walk(src) if isinstance(n, ast.Constant) and n.value in (*DEVICES, *backends)]
    assert not own, own
    r = subprocess.run([sys.executable, "-I", "-S", "-c", code, str(plugin_source().parent)], capture_output=True,
                       text=True, timeout=60)  # the source folder: no choices.json
    assert r.returncode != 0 and "choices.json cannot be read" in r.stderr and "sam3tiles qgis install" in r.stderr


def test_the_main_package_never_imports_the_plugin():
    for path in (ROOT / "sam3tiles").rglob("*.py"):
        if plugin_source() in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import) or (isinstance(node, ast.ImportFrom) and node.level == 0):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            elif isinstance(node, ast.ImportFrom):  # relative: `from .qgis import qgis` is the CLI command
                names = [n for n in [node.module or "", *(a.name for a in node.names)] if "qgis_plugin" in n]
            else:
                continue
            bad = [n for n in names if n.split(".")[0] in ("qgis", "processing", PLUGIN) or "qgis_plugin" in n]
            assert not bad, (path, bad)


def _qgis_run(plugins: Path, params: dict, *extra: str) -> dict:
    r = subprocess.run([SYSTEM_PYTHON, str(ROOT / "tests" / "qgis_run.py"), str(plugins), json.dumps(params),
                        *extra], capture_output=True, text=True, env=_env(), timeout=300)
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line is not None, r.stdout + r.stderr
    return json.loads(line[len("RESULT "):])


@needs_qgis
def test_processing_segment_gives_the_cli_objects(tmp_path):
    made = write_scene(tmp_path / "scene.tif", 900, 700, seed=5)
    scene = made.path
    boxes = tmp_path / "boxes.gpkg"  # one example box: a building (blue), found with the text prompt red
    building = made.truth[made.truth["class"] == "blue"].geometry.iloc[0]
    gpd.GeoDataFrame(geometry=[shapely.box(*building.bounds)], crs=made.truth.crs).to_file(boxes)
    CliRunner().invoke(cli, ["qgis", "install", "--dest", str(tmp_path / "plugins")], catch_exceptions=False)
    out = tmp_path / "qgis.gpkg"
    res = _qgis_run(tmp_path / "plugins", {"INPUT": str(scene), "PROMPTS": "red, yellow", "BOXES": str(boxes),
                                           "BACKEND": 1, "TILE_SIZE": 512, "OVERLAP": 128, "OUTPUT": str(out)})
    assert res["ok"], res
    r = CliRunner().invoke(cli, ["-q", "segment", str(scene), "-t", "red", "-t", "yellow", "--box-file", str(boxes),
                                 "--backend", "reference", "--tile-size", "512", "--overlap", "128",
                                 "--out", str(tmp_path / "cli.gpkg")], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    a, b = gpd.read_file(out), gpd.read_file(tmp_path / "cli.gpkg")
    assert len(a) == len(b) > 10 and res["layer_valid"] and res["features"] == len(a)
    assert len(set(a["prompt"])) >= 2  # the text prompt's objects and the example box's
    cols = ["id", "prompt", "score", "area_m2", "area_px", "n_tiles", "source"]
    assert a[cols].equals(b[cols]) and shapely.equals_exact(a.geometry.values, b.geometry.values, 0).all()
    assert res["progress"] and res["progress"][-1] == 100 and any(0 < v < 100 for v in res["progress"])


@needs_qgis
def test_processing_segments_only_the_area_layer_a_user_picks_as_the_cli_does(tmp_path):
    # issue 39 in QGIS: an area of interest is a polygon layer (here one layer of a GeoPackage of two, in
    # another CRS); the algorithm gives the CLI's --aoi objects, clipped when asked
    made = write_scene(tmp_path / "scene.tif", 1400, 1000, seed=6)
    x0, y0, x1, y1 = made.truth.total_bounds
    area = shapely.box(x0, y0, (x0 + x1) / 2, (y0 + y1) / 2)
    areas = tmp_path / "areas.gpkg"
    gpd.GeoDataFrame(geometry=[shapely.box(x0, y0, x1, y1)], crs=made.truth.crs).to_file(areas, layer="all")
    gpd.GeoDataFrame(geometry=[area], crs=made.truth.crs).to_crs(4326).to_file(areas, layer="quarter")
    CliRunner().invoke(cli, ["qgis", "install", "--dest", str(tmp_path / "plugins")], catch_exceptions=False)
    for clip in (False, True):
        out = tmp_path / f"qgis-{clip}.gpkg"
        res = _qgis_run(tmp_path / "plugins", {"INPUT": str(made.path), "PROMPTS": "red, yellow", "BACKEND": 1,
                                               "AREA": f"{areas}|layername=quarter", "AREA_CLIP": clip,
                                               "TILE_SIZE": 512, "OVERLAP": 128, "OUTPUT": str(out)})
        assert res["ok"], res
        cli_out = tmp_path / f"cli-{clip}.gpkg"
        r = CliRunner().invoke(cli, ["-q", "segment", str(made.path), "-t", "red", "-t", "yellow", "--backend",
                                     "reference", "--tile-size", "512", "--overlap", "128", "--aoi",
                                     f"{areas}:quarter", *(["--aoi-clip"] if clip else []), "--out", str(cli_out)],
                               catch_exceptions=False)
        assert r.exit_code == 0, r.output
        a, b = gpd.read_file(out), gpd.read_file(cli_out)
        full = len(made.truth)
        assert 0 < len(a) == len(b) < full and shapely.equals_exact(a.geometry.values, b.geometry.values, 0).all()
        if clip:
            assert a.geometry.within(area.buffer(1e-6)).all()


@needs_qgis
def test_processing_segments_the_files_of_one_map_as_one_map_as_the_cli_does(tmp_path):
    # issue 38 in QGIS: a county's tiles loaded as layers; the first is INPUT, the others MORE: one map, the
    # CLI's objects for the glob (whole across the file edges)
    from sam3tiles.testing.mosaic import split_raster

    made = write_scene(tmp_path / "scene.tif", 1400, 1000, seed=7)
    split_raster(made.path, tmp_path / "files", cols=2, rows=2, overlap=60)
    files = sorted(str(p) for p in (tmp_path / "files").glob("*.tif"))
    CliRunner().invoke(cli, ["qgis", "install", "--dest", str(tmp_path / "plugins")], catch_exceptions=False)
    out = tmp_path / "qgis.gpkg"
    res = _qgis_run(tmp_path / "plugins", {"INPUT": files[0], "MORE": files[1:], "PROMPTS": "red, yellow",
                                           "BACKEND": 1, "TILE_SIZE": 512, "OVERLAP": 128, "OUTPUT": str(out)})
    assert res["ok"], res
    cli_out = tmp_path / "cli.gpkg"
    r = CliRunner().invoke(cli, ["-q", "segment", str(tmp_path / "files" / "*.tif"), "-t", "red", "-t", "yellow",
                                 "--backend", "reference", "--tile-size", "512", "--overlap", "128", "--out",
                                 str(cli_out)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    a, b = gpd.read_file(out), gpd.read_file(cli_out)
    assert len(a) == len(b) > 10 and (a["source"] == b["source"]).all()
    assert a["source"].nunique() >= 3  # named by the files they came from (one map, not one file)
    assert shapely.equals_exact(a.geometry.values, b.geometry.values, 0).all()


@needs_qgis
def test_processing_gives_the_object_under_each_point_of_a_layer_as_the_cli_does(tmp_path):
    # issue 41 in QGIS: a point layer (a tree inventory, address points) instead of prompts; its columns
    # carried; the CLI's --point-file rows
    made = write_scene(tmp_path / "scene.tif", 1400, 1000, seed=8)
    blue = made.truth[made.truth["class"] == "blue"]
    points = tmp_path / "points.gpkg"
    gpd.GeoDataFrame({"name": [f"b{k}" for k in range(len(blue))]}, geometry=blue.representative_point().values,
                     crs=made.truth.crs).to_crs(4326).to_file(points)
    CliRunner().invoke(cli, ["qgis", "install", "--dest", str(tmp_path / "plugins")], catch_exceptions=False)
    out = tmp_path / "qgis.gpkg"
    res = _qgis_run(tmp_path / "plugins", {"INPUT": str(made.path), "POINTS": str(points), "BACKEND": 1,
                                           "TILE_SIZE": 512, "OVERLAP": 128, "OUTPUT": str(out)})
    assert res["ok"], res
    cli_out = tmp_path / "cli.gpkg"
    r = CliRunner().invoke(cli, ["-q", "segment", str(made.path), "--point-file", str(points), "--backend",
                                 "reference", "--tile-size", "512", "--overlap", "128", "--out", str(cli_out)],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    a, b = gpd.read_file(out), gpd.read_file(cli_out)
    assert len(a) == len(b) == len(blue) > 3 and a["found"].all() and list(a["name"]) == list(b["name"])
    assert shapely.equals_exact(a.geometry.values, b.geometry.values, 0).all()


@needs_qgis
def test_processing_reads_the_example_layer_a_user_picks_in_a_geopackage_of_several(tmp_path):
    # a layer of a GeoPackage of several ('PATH|layername=L' in QGIS) was passed as PATH: its first layer
    made = write_scene(tmp_path / "scene.tif", 900, 700, seed=5)
    first = {c: made.truth[made.truth["class"] == c].geometry.iloc[0] for c in ("red", "blue")}
    boxes, right = tmp_path / "boxes.gpkg", tmp_path / "right.gpkg"
    for layer, cls in (("vehicles", "red"), ("buildings", "blue")):
        gpd.GeoDataFrame(geometry=[shapely.box(*first[cls].bounds)], crs=made.truth.crs).to_file(boxes, layer=layer)
    gpd.GeoDataFrame(geometry=[shapely.box(*first["blue"].bounds)], crs=made.truth.crs).to_file(right)
    CliRunner().invoke(cli, ["qgis", "install", "--dest", str(tmp_path / "plugins")], catch_exceptions=False)
    out = tmp_path / "qgis.gpkg"
    res = _qgis_run(tmp_path / "plugins", {"INPUT": str(made.path), "BOXES": f"{boxes}|layername=buildings",
                                           "BACKEND": 1, "TILE_SIZE": 512, "OVERLAP": 128, "OUTPUT": str(out)})
    assert res["ok"], res
    cli_out = tmp_path / "cli.gpkg"
    r = CliRunner().invoke(cli, ["-q", "segment", str(made.path), "--box-file", str(right), "--backend", "reference",
                                 "--tile-size", "512", "--overlap", "128", "--out", str(cli_out)],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    a, b = gpd.read_file(out), gpd.read_file(cli_out)
    assert len(a) == len(b) > 1 and shapely.equals_exact(a.geometry.values, b.geometry.values, 0).all()


@needs_qgis
def test_processing_cancel_stops_the_run_and_leaves_no_output(tmp_path):
    # ~400 tiles of 128 px: seconds of work, and the cancel comes at the first progress line
    scene = write_scene(tmp_path / "big.tif", 2000, 2000, seed=6).path
    CliRunner().invoke(cli, ["qgis", "install", "--dest", str(tmp_path / "plugins")], catch_exceptions=False)
    out = tmp_path / "cancelled.gpkg"
    res = _qgis_run(tmp_path / "plugins", {"INPUT": str(scene), "PROMPTS": "red", "BACKEND": 1, "TILE_SIZE": 128,
                                           "OVERLAP": 32, "OUTPUT": str(out)}, "cancel")
    assert not res["ok"] and "cancelled" in res["error"], res
    left = {p.name for p in tmp_path.iterdir() if p.name.startswith("cancelled")}
    # no output, no report, no temporaries: only the checkpoints a rerun resumes from (and the lock file)
    assert not out.exists() and left <= {"cancelled.gpkg.sam3tiles-work", "cancelled.gpkg.lock"}, left


STREAM_CHECK = r'''
import gc, json, sys, time
sys.path.insert(0, sys.argv[1])
from sam3tiles_qgis.stream import run_streamed


class Feedback:
    """The calls the runner makes on QGIS's QgsProcessingFeedback, recorded."""

    def __init__(self, cancel_after=None):
        self.values, self.info, self.errors, self.cancel_after = [], [], [], cancel_after

    def isCanceled(self):
        return self.cancel_after is not None and len(self.values) >= self.cancel_after

    def setProgress(self, v):
        self.values.append(v)

    def pushInfo(self, text):
        self.info.append(text)

    def reportError(self, text):
        self.errors.append(text)


def child(body):
    return [sys.executable, "-c", "import json, sys, time\n" + body]


out = {}
fb = Feedback()
out["done"] = run_streamed(child("print(json.dumps({'event': 'progress', 'percent': 50.0}))\nprint('a line')\n"
                                 "print(json.dumps({'event': 'end'}))"), fb)[0], fb.values, fb.info
fb = Feedback()
out["failed"] = run_streamed(child("print('Error: no such file', flush=True)\nsys.exit(3)"), fb)[0], fb.errors
fb = Feedback(cancel_after=1)
t0 = time.monotonic()
out["cancelled"] = run_streamed(child("print(json.dumps({'event': 'progress', 'percent': 1.0}), flush=True)\n"
                                      "time.sleep(60)"), fb)[0], time.monotonic() - t0
try:
    run_streamed(["/nonexistent/sam3tiles", "segment"], Feedback())
except RuntimeError as e:
    out["cannot start"] = str(e)
gc.collect()
print(json.dumps(out))
'''


def test_the_command_runner_closes_what_it_opens(tmp_path):
    """The algorithm's runner (`sam3tiles_qgis.stream.run_streamed`, which imports neither qgis nor sam3tiles)
    in a Python that has neither, under -W error::ResourceWarning: a run that finishes, one that fails, one
    cancelled and a command that cannot start leave no pipe unclosed and no process unwaited (the algorithm
    left the command's stdout pipe open: a ResourceWarning in QGIS's log, issue 40)."""
    CliRunner().invoke(cli, ["qgis", "install", "--dest", str(tmp_path)], catch_exceptions=False)
    r = subprocess.run([sys.executable, "-I", "-S", "-W", "error::ResourceWarning", "-c", STREAM_CHECK,
                        str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "ResourceWarning" not in r.stderr and "Exception ignored" not in r.stderr, r.stderr
    out = json.loads(r.stdout)
    assert out["done"] == [0, [50.0, 100.0], ["a line"]]
    assert out["failed"] == [3, ["Error: no such file"]]
    assert out["cancelled"][0] != 0 and out["cancelled"][1] < 30  # terminated, not waited for
    assert "cannot start /nonexistent/sam3tiles" in out["cannot start"]
