"""OnnxRuntime on small contract-faithful graphs (sam3tiles/testing/graphs.py), and parity with osam's caller."""

from __future__ import annotations

import logging
import shutil
import threading

import numpy as np
import onnxruntime as ort
import pytest
from sam3tiles.testing.graphs import (
    MASK,
    blank_tile,
    build_contract_models,
    contract_interface,
    interface_graph,
    paint,
    write_graph,
)

from sam3tiles.model.registry import RuntimeSpec, clear_cache, get_runtime
from sam3tiles.model.onnx import OnnxEmbedding, OnnxRuntime
from sam3tiles.errors import ContractError, ModelError, ModelNotFoundError, PromptError
from sam3tiles.model.runtime import ExampleBox, ModelRuntime, PreparedPrompt, TileImage

RED = (100, 100, 300, 200)  # x0, y0, x1, y1 in 1008 px
BLUE_A = (600, 600, 700, 900)
BLUE_B = (50, 800, 150, 950)
YELLOW = (800, 80, 950, 200)
ALL_VALID = np.ones((1008, 1008), bool)


def scene() -> np.ndarray:
    rgb = blank_tile()
    paint(rgb, *RED, "red")
    paint(rgb, *BLUE_A, "blue")
    paint(rgb, *BLUE_B, "blue")
    paint(rgb, *YELLOW, "yellow")
    return rgb


def box(x0: float, y0: float, x1: float, y1: float, positive: bool = True) -> ExampleBox:
    return ExampleBox(((x0 + x1) / 2 / 1008, (y0 + y1) / 2 / 1008, (x1 - x0) / 1008, (y1 - y0) / 1008),
                      positive)


@pytest.fixture(scope="module")
def colour_dir(tmp_path_factory):
    return build_contract_models(tmp_path_factory.mktemp("colour1"))


@pytest.fixture(scope="module")
def colour16_dir(tmp_path_factory):
    return build_contract_models(tmp_path_factory.mktemp("colour16"), box_slots=16)


@pytest.fixture(scope="module")
def echo_dir(tmp_path_factory):
    return build_contract_models(tmp_path_factory.mktemp("echo1"), decoder="box-echo")


@pytest.fixture(scope="module")
def echo16_dir(tmp_path_factory):
    return build_contract_models(tmp_path_factory.mktemp("echo16"), box_slots=16, decoder="box-echo")


def _rt(d, **kw):
    return OnnxRuntime(d, device="cpu", intra_op_threads=2, **kw)


@pytest.fixture(scope="module")
def rt1(colour_dir):
    return _rt(colour_dir)


@pytest.fixture(scope="module")
def rt16(colour16_dir):
    return _rt(colour16_dir)


@pytest.fixture(scope="module")
def tile():
    return TileImage(scene(), ALL_VALID)


@pytest.fixture(scope="module")
def emb1(rt1, tile):
    return rt1.encode(tile)


@pytest.fixture(scope="module")
def emb16(rt16, tile):
    return rt16.encode(tile)


def _px_mask(masks: np.ndarray) -> np.ndarray:
    """Union of the masks (> 0.5) as a [288,288] bool map."""
    return (masks[:, 0] > 0.5).any(axis=0) if len(masks) else np.zeros((MASK, MASK), bool)


def _cells_inside(rect) -> np.ndarray:
    """288 cells whose centre lies inside a 1008 px rectangle."""
    x0, y0, x1, y1 = rect
    c = (np.arange(MASK) + 0.5) * 1008 / MASK
    return ((c >= y0) & (c <= y1))[:, None] & ((c >= x0) & (c <= x1))[None, :]


# ------------------------------------------------------------------------------------------------
# loading and the contract


def test_loads_both_layouts(rt1, rt16):
    for rt, slots in ((rt1, 1), (rt16, 16)):
        assert isinstance(rt, ModelRuntime)
        assert rt.name == "onnx" and rt.box_slots == slots
        assert rt.identity.startswith("onnx:") and len(rt.identity) == 5 + 16
        assert rt.providers == ["CPUExecutionProvider"] and rt.device == "cpu"
        assert rt.has_point_decoder is False
        assert not rt.io_binding
    assert rt1.identity != rt16.identity


def test_identity_is_stable_and_cheap(colour_dir, rt1):
    assert _rt(colour_dir).identity == rt1.identity


def test_point_decoder_presence_is_recorded(tmp_path):
    rt = _rt(build_contract_models(tmp_path, box_slots=16, with_point_decoder=True))
    assert rt.has_point_decoder and rt.box_slots == 16


def test_missing_model_dir_names_the_fetch_command(tmp_path):
    with pytest.raises(ModelNotFoundError, match=r"sam3tiles model fetch --dir .*nope") as info:
        OnnxRuntime(tmp_path / "nope", device="cpu")
    assert "sam3_decoder.onnx" in str(info.value) or "does not exist" in str(info.value)


def test_missing_data_file_is_listed(tmp_path, colour_dir):
    d = shutil.copytree(colour_dir, tmp_path / "m")
    (d / "sam3_language_encoder.onnx.data").unlink()
    with pytest.raises(ModelNotFoundError, match="sam3_language_encoder.onnx.data"):
        OnnxRuntime(d, device="cpu")


def test_contract_error_lists_every_difference(tmp_path, colour_dir):
    d = shutil.copytree(colour_dir, tmp_path / "m")
    ins, outs = contract_interface("decoder")
    ins = {name: [name, dtype, shape] for name, dtype, shape in ins}
    ins["box_coords"][0] = "box_coordinates"  # renamed input
    ins["box_labels"][1] = "float32"  # wrong dtype
    ins["language_features"][2] = [32, 1, 128]  # wrong size
    ins["box_masks"][2] = [1, 2]  # slot count differs from box_labels
    ins["extra"] = ["extra", "float32", [1]]  # unexpected input
    outs = [o for o in outs if o[0] != "masks"]  # missing output
    outs[1][2] = ["N", 1]  # wrong rank
    write_graph(interface_graph("sam3_decoder", list(ins.values()), outs), d / "sam3_decoder.onnx")
    ins, outs = contract_interface("language_encoder")
    outs[1][1] = "float16"  # text_memory
    write_graph(interface_graph("sam3_language_encoder", ins, outs), d / "sam3_language_encoder.onnx")
    (d / "sam3_language_encoder.onnx.data").write_bytes(b"")  # no weights, but the file must be there

    with pytest.raises(ContractError) as info:
        OnnxRuntime(d, device="cpu")
    message = str(info.value)
    expected = [
        "sam3_decoder.onnx: input 'box_coords' is missing",
        "sam3_decoder.onnx: input 'box_labels' is float32, the contract says int64",
        "sam3_decoder.onnx: input 'language_features' has size 128 on axis 2, the contract says 256",
        "sam3_decoder.onnx: unexpected input 'box_coordinates'",
        "sam3_decoder.onnx: unexpected input 'extra'",
        "sam3_decoder.onnx: output 'masks' is missing",
        "sam3_decoder.onnx: output 'scores' has rank 2",
        "sam3_decoder.onnx: the box slot count differs between inputs: box_labels[0]=1, box_masks[1]=2",
        "sam3_language_encoder.onnx: output 'text_memory' is float16, the contract says float32",
    ]
    for fragment in expected:
        assert fragment in message
    assert f"({len(expected)} differences)" in message
    assert "sam3tiles model fetch --dir" in message and "sam3tiles model verify" in message


def test_sixteen_slot_graph_with_three_inconsistent_slot_counts_is_refused(tmp_path, colour_dir):
    d = shutil.copytree(colour_dir, tmp_path / "m")
    ins, outs = contract_interface("decoder", box_slots=16)
    ins[-1][2] = [1, 4]  # box_masks
    write_graph(interface_graph("sam3_decoder", ins, outs), d / "sam3_decoder.onnx")
    with pytest.raises(ContractError, match="box_coords\\[0\\]=16, box_labels\\[0\\]=16, box_masks\\[1\\]=4"):
        OnnxRuntime(d, device="cpu")


@pytest.mark.parametrize("victim", ["sam3_decoder.onnx", "sam3_image_encoder.onnx.data",
                                    "sam3_language_encoder.onnx", "sam3_language_encoder.onnx.data"])
def test_truncated_files_give_a_model_error(tmp_path, colour_dir, victim):
    d = shutil.copytree(colour_dir, tmp_path / "m")
    path = d / victim
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelError) as info:
        OnnxRuntime(d, device="cpu")
    message = str(info.value)
    assert victim.removesuffix(".data") in message
    assert "sam3tiles model verify" in message and "sam3tiles model fetch --dir" in message
    assert not isinstance(info.value, ContractError)


def test_cuda_requested_without_cuda_is_a_model_error(colour_dir):
    """An explicit device that cannot be had is refused (issue 36): never the CPU, 10-20x slower, instead."""
    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ModelError, match="device=cuda: this onnxruntime .* has no CUDAExecutionProvider"):
        OnnxRuntime(colour_dir, device="cuda")


def test_providers_are_logged(colour_dir, caplog):
    with caplog.at_level(logging.INFO, logger="sam3tiles.model.onnx"):
        _rt(colour_dir)
    assert any("providers in use: CPUExecutionProvider" in r.getMessage() for r in caplog.records)


def test_runtime_spec_builds_an_onnx_runtime(colour_dir):
    clear_cache()
    try:
        spec = RuntimeSpec(backend="onnx", model_dir=str(colour_dir), device="cpu", intra_op_threads=1)
        rt = get_runtime(spec)
        assert isinstance(rt, OnnxRuntime) and get_runtime(spec) is rt
    finally:
        clear_cache()


# ------------------------------------------------------------------------------------------------
# encode / prompt / decode


def test_encode_asks_only_for_the_decoder_inputs(colour_dir, tile):
    rt = _rt(colour_dir)
    asked = []
    real = rt._sessions["image_encoder"]

    class Spy:
        def __getattr__(self, name):
            return getattr(real, name)

        def run(self, names, feeds):
            asked.append(list(names))
            return real.run(names, feeds)

    rt._sessions["image_encoder"] = Spy()
    emb = rt.encode(tile)
    assert asked == [["vision_pos_enc_2", "backbone_fpn_0", "backbone_fpn_1", "backbone_fpn_2"]]
    assert isinstance(emb, OnnxEmbedding) and emb.device == "cpu"
    assert emb.values["backbone_fpn_0"].shape == (1, 256, 288, 288)
    assert emb.values["vision_pos_enc_2"].shape == (1, 256, 72, 72)
    assert emb.nbytes == 4 * 256 * (288**2 + 144**2 + 2 * 72**2)


def test_text_prompt_segments_by_colour(rt1, emb1):
    det = rt1.decode(emb1, rt1.prepare_prompt("red"))
    assert len(det) == 2  # the red rectangle spans two 252 px query cells
    assert det.boxes.dtype == det.scores.dtype == det.masks.dtype == np.float32
    assert (det.scores > 0.5).all() and (det.scores < 1).all()
    union = _px_mask(det.masks)
    inside = _cells_inside((RED[0] - 4, RED[1] - 4, RED[2] + 4, RED[3] + 4))
    assert not (union & ~inside).any()  # nothing outside the red rectangle
    assert union.sum() >= _cells_inside(RED).sum() * 0.9
    px = np.concatenate([det.boxes.min(0)[:2], det.boxes.max(0)[2:]]) * 1008
    np.testing.assert_allclose(px, RED, atol=4)
    blue = rt1.decode(emb1, rt1.prepare_prompt("a blue roof"))
    assert len(blue) >= 2
    np.testing.assert_allclose(_px_mask(blue.masks).sum(), (_cells_inside(BLUE_A) | _cells_inside(BLUE_B)).sum(),
                               rtol=0.1)


@pytest.mark.parametrize("text", ["green", "visual", "building"])
def test_nothing_found_is_n_zero(rt1, emb1, text):
    det = rt1.decode(emb1, rt1.prepare_prompt(text))
    assert len(det) == 0
    assert det.boxes.shape == (0, 4) and det.scores.shape == (0,) and det.masks.shape == (0, 1, 288, 288)


def test_sixteen_slot_layout_segments_too(rt1, emb1, rt16, emb16):
    a = rt1.decode(emb1, rt1.prepare_prompt("yellow"))
    b = rt16.decode(emb16, rt16.prepare_prompt("yellow"))
    assert len(a) == len(b) >= 1
    np.testing.assert_array_equal(a.masks, b.masks)


def test_example_box_finds_things_of_its_colour(rt16, emb16):
    visual = rt16.prepare_prompt("visual")
    det = rt16.decode(emb16, visual, [box(620, 620, 680, 700)])  # inside blue A
    union = _px_mask(det.masks)
    assert union[_cells_inside(BLUE_B)].all() and union[_cells_inside(BLUE_A)].mean() > 0.9
    assert not union[_cells_inside(RED)].any()
    assert len(rt16.decode(emb16, visual, [box(620, 620, 680, 700, positive=False)])) == 0


def test_counters(colour_dir, tile):
    rt = _rt(colour_dir)
    assert rt.counters == {"encodes": 0, "prompts": 0, "decodes": 0, "click_decodes": 0}
    e1 = rt.encode(tile)
    e2 = rt.encode(TileImage(blank_tile(), ALL_VALID))
    red = [rt.prepare_prompt(t) for t in ("red", "red", " RED ", "Red")]  # one token row
    assert rt.counters["prompts"] == 1
    assert all(p.payload is red[0].payload for p in red) and [p.text for p in red][2] == " RED "
    rt.prepare_prompt("blue")
    for e in (e1, e2):
        rt.decode(e, red[0])
    rt.decode(e1, PreparedPrompt("yellow"))  # a prompt prepared elsewhere: encoded here, once
    rt.decode(e2, PreparedPrompt("yellow"))
    assert rt.counters == {"encodes": 2, "prompts": 3, "decodes": 4, "click_decodes": 0}


def test_prompt_is_encoded_once_under_threads(colour_dir):
    rt = _rt(colour_dir)
    barrier = threading.Barrier(8)

    def work():
        barrier.wait()
        rt.prepare_prompt("magenta")

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert rt.counters["prompts"] == 1


def test_bad_prompts(rt1):
    with pytest.raises(PromptError, match="empty"):
        rt1.prepare_prompt("   ")
    with pytest.raises(PromptError, match="at most 30"):
        rt1.prepare_prompt("very " * 31)


def test_io_binding_path_matches_plain_path(colour_dir, rt1, emb1, tile):
    rt = _rt(colour_dir, io_binding=True)
    emb = rt.encode(tile)
    assert all(isinstance(v, ort.OrtValue) for v in emb.values.values())
    assert emb.nbytes == emb1.nbytes
    for text, boxes in (("red", ()), ("visual", [box(620, 620, 680, 700)]), ("green", ())):
        a = rt1.decode(emb1, rt1.prepare_prompt(text), boxes)
        b = rt.decode(emb, rt.prepare_prompt(text), boxes)
        for x, y in ((a.boxes, b.boxes), (a.scores, b.scores), (a.masks, b.masks)):
            np.testing.assert_array_equal(x, y)


def test_decode_rejects_foreign_embeddings(rt1):
    with pytest.raises(TypeError):
        rt1.decode(np.zeros(3), rt1.prepare_prompt("red"))


# ------------------------------------------------------------------------------------------------
# boxes arrive in the normalised cxcywh frame of the 1008 input


@pytest.fixture(scope="module")
def echo1(echo_dir):
    return _rt(echo_dir)


@pytest.fixture(scope="module")
def echo_emb(echo1, tile):
    return echo1.encode(tile)


def test_box_echo_frame(echo1, echo_emb):
    rect = (200, 300, 500, 420)
    det = echo1.decode(echo_emb, echo1.prepare_prompt("visual"), [box(*rect)])
    assert len(det) == 1
    np.testing.assert_allclose(det.boxes[0] * 1008, rect, atol=1e-3)
    assert det.scores.tolist() == [pytest.approx(0.9)]
    np.testing.assert_array_equal(det.masks[0, 0] > 0.5, _cells_inside(rect))
    neg = echo1.decode(echo_emb, echo1.prepare_prompt("visual"), [box(*rect, positive=False)])
    assert neg.scores.tolist() == [pytest.approx(0.7)]
    assert len(echo1.decode(echo_emb, echo1.prepare_prompt("visual"))) == 0  # no box: empty slot


def test_box_echo_sixteen_slots_keep_slot_order(echo16_dir, tile):
    rt = _rt(echo16_dir)
    emb = rt.encode(tile)
    rects = [(0, 0, 100, 100), (500, 500, 1008, 1008), (10, 700, 300, 720)]
    det = rt.decode(emb, rt.prepare_prompt("visual"), [box(*rects[0]), box(*rects[1], False), box(*rects[2])])
    np.testing.assert_allclose(det.boxes * 1008, rects, atol=1e-3)
    np.testing.assert_allclose(det.scores, [0.9, 0.7, 0.9])
    for m, r in zip(det.masks, rects):
        np.testing.assert_array_equal(m[0] > 0.5, _cells_inside(r))
    full = [box(i * 60, 0, i * 60 + 50, 50) for i in range(16)]
    assert len(rt.decode(emb, rt.prepare_prompt("visual"), full)) == 16
    with pytest.raises(ValueError, match="at most 16"):
        rt.decode(emb, rt.prepare_prompt("visual"), full + [box(0, 0, 1, 1)])


def test_too_many_boxes_for_one_slot(echo1, echo_emb):
    with pytest.raises(ValueError, match="at most 1 per pass"):
        echo1.decode(echo_emb, echo1.prepare_prompt("visual"), [box(0, 0, 9, 9), box(9, 9, 20, 20)])


# ------------------------------------------------------------------------------------------------
# parity oracle: osam's own SAM 3 caller on the same graph files


class _Recorder:
    """Wraps osam's decoder session and keeps the raw outputs of each run."""

    def __init__(self, session):
        self.session = session
        self.feeds: list[dict] = []
        self.outputs: list[list[np.ndarray]] = []

    def run(self, names, feeds):
        out = self.session.run(names, feeds)
        self.feeds.append(feeds)
        self.outputs.append(out)
        return out


def _osam_sam3(directory):
    sam3 = pytest.importorskip("osam._models.sam3._models")
    sessions = {key: ort.InferenceSession(str(directory / f"sam3_{key}.onnx"), providers=["CPUExecutionProvider"])
                for key in ("image_encoder", "language_encoder", "decoder")}
    model = sam3.Sam3.__new__(sam3.Sam3)  # no download: the sessions come from our directory
    recorder = _Recorder(sessions["decoder"])
    model._inference_sessions = {**sessions, "decoder": recorder}
    return model, recorder


@pytest.mark.parametrize("which", ["colour", "box-echo"])
def test_parity_with_osam(which, colour_dir, echo_dir, rt1, emb1, echo1, echo_emb):
    from osam import types

    directory, rt, emb = (colour_dir, rt1, emb1) if which == "colour" else (echo_dir, echo1, echo_emb)
    model, recorder = _osam_sam3(directory)
    image = scene().transpose(1, 2, 0).copy()  # osam takes HWC; a 1008 image is not resized
    embedding = model.encode_image(image)
    rect = (620, 620, 680, 700)
    cases = [("red", None), ("blue", None), ("green", None), ("visual", rect)]
    for text, bx in cases:
        if bx is None:
            prompt = types.Prompt(texts=[text])
            boxes = ()
        else:
            prompt = types.Prompt(texts=[text], points=np.array([[bx[0], bx[1]], [bx[2], bx[3]]], float),
                                  point_labels=np.array([2, 3]))
            boxes = [box(*bx)]
        response = model.generate(types.GenerateRequest(model="sam3", image_embedding=embedding, prompt=prompt))
        ref_boxes, ref_scores, ref_masks = recorder.outputs[-1]
        det = rt.decode(emb, rt.prepare_prompt(text), boxes)
        # the decoder saw the same box inputs
        for name, value in rt._box_inputs(boxes).items():
            np.testing.assert_allclose(recorder.feeds[-1][name], value, atol=1e-7)
        if which == "colour":
            np.testing.assert_array_equal(det.boxes, ref_boxes)
        else:
            np.testing.assert_allclose(det.boxes, ref_boxes, atol=1e-6)
        np.testing.assert_array_equal(det.scores, ref_scores)
        np.testing.assert_array_equal(det.masks, ref_masks)
        # and what osam's user sees: one annotation per detection, same pixel boxes and scores
        assert len(response.annotations) == len(det)
        for ann, b, s in zip(response.annotations, det.boxes, det.scores):
            assert ann.score == pytest.approx(float(s))
            bb = ann.bounding_box
            assert [bb.xmin, bb.ymin, bb.xmax, bb.ymax] == [round(v) for v in (b * 1008).tolist()]
    assert sum(len(o[1]) for o in recorder.outputs) > 0 or which == "box-echo"
