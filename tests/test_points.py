"""Clicks and point layers (issue 41): the point decoder of the four-graph layout, the reference backend's
answer to a click, and points as prompts through the whole run (`--point`, `--point-file`, job keys, API).

Real components: the four-graph contract graphs of `sam3tiles.testing.graphs` in real onnxruntime sessions,
GeoTIFFs written by rasterio, outputs read back with geopandas/pyogrio."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from sam3tiles.cli.main import cli
from sam3tiles.errors import ModelError
from sam3tiles.model import contract as mc
from sam3tiles.model.onnx import OnnxRuntime
from sam3tiles.model.points import HOLE_CELLS, fill_holes
from sam3tiles.model.reference import ReferenceRuntime
from sam3tiles.model.runtime import Click, TileImage, clicks_problem
from sam3tiles.testing.graphs import (CLICK_IOUS, SECOND_PASS_IOU, blank_tile, build_contract_models,
                                      build_four_graph_models, paint)


@pytest.fixture(scope="module")
def four(tmp_path_factory):
    return build_four_graph_models(tmp_path_factory.mktemp("m") / "model")


@pytest.fixture(scope="module")
def differs(tmp_path_factory):
    return build_four_graph_models(tmp_path_factory.mktemp("m") / "model", point="differs")


def _tile(*paints) -> TileImage:
    img = blank_tile()
    for x0, y0, x1, y1, colour in paints:
        paint(img, x0, y0, x1, y1, colour)
    return TileImage(img, np.ones((1008, 1008), bool))


def _cells(det) -> np.ndarray:
    return det.masks[0, 0] > 0.5


def _box_cells(x0, y0, x1, y1) -> np.ndarray:
    """The 288-grid cells whose centres lie in the pixel box."""
    c = (np.arange(288) + 0.5) * 1008 / 288
    return ((c[:, None] >= y0) & (c[:, None] < y1)) & ((c[None, :] >= x0) & (c[None, :] < x1))


# -- the model: the point decoder driven as published ------------------------------------------------------

def test_model_info_reads_the_four_graph_layout(four, differs):
    info = mc.info(four)
    assert info.layout == "16-slot layout (as in sam3-onnx v0.6.0), point decoder: clicks usable"
    assert not info.point_differences and not info.differences
    assert "sam3_point_decoder.onnx" in info.format() and "input  point_coords float32 [1,num_points,2]" in info.format()
    bad = mc.info(differs)
    assert "clicks refused" in bad.layout and not bad.differences  # text prompts still fit
    text = bad.format()
    assert "unexpected input orig_im_size int64 [2]" in text
    assert "input point_labels int64 [1,num_points], where sam3tiles feeds point_labels float32 [1,N]" in text
    r = CliRunner().invoke(cli, ["model", "info", str(differs)])
    assert r.exit_code == 0 and "orig_im_size" in r.output and "clicks refused" in r.output


def test_one_encode_feeds_both_decoders(four):
    rt = OnnxRuntime(four, device="cpu")
    emb = rt.encode(_tile((100, 100, 300, 260, "red"), (500, 500, 700, 700, "blue")), clicks=True)
    text = rt.decode(emb, rt.prepare_prompt("blue"))
    click = rt.decode_clicks(emb, [Click((200, 180))])
    assert rt.counters["encodes"] == 1 and rt.counters["click_decodes"] == 2  # two passes
    assert len(text) == 1 and _cells(text).sum() == _box_cells(500, 500, 700, 700).sum()
    assert len(click) == 1 and (_cells(click) == _box_cells(100, 100, 300, 260)).all()


def test_two_passes_the_best_candidate_by_predicted_iou(four):
    """The candidates come as (a part, the object, the whole window), so index order would take the part;
    the argmax of the predicted IoU takes the object, and the second pass (the object's logits fed back)
    answers with its own IoU."""
    rt = OnnxRuntime(four, device="cpu")
    emb = rt.encode(_tile((100, 100, 300, 260, "red")), clicks=True)
    det = rt.decode_clicks(emb, [Click((200, 180))])
    assert CLICK_IOUS.index(max(CLICK_IOUS)) == 1
    assert det.scores[0] == pytest.approx(SECOND_PASS_IOU)
    assert (_cells(det) == _box_cells(100, 100, 300, 260)).all()
    x0, y0, x1, y1 = det.boxes[0] * 1008
    assert (x0, y0, x1, y1) == pytest.approx((100.8, 98, 301, 262.5), abs=3.6)


def test_holes_up_to_256_cells_are_filled(four):
    rt = OnnxRuntime(four, device="cpu")
    small, large = (180, 150, 215, 185), (420, 150, 530, 250)  # 10x10 and 31x28 cells of another colour
    emb = rt.encode(_tile((100, 100, 300, 260, "red"), *[(*b, "green") for b in (small,)],
                          (380, 100, 600, 300, "red"), (*large, "green")), clicks=True)
    det = rt.decode_clicks(emb, [Click((130, 130))])
    cells = _cells(det)
    assert cells[_box_cells(*small)].all()  # the small hole is filled
    assert not cells[_box_cells(*large)][5:-5].any() and _box_cells(*large).sum() > HOLE_CELLS
    logits = np.full((8, 8), 5.0)
    logits[2:4, 2:4] = -5
    assert (fill_holes(logits, 3) == logits).all() and (fill_holes(logits, 4) > 0).all()


def test_a_negative_click_takes_a_look_alike_away(four):
    rt = OnnxRuntime(four, device="cpu")
    emb = rt.encode(_tile((100, 100, 300, 260, "red"), (300, 100, 420, 260, (200, 0, 0))), clicks=True)
    both = rt.decode_clicks(emb, [Click((200, 180))])
    assert (_cells(both) == _box_cells(100, 100, 420, 260)).all()  # the look-alike matches the click's colour
    one = rt.decode_clicks(emb, [Click((200, 180)), Click((360, 180), positive=False)])
    assert (_cells(one) == _box_cells(100, 100, 300, 260)).all()


def test_a_point_decoder_that_differs_is_refused_naming_its_inputs(differs, tmp_path):
    rt = OnnxRuntime(differs, device="cpu")
    problem = clicks_problem(rt)
    assert "orig_im_size int64 [2]" in problem and "point_labels int64 [1,num_points]" in problem
    assert "Its inputs are: image_embeddings float32 [1,256,72,72]" in problem
    with pytest.raises(ModelError, match="orig_im_size"):
        rt.encode(_tile(), clicks=True)
    three = OnnxRuntime(build_contract_models(tmp_path / "v030"), device="cpu")
    assert "sam3_point_decoder.onnx" in clicks_problem(three) and "has none" in clicks_problem(three)


def test_the_reference_backend_answers_the_region_under_the_click():
    rt = ReferenceRuntime()
    tile = _tile((100, 100, 300, 260, (230, 20, 25)), (300, 100, 420, 260, (190, 20, 25)),
                 (600, 600, 700, 700, (230, 20, 25)))
    assert clicks_problem(rt) is None
    det = rt.decode_clicks(rt.encode(tile, clicks=True), [Click((200, 180))])
    assert (_cells(det) == _box_cells(100, 100, 420, 260)).all()  # touching look-alike, not the far copy
    det = rt.decode_clicks(tile, [Click((200, 180)), Click((360, 180), positive=False)])
    assert (_cells(det) == _box_cells(100, 100, 300, 260)).all()
    background = rt.decode_clicks(tile, [Click((800, 300))])
    assert _cells(background).mean() > 0.8  # the region under a background click: the caller checks its area
    assert len(rt.decode_clicks(tile, [Click((200, 180), positive=False)])) == 0
