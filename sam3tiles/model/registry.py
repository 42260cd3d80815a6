"""Which model runs: the backend door, and the per-process cache that loads each model once.

A backend is given three ways (`RuntimeSpec.of`):

* a name: a built-in (`onnx`, `reference`, `simulated`) or one an installed package registers under the
  entry-point group `sam3tiles.backends` (`--backend NAME`, `backend: {name: NAME}` in job files);
* an object implementing `ModelRuntime`: runs in this process only (the in-process engine);
* a callable that returns a `ModelRuntime`: called once in each process that runs model tasks, so a
  cluster's worker processes each build their own (objects holding ONNX or TensorRT sessions do not
  pickle). The callable travels by cloudpickle.

`RuntimeSpec` is the small picklable value that names the backend and its options; workers turn it into
a runtime with `get_runtime`, which builds it at most once per process (the worker-local cache that keeps
a GPU worker's model alive across tasks). docs/backends.md is the guide for backend authors.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import threading
import uuid
from dataclasses import dataclass, field, replace
from functools import lru_cache
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Callable, Union

import cloudpickle

from ..errors import ModelError, UsageError
from .files import files_fingerprint
from .layouts import layout_tag
from .onnx import OnnxRuntime  # imports onnxruntime (an optional extra) only when it builds a session
from .providers import DEVICES, precision_problem
from .reference import ReferenceRuntime
from .runtime import ModelRuntime
from .simulated import SimulatedGpuRuntime

BUILTIN = ("onnx", "reference", "simulated")
#: Entry-point group of third-party backends: `NAME = "package.module:factory"`, where
#: `factory(spec: RuntimeSpec) -> ModelRuntime`.
ENTRY_POINT_GROUP = "sam3tiles.backends"

#: What `segment(backend=...)` accepts.
Backend = Union[str, ModelRuntime, Callable[[], ModelRuntime]]


@lru_cache(maxsize=1)
def installed_backends() -> dict[str, Any]:
    """Entry points of the `sam3tiles.backends` group, by name (not loaded; read once per process). A name
    that shadows a built-in is left out: the built-in wins."""
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name not in BUILTIN}


def available_backends() -> tuple[str, ...]:
    """Every backend name `--backend` accepts: the built-ins, then the installed ones (sorted)."""
    return BUILTIN + tuple(sorted(installed_backends()))


# Runtime objects handed over in this process, by token: a spec that carries one pickles the token only
# (the object may hold sessions that do not pickle) and finds the object again when unpickled here.
_objects: dict[str, ModelRuntime] = {}
_object_tokens: dict[int, str] = {}


@dataclass(frozen=True)
class RuntimeSpec:
    """Which backend to build and how; hashable and picklable, so it travels to Dask workers.

    `backend` is always the backend's name (the `backend` column of every output row). For an object or a
    callable, `token` tells specs apart and `runtime`/`factory` hold it (see `RuntimeSpec.of`)."""

    backend: str = "onnx"
    model_dir: str | None = None
    device: str = "auto"  # auto | cpu | cuda | tensorrt (model.providers)
    intra_op_threads: int = 0  # 0 = onnxruntime's default
    precision: str = "auto"  # auto | fp32 | tf32 | fp16 (model.providers)
    #: onnx: keep queries scored above this (below 0.5 only with a raw-score decoder, `model.layouts`)
    score_threshold: float = 0.5
    # simulated backend: seconds slept per encode / decode (releases the GIL as a GPU call does)
    encode_seconds: float = 0.1
    decode_seconds: float = 0.01
    #: "" for named backends; "object:..." or "factory:..." for a backend handed over as a value
    token: str = ""
    runtime: ModelRuntime | None = field(default=None, compare=False, repr=False)
    factory: Callable[[], ModelRuntime] | None = field(default=None, compare=False, repr=False)
    #: the checkpoint identity of an object or callable backend, read once where it was handed over
    identity: str = field(default="", compare=False, repr=False)
    #: the model files' fingerprint when the run was planned (onnx: `spec_identity`); part of the spec, so a
    #: process that ran a job keeps no sessions of files replaced since (`get_runtime` drops them)
    files: str = ""

    def __post_init__(self) -> None:
        if not self.token and self.backend not in BUILTIN and self.backend not in installed_backends():
            raise UsageError(f"unknown backend {self.backend!r}: choose one of {', '.join(available_backends())} "
                             f"(other backends register under the entry-point group {ENTRY_POINT_GROUP!r})")
        if self.device not in DEVICES:
            raise UsageError(f"unknown device {self.device!r}: choose {', '.join(DEVICES[:-1])} or {DEVICES[-1]}")
        problem = precision_problem(self.device, self.precision)
        if problem is not None:
            raise UsageError(problem)

    @classmethod
    def of(cls, backend: Backend, **options: Any) -> "RuntimeSpec":
        """The spec for a backend name, a `ModelRuntime` object or a callable that builds one; `options`
        are the other fields (model_dir, device, ...). A callable without `name` and `identity`
        attributes is called once here to read them (and that runtime is reused in this process)."""
        if isinstance(backend, str):
            return cls(backend=backend, **options)
        if not isinstance(backend, type) and isinstance(backend, ModelRuntime):
            token = _object_tokens.get(id(backend))
            if token is None or _objects.get(token) is not backend:
                token = f"object:{os.getpid()}:{uuid.uuid4().hex}"
                _objects[token] = backend
                _object_tokens[id(backend)] = token
            return cls(backend=_name_of(backend), token=token, runtime=backend,
                       identity=_identity_of(backend), **options)
        if callable(backend):
            return _factory_spec(cls, backend, options)
        raise UsageError(f"backend={backend!r}: give a backend name ({', '.join(available_backends())}), an "
                         "object implementing sam3tiles.model.runtime.ModelRuntime, or a callable returning one")

    def __reduce__(self):
        # the object itself never travels (see _objects); a callable travels by value with cloudpickle, so
        # a function from a notebook or a module the workers cannot import still reaches them
        state = {k: getattr(self, k) for k in self.__dataclass_fields__ if k not in ("runtime", "factory")}
        blob = cloudpickle.dumps(self.factory) if self.factory is not None else None
        return _rebuild_spec, (state, blob)


def _rebuild_spec(state: dict, blob: bytes | None) -> RuntimeSpec:
    factory = pickle.loads(blob) if blob is not None else None
    token = state["token"]
    # an object is found again only in the process that handed it over (not in a forked copy of it)
    here = token.startswith(f"object:{os.getpid()}:")
    return RuntimeSpec(**state, runtime=_objects.get(token) if here else None, factory=factory)


def _factory_spec(cls, factory: Callable[[], ModelRuntime], options: dict) -> RuntimeSpec:
    try:  # the same function gives the same token, so workers keep one runtime across runs
        blob = cloudpickle.dumps(factory)
    except Exception as e:  # noqa: BLE001 - whatever the pickler raises, the message is the same
        raise UsageError(f"backend={factory!r}: the callable does not pickle ({e}): define it at module level "
                         "or close over picklable values only (a path, not an open session)") from None
    token = "factory:" + hashlib.sha256(blob).hexdigest()[:16]
    name, ident = getattr(factory, "name", None), getattr(factory, "identity", None)
    if not (isinstance(name, str) and isinstance(ident, str)):
        name, ident = _factory_answers.get(token) or _ask_factory(factory, token, options)
    return cls(backend=name, token=token, factory=factory, identity=ident, **options)


#: (name, identity) of each callable built here to ask them, by token: asked once per process
_factory_answers: dict[str, tuple[str, str]] = {}


def _ask_factory(factory: Callable[[], ModelRuntime], token: str, options: dict) -> tuple[str, str]:
    rt = _check_built(factory(), factory)
    name, ident = _name_of(rt), _identity_of(rt)
    spec = RuntimeSpec(backend=name, token=token, factory=factory, identity=ident, **options)
    with _lock:  # the runtime built to ask it serves this process's tasks too
        if spec not in _cache:
            _cache[spec] = rt
            load_counts[spec] = load_counts.get(spec, 0) + 1
        _factory_answers[token] = (name, ident)
    return name, ident


def _name_of(rt: Any) -> str:
    name = getattr(rt, "name", None)
    if not isinstance(name, str) or not name.strip():
        raise UsageError(f"backend {rt!r}: its `name` must be a non-empty string (it fills the `backend` column)")
    return name


def _identity_of(rt: Any) -> str:
    ident = rt.identity
    if not isinstance(ident, str) or not ident:
        raise UsageError(f"backend {_name_of(rt)!r}: its `identity` must be a non-empty string naming the model "
                         "(checkpoints are keyed by it)")
    return ident


_lock = threading.Lock()
_cache: dict[RuntimeSpec, ModelRuntime] = {}
#: How many times each spec was loaded in this process (tests assert one load per worker).
load_counts: dict[RuntimeSpec, int] = {}


def build_runtime(spec: RuntimeSpec) -> ModelRuntime:
    """A new runtime for `spec` (loads the model). Prefer `get_runtime`, which caches."""
    if spec.token.startswith("object:"):
        if spec.runtime is None:
            raise ModelError(f"the {spec.backend!r} backend was handed over as an object, which exists only in the "
                             "process that made it: on a cluster with worker processes give a callable that "
                             "builds it (segment(..., backend=make_runtime))")
        return spec.runtime
    if spec.factory is not None:
        return _check_built(spec.factory(), spec.factory)
    if spec.backend == "reference":
        return ReferenceRuntime()
    if spec.backend == "simulated":
        return SimulatedGpuRuntime(spec.encode_seconds, spec.decode_seconds)
    if spec.backend == "onnx":
        model_dir = Path(spec.model_dir) if spec.model_dir else None
        return OnnxRuntime(model_dir, device=spec.device, intra_op_threads=spec.intra_op_threads,
                           precision=spec.precision, score_threshold=spec.score_threshold)
    ep = installed_backends().get(spec.backend)
    if ep is None:
        raise ModelError(f"the {spec.backend!r} backend is not installed in this process (entry-point group "
                         f"{ENTRY_POINT_GROUP!r}): install its package on every worker")
    factory = ep.load()
    return _check_built(factory(spec), ep.value)


def _check_built(rt: Any, origin: Any) -> ModelRuntime:
    if isinstance(rt, type) or not isinstance(rt, ModelRuntime):
        raise ModelError(f"backend factory {origin!r} returned {type(rt).__name__}, not a ModelRuntime (needs "
                         "name, box_slots, identity, encode, prepare_prompt, decode)")
    return rt


def get_runtime(spec: RuntimeSpec) -> ModelRuntime:
    """The process-wide runtime for `spec`, loaded on first use and kept for every later task."""
    rt = _cache.get(spec)
    if rt is not None:
        return rt
    with _lock:
        rt = _cache.get(spec)
        if rt is None:
            if spec.files:  # sessions of the same backend and folder from files replaced since: never used again
                for old in [k for k in _cache if k.files and replace(k, files="") == replace(spec, files="")]:
                    del _cache[old]
                    load_counts.pop(old, None)
            rt = build_runtime(spec)
            _cache[spec] = rt
            load_counts[spec] = load_counts.get(spec, 0) + 1
    return rt


def runtime_stats() -> dict[str, Any]:
    """Per-process counters, for tests and reports: loads per spec and the runtime's own counters."""
    out: dict[str, Any] = {}
    for spec, rt in _cache.items():
        out[spec.backend] = {"loads": load_counts.get(spec, 0), **getattr(rt, "counters", {})}
        if getattr(rt, "session_providers", None):  # ONNX: the providers each graph actually runs on
            out[spec.backend]["providers"] = {k: ", ".join(v) for k, v in rt.session_providers.items()}
        layout = getattr(rt, "layout", None)
        if callable(getattr(layout, "describe", None)):  # ONNX: the layout that ran and the score cut it kept
            out[spec.backend]["layout"] = layout.describe()
            out[spec.backend]["score_threshold"] = getattr(rt, "score_threshold", None)
    return out


def clear_cache() -> None:
    """Drop every cached runtime in this process (tests)."""
    with _lock:
        _cache.clear()
        load_counts.clear()


def spec_identity(spec: RuntimeSpec) -> str:
    """The backend's identity, the checkpoint key of its results: from the backend itself (`identity`).

    Built-ins answer without loading a model (the ONNX files are fingerprinted); an object or callable
    answered when it was handed over; an installed backend is built once in this process to ask it (the
    in-process engine then reuses that runtime)."""
    if spec.identity:
        return spec.identity
    if spec.backend == "onnx" and not spec.token:  # fp16, tf32 and fp32 answers differ: their own checkpoints
        # a layout other than the seed's, or another score threshold, answers differently: its own checkpoints
        return spec.files or (files_fingerprint(spec.model_dir) + _precision_part(spec)
                              + layout_tag(spec.model_dir, spec.score_threshold))
    if spec.backend in ("reference", "simulated") and not spec.token:
        return build_runtime(spec).identity
    return _identity_of(get_runtime(spec))


def _fp16(spec: RuntimeSpec) -> bool:
    return spec.device == "tensorrt" and spec.precision in ("auto", "fp16")


def _precision_part(spec: RuntimeSpec) -> str:
    """The precision in the model's identity: fp16 (TensorRT's default), or an explicit tf32 / fp32; `auto`
    elsewhere adds nothing (TF32 on a GPU, FP32 on a CPU: the plan cannot know, so it shares with neither)."""
    if _fp16(spec):
        return ":fp16"
    return f":{spec.precision}" if spec.precision in ("tf32", "fp32") else ""
