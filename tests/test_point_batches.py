"""Many points on one tile: the reference backend's batched click decode answers as one call a click does."""

from __future__ import annotations

import numpy as np
import pytest
import rasterio
from rasterio.windows import Window

from sam3tiles.model.reference import ReferenceRuntime
from sam3tiles.model.runtime import MODEL_SIZE, Click, TileImage
from sam3tiles.testing.demo import write_scene


def _tile(path, x0, y0, w=MODEL_SIZE, h=MODEL_SIZE) -> TileImage:
    """A window of the scene as a model input, padded with zeros past `w` x `h`."""
    rgb = np.zeros((3, MODEL_SIZE, MODEL_SIZE), np.uint8)
    valid = np.zeros((MODEL_SIZE, MODEL_SIZE), bool)
    with rasterio.open(path) as ds:
        rgb[:, :h, :w] = ds.read(window=Window(x0, y0, w, h))
    valid[:h, :w] = True
    return TileImage(rgb, valid)


@pytest.fixture(scope="module")
def tiles(tmp_path_factory):
    d = tmp_path_factory.mktemp("batches")
    scene = write_scene(d / "s.tif", 2000, 1800, seed=3, n_fields=2, n_buildings=40, n_cars=60)
    return [_tile(scene.path, 0, 0), _tile(scene.path, 900, 700), _tile(scene.path, 992, 792, 1008, 1008 - 216)]


def _asks(rng, n):
    asks = []
    for k in range(n):
        xy = tuple(rng.uniform(0, MODEL_SIZE, 2))
        negs = tuple(Click(tuple(rng.uniform(0, MODEL_SIZE, 2)), False) for _ in range(k % 3 == 0))
        more = (Click(tuple(rng.uniform(0, MODEL_SIZE, 2))),) if k % 17 == 0 else ()
        asks.append((Click(xy), *more, *negs))
    asks += [(Click((0.0, 0.0)),), (Click((1007.9, 1007.9)),), (Click((3.5, 500.0)),), (Click((500.0, 1004.0)),)]
    return asks


def test_batched_click_decode_equals_one_call_a_click(tiles):
    rt = ReferenceRuntime()
    rng = np.random.default_rng(0)
    found = large = 0
    for image in tiles:
        asks = _asks(rng, 50)
        many = rt.decode_clicks_many(image, asks)
        assert len(many) == len(asks)
        for clicks, got in zip(asks, many):
            one = rt.decode_clicks(image, clicks)
            assert len(got) == len(one)
            if len(one):
                found += 1
                large += (one.masks[0, 0] > 0.5).sum() > 288 * 288 / 4
                np.testing.assert_array_equal(got.masks, one.masks)
                np.testing.assert_array_equal(got.boxes, one.boxes)
                np.testing.assert_array_equal(got.scores, one.scores)
    assert found > 60 and large > 5  # objects and background both asked


def test_point_decoder_many_equals_one_at_a_time(tmp_path):
    """The ONNX point decoder: a tile's asks with the shared feeds prepared once answer as one call each."""
    from sam3tiles.model.onnx import OnnxRuntime
    from sam3tiles.testing.graphs import blank_tile, build_four_graph_models, paint

    rt = OnnxRuntime(build_four_graph_models(tmp_path / "model"), device="cpu")
    img = blank_tile()
    for x0, y0, x1, y1, colour in ((100, 100, 300, 260, "red"), (500, 500, 700, 700, "blue"),
                                   (40, 600, 90, 650, "red")):
        paint(img, x0, y0, x1, y1, colour)
    emb = rt.encode(TileImage(img, np.ones((MODEL_SIZE, MODEL_SIZE), bool)), clicks=True)
    assert rt.clicks_problem() is None
    features = {k: np.asarray(v) for k, v in emb.values.items() if k.startswith(("image_emb", "high_res"))}
    asks = [(Click((200, 180)),), (Click((600, 600)), Click((200, 180), False)), (Click((60, 620)),),
            (Click((900, 900)),), (Click((200, 180), False),), (Click((200, 180)), Click((600, 600)))]
    many = rt._point.decode_many(features, asks)
    assert sum(len(d) for d in many) >= 4
    for clicks, got in zip(asks, many):
        one = rt._point.decode(features, clicks)
        assert len(got) == len(one)
        if len(one):
            np.testing.assert_array_equal(got.masks, one.masks)
            assert got.scores[0] == one.scores[0]


def test_onnx_backend_answers_a_tiles_asks_in_one_call(tmp_path):
    """The ONNX backend has `decode_clicks_many` (run.executing.points asks it for a tile's asks at once): the same
    answers as one `decode_clicks` an ask, two point decoder passes counted an ask."""
    from sam3tiles.model.onnx import OnnxRuntime
    from sam3tiles.testing.graphs import blank_tile, build_four_graph_models, paint

    rt = OnnxRuntime(build_four_graph_models(tmp_path / "model"), device="cpu")
    img = blank_tile()
    paint(img, 100, 100, 300, 260, "red")
    paint(img, 500, 500, 700, 700, "blue")
    emb = rt.encode(TileImage(img, np.ones((MODEL_SIZE, MODEL_SIZE), bool)), clicks=True)
    asks = [(Click((200, 180)),), (Click((600, 600)), Click((200, 180), False)), (Click((900, 900)),)]
    before = rt.counters["click_decodes"]
    many = rt.decode_clicks_many(emb, asks)
    assert rt.counters["click_decodes"] - before == 2 * len(asks)
    assert sum(len(d) for d in many) >= 2
    for clicks, got in zip(asks, many):
        one = rt.decode_clicks(emb, clicks)
        assert len(got) == len(one)
        if len(one):
            np.testing.assert_array_equal(got.masks, one.masks)
