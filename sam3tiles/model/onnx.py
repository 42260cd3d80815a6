"""The ONNX backend: the published SAM 3 ONNX graphs run with onnxruntime, unchanged.

One `OnnxRuntime` per process holds three sessions (image encoder, language encoder, decoder). At load
every graph is checked against the SAM 3 ONNX contract (`sam3tiles.model.contract.CONTRACT`) and the box
slot count is read from the decoder's ``box_coords`` input (1 in v0.3.0, 16 in the later layout).

* `encode` runs the image encoder once per tile and asks only for the four tensors the decoder reads
  (``vision_pos_enc_2``, ``backbone_fpn_0/1/2``, ~117 MB). On CUDA they stay on the GPU as OrtValues
  (IOBinding) and are bound straight into the decoder: no host round trip.
* `prepare_prompt` tokenizes and runs the language encoder once per distinct text per instance.
* `decode` runs the decoder for one (tile, prompt, up to `box_slots` boxes) and returns its outputs
  as `Detections`, untouched.

`counters` ({"encodes", "prompts", "decodes"}) count the graph runs.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ContractError, ModelError
from .contract import CONTRACT, EMBEDDING_OUTPUTS, TensorSpec, check_graph, raise_for_differences
from .files import (DECODER, IMAGE_ENCODER, LANGUAGE_ENCODER, POINT_DECODER, fetch_command, files_fingerprint,
                    require_model)
from .runtime import MODEL_SIZE, Detections, ExampleBox, PreparedPrompt, TileImage
from .tokenizer import get_tokenizer

logger = logging.getLogger(__name__)

from ..wording import opt, render, spoken
from .providers import (CPU, CUDA, DEVICES, TENSORRT, cpu_fallback, describe, missing, names, precision_problem,
                        requested)

_PROMPT_OUTPUTS = ("text_attention_mask", "text_memory")
_DECODER_OUTPUTS = ("boxes", "scores", "masks")


class OnnxEmbedding:
    """One tile's image embedding: the four encoder outputs the decoder reads.

    `values` maps output name to a numpy array (CPU) or an onnxruntime OrtValue (IOBinding, e.g. kept
    in GPU memory). Opaque to callers; valid only in the process and runtime that made it.
    """

    __slots__ = ("device", "owner", "values")

    def __init__(self, values: dict[str, Any], device: str, owner: int):
        self.values = values
        self.device = device
        self.owner = owner

    @property
    def nbytes(self) -> int:
        total = 0
        for v in self.values.values():
            if isinstance(v, np.ndarray):
                total += v.nbytes
            else:
                total += int(np.prod(v.shape())) * 4
        return total

    def __repr__(self) -> str:
        return f"OnnxEmbedding(device={self.device!r}, {self.nbytes / 2**20:.0f} MiB)"


@dataclass(frozen=True)
class _Prompt:
    tokens: np.ndarray  # int64 [1,32]
    language_mask: np.ndarray  # bool [1,32]
    language_features: np.ndarray  # float32 [32,1,256]


def _short(exc: BaseException, limit: int = 300) -> str:
    """onnxruntime's message, trimmed from the front (the cause is at the end of its long messages)."""
    text = " ".join(str(exc).split()).rstrip(".")
    return text if len(text) <= limit else "..." + text[-limit:]


def _address_space_limited() -> bool:
    """True under a soft RLIMIT_AS (`ulimit -v`), read as `run.limits.address_space_limit` reads it (the
    model sits below the run, so it reads the limit itself)."""
    try:
        import resource
    except ImportError:
        return False
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return not (soft == resource.RLIM_INFINITY or soft < 0)


def _describe(args) -> list[TensorSpec]:
    return [TensorSpec(a.name, a.type, tuple(d if isinstance(d, int) else (d or None) for d in a.shape))
            for a in args]


class OnnxRuntime:
    """SAM 3 through onnxruntime, implementing `sam3tiles.runtime.ModelRuntime`.

    `model_dir`: the model directory (None: ``$SAM3TILES_MODEL_DIR`` or the default cache); never
    downloads. `device`: "auto" (CUDA when onnxruntime offers it, else the CPU, said once), "cpu", "cuda"
    or "tensorrt" (a ModelError when onnxruntime cannot run the graphs there: never the CPU instead).
    `intra_op_threads` / `inter_op_threads`: onnxruntime thread pools
    (0 = onnxruntime's default). `io_binding`: keep embeddings as OrtValues and feed them with
    IOBinding (default: on with CUDA, off on CPU; forcing it on a CPU run is for tests).
    """

    name = "onnx"

    def __init__(self, model_dir: str | os.PathLike[str] | None = None, *, device: str = "auto",
                 intra_op_threads: int = 0, inter_op_threads: int = 0, io_binding: bool | None = None,
                 precision: str = "auto"):
        import onnxruntime as ort

        if device not in DEVICES:
            raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {device!r}")
        problem = precision_problem(device, precision)
        if problem is not None:
            raise ValueError(render(problem))
        self.model_dir = require_model(model_dir)
        self._tokenizer = get_tokenizer(self.model_dir)
        self.requested_device, self.precision = device, precision
        available = ort.get_available_providers()
        try:
            providers = requested(device, precision, available, self.model_dir,
                                  files_fingerprint(self.model_dir) if device == "tensorrt" else "", ort.__version__)
        except LookupError:  # an explicit device that is not there: refused, never the CPU instead
            raise ModelError(missing(device, available, ort.__version__)) from None

        options = ort.SessionOptions()
        if _address_space_limited():
            # the CPU arena grows by doubling and keeps what it took: under `ulimit -v` it asked for twice
            # the activations; freed to malloc instead, a contract-graph run fits 0.45 GB lower (issue 36)
            options.enable_cpu_mem_arena = False
        if intra_op_threads > 0:
            options.intra_op_num_threads = intra_op_threads
        if inter_op_threads > 0:
            options.inter_op_num_threads = inter_op_threads
            if inter_op_threads > 1:
                options.execution_mode = ort.ExecutionMode.ORT_PARALLEL
        self._sessions: dict[str, Any] = {}
        self._load_failure = ""  # why a GPU session could not be created (then the CPU; see _say_fallbacks)
        self.requested_providers = describe(providers)
        self._load_sessions(ort, options, providers, available)
        #: what onnxruntime actually placed each graph on (a graph may fall back, see _say_fallbacks)
        self.session_providers = {key: list(s.get_providers()) for key, s in self._sessions.items()}

        checks = [check_graph(key, _describe(s.get_inputs()), _describe(s.get_outputs()))
                  for key, s in self._sessions.items()]
        raise_for_differences(checks, self.model_dir)
        self.box_slots: int = checks[-1].box_slots or 1
        self.has_point_decoder = (self.model_dir / POINT_DECODER).is_file()

        self.providers: list[str] = list(self._sessions["decoder"].get_providers())
        self.device = "cuda" if self.providers and self.providers[0] in (CUDA, TENSORRT) else "cpu"
        self._say_fallbacks(device, available)
        self.io_binding = (self.device == "cuda") if io_binding is None else bool(io_binding)
        self._bind_device = "cuda" if self.device == "cuda" else "cpu"
        self._identity = self._make_identity()
        self._lock = threading.Lock()
        self._prompt_lock = threading.Lock()
        self._prompts: dict[bytes, _Prompt] = {}
        self.counters = {"encodes": 0, "prompts": 0, "decodes": 0}
        logger.info("SAM 3 ONNX model %s loaded from %s: %d box slot(s), providers in use: %s%s",
                    self._identity, self.model_dir, self.box_slots, ", ".join(self.providers),
                    ", IOBinding" if self.io_binding else "")

    # ---------------------------------------------------------------------------------------------
    # loading

    def _say_fallbacks(self, device: str, available: list[str]) -> None:
        """`auto`: graphs onnxruntime placed on the CPU (no CUDA here, or one it could not start), said once
        (`providers.cpu_fallback`). An explicit device was refused at its first such graph (`_load_sessions`)."""
        said = cpu_fallback(device, available, self.session_providers) if device == "auto" else None
        if said is not None:
            failed = f" (creating a session failed: {self._load_failure})" if self._load_failure else ""
            logger.warning(spoken(said + failed))

    def _load_sessions(self, ort, options, providers: list, available: list[str]) -> None:
        """The three sessions; an explicit GPU device onnxruntime dropped from one (it could not start it
        there) is a ModelError at once, before the other graphs load."""
        device = self.requested_device
        for key in ("image_encoder", "language_encoder", "decoder"):
            self._sessions[key], providers = self._load_session(ort, key, options, providers)
            if device in ("cuda", "tensorrt"):
                problem = cpu_fallback(device, available, {key: list(self._sessions[key].get_providers())})
                if problem is not None:
                    raise ModelError(problem)

    def _load_session(self, ort, key: str, options, providers: list):
        file_name = CONTRACT[key][0]
        path = self.model_dir / file_name
        try:
            return ort.InferenceSession(str(path), options, providers=providers), providers
        except Exception as exc:  # onnxruntime raises its own Fail/InvalidProtobuf/NoSuchFile/...
            if set(names(providers)) - {CPU}:  # the file's own error if the CPU cannot load it either
                on_cpu = self._load_session(ort, key, options, [CPU])
                if self.requested_device in ("cuda", "tensorrt"):  # asked for: never the CPU instead
                    raise ModelError(
                        f"{opt('device', self.requested_device)}: onnxruntime could not create the {file_name} "
                        f"session with {names(providers)[0]} ({_short(exc)}): check the GPU, CUDA 12 and cuDNN 9 "
                        f"for this onnxruntime-gpu, or use {opt('device', 'cpu')}") from exc
                self._load_failure = f"{file_name} with {names(providers)[0]}: {_short(exc)}"  # _say_fallbacks
                return on_cpu
            data = path.with_name(path.name + ".data")
            weights = f" with its weights {data.name}" if data.exists() else ""
            raise ModelError(
                f"cannot load {path}{weights}: {_short(exc)}. A file is missing, truncated or corrupt: check "
                f"them with `sam3tiles model verify {self.model_dir}` and download again with "
                f"`{fetch_command(self.model_dir)}`") from exc

    def _make_identity(self) -> str:
        h = hashlib.sha256(b"sam3-onnx-contract-1")
        for file_name in (IMAGE_ENCODER, LANGUAGE_ENCODER, DECODER):
            path = self.model_dir / file_name
            h.update(file_name.encode())
            h.update(hashlib.sha256(path.read_bytes()).digest())  # graphs are small; .data only by size
            data = path.with_name(path.name + ".data")
            h.update(str(data.stat().st_size if data.exists() else -1).encode())
        h.update(f"B{self.box_slots}".encode())
        return "onnx:" + h.hexdigest()[:16]

    @property
    def identity(self) -> str:
        """"onnx:" + a hash of the three graph files, the weight file sizes and the box slot count."""
        return self._identity

    def _count(self, key: str) -> None:
        with self._lock:
            self.counters[key] += 1

    def _run(self, key: str, outputs: Sequence[str], feeds: dict[str, Any]) -> list[Any]:
        try:
            return self._sessions[key].run(list(outputs), feeds)
        except Exception as exc:
            raise ModelError(f"the SAM 3 {key.replace('_', ' ')} failed: {_short(exc)}. If this "
                             f"is out of memory, use fewer workers or {opt('device', 'cpu')}; otherwise check the "
                             f"model with `sam3tiles model verify {self.model_dir}`") from exc

    # ---------------------------------------------------------------------------------------------
    # the ModelRuntime interface

    def encode(self, image: TileImage | np.ndarray) -> OnnxEmbedding:
        """The tile's embedding: only `EMBEDDING_OUTPUTS` are computed out of the encoder."""
        rgb = image.rgb if isinstance(image, TileImage) else image
        if rgb.shape != (3, MODEL_SIZE, MODEL_SIZE) or rgb.dtype != np.uint8:
            raise ValueError(f"encode takes uint8 [3,{MODEL_SIZE},{MODEL_SIZE}], got {rgb.dtype} {rgb.shape}")
        rgb = np.ascontiguousarray(rgb)
        if self.io_binding:
            session = self._sessions["image_encoder"]
            binding = session.io_binding()
            binding.bind_cpu_input("image", rgb)
            for name in EMBEDDING_OUTPUTS:
                binding.bind_output(name, self._bind_device)
            try:
                session.run_with_iobinding(binding)
            except Exception as exc:
                raise ModelError(f"the SAM 3 image encoder failed: {_short(exc)}. If this is out "
                                 f"of memory, use fewer GPU workers or {opt('device', 'cpu')}") from exc
            values = dict(zip(EMBEDDING_OUTPUTS, binding.get_outputs()))
        else:
            values = dict(zip(EMBEDDING_OUTPUTS, self._run("image_encoder", EMBEDDING_OUTPUTS, {"image": rgb})))
        self._count("encodes")
        return OnnxEmbedding(values, self._bind_device if self.io_binding else "cpu", id(self))

    def prepare_prompt(self, text: str) -> PreparedPrompt:
        """Tokenize `text` and run the language encoder, once per distinct token row per instance."""
        tokens = self._tokenizer.tokenize(text)  # PromptError for blank or too long text
        key = tokens.tobytes()
        with self._prompt_lock:
            cached = self._prompts.get(key)
            if cached is None:
                mask, features = self._run("language_encoder", _PROMPT_OUTPUTS, {"tokens": tokens})
                cached = _Prompt(tokens, mask, features)
                self._prompts[key] = cached
                self._count("prompts")
        return PreparedPrompt(text=text, payload=cached)

    def _box_inputs(self, boxes: Sequence[ExampleBox]) -> dict[str, np.ndarray]:
        b = self.box_slots
        if len(boxes) > b:
            raise ValueError(f"{len(boxes)} example boxes given, but this SAM 3 decoder takes at most {b} per "
                             f"pass: split them into chunks of box_slots={b}")
        coords = np.zeros((b, 1, 4), np.float32)
        labels = np.ones((b, 1), np.int64)
        masks = np.ones((1, b), np.bool_)  # True = empty slot
        for i, box in enumerate(boxes):
            coords[i, 0] = box.cxcywh
            labels[i, 0] = 1 if box.positive else 0
            masks[0, i] = False
        return {"box_coords": coords, "box_labels": labels, "box_masks": masks}

    def decode(self, embedding: OnnxEmbedding, prompt: PreparedPrompt,
               boxes: Sequence[ExampleBox] = ()) -> Detections:
        """The decoder's boxes, scores and masks for one prompt on one encoded tile (N may be 0)."""
        if not isinstance(embedding, OnnxEmbedding):
            raise TypeError(f"decode needs an embedding from OnnxRuntime.encode, got {type(embedding).__name__}")
        payload = prompt.payload
        if not isinstance(payload, _Prompt):
            payload = self.prepare_prompt(prompt.text).payload
        feeds: dict[str, Any] = {"language_mask": payload.language_mask,
                                 "language_features": payload.language_features, **self._box_inputs(boxes)}
        if not all(isinstance(v, np.ndarray) for v in embedding.values.values()):  # OrtValues: IOBinding
            session = self._sessions["decoder"]
            binding = session.io_binding()
            for name, value in embedding.values.items():
                if isinstance(value, np.ndarray):
                    binding.bind_cpu_input(name, value)
                else:
                    binding.bind_ortvalue_input(name, value)
            for name, value in feeds.items():
                binding.bind_cpu_input(name, value)
            for name in _DECODER_OUTPUTS:
                binding.bind_output(name, "cpu")  # N is data-dependent: onnxruntime allocates
            try:
                session.run_with_iobinding(binding)
            except Exception as exc:
                raise ModelError(f"the SAM 3 decoder failed: {_short(exc)}") from exc
            out_boxes, scores, masks = binding.copy_outputs_to_cpu()
        else:
            feeds.update(embedding.values)
            out_boxes, scores, masks = self._run("decoder", _DECODER_OUTPUTS, feeds)
        self._count("decodes")
        try:
            return Detections(boxes=out_boxes, scores=scores, masks=masks)
        except ValueError as exc:
            raise ContractError(f"the SAM 3 decoder returned outputs that do not fit the contract: {exc}. "
                                f"Check the model with `sam3tiles model info {self.model_dir}`") from exc

    def close(self) -> None:
        """Drop the sessions and cached prompts (frees the model's memory once nothing else holds it)."""
        self._sessions.clear()
        self._prompts.clear()

    def __repr__(self) -> str:
        return (f"OnnxRuntime({str(self.model_dir)!r}, device={self.device!r}, box_slots={self.box_slots}, "
                f"providers={self.providers})")

