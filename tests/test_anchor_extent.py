"""An anchored grid's margin is where tiles are laid, not part of the outputs (issue 52 G): a mosaic whose
grid is anchored to its CRS lattice writes its label image and quicklook, and states its size and holes in the
plan and the report, over its files' extent, as the one file does.

Real GeoTIFFs written by rasterio in tmp dirs, the reference backend, outputs read back.
"""

from __future__ import annotations

import numpy as np
import pytest
import rasterio
from PIL import Image

from sam3tiles import segment_report
from sam3tiles.options import Options
from sam3tiles.run.planning.plan import plan_run
from sam3tiles.run.planning.targets import Targets
from sam3tiles.testing.demo import write_scene
from sam3tiles.testing.mosaic import split_raster

PROMPTS = ["red", "blue", "yellow"]
W, H = 1500, 1100


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    return write_scene(tmp_path_factory.mktemp("scene") / "scene.tif", W, H, seed=5)


def test_a_mosaics_label_image_quicklook_and_figures_cover_its_files_not_the_anchors_margin(scene, tmp_path):
    split_raster(scene.path, tmp_path / "files", cols=2, rows=2)
    inputs = str(tmp_path / "files" / "*.tif")
    (inp,) = plan_run(inputs, PROMPTS, targets=Targets(out=str(tmp_path / "p.gpkg"), checkpoint=False),
                      options=Options(backend="reference")).inputs
    assert inp.anchored and inp.margin != (0, 0)  # the scene's origin is off the lattice: the case at hand
    assert (inp.width, inp.height) == (W + inp.margin[0], H + inp.margin[1])  # the tiles' map has the margin
    with rasterio.open(scene.path) as ds:
        one_transform = ds.transform
    got = {}
    for name, src in (("one", str(scene.path)), ("mosaic", inputs)):  # the one file on the mosaic's grid
        report = segment_report(src, PROMPTS, backend="reference", out=str(tmp_path / f"{name}.gpkg"),
                                labels=str(tmp_path / f"{name}.tif"), checkpoint=False, anchor="lattice")
        with rasterio.open(tmp_path / f"{name}.tif") as lab:
            got[name] = (lab.shape, lab.transform, lab.read(1),
                         np.asarray(Image.open(tmp_path / f"{name}.gpkg.preview.png").convert("RGB"), np.int16),
                         report)
    one, mosaic = got["one"], got["mosaic"]
    assert mosaic[0] == (H, W) and mosaic[1] == one_transform == one[1]
    assert (mosaic[2] > 0).sum() == (one[2] > 0).sum() > 0 and ((mosaic[2] > 0) == (one[2] > 0)).mean() > 0.9999
    assert mosaic[3].shape == one[3].shape  # the quicklook: the files, no strip of holes at its top or left
    picture = slice(0, one[3].shape[0] - 80)  # above the legend
    assert np.abs(mosaic[3][picture] - one[3][picture]).mean() < 2.0
    (m,) = mosaic[4].maps
    assert (m["width"], m["height"], m["holes"]) == (W, H, 0.0)
    line = next(ln for ln in inp.describe().splitlines())
    assert f": {W} x {H} px" in line and "holes 0.0%" in line


def test_a_job_file_and_the_cli_lay_one_file_on_the_lattice(tmp_path):
    from sam3tiles.errors import JobFileError
    from sam3tiles.jobs import job_call, parse_job

    (tmp_path / "a.tif").write_bytes(b"x")
    text = "inputs: [a.tif]\nprompts: {text: field}\noutput: {path: o.gpkg}\n"
    assert job_call(parse_job(text + "grid: {anchor: lattice}\n", tmp_path))["options"].anchor == "lattice"
    assert job_call(parse_job(text, tmp_path))["options"].anchor == "auto"
    with pytest.raises(JobFileError, match="grid.anchor"):
        parse_job(text + "grid: {anchor: files}\n", tmp_path)


def test_one_file_on_the_lattice_grows_into_a_mosaic_that_reuses_its_tiles(scene, tmp_path):
    import shutil

    import geopandas as gpd
    from click.testing import CliRunner

    from sam3tiles.cli.main import cli

    split_raster(scene.path, tmp_path / "cells", cols=2, rows=1)
    files, work, out = tmp_path / "delivery", tmp_path / "work", tmp_path / "o.gpkg"
    files.mkdir()
    shutil.copy(tmp_path / "cells" / "r0c1.tif", files)  # the first delivery: the east file alone
    args = ["segment", str(files / "*.tif"), "--text", "red", "--text", "blue", "--text", "yellow", "--backend",
            "reference", "--tile-size", "512", "--overlap", "128", "--out", str(out), "--work-dir", str(work),
            "--overwrite"]
    kw = dict(backend="reference", tile_size=512, overlap=128)  # tiles smaller than a file: some away from the west
    r = CliRunner().invoke(cli, [*args, "--anchor-grid", "lattice"])
    assert r.exit_code == 0, r.output
    first = len(gpd.read_file(out))
    shutil.copy(tmp_path / "cells" / "r0c0.tif", files)  # the west file arrives: one map of two files
    grown = segment_report(str(files / "*.tif"), PROMPTS, out=str(out), work_dir=str(work), overwrite=True, **kw)
    fresh = segment_report(str(files / "*.tif"), PROMPTS, out=str(tmp_path / "f.gpkg"), checkpoint=False, **kw)
    # the tiles of the east file that the west one does not reach are reused (a column of them at least)
    assert grown.resumed >= 2 and grown.done + grown.resumed + grown.skipped == grown.tiles == fresh.tiles
    def objects(path):
        got = gpd.read_file(path)
        return sorted((r["prompt"], round(r["score"], 6), r["source"], round(r.geometry.area, 6),
                       tuple(np.round(r.geometry.bounds, 6))) for _, r in got.iterrows())

    assert first > 0 and objects(out) == objects(tmp_path / "f.gpkg")  # the rerun gives the fresh run's objects
    print(f"anchored: {grown.resumed} reused, {grown.done} computed of {grown.tiles}")
    # without the anchor, the first run's grid starts at the file's corner: no tile of it is reused
    shutil.rmtree(work)
    (files / "r0c0.tif").unlink()
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output
    shutil.copy(tmp_path / "cells" / "r0c0.tif", files)
    again = segment_report(str(files / "*.tif"), PROMPTS, out=str(out), work_dir=str(work), overwrite=True, **kw)
    print(f"not anchored: {again.resumed} reused, {again.done} computed of {again.tiles}")
    assert again.resumed < grown.resumed, (again.resumed, grown.resumed)
