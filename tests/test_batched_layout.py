"""The batched FP16 644 px layout (greenjava/sam3-onnx; `sam3tiles.testing.batched`): recognised from its graphs,
its tile side sets the run's tiles, every text prompt of a tile decoded in one call, float16 answers the float32
ones within a stated tolerance, and a broken export refused with exit 4 before any tile."""

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
from sam3tiles.testing.batched import build_batched_models
from sam3tiles.testing.graphs import build_contract_models, interface_graph, write_graph

from sam3tiles.cli.main import cli
from sam3tiles.cli.model import model as model_cli
from sam3tiles.errors import EXIT_MODEL
from sam3tiles.model import layouts

T = Affine(0.5, 0, 500000, 0, -0.5, 4000000)
BG = (70, 90, 120)
COLOURS = {"red": (250, 5, 5), "blue": (5, 5, 250), "yellow": (250, 250, 5), "green": (5, 250, 5)}
# objects inside tiles, across seams, and two larger than a 644 px tile (one larger than 1008 across)
OBJECTS = [("red", (60, 80, 200, 170)), ("blue", (500, 560, 1400, 760)), ("yellow", (1700, 150, 1820, 1050)),
           ("green", (1100, 1100, 1240, 1180)), ("red", (900, 1350, 1000, 1420)), ("blue", (300, 1000, 420, 1300))]
PROMPTS = ["red", "blue", "yellow", "green"]
#: FP16 against float32: box corners within one mask cell (1/184 of the side), scores within 1e-3, mask cells equal
BOX_TOL, SCORE_TOL = 1 / 184, 1e-3


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    img = np.empty((3, 1500, 2000), np.uint8)
    img[:] = np.asarray(BG, np.uint8)[:, None, None]
    for name, (x0, y0, x1, y1) in OBJECTS:
        img[:, y0:y1, x0:x1] = np.asarray(COLOURS[name], np.uint8)[:, None, None]
    return write_raster(tmp_path_factory.mktemp("batched-scene") / "scene.tif", img, transform=T)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("batched")
    return {"seed": build_contract_models(root / "seed", grid=1), "fp16": build_batched_models(root / "fp16"),
            "fp32": build_batched_models(root / "fp32", precision="float32")}


def _segment(scene, model, out, *extra, prompts=PROMPTS):
    args = ["segment", str(scene), "--backend", "onnx", "--model", str(model), "--out", str(out), "--no-preview"]
    for p in prompts:
        args += ["--text", p]
    return CliRunner().invoke(cli, args + list(extra))


def _f1(a: gpd.GeoDataFrame, b: gpd.GeoDataFrame, iou: float = 0.5) -> float:
    """Objects matched one to one within a class at IoU >= `iou`: 2 x matches / (len(a) + len(b))."""
    used, hits = set(), 0
    for i, ra in a.iterrows():
        for j, rb in b.iterrows():
            if j in used or ra["prompt"] != rb["prompt"]:
                continue
            g, h = ra.geometry, rb.geometry
            if g.intersection(h).area / g.union(h).area >= iou:
                used.add(j)
                hits += 1
                break
    return 2 * hits / (len(a) + len(b)) if len(a) + len(b) else 1.0


def _truth() -> list[tuple[str, shapely.Polygon]]:
    out = []
    for name, (x0, y0, x1, y1) in OBJECTS:
        (a, b), (c, d) = T @ (x0, y0), T @ (x1, y1)
        out.append((name, shapely.box(min(a, c), min(b, d), max(a, c), max(b, d))))
    return out


def test_the_layout_is_recognised_and_named(models):
    for which, precision in (("fp16", "float16"), ("fp32", "float32")):
        f = layouts.info(models[which]).fit
        assert f.layout is layouts.BATCHED and not f.differences, f.differences
        assert (f.image_side, f.mask_side, f.precision, f.batched, f.raw_scores) == (644, 184, precision, True, True)
    v = CliRunner().invoke(model_cli, ["verify", str(models["fp16"])])
    assert v.exit_code == 0, v.output
    assert "tile side 644 (mask grid 184), no box slots (text only), scores raw" in v.output
    assert "precision float16" in v.output and "in one decoder call" in v.output
    i = CliRunner().invoke(model_cli, ["info", str(models["fp16"])])
    assert i.exit_code == 0 and "batched fp16 (greenjava/sam3-onnx) layout: tile side 644, text only" in i.output


def test_float16_gives_the_float32_objects_within_tolerance(models):
    from sam3tiles.model.onnx import OnnxRuntime
    from sam3tiles.testing.graphs import blank_tile, paint

    rgb = blank_tile()
    paint(rgb, 101, 37, 333, 90, "red")
    paint(rgb, 400, 400, 640, 600, "blue")  # to the model's edge (644): the part beyond is not its input
    answers = {}
    for which in ("fp16", "fp32"):
        rt = OnnxRuntime(models[which], device="cpu")
        emb = rt.encode(rgb)
        answers[which] = rt.decode_batch(emb, [rt.prepare_prompt(t) for t in ("red", "blue", "green")])
        assert rt.counters["decodes"] == 1 and rt.counters["encodes"] == 1
    for half, full in zip(answers["fp16"], answers["fp32"]):
        assert len(half) == len(full)
        assert np.abs(half.boxes - full.boxes).max(initial=0) <= BOX_TOL * 644 / 1008
        assert np.abs(half.scores - full.scores).max(initial=0) <= SCORE_TOL
        assert np.array_equal(half.masks > 0.5, full.masks > 0.5)
    red, blue, green = answers["fp16"]
    assert len(red) == 1 and len(blue) == 1 and len(green) == 0
    # in the 1008 frame: the red box at its pixels, the 184 grid the top-left of the 288 one
    assert np.allclose(red.boxes[0] * 1008, (101, 37, 333, 90), atol=4)
    assert red.masks.shape[-1] == 288 and not (red.masks[0, 0, 184:, :] > 0.5).any()


def test_same_objects_as_the_1008_layout_in_one_decoder_call_a_tile(tmp_path, scene, models):
    seed_out, out = tmp_path / "seed.gpkg", tmp_path / "batched.gpkg"
    r = _segment(scene, models["seed"], seed_out)
    assert r.exit_code == 0, r.output
    b = _segment(scene, models["fp16"], out)
    assert b.exit_code == 0, b.output
    seed, got = gpd.read_file(seed_out), gpd.read_file(out)
    assert len(got) == len(OBJECTS) == len(seed), (len(got), len(seed))
    assert _f1(got, seed) >= 0.99
    truth = gpd.GeoDataFrame({"prompt": [n for n, _ in _truth()]}, geometry=[g for _, g in _truth()], crs=got.crs)
    assert _f1(got, truth, iou=0.9) >= 0.99  # objects larger than a tile come whole
    report = json.loads(next(tmp_path.glob("batched*report*.json")).read_text())
    assert report["parameters"]["tile_size"] == 644 and report["parameters"]["overlap"] == 164
    tiles = report["done"]
    assert tiles > 4 and report["decoder_calls"] == tiles  # one call a tile for four prompts
    seed_report = json.loads(next(tmp_path.glob("seed*report*.json")).read_text())
    assert seed_report["decoder_calls"] == seed_report["done"] * len(PROMPTS)
    assert ":batched-fp16" in got["model"].iloc[0]
    assert f"{tiles} decoder calls" in b.output
    from sam3tiles.options import Options
    from sam3tiles.run.planning.plan import plan_run

    plan = plan_run([str(scene)], PROMPTS, options=Options(backend="onnx", model=str(models["fp16"])))
    assert plan.estimates()["decoder_calls"] == tiles and plan.options.tile_size == 644  # the plan counts the same
    assert f"{tiles} encodes, {tiles} decodes" in "\n".join(plan.describe())


def test_a_tile_size_the_model_cannot_take_is_refused(tmp_path, scene, models):
    r = _segment(scene, models["fp16"], tmp_path / "o.gpkg", "--tile-size", "800", prompts=["red"])
    assert r.exit_code != 0 and "takes 644 px inputs" in r.output and "Traceback" not in r.output


def _broken(tmp_path, models, change: str):
    d = shutil.copytree(models["fp16"], tmp_path / change)
    from sam3tiles.model.contract import read_graph_io

    io = read_graph_io(d / "sam3_decoder.onnx")
    ins = [[t.name, t.dtype, list(t.shape)] for t in io.inputs]
    outs = [[t.name, t.dtype, list(t.shape)] for t in io.outputs]
    if change == "renamed":
        outs[3][0] = "presence_logit_dec"
    elif change == "missing":
        outs = outs[:3]
    elif change == "dtype":
        ins[-1][1] = "int32"  # text_ids
    elif change == "rank":
        outs[2][2] = [200, 184, 184]
    write_graph(interface_graph("sam3_decoder", ins, outs), d / "sam3_decoder.onnx")
    return d


@pytest.mark.parametrize("change,words", [("renamed", "output 'presence_logits' is missing"),
                                          ("missing", "output 'presence_logits' is missing"),
                                          ("dtype", "input 'text_ids' is int32"),
                                          ("rank", "output 'pred_masks' has rank 3")])
def test_a_broken_batched_export_is_refused_before_any_tile(tmp_path, scene, models, change, words):
    d = _broken(tmp_path, models, change)
    out = tmp_path / "o.gpkg"
    r = _segment(scene, d, out, prompts=["red"])
    assert r.exit_code == EXIT_MODEL, r.output
    assert words in r.output and "Traceback" not in r.output
    assert "nearest: batched fp16" in r.output
    assert not out.exists() and not list(tmp_path.glob("*report*.json"))


def test_example_boxes_on_a_text_only_decoder_stop_with_exit_4(tmp_path, scene, models):
    (a, b), (c, d) = T @ (60, 80), T @ (200, 170)
    out = tmp_path / "o.gpkg"
    r = _segment(scene, models["fp16"], out, "--box", f"{a},{d},{c},{b}", prompts=[])
    assert r.exit_code == EXIT_MODEL, r.output
    assert "takes text prompts only" in r.output and "Traceback" not in r.output and not out.exists()


def test_a_folder_as_the_export_names_it_runs(tmp_path, scene, models):
    """vision-encoder-fp16.onnx, text-encoder-fp16.onnx, decoder-fp16.onnx with their weights inside: found,
    recognised by their graphs, and the same objects as the seed's names give."""
    d = build_batched_models(tmp_path / "export", export_names=True)
    assert not list(d.glob("sam3_*")) and not list(d.glob("*.data"))
    v = CliRunner().invoke(model_cli, ["verify", str(d)])
    assert v.exit_code == 0 and "tile side 644" in v.output, v.output
    a, b = _segment(scene, d, tmp_path / "a.gpkg"), _segment(scene, models["fp16"], tmp_path / "b.gpkg")
    assert a.exit_code == 0 and b.exit_code == 0, a.output + b.output
    got, want = gpd.read_file(tmp_path / "a.gpkg"), gpd.read_file(tmp_path / "b.gpkg")
    assert len(got) == len(want) == len(OBJECTS) and _f1(got, want, iou=0.99) == 1.0
    (d / "decoder-fp16.onnx").unlink()
    r = _segment(scene, d, tmp_path / "c.gpkg", prompts=["red"])
    assert r.exit_code == EXIT_MODEL and "sam3_decoder.onnx" in r.output and "Traceback" not in r.output
