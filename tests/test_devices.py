"""--device coreml and --device dml (issue 41). This machine has neither (Linux, onnxruntime's CPU wheel), so
they are tested by their refusal (exit 4 naming the missing provider and the install that carries it), the
CoreML Gemm transform by exactness on the four-graph contract graphs (the transformed graph's outputs equal
the untransformed graph's, both on the CPU provider), and DirectML's parity check by running it between two
real CPU runtimes (the same files pass; files that answer otherwise are refused)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner

from sam3tiles.cli.main import cli
from sam3tiles.errors import ModelError
from sam3tiles.model.coreml import EXTERNAL_FOLDER, coreml_graph, transpose_gemm_weights
from sam3tiles.model.onnx import OnnxRuntime
from sam3tiles.model.parity import PARITY_DIR, compare
from sam3tiles.model.providers import COREML, CPU, DEVICES, DML, missing, requested
from sam3tiles.model.runtime import Detections, TileImage
from sam3tiles.testing import write_raster
from sam3tiles.testing.graphs import blank_tile, build_contract_models, build_four_graph_models, paint

pytestmark = pytest.mark.skipif(COREML in ort.get_available_providers() or DML in ort.get_available_providers(),
                                reason="this onnxruntime offers CoreML or DirectML: the refusals cannot be seen")


@pytest.fixture(scope="module")
def four(tmp_path_factory):
    return build_four_graph_models(tmp_path_factory.mktemp("m") / "model")


def test_the_devices_are_one_list_with_coreml_and_dml():
    assert DEVICES == ("auto", "cpu", "cuda", "tensorrt", "coreml", "dml")
    assert requested("coreml", "auto", [COREML, CPU]) == [COREML, CPU]
    assert requested("dml", "auto", [DML, CPU]) == [DML, CPU]
    for device in ("coreml", "dml"):
        with pytest.raises(LookupError):  # not offered: refused, never the CPU instead
            requested(device, "auto", [CPU])


@pytest.mark.parametrize("device, provider, install", [
    ("coreml", "CoreMLExecutionProvider", "pip install onnxruntime"),
    ("dml", "DmlExecutionProvider", "pip install onnxruntime-directml")])
def test_a_missing_provider_says_what_to_install(device, provider, install):
    text = missing(device, [CPU], "1.22.0")
    assert provider in text and install in text and "device" in text


@pytest.mark.parametrize("device, provider, install", [
    ("coreml", "CoreMLExecutionProvider", "macOS"), ("dml", "DmlExecutionProvider", "onnxruntime-directml")])
def test_coreml_and_dml_here_are_exit_4_and_write_nothing(four, tmp_path, device, provider, install):
    img = np.full((3, 300, 300), 90, np.uint8)
    src = write_raster(tmp_path / "in.tif", img)
    out = tmp_path / "o" / "out.gpkg"
    out.parent.mkdir()
    r = CliRunner().invoke(cli, ["segment", str(src), "--text", "red", "--backend", "onnx", "--model", str(four),
                                 "--device", device, "-o", str(out)])
    assert r.exit_code == 4, r.output
    assert provider in r.output and install in r.output and f"--device {device}" in r.output
    assert "Traceback" not in r.output and list(out.parent.iterdir()) == []
    r = CliRunner().invoke(cli, ["model", "info", str(four), "--device", device])
    assert r.exit_code == 4 and provider in r.output


@pytest.mark.parametrize("device", ["coreml", "dml"])
def test_cuda_precision_on_coreml_or_dml_is_a_usage_error(four, tmp_path, device):
    src = write_raster(tmp_path / "in.tif", np.full((3, 100, 100), 90, np.uint8))
    r = CliRunner().invoke(cli, ["segment", str(src), "--text", "red", "--backend", "onnx", "--model", str(four),
                                 "--device", device, "--precision", "tf32", "-o", str(tmp_path / "out.gpkg")])
    assert r.exit_code == 2 and "--precision tf32" in r.output and f"--device {device}" in r.output


# -- CoreML: the Gemm weights transposed in memory, exactly ---------------------------------------------------

def _feeds(session, four) -> dict:
    """Inputs for any of the four graphs: a painted tile, its encoder outputs, a text and two clicks."""
    enc = ort.InferenceSession(str(four / "sam3_image_encoder.onnx"), providers=[CPU])
    img = blank_tile()
    paint(img, 100, 120, 400, 300, "red")
    paint(img, 500, 500, 700, 650, "blue")
    values = dict(zip([o.name for o in enc.get_outputs()], enc.run(None, {"image": img})))
    lang = ort.InferenceSession(str(four / "sam3_language_encoder.onnx"), providers=[CPU])
    tokens = np.zeros((1, 32), np.int64)
    tokens[0, :3] = (49406, 736, 49407)
    mask, memory, _ = lang.run(None, {"tokens": tokens})
    values.update(image=img, tokens=tokens, language_mask=mask, language_features=memory,
                  box_coords=np.zeros((16, 1, 4), np.float32), box_labels=np.ones((16, 1), np.int64),
                  box_masks=np.ones((1, 16), bool), point_coords=np.asarray([[[200, 200], [600, 560]]], np.float32),
                  point_labels=np.asarray([[1, 0]], np.float32), mask_input=np.zeros((1, 1, 288, 288), np.float32),
                  has_mask_input=np.zeros(1, np.float32))
    return {i.name: values[i.name] for i in session.get_inputs()}


@pytest.mark.parametrize("name, gemms", [("sam3_image_encoder.onnx", 2), ("sam3_language_encoder.onnx", 0),
                                         ("sam3_decoder.onnx", 0), ("sam3_point_decoder.onnx", 1)])
def test_the_coreml_gemm_transform_is_exact(four, name, gemms):
    """Each graph as CoreML gets it (every eligible Gemm with B stored {N, K} and transB=1, the weights that
    live in the .data file handed over from memory) computes exactly what the file computes, on the CPU."""
    path = four / name
    plain = ort.InferenceSession(str(path), providers=[CPU])
    graph = coreml_graph(path)
    assert graph.transposed == gemms and (name != "sam3_image_encoder.onnx" or len(graph.overrides) == 2)
    model = onnx.load_from_string(graph.model)
    for node in model.graph.node:
        if node.op_type == "Gemm":
            assert [a.i for a in node.attribute if a.name == "transB"] == [1]
    options = graph.options(ort, ort.SessionOptions())
    assert options.get_session_config_entry(EXTERNAL_FOLDER) == str(four)
    moved = ort.InferenceSession(graph.model, options, providers=[CPU])
    feeds = _feeds(plain, four)
    for a, b, out in zip(plain.run(None, feeds), moved.run(None, feeds), plain.get_outputs()):
        assert a.shape == b.shape and np.array_equal(a, b), out.name
    assert onnx.load(str(path), load_external_data=False).SerializeToString() != graph.model or gemms == 0


def test_a_weight_shared_with_another_node_is_transposed_into_a_copy(tmp_path):
    from onnx import TensorProto, helper, numpy_helper

    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    nodes = [helper.make_node("Gemm", ["x", "W"], ["y"]), helper.make_node("Identity", ["W"], ["w_out"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4]),
                               helper.make_tensor_value_info("w_out", TensorProto.FLOAT, [3, 4])],
                              initializer=[numpy_helper.from_array(w, "W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    count, overrides = transpose_gemm_weights(model, tmp_path)
    assert count == 1 and not overrides and model.graph.node[0].input[1] == "W__transposed"
    x = np.ones((2, 3), np.float32)
    y, w_out = ort.InferenceSession(model.SerializeToString(), providers=[CPU]).run(None, {"x": x})
    assert np.array_equal(y, x @ w) and np.array_equal(w_out, w)  # the Identity still reads W as it was


# -- DirectML: the first tile checked against the CPU -----------------------------------------------------------

def _tile() -> TileImage:
    img = blank_tile()
    paint(img, 100, 120, 400, 300, "red")
    return TileImage(img, np.ones((1008, 1008), bool))


def _det(cells) -> Detections:
    masks = np.zeros((len(cells), 1, 288, 288), np.float32)
    for k, (r0, r1) in enumerate(cells):
        masks[k, 0, r0:r1, 10:50] = 0.9
    return Detections(np.zeros((len(cells), 4), np.float32), np.full(len(cells), 0.8, np.float32), masks)


def test_parity_compares_counts_masks_and_scores():
    assert compare(_det([(10, 50)]), _det([(10, 50)])) is None
    assert "1 object(s) where the CPU finds 2" in compare(_det([(10, 50)]), _det([(10, 50), (60, 80)]))
    assert "mask IoU of 0.500" in compare(_det([(10, 30)]), _det([(10, 50)]))
    other = _det([(10, 50)])
    other.scores[:] = 0.5
    assert "scores 0.300 apart" in compare(other, _det([(10, 50)]))


def test_a_device_that_answers_otherwise_than_the_cpu_is_refused(four, tmp_path):
    """The check as a dml run makes it, between two CPU runtimes: files that answer the first tile otherwise
    are refused (exit 4's error) at that tile; the same files pass, and the pass is remembered beside them."""
    other = build_contract_models(tmp_path / "box-echo", box_slots=16, decoder="box-echo")
    rt = OnnxRuntime(four, device="cpu", parity=True, parity_against=other)
    emb = rt.encode(_tile())
    with pytest.raises(ModelError, match=r"differs from the CPU's \(1 object\(s\) where the CPU finds 0\)"):
        rt.decode(emb, rt.prepare_prompt("red"))
    assert rt.decode(emb, rt.prepare_prompt("red")) is not None  # checked once: not again
    same = OnnxRuntime(four, device="cpu", parity=True)
    det = same.decode(same.encode(_tile()), same.prepare_prompt("red"))
    assert len(det) == 1 and len(list((four / PARITY_DIR).iterdir())) == 1
    again = OnnxRuntime(four, device="cpu", parity=True)
    assert again._parity is None  # remembered: the next run skips the check
