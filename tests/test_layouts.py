"""SAM 3 exports in other layouts (sam3tiles.model.layouts): samexporter 0.5.0's graphs run through `segment`
and give the seed layout's objects; raw scores under 0.5 are kept when asked; unknown layouts and thresholds a
filtered decoder cannot keep are refused with exit 4 before any tile."""

from __future__ import annotations

import json
import shutil

import geopandas as gpd
import numpy as np
import pytest
import shapely
from affine import Affine
from click.testing import CliRunner
from sam3tiles.testing import write_raster
from sam3tiles.testing.graphs import (build_contract_models, build_samexporter_models, contract_interface,
                                      interface_graph, write_graph)

from sam3tiles.cli.main import cli
from sam3tiles.cli.model import model as model_cli
from sam3tiles.errors import EXIT_MODEL
from sam3tiles.model import layouts

T = Affine(0.5, 0, 500000, 0, -0.5, 4000000)
BG = (70, 90, 120)
COLOURS = {"red": (250, 5, 5), "blue": (5, 5, 250), "yellow": (250, 250, 5), "green": (5, 250, 5)}
# a scene none of the other tests uses: objects inside tiles and across seams (tiles of 1008, overlap 256)
OBJECTS = [("red", (120, 900, 300, 1010)), ("blue", (700, 200, 860, 420)), ("blue", (1500, 1300, 1830, 1420)),
           ("yellow", (2200, 640, 2330, 900)), ("green", (980, 700, 1120, 790))]
# 12 x 12 px of magenta: about 12 matching mask cells, so the colour decoder scores it 12/(12+16) ~ 0.43
FAINT = (1900, 300, 1912, 312)
PROMPTS = ["red", "blue", "yellow", "green"]


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    img = np.empty((3, 1700, 2600), np.uint8)
    img[:] = np.asarray(BG, np.uint8)[:, None, None]
    for name, (x0, y0, x1, y1) in OBJECTS:
        img[:, y0:y1, x0:x1] = np.asarray(COLOURS[name], np.uint8)[:, None, None]
    x0, y0, x1, y1 = FAINT
    img[:, y0:y1, x0:x1] = np.asarray((255, 0, 255), np.uint8)[:, None, None]
    return write_raster(tmp_path_factory.mktemp("layout-scene") / "scene.tif", img, transform=T)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("layouts")
    return {"seed": build_contract_models(root / "seed", grid=1),
            "uint8": build_samexporter_models(root / "uint8", box_slots=4, grid=1),
            "float32": build_samexporter_models(root / "float32", box_slots=4, image="float32", grid=1),
            "simplified": build_samexporter_models(root / "simple", box_slots=4, grid=1, simplified=True),
            "filtered": build_samexporter_models(root / "filtered", box_slots=4, grid=1, outputs="filtered")}


def _segment(scene, model, out, *extra, prompts=PROMPTS):
    args = ["segment", str(scene), "--backend", "onnx", "--model", str(model), "--out", str(out), "--no-preview"]
    for p in prompts:
        args += ["--text", p]
    return CliRunner().invoke(cli, args + list(extra))


def _union_iou(a: gpd.GeoDataFrame, b: gpd.GeoDataFrame) -> float:
    ua, ub = shapely.union_all(a.geometry.values), shapely.union_all(b.geometry.values)
    return ua.intersection(ub).area / ua.union(ub).area


@pytest.fixture(scope="module")
def seed_result(tmp_path_factory, scene, models):
    out = tmp_path_factory.mktemp("seed-out") / "seed.gpkg"
    r = _segment(scene, models["seed"], out)
    assert r.exit_code == 0, r.output
    return gpd.read_file(out)


@pytest.mark.parametrize("which", ["uint8", "float32", "simplified"])
def test_samexporter_graphs_give_the_seed_layouts_objects(tmp_path, scene, models, seed_result, which):
    out = tmp_path / "o.gpkg"
    r = _segment(scene, models[which], out)
    assert r.exit_code == 0, r.output
    got = gpd.read_file(out)
    assert sorted(got["prompt"]) == sorted(seed_result["prompt"])  # same classes, same counts
    assert len(got) == len(OBJECTS)
    for prompt in PROMPTS:
        iou = _union_iou(got[got["prompt"] == prompt], seed_result[seed_result["prompt"] == prompt])
        assert iou >= 0.9, (prompt, iou)
    assert _union_iou(got, seed_result) >= 0.9
    # the rows and the report say which layout ran
    assert set(got["model"]) == {got["model"].iloc[0]} and ":samexporter-0.5.0" in got["model"].iloc[0]
    assert ":samexporter" not in seed_result["model"].iloc[0]
    report = json.loads(next(tmp_path.glob("*report*.json")).read_text())
    assert "samexporter 0.5.0" in json.dumps(report["runtime_counters"])


def test_a_lower_threshold_keeps_queries_the_seed_layout_cannot_return(tmp_path, scene, models):
    prompts = ["magenta"]
    seed = _segment(scene, models["seed"], tmp_path / "seed.gpkg", prompts=prompts)
    assert seed.exit_code == 0, seed.output
    assert not (tmp_path / "seed.gpkg").exists() or len(gpd.read_file(tmp_path / "seed.gpkg")) == 0
    raw = _segment(scene, models["uint8"], tmp_path / "raw.gpkg", prompts=prompts)  # default 0.5: same as seed
    assert raw.exit_code == 0 and (not (tmp_path / "raw.gpkg").exists() or len(gpd.read_file(tmp_path / "raw.gpkg"))
                                   == 0)
    low = _segment(scene, models["uint8"], tmp_path / "low.gpkg", "--score-threshold", "0.3", prompts=prompts)
    assert low.exit_code == 0, low.output
    got = gpd.read_file(tmp_path / "low.gpkg")
    assert len(got) == 1 and 0.3 < got["score"].iloc[0] < 0.5
    x0, y0, x1, y1 = FAINT
    (a, b), (c, d) = T @ (x0, y0), T @ (x1, y1)
    truth = shapely.box(min(a, c), min(b, d), max(a, c), max(b, d))
    assert got.geometry.iloc[0].intersects(truth)
    assert ":t0.3" in got["model"].iloc[0]
    report = json.loads(next(tmp_path.glob("low*report*.json")).read_text())
    text = json.dumps(report["runtime_counters"])
    assert '"score_threshold": 0.3' in text and "queries_under_threshold" in text
    assert "score threshold 0.3" in low.output


def test_a_filtered_decoder_refuses_a_threshold_under_its_cut(tmp_path, scene, models):
    for which in ("seed", "filtered"):
        out = tmp_path / f"{which}.gpkg"
        r = _segment(scene, models[which], out, "--score-threshold", "0.3")
        assert r.exit_code == EXIT_MODEL, r.output
        title = "samexporter 0.5.0" if which == "filtered" else "sam3-onnx v0.3.0"
        assert "--score-threshold 0.3" in r.output and title in r.output and "Traceback" not in r.output
        assert not out.exists()


def _broken(tmp_path, models, change: str):
    d = shutil.copytree(models["uint8"], tmp_path / change)
    from sam3tiles.model.contract import read_graph_io

    io = read_graph_io(d / "sam3_decoder.onnx")
    ins = [[t.name, t.dtype, list(t.shape)] for t in io.inputs]
    outs = [[t.name, t.dtype, list(t.shape)] for t in io.outputs]
    if change == "renamed":
        outs[1][0] = "pred_scores"
    elif change == "missing":
        outs = outs[:3]
    elif change == "dtype":
        ins[-2][1] = "int32"  # box_labels
    elif change == "rank":
        outs[0][2] = [200, 4]
    write_graph(interface_graph("sam3_decoder", ins, outs), d / "sam3_decoder.onnx")
    return d


@pytest.mark.parametrize("change,words", [("renamed", "output 'pred_logits' is missing"),
                                          ("missing", "output 'presence_logit_dec' is missing"),
                                          ("dtype", "input 'box_labels' is int32"),
                                          ("rank", "output 'pred_boxes' has rank 2")])
def test_a_broken_export_is_refused_before_any_tile(tmp_path, scene, models, change, words):
    d = _broken(tmp_path, models, change)
    out = tmp_path / "o.gpkg"
    r = _segment(scene, d, out, prompts=["red"])
    assert r.exit_code == EXIT_MODEL, r.output
    assert words in r.output and "Traceback" not in r.output
    assert "fits no SAM 3 ONNX layout" in r.output and "Known layouts: sam3-onnx v0.3.0" in r.output
    assert "samexporter 0.5.0" in r.output
    assert not out.exists() and not list(tmp_path.glob("*report*.json"))
    v = CliRunner().invoke(model_cli, ["verify", str(d)])
    assert v.exit_code == EXIT_MODEL and words in v.output


@pytest.mark.parametrize("which,image", [("uint8", "image uint8"), ("float32", "image float32 normalised")])
def test_model_verify_and_info_name_the_layout(models, which, image):
    v = CliRunner().invoke(model_cli, ["verify", str(models[which])])
    assert v.exit_code == 0, v.output
    assert "samexporter 0.5.0: tile side 1008 (mask grid 288), 4 box slots, scores raw" in v.output
    assert image in v.output
    assert "precision float32" in v.output
    i = CliRunner().invoke(model_cli, ["info", str(models[which])])
    assert i.exit_code == 0, i.output
    assert "layout: samexporter 0.5.0 layout: tile side 1008, 4 box slots" in i.output and "scores raw" in i.output
    f = layouts.info(models["filtered"])
    assert f.fit.layout is layouts.SAMEXPORTER and not f.fit.raw_scores
    s = layouts.info(models["seed"])
    assert s.fit.layout is layouts.SEED and "filtered at 0.5" in s.fit.describe()


def test_every_layout_in_the_table_has_a_test_graph(models, tmp_path):
    from sam3tiles.testing.batched import build_batched_models

    folders = [*models.values(), build_batched_models(tmp_path / "batched")]
    assert {layouts.info(m).fit.layout.key for m in folders} == {lay.key for lay in layouts.LAYOUTS}
    # an interface made from the seed contract with one output renamed fits no layout
    ins, outs = contract_interface("decoder")
    assert ins and outs


def test_a_float_image_of_another_side_is_named_not_run():
    """A 644 px float image in front of 288 px maps: the side and the grid it needs are named at load."""
    from sam3tiles.model.contract import CONTRACT, TensorSpec

    ios = {k: (list(CONTRACT[k][1]), list(CONTRACT[k][2])) for k in ("image_encoder", "language_encoder")}
    ios["image_encoder"] = ([TensorSpec("image", "float32", (1, 3, 644, 644))], ios["image_encoder"][1])
    best = layouts.fits(ios)[0]
    assert any("a 644 px input needs 184" in d for d in best.differences), best.differences
    ios["image_encoder"] = ([TensorSpec("image", "float32", (1, 3, "h", "w"))], ios["image_encoder"][1])
    best = layouts.fits(ios)[0]
    assert best.layout is layouts.SAMEXPORTER and not best.differences and best.image_input == "float32 normalised"


def test_the_reference_backend_refuses_a_lower_threshold():
    from sam3tiles.errors import UsageError
    from sam3tiles.options import Options

    with pytest.raises(UsageError, match="reference backend"):
        Options(backend="reference", score_threshold=0.3)
    assert Options(score_threshold=0.3).min_score == 0.3  # min_score at its default follows the threshold
    with pytest.raises(UsageError, match="already drops"):
        Options(score_threshold=0.5, min_score=0.4)


def test_clicks_go_to_a_samexporter_decoder_as_small_boxes(models):
    """Without a point decoder, samexporter's layout answers clicks as its caller sends them: a 0.01-wide box
    each, with its label; the object is the best-scored mask that holds the positive clicks."""
    from sam3tiles.model.onnx import OnnxRuntime
    from sam3tiles.model.runtime import Click, TileImage
    from sam3tiles.testing.graphs import blank_tile, paint

    rt = OnnxRuntime(models["uint8"], device="cpu")
    assert rt.clicks_problem() is None
    rgb = blank_tile()
    paint(rgb, 100, 100, 300, 200, "red")
    paint(rgb, 600, 600, 700, 900, "blue")
    emb = rt.encode(TileImage(rgb, np.ones((1008, 1008), bool)), clicks=True)
    det = rt.decode_clicks(emb, [Click((650, 700))])
    assert len(det) == 1
    x0, y0, x1, y1 = (det.boxes[0] * 1008).round()
    assert abs(x0 - 600) <= 4 and abs(y0 - 600) <= 4 and abs(x1 - 700) <= 4 and abs(y1 - 900) <= 4
    (red,) = rt.decode_clicks(emb, [Click((200, 150)), Click((650, 700), positive=False)]).boxes
    assert np.allclose(red * 1008, (100, 100, 300, 200), atol=4)
    with pytest.raises(ValueError, match="at most 4"):
        rt.decode_clicks(emb, [Click((650, 700))] * 5)
    seed = OnnxRuntime(models["seed"], device="cpu")
    assert "point decoder" in seed.clicks_problem()  # the seed layout has no such route


def test_a_point_through_the_cli_on_samexporter_files(tmp_path, scene, models):
    x0, y0, x1, y1 = OBJECTS[2][1]  # blue, across a seam
    cx, cy = T @ ((x0 + x1) / 2, (y0 + y1) / 2)
    out = tmp_path / "pt.gpkg"
    r = CliRunner().invoke(cli, ["segment", str(scene), "--point", f"{cx},{cy}", "--backend", "onnx", "--model",
                                 str(models["uint8"]), "--out", str(out), "--no-preview"])
    assert r.exit_code == 0, r.output
    (geom,) = gpd.read_file(out).geometry
    (a, b), (c, d) = T @ (x0, y0), T @ (x1, y1)
    truth = shapely.box(min(a, c), min(b, d), max(a, c), max(b, d))
    assert geom.intersection(truth).area / geom.union(truth).area > 0.9
