"""Exemplars too large for a tile's free margin (the exemplar strip) and exemplars from other images
(`--example-image`). Scenes from `benchmarks.bench_exemplar_sizes` (flat rectangles of a size, 0.5 m UTM),
run through the whole pipeline on the reference backend with default options, and on contract ONNX graphs."""

from __future__ import annotations

import json

import geopandas as gpd
import numpy as np
import pytest
import rasterio
import shapely
from click.testing import CliRunner
from PIL import Image

from benchmarks.bench_exemplar_sizes import crs_box, pick, score, write_chip, write_scene
from sam3tiles.cli.main import cli
from sam3tiles.errors import BandError, InputDataError, UsageError
from sam3tiles.prompts.exemplars import GUARD, LIMIT, plan_tile
from sam3tiles.prompts.prompt import GeoBox, Prompt
from sam3tiles.prompts.strip import choose_strip, fits
from sam3tiles.run.pipeline import segment_job
from sam3tiles.testing import write_raster
from sam3tiles.tiling.grid import TileGrid

REF = {"backend": "reference", "checkpoint": False}


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """1500 px, objects ~200 px wide: their patch fits no margin (about 111 px free at overlap 256)."""
    d = tmp_path_factory.mktemp("strip")
    truth = write_scene(d / "s.tif", 1500, 200, seed=3)
    return d, d / "s.tif", truth


def test_a_box_too_large_for_the_margin_finds_its_kind_through_the_strip(big):
    d, path, truth = big
    rect = pick(truth, "blue", 200)
    gdf, rep = segment_job(str(path), [], boxes=[tuple(crs_box(rect).bounds)], **REF)
    s = score(gdf, truth, "blue")
    assert s["recall"] >= 0.95 and s["precision"] >= 0.95, s
    e = rep.exemplars
    assert e["strip_px"] > 111 and e["extra_tiles"] == rep.tiles - 4 > 0  # the default grid has 4 tiles
    assert e["margin"] == 0 and e["strip"] > 0 and e["strip"] + e["padding"] + e["in_place"] >= rep.tiles
    assert e["dropped"] >= e["strip"]  # each pasted copy is found, then dropped
    (row,) = rep.exemplars_by_prompt.values()
    assert row["given"] == 1 and row["strip"] == e["strip"] and row["dropped"] == e["dropped"]
    assert "strip" in rep.summary() and f"+{e['extra_tiles']} tiles" in rep.summary()
    # in place only (box scope tile), it finds the kind only around where it lies
    local, _ = segment_job(str(path), [], boxes=[tuple(crs_box(rect).bounds)], box_scope="tile", **REF)
    assert score(local, truth, "blue")["recall"] < 0.8


def test_the_strip_never_covers_a_core_and_the_cores_still_partition_the_image():
    for side in (150, 250, 336):
        patch = side + 17
        choice = choose_strip([(patch, patch, float(side))], 1008, 256)
        assert choice.strip >= patch and fits(patch, patch, choice.tile_size, 256)
        grid = TileGrid(3100, 2900, tile_size=choice.tile_size, overlap=256)
        boxes = [GeoBox(10, 10, 10 + side, 10 + side), GeoBox(40, 40, 60, 60, positive=False)]
        from sam3tiles.prompts.exemplars import Exemplar

        ex = [Exemplar(i, b, np.zeros((3, int(b.maxy - b.miny) + 17, int(b.maxx - b.minx) + 17), np.uint8),
                       np.ones((int(b.maxy - b.miny) + 17, int(b.maxx - b.minx) + 17), bool),
                       (8, 8, 8 + b.maxx - b.minx, 8 + b.maxy - b.miny), (b.minx, b.miny),
                       (b.minx, b.miny, b.maxx, b.maxy))
              for i, b in enumerate(boxes)]
        area = 0.0
        for t in grid:
            plan = plan_tile(t, [Prompt(None, tuple(boxes))], boxes, ex)
            core = shapely.box(*t.core_tile_px).buffer(1 + GUARD - 1e-6, join_style="mitre")
            for p in plan.pastes:
                assert not shapely.box(*p.xyxy).intersects(core) and p.xyxy[2] <= 1008 and p.xyxy[3] <= 1008
            if not plan.in_place:
                assert len(plan.pastes) == 2 and not plan.no_room  # the positive and the negative, every tile
            area += shapely.box(*t.core_xyxy).area
        assert area == pytest.approx(3100 * 2900)  # the cores still partition the image
    too = choose_strip([(LIMIT + 60, LIMIT + 60, LIMIT + 43.0)], 1008, 256)
    assert too.strip == 0 and too.too_large


def test_larger_boxes_name_the_scale_and_plan_and_dry_run_print_the_cost(big, tmp_path):
    d, path, truth = big
    rect = pick(truth, "blue", 200)
    box = ",".join(f"{v:.3f}" for v in crs_box(rect).bounds)
    huge = ",".join(f"{v:.3f}" for v in crs_box((100, 100, 100 + 400, 100 + 380)).bounds)
    r = CliRunner().invoke(cli, ["plan", str(path), "--box", box])
    assert r.exit_code == 0, r.output
    assert "exemplar strip:" in r.output and "instead of 4" in r.output and "+" in r.output
    job = tmp_path / "job.yaml"
    job.write_text(f"inputs: [{path}]\nprompts: {{boxes: ['{box}']}}\nbackend: {{name: reference}}\n"
                   f"output: {{path: {tmp_path / 'o.gpkg'}}}\n")
    r = CliRunner().invoke(cli, ["run", str(job), "--dry-run"])
    assert r.exit_code == 0 and "exemplars: +" in r.output and "exemplar strip" in r.output, r.output
    _, rep = segment_job(str(path), [], boxes=[huge], **REF)
    notes = " ".join(rep.exemplar_notes)
    assert "acts only where it lies" in notes and "use scale=0.88 or below" in notes
    assert not rep.exemplars.get("strip_px")


@pytest.fixture(scope="module")
def chips(tmp_path_factory):
    d = tmp_path_factory.mktemp("chips")
    truth = write_scene(d / "s.tif", 1500, 100, seed=5)
    return d, d / "s.tif", truth, write_chip(d, 100, 5, geo=False), write_chip(d, 100, 5, geo=True)


def test_a_chip_from_another_scene_finds_the_kind_plain_and_georeferenced_at_twice_the_pixel_size(chips, tmp_path):
    d, path, truth, png, geo = chips
    with rasterio.open(geo) as ds:
        assert ds.transform.a == 1.0  # twice the scene's 0.5 m
    for chip in (png, geo):
        gdf, rep = segment_job(str(path), [], example_images=[str(chip)], **REF)
        s = score(gdf, truth, "blue")
        assert s["recall"] >= 0.95 and s["precision"] >= 0.95, (chip, s)
        (row,) = rep.exemplars_by_prompt.values()
        assert row["images"] == 1 and row["pasted"] == rep.tiles and row["in_place"] == 0
    # a folder means every image in it, ",neg" a negative; job files take prompts.example_images
    folder = tmp_path / "lib"
    folder.mkdir()
    Image.open(png).save(folder / "a.png")
    job = tmp_path / "job.yaml"
    job.write_text(f"inputs: [{path}]\nprompts: {{example_images: [lib]}}\nbackend: {{name: reference}}\n"
                   f"output: {{path: o.gpkg}}\n")
    r = CliRunner().invoke(cli, ["-q", "run", str(job)])
    assert r.exit_code == 0, r.output
    assert score(gpd.read_file(tmp_path / "o.gpkg"), truth, "blue")["recall"] >= 0.95
    report = json.loads((tmp_path / "o.gpkg.report.json").read_text())
    assert report["parameters"]["example_images"] == [str(folder / "a.png")]


def test_chip_pixels_never_reach_outputs_and_a_changed_chip_invalidates_what_it_reached(chips, tmp_path):
    d, path, truth, png, _ = chips
    chip = tmp_path / "m.png"
    Image.fromarray(np.full((40, 50, 3), (250, 10, 250), np.uint8)).save(chip)  # magenta: not in the scene
    out, labels = tmp_path / "o.gpkg", tmp_path / "l.tif"
    gdf, rep = segment_job(str(path), [], example_images=[str(chip)], backend="reference", out=out, labels=labels)
    assert len(gdf) == 0 and rep.exemplars["dropped"] >= rep.tiles  # every pasted copy found, then dropped
    with rasterio.open(labels) as ds:
        assert not ds.read(1).any()
    Image.fromarray(np.full((40, 50, 3), (250, 10, 250), np.uint8)).save(chip)  # the same bytes again
    _, rep = segment_job(str(path), [], example_images=[str(chip)], backend="reference", out=out, overwrite=True)
    assert rep.resumed == rep.tiles and rep.done == 0
    Image.fromarray(np.full((40, 50, 3), (250, 12, 250), np.uint8)).save(chip)  # changed content
    _, rep = segment_job(str(path), [], example_images=[str(chip)], backend="reference", out=out, overwrite=True)
    assert rep.done == rep.tiles and rep.resumed == 0


def test_bad_chips_are_refused_before_any_tile(chips, tmp_path):
    d, path, truth, png, _ = chips
    (tmp_path / "text.png").write_text("not an image")
    write_raster(tmp_path / "five.tif", np.zeros((5, 20, 20), np.uint8), crs=None)
    Image.fromarray(np.zeros((400, 420, 3), np.uint8)).save(tmp_path / "large.png")
    cases = [(str(tmp_path / "missing.png"), InputDataError, "no such file"),
             (str(tmp_path / "nothing-*.png"), InputDataError, "matches no image"),
             (str(tmp_path / "text.png"), InputDataError, "text.png"),
             (str(tmp_path / "five.tif"), BandError, "5 bands"),
             (str(tmp_path / "large.png"), UsageError, "run at scale=0.84 or below")]  # Python: keywords
    for chip, err, words in cases:
        with pytest.raises(err, match=words):
            segment_job(str(path), [], example_images=[chip], out=tmp_path / "o.gpkg", **REF)
        assert not (tmp_path / "o.gpkg").exists() and not (tmp_path / "o.gpkg.sam3tiles-work").exists()
    r = CliRunner().invoke(cli, ["segment", str(path), "--example-image", str(tmp_path / "missing.png"),
                                 "--backend", "reference", "--out", str(tmp_path / "o.gpkg")])
    assert r.exit_code == 3 and "missing.png" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(cli, ["segment", str(path), "--example-image", str(tmp_path / "large.png"),
                                 "--backend", "reference", "--out", str(tmp_path / "o.gpkg")])
    assert r.exit_code == 2 and "--example-image " in r.output and "run at --scale 0.84 or below" in r.output


def test_text_and_exemplars_in_one_run_and_several_exemplars_per_prompt(chips):
    """The text prompt scores the same beside exemplar prompts (the pastes cost it nothing); a prompt with
    text and two exemplars (a box and a chip) finds its kind."""
    from benchmarks.bench_exemplar_sizes import text_f1

    d, path, truth, png, _ = chips
    rect = pick(truth, "blue", 100)
    f1 = text_f1(path, truth, tuple(crs_box(rect).bounds))
    assert f1["alone"] >= 0.95 and f1["delta"] <= 0.005, f1
    gdf, rep = segment_job(str(path), ["blue"], boxes=[tuple(crs_box(rect).bounds)], example_images=[str(png)], **REF)
    assert score(gdf, truth, "blue")["recall"] >= 0.95
    (row,) = rep.exemplars_by_prompt.values()
    assert row["given"] == 2 and row["boxes"] == 1 and row["images"] == 1


def test_contract_graphs_find_far_objects_from_an_example_image(tmp_path):
    """The test decoder segments by the colour under the positive box of each tile's own input: far tiles
    find the kind only because the box points at the pasted chip."""
    from onnx_graphs import build_contract_models

    from test_exemplars import KINDS, _crs, _scene

    path, truth = _scene(tmp_path / "m.tif", kinds=("magenta", "blue"), seed=2)
    chip = tmp_path / "chip.png"
    Image.fromarray(np.full((44, 52, 3), KINDS["magenta"], np.uint8)).save(chip)
    model = build_contract_models(tmp_path / "model", decoder="colour", grid=12, box_slots=1)
    gdf, rep = segment_job(str(path), [], example_images=[str(chip)], backend="onnx", model=str(model),
                           checkpoint=False)
    far = [_crs(r) for k, r in truth if k == "magenta" and min(r[0], r[1]) > 1100]
    found = shapely.union_all(list(gdf.geometry))
    covered = np.asarray([g.intersection(found).area / g.area for g in far])
    assert len(far) > 10 and (covered > 0.7).all(), covered
    assert rep.exemplars["pasted"] == rep.tiles == 9
