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
* Clicks (the four-graph layout): `encode(image, clicks=True)` also asks for the encoder's
  `image_embeddings`, `high_res_features1/2`, so one encode feeds both decoders; `decode_clicks` runs the
  point decoder (`model.points`: loaded and checked on first use, `clicks_problem`; on the CPU under CoreML,
  which cannot load its unbounded `point_coords`).
* `coreml`: each graph loads with its Gemm weights transposed in memory (`model.coreml`); `dml`: the first
  answered tile is checked against the CPU (`model.parity`).

`counters` ({"encodes", "prompts", "decodes", "click_decodes"}) count the graph runs.
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
from .contract import (CONTRACT, LATER_ENCODER_OUTPUTS, TensorSpec, check_point_graph, normalise_dtype,
                       point_refusal)
from .layouts import CLICK_BOX, SEED, recognise
from .files import (DECODER, IMAGE_ENCODER, LANGUAGE_ENCODER, POINT_DECODER, fetch_command, files_fingerprint,
                    graph_path, require_model)
from .runtime import (MASK_SIZE, MODEL_SIZE, SCORE_THRESHOLD, VISUAL_PROMPT, Click, Detections, ExampleBox,
                      PreparedPrompt, TileImage)
from .tokenizer import get_tokenizer

logger = logging.getLogger(__name__)

from ..wording import opt, render, spoken
from .providers import (COREML, CPU, CUDA, DEVICES, DML, EXPLICIT, NEEDS, TENSORRT, cpu_fallback, describe, missing,
                        names, precision_problem, requested)


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
                kind = v.element_type()  # onnx's element type (10: float16), a string in older onnxruntime
                total += int(np.prod(v.shape())) * (2 if kind == 10 or "float16" in str(kind) else 4)
        return total

    def __repr__(self) -> str:
        return f"OnnxEmbedding(device={self.device!r}, {self.nbytes / 2**20:.0f} MiB)"


@dataclass(frozen=True)
class _Prompt:
    tokens: np.ndarray  # int64 [1,32]
    language_mask: np.ndarray  # bool [1,32]
    language_features: np.ndarray  # float32 [32,1,256]
    language_embeds: np.ndarray | None = None  # float32 [32,1,1024], for a decoder that reads them


def _short(exc: BaseException, limit: int = 300) -> str:
    """onnxruntime's message, trimmed from the front (the cause is at the end of its long messages)."""
    text = " ".join(str(exc).split()).rstrip(".")
    return text if len(text) <= limit else "..." + text[-limit:]


def _address_space_limited() -> bool:
    """True under a soft RLIMIT_AS (`ulimit -v`), read as `run.planning.limits.address_space_limit` reads it (the
    model sits below the run, so it reads the limit itself)."""
    try:
        import resource
    except ImportError:
        return False
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return not (soft == resource.RLIM_INFINITY or soft < 0)


def _describe(args) -> list[TensorSpec]:
    return [TensorSpec(a.name, normalise_dtype(a.type),
                       tuple(d if isinstance(d, int) else (d or None) for d in a.shape))
            for a in args]


class OnnxRuntime:
    """SAM 3 through onnxruntime, implementing `sam3tiles.runtime.ModelRuntime` (and clicks, with a point decoder).

    `model_dir`: the model directory (None: ``$SAM3TILES_MODEL_DIR`` or the default cache); never
    downloads. `device`: "auto" (CUDA when onnxruntime offers it, else the CPU, said once), "cpu", "cuda",
    "tensorrt", "coreml" or "dml" (a ModelError when onnxruntime cannot run the graphs there: never the CPU
    instead). `intra_op_threads` / `inter_op_threads`: onnxruntime thread pools
    (0 = onnxruntime's default). `io_binding`: keep embeddings as OrtValues and feed them with
    IOBinding (default: on with CUDA, off on CPU; forcing it on a CPU run is for tests). `parity`: check the
    first answered tile against the CPU (`model.parity`; default: on for dml only), `parity_against`: the
    model folder the CPU loads for it (default: this one; another is for tests).
    """

    name = "onnx"

    def __init__(self, model_dir: str | os.PathLike[str] | None = None, *, device: str = "auto",
                 intra_op_threads: int = 0, inter_op_threads: int = 0, io_binding: bool | None = None,
                 precision: str = "auto", parity: bool | None = None,
                 parity_against: str | os.PathLike[str] | None = None, score_threshold: float = SCORE_THRESHOLD):
        import onnxruntime as ort

        if device not in DEVICES:
            raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {device!r}")
        problem = precision_problem(device, precision)
        if problem is not None:
            raise ValueError(render(problem))
        self.model_dir = require_model(model_dir)
        self._tokenizer = get_tokenizer(self.model_dir)
        self.requested_device, self.precision = device, precision
        self._threads = (intra_op_threads, inter_op_threads)
        available = ort.get_available_providers()
        try:
            providers = requested(device, precision, available, self.model_dir,
                                  files_fingerprint(self.model_dir) if device == "tensorrt" else "", ort.__version__)
        except LookupError:  # an explicit device that is not there: refused, never the CPU instead
            raise ModelError(missing(device, available, ort.__version__)) from None
        self._sessions: dict[str, Any] = {}
        self._held: list = []  # what a session built from memory needs kept alive (CoreML's transposed weights)
        self._load_failure = ""  # why a GPU session could not be created (then the CPU; see _say_fallbacks)
        self.requested_providers = describe(providers)
        self._providers = providers
        self._load_sessions(ort, providers, available)
        #: what onnxruntime actually placed each graph on (a graph may fall back, see _say_fallbacks)
        self.session_providers = {key: list(s.get_providers()) for key, s in self._sessions.items()}

        #: the layout the graphs fit (`model.layouts`): what encode feeds, decode feeds and reads
        self.layout = recognise({key: (_describe(s.get_inputs()), _describe(s.get_outputs()))
                                 for key, s in self._sessions.items()}, self.model_dir)
        self.box_slots: int = self.layout.box_slots or 1
        self.score_threshold = float(score_threshold)
        self._refuse_threshold()
        self.has_point_decoder = (self.model_dir / POINT_DECODER).is_file()

        self.providers: list[str] = list(self._sessions["decoder"].get_providers())
        self.device = {CUDA: "cuda", TENSORRT: "cuda", COREML: "coreml", DML: "dml"}.get(
            self.providers[0] if self.providers else CPU, "cpu")
        self._say_fallbacks(device, available)
        self.io_binding = (self.device == "cuda") if io_binding is None else bool(io_binding)
        self._bind_device = "cuda" if self.device == "cuda" else "cpu"
        self._identity = self._make_identity()
        self._lock = threading.Lock()
        self._prompt_lock = threading.Lock()
        self._prompts: dict[bytes, _Prompt] = {}
        self._point: Any = None  # model.points.PointDecoder, loaded on first use (`clicks_problem`)
        self._point_problem: str | None = None
        self._parity = self._parity_state(parity, parity_against, ort.__version__)
        self.counters = {"encodes": 0, "prompts": 0, "decodes": 0, "click_decodes": 0}
        if self.layout.raw_scores or self.score_threshold != SCORE_THRESHOLD:  # queries sam3tiles itself dropped
            self.counters["queries_under_threshold"] = 0
        logger.info("SAM 3 ONNX model %s loaded from %s: %s, providers in use: %s%s",
                    self._identity, self.model_dir, self.layout.describe(), ", ".join(self.providers),
                    ", IOBinding" if self.io_binding else "")

    def _refuse_threshold(self) -> None:
        """A score threshold under the 0.5 a filtered decoder bakes in cannot be kept: refused at load."""
        t = self.score_threshold
        if not 0.0 <= t <= 1.0:
            raise ModelError(f"{opt('score_threshold', t)}: a score is a probability, give one from 0 to 1")
        if t < SCORE_THRESHOLD and not self.layout.raw_scores:
            raise ModelError(
                f"{opt('score_threshold', t)}: the {self.layout.layout.title} decoder in {self.model_dir} drops every "
                f"query scored under {SCORE_THRESHOLD} inside the graph, so nothing under it can be kept: use an "
                f"export with raw scores (samexporter 0.5.0's decoder) or leave {opt('score_threshold')} at "
                f"{SCORE_THRESHOLD}")

    # ---------------------------------------------------------------------------------------------
    # loading

    def _session_options(self, ort):
        """Fresh session options (one per session: CoreML's adds each graph's own weights to them)."""
        options = ort.SessionOptions()
        if _address_space_limited():
            # the CPU arena grows by doubling and keeps what it took: under `ulimit -v` it asked for twice
            # the activations; freed to malloc instead, a contract-graph run fits 0.45 GB lower (issue 36)
            options.enable_cpu_mem_arena = False
        intra, inter = self._threads
        if intra > 0:
            options.intra_op_num_threads = intra
        if inter > 0:
            options.inter_op_num_threads = inter
            if inter > 1 and self.requested_device != "dml":  # DirectML runs sequentially only
                options.execution_mode = ort.ExecutionMode.ORT_PARALLEL
        if self.requested_device == "dml":  # onnxruntime's DirectML provider takes no memory pattern
            options.enable_mem_pattern = False
        return options

    def _say_fallbacks(self, device: str, available: list[str]) -> None:
        """`auto`: graphs onnxruntime placed on the CPU (no CUDA here, or one it could not start), said once
        (`providers.cpu_fallback`). An explicit device was refused at its first such graph (`_load_sessions`)."""
        said = cpu_fallback(device, available, self.session_providers) if device == "auto" else None
        if said is not None:
            failed = f" (creating a session failed: {self._load_failure})" if self._load_failure else ""
            logger.warning(spoken(said + failed))

    def _load_sessions(self, ort, providers: list, available: list[str]) -> None:
        """The three sessions; an explicit device onnxruntime dropped from one (it could not start it there) is
        a ModelError at once, before the other graphs load."""
        device = self.requested_device
        for key in ("image_encoder", "language_encoder", "decoder"):
            self._sessions[key], providers = self._load_session(ort, key, providers)
            if device in EXPLICIT:
                problem = cpu_fallback(device, available, {key: list(self._sessions[key].get_providers())})
                if problem is not None:
                    raise ModelError(problem)

    def _new_session(self, ort, path, providers: list):
        """A session of the graph at `path`: as the file says, or under CoreML with its Gemm weights
        transposed in memory (`model.coreml`)."""
        if COREML in names(providers):
            from .coreml import coreml_graph

            graph = coreml_graph(path)
            self._held.append(graph)
            return ort.InferenceSession(graph.model, graph.options(ort, self._session_options(ort)),
                                        providers=providers)
        return ort.InferenceSession(str(path), self._session_options(ort), providers=providers)

    def _load_session(self, ort, key: str, providers: list):
        file_name = CONTRACT[key][0] if key in CONTRACT else POINT_DECODER
        path = graph_path(self.model_dir, file_name)
        try:
            return self._new_session(ort, path, providers), providers
        except ModelError:
            raise
        except Exception as exc:  # onnxruntime raises its own Fail/InvalidProtobuf/NoSuchFile/...
            if set(names(providers)) - {CPU}:  # the file's own error if the CPU cannot load it either
                on_cpu = self._load_session(ort, key, [CPU])
                if self.requested_device in EXPLICIT:  # asked for: never the CPU instead
                    raise ModelError(
                        f"{opt('device', self.requested_device)}: onnxruntime could not create the {file_name} "
                        f"session with {names(providers)[0]} ({_short(exc)}): it needs "
                        f"{NEEDS[self.requested_device]}; or use {opt('device', 'cpu')}") from exc
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
            path = graph_path(self.model_dir, file_name)
            h.update(file_name.encode())
            h.update(hashlib.sha256(path.read_bytes()).digest())  # graphs are small; .data only by size
            data = path.with_name(path.name + ".data")
            h.update(str(data.stat().st_size if data.exists() else -1).encode())
        h.update(f"B{self.box_slots}".encode())
        if self.layout.layout is not SEED or self.score_threshold != SCORE_THRESHOLD:  # the seed's stays as it was
            h.update(f"{self.layout.layout.key}:t{self.score_threshold:g}".encode())
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

    def encode(self, image: TileImage | np.ndarray, clicks: bool = False) -> OnnxEmbedding:
        """The tile's embedding: only the encoder outputs the decoder reads are computed (the layout's
        `embedding_outputs`), and with `clicks` the point decoder's `LATER_ENCODER_OUTPUTS` too (one encode feeds
        both decoders). The layout says how the image is fed (uint8, or float32 normalised)."""
        rgb = image.rgb if isinstance(image, TileImage) else image
        if rgb.shape != (3, MODEL_SIZE, MODEL_SIZE) or rgb.dtype != np.uint8:
            raise ValueError(f"encode takes uint8 [3,{MODEL_SIZE},{MODEL_SIZE}], got {rgb.dtype} {rgb.shape}")
        rgb = np.ascontiguousarray(rgb)
        point_features = clicks and not self._clicks_as_boxes
        wanted = self.layout.embedding_outputs + (LATER_ENCODER_OUTPUTS if point_features else ())
        feed = self.layout.image_feed(rgb)
        if clicks:
            self._require_clicks()
        if self._parity is not None and self._parity["image"] is None:  # dml: the first tile, for the CPU
            self._parity.update(image=rgb.copy(), clicks=clicks)
        if self.io_binding:
            session = self._sessions["image_encoder"]
            binding = session.io_binding()
            for name, value in feed.items():
                binding.bind_cpu_input(name, value)
            for name in wanted:
                binding.bind_output(name, self._bind_device)
            try:
                session.run_with_iobinding(binding)
            except Exception as exc:
                raise ModelError(f"the SAM 3 image encoder failed: {_short(exc)}. If this is out "
                                 f"of memory, use fewer GPU workers or {opt('device', 'cpu')}") from exc
            values = dict(zip(wanted, binding.get_outputs()))
        else:
            values = dict(zip(wanted, self._run("image_encoder", wanted, feed)))
        self._count("encodes")
        return OnnxEmbedding(values, self._bind_device if self.io_binding else "cpu", id(self))

    # -- clicks (the point decoder of the four-graph layout) ----------------------------------------------

    def clicks_problem(self) -> str | None:
        """Why clicks cannot run with these files (a model error's message), or None: loads the point decoder
        on first use and checks its interface against what sam3tiles can drive (`contract.check_point_graph`)."""
        with self._lock:
            if self._point is None and self._point_problem is None:
                self._point, self._point_problem = self._load_point_decoder()
        return self._point_problem

    def _require_clicks(self) -> None:
        problem = self.clicks_problem()
        if problem is not None:
            raise ModelError(problem)

    def _load_point_decoder(self):
        """(PointDecoder, None) or (None, why not). Under CoreML on the CPU: CoreML cannot load the point
        decoder (its `point_coords` dimension is unbounded)."""
        import onnxruntime as ort

        from .points import PointDecoder

        if not self.has_point_decoder and self._clicks_as_boxes:
            return None, None  # clicks go to the decoder as small example boxes (`_decode_clicks_as_boxes`)
        if not self.has_point_decoder:
            return None, (f"clicks need the point decoder {POINT_DECODER} of the four-graph layout (sam3-onnx "
                          f"v0.6.0), and {self.model_dir} has none (the v0.3.0 files `sam3tiles model fetch` gets "
                          "have three graphs): put the four-graph files there, or use text prompts or example boxes")
        encoder = _describe(self._sessions["image_encoder"].get_outputs())
        providers = [CPU] if self.device in ("coreml", "cpu") else self._providers
        session, _ = self._load_session(ort, "point_decoder", providers)
        inputs = _describe(session.get_inputs())
        interface, diffs = check_point_graph(inputs, _describe(session.get_outputs()), encoder)
        if interface is None:
            return None, point_refusal(diffs, inputs, self.model_dir)
        self.session_providers["point_decoder"] = list(session.get_providers())
        return PointDecoder(session, interface), None

    def decode_clicks(self, embedding: OnnxEmbedding, clicks: Sequence[Click]) -> Detections:
        """The object under the positive `clicks` (0 or 1 detection; negatives push away), from an embedding
        made with `encode(..., clicks=True)`: two point decoder passes (`model.points`), or with a layout that
        sends clicks as boxes and no point decoder, one decoder pass (`_decode_clicks_as_boxes`)."""
        return self.decode_clicks_many(embedding, [clicks])[0]

    def decode_clicks_many(self, embedding: OnnxEmbedding, asks: Sequence[Sequence[Click]]) -> list[Detections]:
        """`decode_clicks` for each ask on one embedding, the point decoder's shared feeds prepared once."""
        self._require_clicks()
        if self._clicks_as_boxes:
            return [self._decode_clicks_as_boxes(embedding, clicks) for clicks in asks]
        missing_features = [k for k in LATER_ENCODER_OUTPUTS if k not in embedding.values]
        if missing_features:
            raise ValueError(f"decode_clicks needs an embedding from encode(image, clicks=True); this one lacks "
                             f"{', '.join(missing_features)}")
        features = {k: v if isinstance(v, np.ndarray) else v.numpy() for k, v in embedding.values.items()
                    if k in LATER_ENCODER_OUTPUTS}  # a few MB: the point decoder may sit on another device
        try:
            dets = self._point.decode_many(features, asks)
        except Exception as exc:  # onnxruntime's own errors
            raise ModelError(f"the SAM 3 point decoder failed: {_short(exc)}") from exc
        with self._lock:
            self.counters["click_decodes"] += 2 * len(asks)
        for det, clicks in zip(dets, asks):
            self._check_parity(det, lambda rt, emb, c=clicks: rt.decode_clicks(emb, c))
        return dets

    @property
    def _clicks_as_boxes(self) -> bool:
        return self.layout.layout.clicks_as_boxes and not self.has_point_decoder

    def _decode_clicks_as_boxes(self, embedding: OnnxEmbedding, clicks: Sequence[Click]) -> Detections:
        """The object under the positive clicks, each click sent as a `CLICK_BOX`-wide example box with its label
        (samexporter's caller does so): of the decoder's answer, the best-scored mask that holds every positive
        click; none when no mask does (the decoder finds things like the boxes, not only the one clicked)."""
        if len(clicks) > self.box_slots:
            raise ValueError(f"{len(clicks)} clicks given, but this {self.layout.layout.title} decoder takes at most "
                             f"{self.box_slots} (each click is a box): click fewer times on one object")
        boxes = [ExampleBox((c.xy[0] / MODEL_SIZE, c.xy[1] / MODEL_SIZE, CLICK_BOX, CLICK_BOX), c.positive)
                 for c in clicks]
        det = self.decode(embedding, self.prepare_prompt(VISUAL_PROMPT), boxes)
        cells = [(min(MASK_SIZE - 1, int(c.xy[1] * MASK_SIZE / MODEL_SIZE)),
                  min(MASK_SIZE - 1, int(c.xy[0] * MASK_SIZE / MODEL_SIZE))) for c in clicks if c.positive]
        for i in np.argsort(-det.scores, kind="stable"):
            if cells and all(det.masks[i, 0, r, c] > 0.5 for r, c in cells):
                return Detections(det.boxes[i:i + 1], det.scores[i:i + 1], det.masks[i:i + 1])
        return Detections.empty()

    # -- dml: the first answered tile against the CPU (model.parity) --------------------------------------

    def _parity_state(self, parity: bool | None, against, ort_version: str) -> dict | None:
        from .parity import remembered

        if not (self.requested_device == "dml" if parity is None else parity):
            return None
        key = f"{files_fingerprint(self.model_dir).replace('onnx:', '')}-ort{ort_version}-{self.requested_device}"
        if against is None and remembered(self.model_dir, key):
            return None
        return {"key": key, "against": against or self.model_dir, "image": None, "clicks": False}

    def _check_parity(self, det: Detections, again) -> None:
        """dml: compare the first tile's answer `det` with the CPU's (`again(cpu_runtime, cpu_embedding)`);
        a ModelError when they differ. Done once per runtime."""
        state = self._parity
        if state is None or state["image"] is None:
            return
        from .parity import compare, remember

        self._parity = None
        cpu = OnnxRuntime(state["against"], device="cpu", intra_op_threads=self._threads[0],
                          score_threshold=self.score_threshold)
        try:
            reference = again(cpu, cpu.encode(state["image"], clicks=state["clicks"]))
        finally:
            cpu.close()
        problem = compare(det, reference)
        if problem is not None:
            raise ModelError(f"{opt('device', self.requested_device)}: its answer on the first tile differs from the "
                             f"CPU's ({problem}); DirectML has given silently wrong SAM 3 masks on some devices, so "
                             f"this device is refused: use {opt('device', 'cpu')}, or update the GPU driver and "
                             "onnxruntime-directml and try again")
        if len(reference):
            remember(self.model_dir, state["key"], {"objects": len(reference)})

    def prepare_prompt(self, text: str) -> PreparedPrompt:
        """Tokenize `text` and run the language encoder, once per distinct token row per instance."""
        tokens = self._tokenizer.tokenize(text)  # PromptError for blank or too long text
        key = tokens.tobytes()
        with self._prompt_lock:
            cached = self._prompts.get(key)
            if cached is None:
                wanted = self.layout.layout.prompt_outputs + (("text_embeds",) if self.layout.wants_text_embeds else ())
                outs = self._run("language_encoder", wanted, {"tokens": tokens})
                cached = _Prompt(tokens, outs[0], outs[1], outs[2] if len(outs) > 2 else None)
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

    def _decoder_feeds(self, embedding: OnnxEmbedding, payloads: Sequence[_Prompt],
                       boxes: Sequence[ExampleBox]) -> dict:
        """Every input the layout's decoder has: the embedding, the prompt (a batched decoder's: every prompt,
        `text_ids` row i = prompt i), the boxes, the image size (the tile is the whole model input, so its side;
        samexporter's decoder takes it as int64 scalars)."""
        if boxes and not self.layout.takes_boxes:
            raise ModelError(f"the {self.layout.layout.title} decoder in {self.model_dir} takes text prompts only "
                             "(it has no box inputs): example boxes, example images and clicks cannot run with it")
        size = np.asarray(self.layout.image_side, np.int64)
        values = {k: v for k, v in embedding.values.items() if k in self.layout.embedding_outputs}  # not clicks'
        first = payloads[0]
        return self.layout.decoder_feeds({
            **values, "language_mask": first.language_mask, "language_features": first.language_features,
            "language_embeds": first.language_embeds, **self._box_inputs(boxes),
            "text_features": np.concatenate([p.language_features for p in payloads], axis=1),
            "text_mask": np.concatenate([p.language_mask for p in payloads], axis=0),
            "text_ids": np.arange(len(payloads), dtype=np.int64),
            "original_height": size, "original_width": size})

    def decode(self, embedding: OnnxEmbedding, prompt: PreparedPrompt,
               boxes: Sequence[ExampleBox] = ()) -> Detections:
        """The decoder's boxes, scores and masks for one prompt on one encoded tile (N may be 0): a filtered
        decoder's outputs untouched, a raw one's queries over `score_threshold` (`Fit.detections`)."""
        rows = self._decode_rows(embedding, [prompt], boxes)
        self._check_parity(rows[0], lambda rt, emb: rt.decode(emb, rt.prepare_prompt(prompt.text), boxes))
        return rows[0]

    def decode_batch(self, embedding: OnnxEmbedding, prompts: Sequence[PreparedPrompt]) -> list[Detections]:
        """Every text prompt (no boxes) on one encoded tile: ONE decoder call with a batched decoder
        (`Fit.batched`), one each otherwise. The answers in the prompts' order."""
        if not self.layout.batched or len(prompts) <= 1:
            return [self.decode(embedding, p) for p in prompts]
        return self._decode_rows(embedding, prompts, ())

    @property
    def batched(self) -> bool:
        return self.layout.batched

    def _decode_rows(self, embedding: OnnxEmbedding, prompts: Sequence[PreparedPrompt],
                     boxes: Sequence[ExampleBox]) -> list[Detections]:
        if not isinstance(embedding, OnnxEmbedding):
            raise TypeError(f"decode needs an embedding from OnnxRuntime.encode, got {type(embedding).__name__}")
        payloads = [p.payload if isinstance(p.payload, _Prompt) else self.prepare_prompt(p.text).payload
                    for p in prompts]
        feeds = self._decoder_feeds(embedding, payloads, boxes)
        outputs = self.layout.decoder_outputs
        if not all(isinstance(v, np.ndarray) for v in feeds.values()):  # OrtValues: IOBinding
            session = self._sessions["decoder"]
            binding = session.io_binding()
            for name, value in feeds.items():
                if isinstance(value, np.ndarray):
                    binding.bind_cpu_input(name, value)
                else:
                    binding.bind_ortvalue_input(name, value)
            for name in outputs:
                binding.bind_output(name, "cpu")  # N is data-dependent: onnxruntime allocates
            try:
                session.run_with_iobinding(binding)
            except Exception as exc:
                raise ModelError(f"the SAM 3 decoder failed: {_short(exc)}") from exc
            got = binding.copy_outputs_to_cpu()
        else:
            got = self._run("decoder", outputs, feeds)
        self._count("decodes")
        try:
            rows = self.layout.detections_rows(got, self.score_threshold)
        except ValueError as exc:
            raise ContractError(f"the SAM 3 decoder returned outputs that do not fit the {self.layout.layout.title} "
                                f"layout: {exc}. Check the model with `sam3tiles model info {self.model_dir}`") from exc
        if len(rows) != len(prompts):
            raise ContractError(f"the {self.layout.layout.title} decoder answered {len(rows)} prompt rows for "
                                f"{len(prompts)} prompts. Check the model with `sam3tiles model info {self.model_dir}`")
        under = sum(u for _, u in rows)
        if under:
            with self._lock:
                self.counters["queries_under_threshold"] += under
        return [d for d, _ in rows]

    def close(self) -> None:
        """Drop the sessions and cached prompts (frees the model's memory once nothing else holds it)."""
        self._sessions.clear()
        self._prompts.clear()
        self._point = None
        self._held.clear()

    def __repr__(self) -> str:
        return (f"OnnxRuntime({str(self.model_dir)!r}, device={self.device!r}, box_slots={self.box_slots}, "
                f"providers={self.providers})")

