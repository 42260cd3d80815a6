"""Backends behind the `ModelRuntime` protocol, and the per-process cache that loads each model once.

`RuntimeSpec` is a small picklable value naming a backend and its options; workers turn it into a
runtime with `get_runtime`, which loads the model at most once per process (the worker-local cache that
keeps a GPU worker's model alive across tasks).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UsageError
from .runtime import ModelRuntime

BACKENDS = ("reference", "onnx", "simulated", "misbehaving")


@dataclass(frozen=True)
class RuntimeSpec:
    """Which backend to build and how; hashable and picklable, so it travels to Dask workers."""

    backend: str = "onnx"
    model_dir: str | None = None
    device: str = "auto"  # auto | cpu | cuda
    intra_op_threads: int = 0  # 0 = onnxruntime's default
    inter_op_threads: int = 0
    # simulated backend: seconds slept per encode / decode (releases the GIL as a GPU call does)
    encode_seconds: float = 0.1
    decode_seconds: float = 0.01

    def __post_init__(self) -> None:
        # "misbehaving[:BEHAVIOUR]": the reference backend made to misbehave as a real SAM 3 does (tests,
        # benchmarks; BEHAVIOUR a preset or switches of sam3tiles.model.misbehaving, default "all")
        if self.backend.partition(":")[0] not in BACKENDS or (":" in self.backend and
                                                               not self.backend.startswith("misbehaving:")):
            raise UsageError(f"unknown backend {self.backend!r}: choose one of {', '.join(BACKENDS)}")
        if self.device not in ("auto", "cpu", "cuda"):
            raise UsageError(f"unknown device {self.device!r}: choose auto, cpu or cuda")


_lock = threading.Lock()
_cache: dict[RuntimeSpec, ModelRuntime] = {}
#: How many times each spec was loaded in this process (tests assert one load per worker).
load_counts: dict[RuntimeSpec, int] = {}


def build_runtime(spec: RuntimeSpec) -> ModelRuntime:
    """A new runtime for `spec` (loads the model). Prefer `get_runtime`, which caches."""
    if spec.backend == "reference":
        from .reference import ReferenceRuntime

        return ReferenceRuntime()
    if spec.backend == "simulated":
        from .simulated import SimulatedGpuRuntime

        return SimulatedGpuRuntime(spec.encode_seconds, spec.decode_seconds)
    if spec.backend.startswith("misbehaving"):
        from .misbehaving import MisbehavingRuntime
        from .reference import ReferenceRuntime

        return MisbehavingRuntime(ReferenceRuntime(), spec.backend.partition(":")[2] or "all")
    from .onnx import OnnxRuntime

    model_dir = Path(spec.model_dir) if spec.model_dir else None
    return OnnxRuntime(model_dir, device=spec.device, intra_op_threads=spec.intra_op_threads,
                       inter_op_threads=spec.inter_op_threads)


def get_runtime(spec: RuntimeSpec) -> ModelRuntime:
    """The process-wide runtime for `spec`, loaded on first use and kept for every later task."""
    rt = _cache.get(spec)
    if rt is not None:
        return rt
    with _lock:
        rt = _cache.get(spec)
        if rt is None:
            rt = build_runtime(spec)
            _cache[spec] = rt
            load_counts[spec] = load_counts.get(spec, 0) + 1
    return rt


def runtime_stats() -> dict[str, Any]:
    """Per-process counters, for tests and reports: loads per spec and the runtime's own counters."""
    out: dict[str, Any] = {}
    for spec, rt in _cache.items():
        out[spec.backend] = {"loads": load_counts.get(spec, 0), **getattr(rt, "counters", {})}
    return out


def clear_cache() -> None:
    """Drop every cached runtime in this process (tests)."""
    with _lock:
        _cache.clear()
        load_counts.clear()


def spec_identity(spec: RuntimeSpec) -> str:
    """The runtime's identity without loading it: backend, code or model-file hashes (checkpoint key)."""
    if spec.backend in ("reference", "simulated") or spec.backend.startswith("misbehaving"):
        rt = build_runtime(spec)
        return rt.identity
    import hashlib

    d = Path(spec.model_dir) if spec.model_dir else None
    if d is None or not d.is_dir():
        return "onnx:unknown"
    # names, sizes and the first and last MiB of every graph and weight file: cheap on 3.4 GB, and any
    # re-export or corruption changes it (a full sha256 is `sam3tiles model verify`'s job)
    h = hashlib.sha256()
    for f in sorted([*d.glob("*.onnx"), *d.glob("*.onnx.data")]):
        size = f.stat().st_size
        h.update(f"{f.name}:{size}".encode())
        with open(f, "rb") as fh:
            h.update(fh.read(1 << 20))
            if size > 2 << 20:
                fh.seek(size - (1 << 20))
                h.update(fh.read(1 << 20))
    return "onnx:" + h.hexdigest()[:16]
