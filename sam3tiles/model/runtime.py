"""The model runtime interface: every backend (reference, ONNX, a third party's) implements `ModelRuntime`.

Frames and units, shared by every backend:

* A tile reaches the model as `TileImage.rgb`, uint8 `[3, 1008, 1008]`, RGB, channels first, exactly the
  SAM 3 image-encoder input. Tile content sits at the top-left; the rest is zero padding, and
  `TileImage.valid` says which pixels are real (padding and nodata are False).
* Example boxes reach `decode` as `ExampleBox.cxcywh`, normalised (cx, cy, w, h) of the 1008 input, the
  SAM 3 decoder's `box_coords` frame.
* `Detections` are SAM 3-shaped: boxes `[N,4]` xyxy normalised to the 1008 input, scores `[N]`, masks
  `[N,1,288,288]` float32 probabilities, N <= 200, only scores > 0.5.

Everything after `decode` (vectorizing, merging, writing) is shared by every backend.

Clicks (optional, docs/points.md): a backend that answers point prompts implements
`decode_clicks(embedding, clicks) -> Detections` (0 or 1 object: the one under the positive `Click`s, their
union when several, negatives pushing away; its score the model's confidence) and takes
`encode(image, clicks=True)` (an embedding both decoders read). `clicks_problem(runtime)` says why one cannot.

For backend authors (docs/backends.md has a worked example):

* Lifetime: one instance per process, built once (`model.registry.get_runtime`) and kept for every tile.
  `encode` once per tile, `prepare_prompt` once per distinct prompt per process, `decode` once per (tile,
  prompt, chunk of at most `box_slots` boxes). The embedding `encode` returns never leaves the process.
* Threads: calls come from the worker's thread pool. On the in-process engine, and on a cluster whose
  model workers advertise `resources={"GPU": 1}`, model tasks run one at a time per worker; on a cluster
  without that resource they may overlap, so guard shared state with a lock if it is not thread-safe.
  `prepare_prompt` is always called under a lock.
* Identity: `identity` names the backend and its exact model (weights hash, export options, version).
  Checkpointed tiles are keyed by it: a changed model must change it, or a resumed run would mix results
  of two models. It is read once when the run starts (the `model` column and the run report).
* Name: `name` fills the `backend` column of every output row.
* Errors: raise `sam3tiles.errors.ModelError` for a problem no retry can fix (missing weights, a wrong
  input shape): the run stops with exit 4. Any other exception fails the tile, which is retried.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence, runtime_checkable

import numpy as np

MODEL_SIZE = 1008
MASK_SIZE = 288
MAX_QUERIES = 200
SCORE_THRESHOLD = 0.5
#: Text the SAM 3 language encoder gets when a prompt has example boxes and no words.
VISUAL_PROMPT = "visual"


@dataclass(frozen=True)
class TileImage:
    """One model input: `rgb` uint8 [3,1008,1008] (padding zero), `valid` bool [1008,1008]."""

    rgb: np.ndarray
    valid: np.ndarray

    def __post_init__(self) -> None:
        if self.rgb.shape != (3, MODEL_SIZE, MODEL_SIZE) or self.rgb.dtype != np.uint8:
            raise ValueError(f"TileImage.rgb must be uint8 [3,{MODEL_SIZE},{MODEL_SIZE}], got "
                             f"{self.rgb.dtype} {self.rgb.shape}")
        if self.valid.shape != (MODEL_SIZE, MODEL_SIZE):
            raise ValueError(f"TileImage.valid must be [{MODEL_SIZE},{MODEL_SIZE}], got {self.valid.shape}")


@dataclass(frozen=True)
class ExampleBox:
    """An exemplar box in the 1008 model-input frame: normalised (cx, cy, w, h); positive or negative."""

    cxcywh: tuple[float, float, float, float]
    positive: bool = True

    @property
    def xyxy_px(self) -> tuple[float, float, float, float]:
        """The box as (x0, y0, x1, y1) in model-input pixels."""
        cx, cy, w, h = (v * MODEL_SIZE for v in self.cxcywh)
        return (cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2)


@dataclass(frozen=True)
class Click:
    """A click in the 1008 model-input frame: `xy` in model-input pixels (x right, y down); positive or not."""

    xy: tuple[float, float]
    positive: bool = True


@dataclass
class Detections:
    """SAM 3 decoder outputs for one tile, one prompt, one decoder pass."""

    boxes: np.ndarray  # float32 [N,4] xyxy normalised to the 1008 input
    scores: np.ndarray  # float32 [N]
    masks: np.ndarray  # float32 [N,1,288,288] probabilities

    def __post_init__(self) -> None:
        n = len(self.scores)
        if self.boxes.shape != (n, 4) or self.masks.shape != (n, 1, MASK_SIZE, MASK_SIZE):
            raise ValueError(f"inconsistent detections: boxes {self.boxes.shape}, scores {self.scores.shape}, "
                             f"masks {self.masks.shape}")

    def __len__(self) -> int:
        return len(self.scores)

    @classmethod
    def empty(cls) -> "Detections":
        return cls(np.zeros((0, 4), np.float32), np.zeros((0,), np.float32),
                   np.zeros((0, 1, MASK_SIZE, MASK_SIZE), np.float32))


@dataclass(frozen=True)
class PreparedPrompt:
    """What `prepare_prompt` returns: the text and the backend's own encoding of it (opaque to callers)."""

    text: str
    payload: Any = field(default=None, compare=False, repr=False)
    #: False when the backend knows this text can find nothing (reported once per job).
    usable: bool = True
    note: str = ""


@runtime_checkable
class ModelRuntime(Protocol):
    """A SAM 3-shaped model. One instance per process; `encode` once per tile, `prepare_prompt` once per
    distinct prompt per job, `decode` once per (tile, prompt, box chunk)."""

    #: short backend name written to every output row ("reference", "onnx", ...)
    name: str
    #: boxes one decoder pass takes; more boxes on a tile mean several passes
    box_slots: int

    @property
    def identity(self) -> str:
        """A stable string naming the backend and its model (file hashes, version): checkpoint key."""
        ...

    def encode(self, image: TileImage) -> Any:
        """The image embedding of one tile; opaque, stays in this process."""
        ...

    def prepare_prompt(self, text: str) -> PreparedPrompt:
        """Encode a text prompt once; `VISUAL_PROMPT` for box-only prompts."""
        ...

    def decode(self, embedding: Any, prompt: PreparedPrompt, boxes: Sequence[ExampleBox] = ()) -> Detections:
        """Detections for one prompt on one encoded tile; at most `box_slots` boxes."""
        ...


def clicks_problem(runtime: Any) -> str | None:
    """Why `runtime` cannot answer clicks (a model error's message), or None. A backend may say itself
    (`clicks_problem()`: the ONNX backend loads and checks its point decoder); else it needs `decode_clicks`."""
    ask = getattr(runtime, "clicks_problem", None)
    if callable(ask):
        return ask()
    if callable(getattr(runtime, "decode_clicks", None)):
        return None
    return (f"the {getattr(runtime, 'name', type(runtime).__name__)!r} backend answers no clicks (it has no "
            "decode_clicks, docs/backends.md): use the onnx backend with the four-graph model files, or the "
            "reference backend")
