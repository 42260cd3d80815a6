"""The whole pipeline through `--backend onnx` on contract-faithful test graphs (real onnxruntime
sessions): objects found where they are, boxes in the right frame from any CRS, costs paid once."""

from __future__ import annotations

import geopandas as gpd
import numpy as np
import pytest
import shapely
from affine import Affine
from click.testing import CliRunner
from sam3tiles.testing import UTM, write_raster
from sam3tiles.testing.graphs import build_contract_models
from shapely.geometry import box

from sam3tiles.cli.main import cli
from sam3tiles.run.pipeline import segment_job

BG = (92, 112, 84)
T = Affine(0.5, 0, 400000, 0, -0.5, 5000000)
# one object per colour (the test decoder with grid=1 returns one instance per colour and tile)
OBJECTS = {"red": (300, 200, 420, 330), "blue": (1450, 900, 1700, 1150),  # blue crosses a seam
           "yellow": (2100, 300, 2200, 380)}


def _scene(tmp_path):
    img = np.empty((3, 1500, 2500), np.uint8)
    img[:] = np.asarray(BG, np.uint8)[:, None, None]
    colours = {"red": (250, 5, 5), "blue": (5, 5, 250), "yellow": (250, 250, 5)}
    for name, (x0, y0, x1, y1) in OBJECTS.items():
        img[:, y0:y1, x0:x1] = np.asarray(colours[name], np.uint8)[:, None, None]
    return write_raster(tmp_path / "scene.tif", img, transform=T)


def _crs_box(x0, y0, x1, y1):
    (a, b), (c, d) = T @ (x0, y0), T @ (x1, y1)
    return box(min(a, c), min(b, d), max(a, c), max(b, d))


@pytest.fixture
def colour_models(tmp_path):
    return build_contract_models(tmp_path / "model", decoder="colour", grid=1)


def test_onnx_backend_finds_the_objects_where_they_are(tmp_path, colour_models):
    path = _scene(tmp_path)
    out = tmp_path / "o.gpkg"
    gdf, rep = segment_job(str(path), ["red", "blue", "yellow"], backend="onnx", model=str(colour_models),
                           out=out)
    read = gpd.read_file(out)
    assert len(read) == len(gdf) == 3
    for name, rect in OBJECTS.items():
        (geom,) = read[read["prompt"] == name].geometry
        truth = _crs_box(*rect)
        assert geom.intersection(truth).area / geom.union(truth).area > 0.9, name
    assert set(read["backend"]) == {"onnx"} and read["model"].iloc[0].startswith("onnx:")
    # costs paid once: one image encoding per tile, one language-encoder run per distinct prompt
    (counters,) = [c["onnx"] for c in rep.runtime_counters.values() if "onnx" in c]
    assert counters["loads"] == 1
    assert counters["encodes"] == rep.done == rep.tiles == 6
    assert counters["prompts"] == 3
    assert counters["decodes"] == 3 * rep.done
    # a second job in the same process reuses the prompts' encodings: no language-encoder run at all
    _, rep2 = segment_job(str(path), ["red", "blue"], backend="onnx", model=str(colour_models), checkpoint=False)
    (counters2,) = [c["onnx"] for c in rep2.runtime_counters.values() if "onnx" in c]
    assert counters2["prompts"] == 3 and counters2["encodes"] == 12


@pytest.mark.parametrize("slots", [1, 16])
def test_boxes_arrive_in_the_models_frame_from_any_crs(tmp_path, slots):
    model = build_contract_models(tmp_path / f"m{slots}", decoder="box-echo", box_slots=slots)
    path = _scene(tmp_path)
    rect = (820, 600, 1130, 790)  # crosses the seam between tile columns 0 and 1
    target = _crs_box(*rect)
    # as --box in the raster's CRS
    gdf, _ = segment_job(str(path), [], boxes=[",".join(map(str, target.bounds))], backend="onnx",
                         model=str(model), checkpoint=False)
    (geom,) = gdf.geometry
    assert geom.intersection(target).area / geom.union(target).area > 0.97
    # as a box file in WGS84
    bf = tmp_path / "boxes.geojson"
    gpd.GeoDataFrame({"label": [1]}, geometry=[target], crs=UTM.to_wkt()).to_crs(4326).to_file(bf)
    gdf2, _ = segment_job(str(path), [], box_file=str(bf), backend="onnx", model=str(model), checkpoint=False)
    (geom2,) = gdf2.geometry
    # reprojection turns the box into a slightly rotated quadrilateral: its bounds are the example
    assert geom2.intersection(target).area / geom2.union(target).area > 0.95
    assert gdf2["prompt"].iloc[0] == "visual"


def test_more_boxes_than_slots_take_several_passes_merged_once(tmp_path):
    model = build_contract_models(tmp_path / "m", decoder="box-echo", box_slots=1)
    path = _scene(tmp_path)
    rects = [(100 + 150 * i, 1000, 200 + 150 * i, 1100) for i in range(4)]  # 4 boxes in one tile, 1 slot
    boxes = [",".join(map(str, _crs_box(*r).bounds)) for r in rects]
    gdf, rep = segment_job(str(path), [], boxes=boxes, backend="onnx", model=str(model), checkpoint=False)
    # each pass echoes its own box; the merge keeps each once
    assert len(gdf) == 4
    for r in rects:
        t = _crs_box(*r)
        # a 100 px box on 3.5 px mask cells: up to ~1.75 px off per edge
        assert max(g.intersection(t).area / g.union(t).area for g in gdf.geometry) > 0.9


def test_no_detections_is_fine(tmp_path, colour_models):
    path = _scene(tmp_path)
    gdf, rep = segment_job(str(path), ["magenta"], backend="onnx", model=str(colour_models), checkpoint=False)
    assert len(gdf) == 0 and rep.done == rep.tiles and rep.failed == 0


@pytest.mark.parametrize("case", ["box-outside", "box-file-without-crs", "prompt-too-long", "wrong-layout"])
def test_bad_input_through_the_cli(tmp_path, colour_models, case):
    path = _scene(tmp_path)
    out = tmp_path / "o.gpkg"
    args = ["segment", str(path), "--backend", "onnx", "--model", str(colour_models), "--out", str(out)]
    if case == "box-outside":
        args += ["--box", "1,1,2,2"]
        code, words = 2, "outside"
    elif case == "box-file-without-crs":
        bf = tmp_path / "b.geojson"
        bf.write_text('{"type":"FeatureCollection","features":[{"type":"Feature","properties":{},"geometry":'
                      '{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,1],[0,0]]]}}]}')
        # GeoJSON without a crs member reads as WGS84; a CSV-less shapefile would be truly CRS-less:
        # write a GeoPackage without CRS instead
        with pytest.warns(UserWarning, match="'crs' was not provided"):  # pyogrio says so: that is the point
            gpd.GeoDataFrame(geometry=[box(400100, 4999500, 400200, 4999600)]).to_file(tmp_path / "b.gpkg")
        args += ["--box-file", str(tmp_path / "b.gpkg")]
        code, words = 3, "no CRS"
    elif case == "prompt-too-long":
        args += ["--text", " ".join(["red"] * 40)]
        code, words = 2, "30"
    else:
        import shutil

        bad = tmp_path / "bad-model"
        shutil.copytree(colour_models, bad)
        build_contract_models(tmp_path / "m16", decoder="colour", box_slots=16)
        shutil.copy(tmp_path / "m16" / "sam3_decoder.onnx", bad / "sam3_decoder.onnx")
        # a decoder whose box inputs disagree with each other cannot be made from the builder; instead
        # swap in an image encoder in place of the decoder: every name differs
        shutil.copy(bad / "sam3_language_encoder.onnx", bad / "sam3_decoder.onnx")
        args[args.index(str(colour_models))] = str(bad)
        args += ["--text", "red"]
        code, words = 4, "sam3_decoder.onnx"
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == code, r.output
    assert "Traceback" not in r.output and words in r.output
    assert not out.exists() and not list(tmp_path.glob(".o.*"))


def test_merged_geometry_is_valid_and_single(tmp_path, colour_models):
    path = _scene(tmp_path)
    gdf, rep = segment_job(str(path), ["blue"], backend="onnx", model=str(colour_models), checkpoint=False)
    (geom,) = gdf.geometry
    assert geom.is_valid and geom.geom_type == "Polygon"
    assert shapely.get_num_interior_rings(geom) == 0
    assert gdf["n_tiles"].iloc[0] >= 2


def test_one_mask_per_prompt_graphs_cover_the_scene(tmp_path):
    """Contract graphs that answer each prompt with ONE mask holding every match (grid=1: N <= 1 per tile
    and prompt, as SAM 3 answers concept prompts): the merge keeps every region of every tile's mask."""
    from sam3tiles.testing.demo import write_scene

    models = build_contract_models(tmp_path / "model", decoder="colour", grid=1)
    scene = write_scene(tmp_path / "scene.tif", 2300, 1900, seed=7)
    gdf, rep = segment_job(str(scene.path), ["red", "blue", "yellow"], backend="onnx", model=str(models),
                           checkpoint=False)
    assert rep.tiles == 9 and rep.merge["parts_split"] > 0
    truth = shapely.union_all(scene.truth.geometry.values)
    pred = shapely.union_all(gdf.geometry.values)
    assert pred.intersection(truth).area / pred.union(truth).area >= 0.9
    for cls in ("blue", "yellow"):
        t = shapely.union_all(scene.truth.geometry[scene.truth["class"] == cls].values)
        p = shapely.union_all(gdf.geometry[gdf["prompt"] == cls].values)
        assert p.intersection(t).area / p.union(t).area >= 0.9, cls
    # every object its own polygon (not one per tile); the vehicles' area is bounded by the graph's binary
    # 288 masks of 10x20 px objects (union IoU 0.75 here, 0.70 with the 16-query graph), not by the merge:
    # what the tiles own comes out
    for cls in ("red", "blue", "yellow"):
        assert (gdf["prompt"] == cls).sum() == (scene.truth["class"] == cls).sum()
    for c in rep.merge["coverage"].values():
        assert c["out"] >= 0.99 * c["owned"]


def test_model_files_replaced_between_jobs_in_one_process_are_loaded_anew(tmp_path, colour_models):
    """A notebook keeps its process between jobs; `sam3tiles model fetch` (or a re-export) replaces the files
    in the model folder meanwhile. The next job must run the files as they are now, not the sessions
    loaded from the old ones (which would label old answers with the new files' identity)."""
    from sam3tiles.model.registry import runtime_stats

    path = _scene(tmp_path)
    gdf, rep = segment_job(str(path), ["red", "blue"], backend="onnx", model=str(colour_models), checkpoint=False)
    assert len(gdf) == 2
    build_contract_models(tmp_path / "other", decoder="box-echo", grid=1)  # answers boxes only: nothing to a text
    (colour_models / "sam3_decoder.onnx").unlink()
    (tmp_path / "other" / "sam3_decoder.onnx").rename(colour_models / "sam3_decoder.onnx")
    gdf2, rep2 = segment_job(str(path), ["red", "blue"], backend="onnx", model=str(colour_models), checkpoint=False)
    assert rep2.model != rep.model
    assert len(gdf2) == 0
    assert sum(s.get("onnx", {}).get("loads", 0) for s in [runtime_stats()]) == 1  # the old sessions dropped
