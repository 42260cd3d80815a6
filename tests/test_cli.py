"""The command line: outputs in every format, read back with geopandas; plan, evaluate, demo; bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import geopandas as gpd
import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import sam3tiles
from sam3tiles.cli.main import cli
from sam3tiles.testing.demo import write_scene


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    return write_scene(tmp_path_factory.mktemp("cli") / "scene.tif", 2200, 1800, seed=7)


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


@pytest.mark.parametrize("ext", [".gpkg", ".parquet", ".fgb", ".geojson"])
def test_segment_writes_every_format_with_crs(scene, tmp_path, ext):
    out = tmp_path / f"out{ext}"
    r = run("-q", "segment", scene.path, "--text", "blue", "--text", "RED", "--backend", "reference", "--out", out)
    assert r.exit_code == 0, r.output
    gdf = gpd.read_file(out) if ext != ".parquet" else gpd.read_parquet(out)
    if ext == ".geojson":  # RFC 7946: WGS84 lon/lat, no crs member, named after the file
        doc = json.loads(out.read_text())
        assert "crs" not in doc and doc["name"] == "out" and gdf.crs.to_epsg() == 4326
        x, y = doc["features"][0]["geometry"]["coordinates"][0][0]
        assert 14 < x < 16 and 36 < y < 38  # lon, lat near the scene (UTM 33N, 500 km E, 4100 km N)
        gdf = gdf.to_crs(32633)
    elif ext != ".parquet":
        import pyogrio

        assert [str(n) for n in pyogrio.list_layers(out)[:, 0]] == ["out"]
    assert gdf.crs is not None and gdf.crs.to_epsg() == 32633
    for col in ("prompt", "score", "area_m2", "area_px", "n_tiles", "source", "backend"):
        assert col in gdf.columns
    assert set(gdf["prompt"]) == {"blue", "RED"}
    assert (gdf["backend"] == "reference").all() and (gdf["source"] == str(scene.path)).all()
    n_truth = int((scene.truth["class"].isin(["blue", "red"])).sum())
    assert abs(len(gdf) - n_truth) <= 0.03 * n_truth
    assert gdf.geometry.is_valid.all()
    assert np.allclose(gdf["area_m2"], gdf.geometry.area, rtol=1e-6 if ext != ".geojson" else 1e-2)
    assert np.allclose(gdf["area_px"], gdf["area_m2"] / 0.09, rtol=1e-6)
    report = json.loads((tmp_path / f"out{ext}.report.json").read_text())
    assert report["objects"] == len(gdf) and report["tiles"] == 9


def test_output_without_crs_says_so(tmp_path):
    from PIL import Image

    img = np.full((300, 400, 3), 90, np.uint8)
    img[40:80, 50:120] = (20, 20, 240)
    Image.fromarray(img).save(tmp_path / "plain.png")
    r = run("-q", "segment", tmp_path / "plain.png", "-t", "blue", "--backend", "reference", "--out",
            tmp_path / "o.parquet")
    assert r.exit_code == 0, r.output
    geo = json.loads(pq.read_schema(tmp_path / "o.parquet").metadata[b"geo"])
    assert geo["columns"]["geometry"]["crs"] is None  # explicit null: unknown, not WGS84
    r = run("-q", "segment", tmp_path / "plain.png", "-t", "blue", "--backend", "reference", "--out",
            tmp_path / "o.gpkg")
    assert r.exit_code == 0
    assert gpd.read_file(tmp_path / "o.gpkg").crs is None
    import sqlite3

    db = sqlite3.connect(tmp_path / "o.gpkg")
    desc, srs = db.execute("SELECT c.description, s.srs_name FROM gpkg_contents c JOIN gpkg_spatial_ref_sys s "
                           "ON c.srs_id = s.srs_id WHERE c.table_name = 'o'").fetchone()
    db.close()
    assert desc.startswith("no CRS") and srs == "Undefined SRS"


def test_overwrite(scene, tmp_path):
    out = tmp_path / "o.gpkg"
    assert run("-q", "segment", scene.path, "-t", "yellow", "--backend", "reference", "--out", out).exit_code == 0
    before = out.read_bytes()
    r = CliRunner().invoke(cli, ["-q", "segment", str(scene.path), "-t", "blue", "--backend", "reference",
                                 "--out", str(out)])
    assert r.exit_code == 2 and "--overwrite" in r.output
    assert out.read_bytes() == before
    r = run("-q", "segment", scene.path, "-t", "blue", "--backend", "reference", "--out", out, "--overwrite")
    assert r.exit_code == 0 and out.read_bytes() != before


def _cli_subprocess(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "sam3tiles.cli", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, timeout=120)


@pytest.mark.parametrize("case", ["missing", "not-a-raster", "unknown-colour", "exists", "bands"])
def test_bad_input_clear_message_no_traceback_nothing_written(scene, tmp_path, case):
    out = tmp_path / "o.gpkg"
    src, extra = scene.path, []
    if case == "missing":
        src = tmp_path / "nope.tif"
    elif case == "not-a-raster":
        src = tmp_path / "notes.tif"
        src.write_text("hello\n")
    elif case == "exists":
        out.write_text("precious")
    elif case == "bands":
        extra = ["--bands", "3,2,9"]
    text = "ultraviolet-ish" if case == "unknown-colour" else "blue"
    p = _cli_subprocess("segment", src, "--text", text, "--backend", "reference", "--out", out, *extra)
    assert p.returncode in (2, 3), p.stderr
    assert "Traceback" not in p.stderr + p.stdout
    assert p.stderr.startswith("Error: ")
    expect = {"missing": "no such file", "not-a-raster": "not a raster", "unknown-colour": "colour",
              "exists": "--overwrite", "bands": "band 9 does not exist"}[case]
    assert expect in p.stderr
    leftovers = sorted(x.name for x in tmp_path.iterdir() if x.name not in ("notes.tif",))
    assert leftovers == (["o.gpkg"] if case == "exists" else [])
    if case == "exists":
        assert out.read_text() == "precious"


def test_onnx_backend_without_model_names_the_fetch_command(scene, tmp_path):
    p = _cli_subprocess("segment", scene.path, "--text", "car", "--model", tmp_path / "empty", "--out",
                        tmp_path / "o.gpkg")
    assert p.returncode == 4, p.stderr
    assert "sam3tiles model fetch" in p.stderr and "Traceback" not in p.stderr


def test_plan(scene, tmp_path):
    r = run("plan", scene.path, "--out", tmp_path / "grid.gpkg")
    assert r.exit_code == 0, r.output
    assert "tiles: 9 (3 rows x 3 cols)" in r.output
    grid = gpd.read_file(tmp_path / "grid.gpkg")
    assert len(grid) == 9 and grid.crs.to_epsg() == 32633
    r = run("plan", scene.path, "--scale", "2")
    assert "tiles: 30 (5 rows x 6 cols)" in r.output


def test_evaluate_and_api(scene, tmp_path):
    gdf = sam3tiles.segment(str(scene.path), ["red"], backend="reference", checkpoint=False)
    assert isinstance(gdf, gpd.GeoDataFrame) and len(gdf) > 50
    assert gdf.attrs["sam3tiles_report"]["objects"] == len(gdf)
    gdf.to_file(tmp_path / "pred.gpkg")
    scene.truth.to_file(tmp_path / "truth.gpkg")
    r = run("evaluate", tmp_path / "pred.gpkg", tmp_path / "truth.gpkg", "--class-col", "class")
    assert r.exit_code == 0, r.output
    line = next(ln for ln in r.output.splitlines() if ln.strip().startswith("red"))
    assert float(line.split()[6]) >= 0.97  # precision


def test_demo_small(tmp_path):
    r = run("-q", "demo", "--out", tmp_path / "d", "--size", "2500x2000", "--seed", "3")
    assert r.exit_code == 0, r.output
    for f in ("scene.tif", "truth.gpkg", "tiled.gpkg", "squash.gpkg", "overlay.png", "tiled-evaluation.csv",
              "boxes.gpkg", "chips/building-1.png", "background.png"):
        assert (tmp_path / "d" / f).exists()
    assert "recall tiled 1.00" in r.output
    _has_a_legend(tmp_path / "d" / "overlay.png", [(0, 255, 0), (255, 0, 255)])


def _has_a_legend(png, colours) -> None:
    """A legend in the picture's top-left corner (issue 40: the overlay had none): a white box holding a
    swatch of each colour the picture draws, and dark text."""
    from PIL import Image

    img = np.asarray(Image.open(png).convert("RGB"))[:60, :300]
    white = (img == 255).all(axis=-1)
    assert white.mean() > 0.5, white.mean()  # the box (the scene has no pure white)
    for colour in colours:
        assert (img == colour).all(axis=-1).sum() >= 40, colour  # a swatch, not a stray pixel
    assert (img.max(axis=-1) < 60).sum() >= 50  # text


def test_rio_plugin_is_registered():
    from importlib.metadata import entry_points

    eps = entry_points(group="rasterio.rio_plugins")
    assert any(ep.name == "sam3tiles" and ep.value == "sam3tiles.cli.main:cli" for ep in eps)
    # rio registers the group under the group's own name
    from rasterio.rio.main import main_group

    assert "sam3tiles" in main_group.commands
    r = CliRunner().invoke(main_group, ["sam3tiles", "plan", "--help"])
    assert r.exit_code == 0 and "tile count" in r.output


def _commands(group, path=()):
    """(argv, command) of every command and group under `group`."""
    import click

    yield list(path), group
    if isinstance(group, click.Group):
        for name, cmd in group.commands.items():
            yield from _commands(cmd, (*path, name))


def test_every_help_text_is_complete():
    """No help text ends a sentence on a colon with nothing after it (`qgis install --help` ended on
    "sam3tiles command to:", the value it meant printed only by the install itself: issue 40)."""
    for argv, _ in _commands(cli):
        r = run(*argv, "--help")
        assert r.exit_code == 0, (argv, r.output)
        lines = r.output.splitlines()
        for i, line in enumerate(lines):
            if line.rstrip().endswith(":") and line.strip() not in ("Options:", "Commands:"):
                after = lines[i + 1].strip() if i + 1 < len(lines) else ""
                assert after and after not in ("Options:", "Commands:"), (argv, line)  # what the colon announces
