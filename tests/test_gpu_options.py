"""--device tensorrt and --precision: what each asks onnxruntime for, a missing provider refused (exit 4),
impossible combinations refused (exit 2), and the providers in use shown by `model info` and the report.
Real onnxruntime sessions on contract-faithful test graphs (this machine has no GPU). An explicit device
that cannot be had is exit 4 at every door (command line, API, job file); `auto` falls back, said once."""

from __future__ import annotations

from pathlib import Path

import logging

import numpy as np
import onnxruntime as ort
import pytest
from click.testing import CliRunner

import sam3tiles
from sam3tiles.cli.main import cli
from sam3tiles.errors import ModelError
from sam3tiles.model.providers import CPU, CUDA, TENSORRT, cpu_fallback, requested
from sam3tiles.run.pipeline import segment_job
from sam3tiles.testing import write_raster
from sam3tiles.testing.graphs import build_contract_models

HAS_TRT = TENSORRT in ort.get_available_providers()
HAS_CUDA = CUDA in ort.get_available_providers()


@pytest.fixture(scope="module")
def graphs(tmp_path_factory):
    return build_contract_models(tmp_path_factory.mktemp("m") / "model", decoder="colour", grid=1)


def _scene(tmp_path):
    img = np.full((3, 600, 700), 90, np.uint8)
    img[:, 100:180, 200:300] = np.array([250, 5, 5], np.uint8)[:, None, None]
    return write_raster(tmp_path / "scene.tif", img)


def test_what_each_device_and_precision_asks_for(tmp_path):
    gpu = [TENSORRT, CUDA, CPU]
    assert requested("cpu", "auto", gpu) == [CPU]
    assert requested("cuda", "auto", gpu) == [CUDA, CPU]  # onnxruntime's own default (TF32 on)
    assert requested("cuda", "fp32", gpu) == [(CUDA, {"use_tf32": "0"}), CPU]
    assert requested("auto", "tf32", gpu) == [(CUDA, {"use_tf32": "1"}), CPU]
    assert requested("auto", "tf32", [CPU]) == [CPU]  # no CUDA here: the CPU, as `auto` says
    trt, cuda, cpu = requested("tensorrt", "auto", gpu, tmp_path / "model", "onnx:0123abcd", "1.22.0")
    # the engine cache lies beside the model, named by its files
    assert trt == (TENSORRT, {"trt_fp16_enable": "1", "trt_engine_cache_enable": "1",
                              "trt_engine_cache_path": str(tmp_path / "model" / "trt-cache"
                                                           / "0123abcd-fp16-ort1.22.0")})
    assert (cuda, cpu) == (CUDA, CPU)
    assert requested("tensorrt", "fp32", gpu)[0][1]["trt_fp16_enable"] == "0"
    assert requested("tensorrt", "fp32", gpu)[1] == (CUDA, {"use_tf32": "0"})
    with pytest.raises(LookupError):
        requested("tensorrt", "fp16", [CUDA, CPU])
    with pytest.raises(LookupError):  # an explicit device that is not there is refused, never the CPU instead
        requested("cuda", "auto", [CPU])


def test_new_weights_or_a_new_onnxruntime_get_new_tensorrt_engines(tmp_path):
    """onnxruntime names a cached TensorRT engine by the model's path, not its weights: re-fetched weights
    at the same path would run the old engine. The cache folder is keyed by the files' fingerprint, the
    precision and onnxruntime's version."""
    from sam3tiles.model.files import files_fingerprint
    from sam3tiles.testing.graphs import build_contract_models

    d = build_contract_models(tmp_path / "model")
    gpu = [TENSORRT, CUDA, CPU]

    def cache(precision="auto", version="1.22.0"):
        return requested("tensorrt", precision, gpu, d, files_fingerprint(d), version)[0][1]["trt_engine_cache_path"]

    before = cache()
    weights = d / "sam3_image_encoder.onnx.data"
    data = bytearray(weights.read_bytes())
    data[100] ^= 0xFF  # new weights, the same graph and sizes
    weights.write_bytes(bytes(data))
    assert cache() != before and Path(cache()).parent == Path(before).parent == d / "trt-cache"
    assert cache("fp32") != cache() and cache(version="1.23.0") != cache()


@pytest.mark.skipif(HAS_TRT, reason="this onnxruntime has TensorRT")
def test_tensorrt_missing_is_exit_4_and_writes_nothing(graphs, tmp_path):
    out = tmp_path / "o.gpkg"
    r = CliRunner().invoke(cli, ["segment", str(_scene(tmp_path)), "--text", "red", "--backend", "onnx",
                                 "--model", str(graphs), "--device", "tensorrt", "-o", str(out)])
    assert r.exit_code == 4, r.output
    assert "TensorrtExecutionProvider" in r.output and "Traceback" not in r.output
    assert not out.exists()


@pytest.mark.parametrize("args, message", [
    (["--precision", "fp16"], "fp16 runs through TensorRT"),
    (["--device", "cuda", "--precision", "fp16"], "fp16 runs through TensorRT"),
    (["--device", "cpu", "--precision", "tf32"], "no effect on --device cpu"),
    (["--precision", "bf16"], "'bf16' is not one of"),
])
def test_impossible_precision_is_a_usage_error(graphs, tmp_path, args, message):
    out = tmp_path / "o.gpkg"
    r = CliRunner().invoke(cli, ["segment", str(_scene(tmp_path)), "--text", "red", "--backend", "onnx",
                                 "--model", str(graphs), *args, "-o", str(out)])
    assert r.exit_code == 2, r.output
    assert message in r.output and not out.exists()


def test_model_info_shows_the_providers_in_use(graphs):
    r = CliRunner().invoke(cli, ["model", "info", str(graphs), "--device", "cpu"])
    assert r.exit_code == 0, r.output
    assert "offers:" in r.output and "asked for (--device cpu --precision auto): CPUExecutionProvider" in r.output
    for name in ("sam3_image_encoder.onnx", "sam3_language_encoder.onnx", "sam3_decoder.onnx"):
        assert f"{name}: runs on CPUExecutionProvider" in r.output
    assert "WARNING" not in r.output
    if not HAS_TRT:
        r = CliRunner().invoke(cli, ["model", "info", str(graphs), "--device", "tensorrt"])
        assert r.exit_code == 4 and "TensorrtExecutionProvider" in r.output


def test_the_report_names_the_providers_each_graph_ran_on(graphs, tmp_path):
    gdf, rep = segment_job(str(_scene(tmp_path)), ["red"], backend="onnx", model=str(graphs), device="cpu",
                           checkpoint=False, out=str(tmp_path / "o.gpkg"))
    assert len(gdf) == 1
    lines = rep.summary().splitlines()
    for graph in ("image_encoder", "language_encoder", "decoder"):
        assert f"providers (onnx, {graph}): CPUExecutionProvider" in lines


def test_checkpoints_of_one_precision_are_not_resumed_under_another(graphs, tmp_path):
    """TF32 and FP32 answers differ (10 against 23 mantissa bits), as fp16's do: a run asked for another
    precision than the checkpoints were made with recomputes, so that a comparison of precisions compares
    answers, not one answer with itself. (`auto` keeps its own identity: on a GPU it is TF32, on a CPU FP32,
    which the plan cannot know: it never shares with an explicit choice.)"""
    path, work = _scene(tmp_path), tmp_path / "work"
    _, a = segment_job(str(path), ["red"], backend="onnx", model=str(graphs), precision="fp32", work_dir=work)
    _, b = segment_job(str(path), ["red"], backend="onnx", model=str(graphs), precision="tf32", work_dir=work)
    _, c = segment_job(str(path), ["red"], backend="onnx", model=str(graphs), precision="tf32", work_dir=work)
    assert a.model != b.model and b.model == c.model
    assert b.resumed == 0 and c.resumed == c.tiles  # the same precision again: resumed


def test_a_device_that_fell_back_is_named_with_the_graphs_it_left():
    """What a run says when onnxruntime placed graphs elsewhere than asked (onnxruntime-gpu without a GPU, or
    without the CUDA/cuDNN libraries, drops CUDA from a session and runs it on the CPU): `OnnxRuntime` raises
    it (exit 4) for an explicit device and logs it once for `auto`."""
    on_cuda = {"image_encoder": [CUDA, CPU], "language_encoder": [CUDA, CPU], "decoder": [CUDA, CPU]}
    assert cpu_fallback("cuda", [CUDA, CPU], on_cuda) is None and cpu_fallback("auto", [CUDA, CPU], on_cuda) is None
    assert cpu_fallback("cpu", [CPU], {"decoder": [CPU]}) is None
    dropped = {**on_cuda, "image_encoder": [CPU], "decoder": [CPU]}
    message = cpu_fallback("cuda", [CUDA, CPU], dropped)
    assert "image_encoder, decoder" in message and "not CUDAExecutionProvider" in message
    assert "language_encoder" not in message
    trt = cpu_fallback("tensorrt", [TENSORRT, CUDA, CPU], {"decoder": [CUDA, CPU]})
    assert "not TensorrtExecutionProvider" in trt
    here = cpu_fallback("auto", [CPU], {"decoder": [CPU]})
    assert "has no CUDAExecutionProvider" in here and "runs on the CPU" in here


@pytest.mark.skipif(HAS_CUDA, reason="this onnxruntime has CUDA")
def test_cuda_missing_is_a_model_error_at_every_door(graphs, tmp_path):
    """The API door: as the command line (tests/test_bad_input.py DOOR_CASES, with the job file), an explicit
    `device="cuda"` without CUDA raises ModelError naming what to install, and writes nothing."""
    out = tmp_path / "o.gpkg"
    with pytest.raises(ModelError, match=r"^device=cuda: this onnxruntime .* has no CUDAExecutionProvider .*"
                                         r"install onnxruntime-gpu with CUDA 12 and cuDNN 9 .*or use device=cpu"):
        sam3tiles.segment(_scene(tmp_path), "red", backend="onnx", model=str(graphs), device="cuda", out=out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scene.tif"]
    r = CliRunner().invoke(cli, ["model", "info", str(graphs), "--device", "cuda"])
    assert r.exit_code == 4 and "no CUDAExecutionProvider" in r.output and "Traceback" not in r.output


@pytest.mark.skipif(HAS_CUDA, reason="this onnxruntime has CUDA")
def test_auto_falls_back_to_the_cpu_and_says_so_once(graphs, tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        gdf, rep = segment_job(str(_scene(tmp_path)), ["red"], backend="onnx", model=str(graphs), device="auto",
                               checkpoint=False)
    assert len(gdf) == 1 and rep.failed == 0
    said = [r.getMessage() for r in caplog.records if "CUDAExecutionProvider" in r.getMessage()]
    assert len(said) == 1, said
    assert said[0].startswith("device=auto: this onnxruntime") and "runs on the CPU" in said[0]
    assert "providers (onnx, decoder): CPUExecutionProvider" in rep.summary()
