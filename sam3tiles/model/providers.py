"""Which onnxruntime execution providers a `--device` and `--precision` ask for, with their options.

* `cpu`: the CPU provider.
* `cuda` / `auto`: CUDA (then the CPU for what CUDA cannot run). `--precision tf32` / `fp32` set the CUDA
  provider's `use_tf32` on / off (TF32 matmuls and convolutions on Ampere and later: ~2-3x faster, 10
  mantissa bits); `auto` leaves onnxruntime's default (on). `cuda` without CUDA is refused (exit 4: an
  explicit device is never silently the CPU, 10-20x slower); `auto` runs on the CPU then, and says so once
  (`cpu_fallback`).
* `tensorrt`: TensorRT (then CUDA, then CPU), with its engine cache in `trt-cache/` beside the model, a
  folder per model files and onnxruntime version (`engine_cache`; building the engines takes minutes the
  first time; the cache makes later runs start in seconds) and
  fp16 on unless `--precision` is fp32 or tf32. TensorRT must be offered by this onnxruntime (the
  onnxruntime-gpu wheel and the TensorRT libraries): otherwise the run refuses (exit 4), since silently
  running fp32 CUDA or the CPU instead is not what was asked for.
* `coreml`: Apple's CoreML (then the CPU), offered by onnxruntime's macOS wheel (`pip install onnxruntime` on a
  Mac). The graphs load with their Gemm weights transposed in memory (`model.coreml`: CoreML compiles a
  Gemm only with B constant, `transA=0`, `alpha=beta=1`, and takes minutes over the `{K, N}`, `transB=0` weights
  of the v0.6.0 export); the point decoder runs on the CPU (CoreML cannot load its unbounded `point_coords`).
* `dml`: DirectML on Windows (then the CPU), offered by the onnxruntime-directml wheel. DirectML has given
  silently wrong SAM 3 masks on some devices, so its first tile is checked against the CPU (`model.parity`).
Neither can run here (Linux): they are refused with exit 4 and the install that offers them (`missing`).

Frames: none (names and strings). The options are strings, as onnxruntime's provider options are.
"""

from __future__ import annotations

from pathlib import Path

from ..wording import opt

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
TENSORRT = "TensorrtExecutionProvider"
COREML = "CoreMLExecutionProvider"
DML = "DmlExecutionProvider"
#: Every `--device` (the one list: the CLI, job files, `model info` and the QGIS provider read it).
DEVICES = ("auto", "cpu", "cuda", "tensorrt", "coreml", "dml")
#: Devices asked for by name: never silently the CPU instead (exit 4 when onnxruntime cannot give them).
EXPLICIT = ("cuda", "tensorrt", "coreml", "dml")
#: The provider each explicit device asks for first.
PROVIDER = {"cuda": CUDA, "tensorrt": TENSORRT, "coreml": COREML, "dml": DML}
#: What each explicit device needs beside onnxruntime's provider (said when a graph fell back to the CPU).
NEEDS = {"cuda": "a GPU, CUDA 12 and cuDNN 9 matching this onnxruntime-gpu",
         "tensorrt": "a GPU, CUDA 12, cuDNN 9 and TensorRT matching this onnxruntime-gpu",
         "coreml": "macOS 13 or later on an Apple computer",
         "dml": "Windows 10 or later with a DirectX 12 GPU and its current driver"}
PRECISIONS = ("auto", "fp32", "tf32", "fp16")
TRT_CACHE = "trt-cache"


def precision_problem(device: str, precision: str) -> str | None:
    """Why `precision` cannot be had on `device` (a usage error's message, options named by `wording.opt`),
    or None."""
    if precision not in PRECISIONS:
        return f"unknown precision {precision!r}: choose {', '.join(PRECISIONS)}"
    if precision == "fp16" and device != "tensorrt":
        return (f"{opt('precision', 'fp16')} runs through TensorRT (the SAM 3 graphs are float32; onnxruntime's "
                f"CUDA provider runs them as they are): give {opt('device', 'tensorrt')}, or "
                f"{opt('precision', 'tf32')} for CUDA")
    if precision in ("tf32", "fp32") and device in ("cpu", "coreml", "dml"):
        return (f"{opt('precision', precision)} sets CUDA's TF32 mode and has no effect on {opt('device', device)}: "
                "leave it out")
    return None


def missing(device: str, available: list[str], ort_version: str) -> str:
    """A model error's message: this onnxruntime offers no provider for `device` (cuda, tensorrt, coreml or
    dml), and what to install (options named by `wording.opt`)."""
    offers = f"(it offers {', '.join(available)})"
    if device == "coreml":
        return (f"{opt('device', 'coreml')}: this onnxruntime ({ort_version}) has no {COREML} {offers}: CoreML runs on "
                f"Apple computers, where onnxruntime's macOS wheel carries it (pip install onnxruntime, or "
                f"pip install 'sam3tiles[coreml]', on macOS 13 or later), or use {opt('device', 'cpu')}")
    if device == "dml":
        return (f"{opt('device', 'dml')}: this onnxruntime ({ort_version}) has no {DML} {offers}: DirectML runs on "
                f"Windows, from the onnxruntime-directml wheel installed in place of onnxruntime (pip uninstall "
                f"onnxruntime; pip install onnxruntime-directml, or pip install 'sam3tiles[dml]'), or use "
                f"{opt('device', 'cpu')}")
    if device == "tensorrt":
        return (f"{opt('device', 'tensorrt')}: this onnxruntime ({ort_version}) has no {TENSORRT} {offers}: install "
                f"onnxruntime-gpu with the TensorRT libraries on the library path, or use {opt('device', 'cuda')}")
    return (f"{opt('device', device)}: this onnxruntime ({ort_version}) has no {CUDA} {offers}: install "
            f"onnxruntime-gpu with CUDA 12 and cuDNN 9 (pip install 'sam3tiles[gpu]'), or use {opt('device', 'cpu')}")


def cpu_fallback(device: str, available: list[str], used: dict[str, list[str]]) -> str | None:
    """What ran elsewhere than `device` asked, given the `available` providers and each graph's providers in
    use (`used`: graph -> names, as its session reports them), or None. onnxruntime drops a provider it
    cannot start from a session and runs it on the next one (onnxruntime-gpu on a machine without a GPU, or
    without the CUDA/cuDNN libraries: the CPU), logging only its own error. An explicit device that fell
    back is a model error (the caller raises it); `auto` logs it once."""
    if device == "cpu":
        return None
    if device == "auto" and CUDA not in available:
        return (f"{opt('device', 'auto')}: this onnxruntime has no {CUDA} (it offers {', '.join(available)}): SAM 3 "
                "runs on the CPU, 10-20x slower than on a GPU. For a GPU install onnxruntime-gpu with CUDA 12 and "
                f"cuDNN 9 (pip install 'sam3tiles[gpu]'); {opt('device', 'cpu')} says the CPU is meant")
    want = PROVIDER.get(device, CUDA)
    left = [k for k, u in used.items() if not u or u[0] != want]
    if not left:
        return None
    on = ", ".join(dict.fromkeys(u[0] if u else CPU for k, u in used.items() if k in left))
    return (f"{opt('device', device)}: onnxruntime runs the SAM 3 {', '.join(left)} graph(s) on {on}, not {want} "
            f"(it could not start {want} there: it needs {NEEDS.get(device, NEEDS['cuda'])}; "
            f"`sam3tiles model info --device {device}` lists the providers in use)"
            + (": expect CPU speed, 10-20x slower" if device == "auto"
               else f": install them, or use {opt('device', 'cpu')}"))


def engine_cache(model_dir: Path, files: str, fp16: bool, ort_version: str) -> Path:
    """The TensorRT engine cache of these model files: `trt-cache/` beside them, one folder per files'
    fingerprint (`files.files_fingerprint`), precision and onnxruntime version. onnxruntime names an engine
    by a hash of the model's path (or of its input and node output names), never of its weights
    (`GenerateMetaDefId` in onnxruntime's model_metadef_id_generator.h), so it reuses a cached engine whose
    model file was replaced: re-fetched weights at the same path would run the old engines. A new
    fingerprint or version gets new engines."""
    key = f"{files.replace('onnx:', '')}-{'fp16' if fp16 else 'fp32'}-ort{ort_version}"
    return Path(model_dir) / TRT_CACHE / key


def requested(device: str, precision: str, available: list[str], model_dir: Path | None = None,
              files: str = "", ort_version: str = "") -> list:
    """onnxruntime's `providers=` for `device` and `precision`, given the `available` providers: names, or
    (name, options) pairs; TensorRT's engines cached in `engine_cache(model_dir, files, ...)`. `tensorrt`,
    `cuda`, `coreml` or `dml` without that provider available raise LookupError (the caller says what to
    install: `missing`)."""
    cuda_opts = {} if precision in ("auto", "fp16") else {"use_tf32": "1" if precision == "tf32" else "0"}
    cuda = (CUDA, cuda_opts) if cuda_opts else CUDA
    if device == "cpu":
        return [CPU]
    if device == "cuda" and CUDA not in available:
        raise LookupError(CUDA)
    if device in ("coreml", "dml"):
        if PROVIDER[device] not in available:
            raise LookupError(PROVIDER[device])
        return [PROVIDER[device], CPU]
    if device == "tensorrt":
        if TENSORRT not in available:
            raise LookupError(TENSORRT)
        fp16 = precision in ("auto", "fp16")
        trt = {"trt_fp16_enable": "1" if fp16 else "0", "trt_engine_cache_enable": "1"}
        if model_dir is not None:
            trt["trt_engine_cache_path"] = str(engine_cache(model_dir, files, fp16, ort_version))
        return [(TENSORRT, trt), *([cuda] if CUDA in available else []), CPU]
    return [cuda, CPU] if CUDA in available else [CPU]


def names(providers: list) -> list[str]:
    """The provider names of a `providers=` list (names or (name, options) pairs)."""
    return [p if isinstance(p, str) else p[0] for p in providers]


def describe(providers: list) -> str:
    """One line: each provider with its options, e.g. `CUDAExecutionProvider(use_tf32=0), CPU...`."""
    out = []
    for p in providers:
        name, opts = (p, {}) if isinstance(p, str) else p
        out.append(name + (f"({', '.join(f'{k}={v}' for k, v in opts.items())})" if opts else ""))
    return ", ".join(out)
