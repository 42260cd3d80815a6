"""A third-party sam3tiles backend around a real trained network: the PP-OCRv4 DB text detector.

The ONNX file ships inside the `rapidocr-onnxruntime` wheel (`models/ch_PP-OCRv4_det_infer.onnx`,
4.7 MB, Apache-2.0); nothing is downloaded at run time. It is a text detector (Differentiable
Binarization: a per-pixel text probability map), NOT SAM 3: it knows one concept, text, and takes no
example boxes. Wrapped here so that its answers have SAM 3's shape (`sam3tiles.model.runtime`):

* `encode` runs the network once per 1008 x 1008 tile (padded to 1024, a multiple of 32, with the tile's
  mean colour, since black padding beside a white page reads as an edge) and keeps the probability map
  of the tile's valid pixels;
* `decode` binarises it at 0.3 (DB's `thresh`), dilates it by 2 x 2 (DB's `use_dilation`), and answers
  one instance per connected region: score = mean probability inside it (DB's `box_score`, kept only
  above 0.5, which is also SAM 3's baked-in threshold), polygon = its minimum rotated rectangle grown by
  DB's unclip (distance = area x 1.6 / perimeter), mask = that polygon's coverage of each cell of the 288
  grid, box = its extent, normalised to the 1008 input, at most 200 instances (highest scores first).

Registered under the `sam3tiles.backends` entry point as `dbtext`: `sam3tiles segment page.tif --text
text --backend dbtext`. The prompt must name text ("text", "word", "line", ...).
"""

from __future__ import annotations

import hashlib
import threading
from importlib import resources
from pathlib import Path

import numpy as np

from sam3tiles.errors import ModelError
from sam3tiles.model.runtime import MASK_SIZE, MAX_QUERIES, MODEL_SIZE, Detections, PreparedPrompt, TileImage

#: DB post-processing as PaddleOCR / RapidOCR configure PP-OCRv4 (rapidocr_onnxruntime/config.yaml).
THRESH = 0.3
BOX_THRESH = 0.5
UNCLIP_RATIO = 1.6
MIN_SIDE = 3
NET_SIZE = 1024  # the network needs sides that are multiples of 32; the 1008 tile sits top-left
PROMPTS = frozenset({"text", "texts", "word", "words", "line", "lines", "text line", "text lines"})
MODEL_FILE = "ch_PP-OCRv4_det_infer.onnx"


def bundled_model() -> Path:
    """The DB detector inside the rapidocr-onnxruntime wheel."""
    try:
        path = Path(str(resources.files("rapidocr_onnxruntime") / "models" / MODEL_FILE))
    except ModuleNotFoundError as err:
        raise ModelError("the dbtext backend needs the DB text detector shipped in rapidocr-onnxruntime: "
                         "pip install rapidocr-onnxruntime") from err
    if not path.is_file():
        raise ModelError(f"{path} is missing: reinstall rapidocr-onnxruntime")
    return path


class DBTextRuntime:
    """The DB text detector with SAM 3's inputs and outputs (see the module docstring)."""

    name = "dbtext"
    box_slots = 1

    def __init__(self, model: str | Path | None = None, device: str = "cpu", threads: int = 0) -> None:
        import onnxruntime as ort

        path = Path(model) if model else bundled_model()
        if path.is_dir():
            path = path / MODEL_FILE
        if not path.is_file():
            raise ModelError(f"no DB detector at {path}: give the .onnx file (or its folder) with --model, or "
                             "leave --model out to use the one in rapidocr-onnxruntime")
        digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
        self._identity = f"dbtext:{path.stem}:{digest}:t{THRESH}:u{UNCLIP_RATIO}"
        opts = ort.SessionOptions()
        if threads:
            opts.intra_op_num_threads = int(threads)
        providers = ["CPUExecutionProvider"]
        if device != "cpu" and "CUDAExecutionProvider" in ort.get_available_providers():
            providers.insert(0, "CUDAExecutionProvider")
        self.session = ort.InferenceSession(str(path), opts, providers=providers)
        self._input = self.session.get_inputs()[0].name
        self._lock = threading.Lock()
        self.counters = {"encodes": 0, "decodes": 0}

    @property
    def identity(self) -> str:
        return self._identity

    def encode(self, image: TileImage) -> np.ndarray:
        """The text probability map [1008, 1008] float32 of one tile (0 on padding and nodata)."""
        with self._lock:
            self.counters["encodes"] += 1
        rgb = image.rgb.transpose(1, 2, 0)
        fill = rgb[image.valid].mean(axis=0) if image.valid.any() else np.zeros(3)
        net = np.empty((NET_SIZE, NET_SIZE, 3), np.float32)
        net[:] = fill
        net[:MODEL_SIZE, :MODEL_SIZE] = np.where(image.valid[..., None], rgb, fill)
        # PaddleOCR reads images as BGR; normalise x/255 then (x - 0.5) / 0.5, channels first, batch of one
        x = ((net[..., ::-1] / 255.0 - 0.5) / 0.5).transpose(2, 0, 1)[None].astype(np.float32)
        prob = self.session.run(None, {self._input: x})[0][0, 0, :MODEL_SIZE, :MODEL_SIZE]
        return np.where(image.valid, prob, 0.0).astype(np.float32)

    def prepare_prompt(self, text: str) -> PreparedPrompt:
        ok = " ".join(text.lower().split()) in PROMPTS
        return PreparedPrompt(text, usable=ok, note="" if ok else
                              f"the dbtext backend is a text detector: it finds text only (prompt 'text'); "
                              f"{text!r} finds nothing, and example boxes are not supported")

    def decode(self, prob: np.ndarray, prompt: PreparedPrompt, boxes=()) -> Detections:
        """One instance per connected text region of the probability map (DB post-processing)."""
        import cv2

        with self._lock:
            self.counters["decodes"] += 1
        if not prompt.usable:
            return Detections.empty()
        bitmap = cv2.dilate((prob > THRESH).astype(np.uint8), np.ones((2, 2), np.uint8))
        n, labels, stats, _ = cv2.connectedComponentsWithStats(bitmap, connectivity=8)
        found = []
        for i in range(1, n):
            x, y, w, h = stats[i, :4]
            region = labels[y:y + h, x:x + w] == i
            score = float(prob[y:y + h, x:x + w][region].mean())
            if score <= BOX_THRESH:
                continue
            rect = _unclipped_rect(np.argwhere(region)[:, ::-1] + (x, y))
            if rect is not None:
                found.append((score, rect))
        found.sort(key=lambda f: -f[0])
        found = found[:MAX_QUERIES]
        masks = np.zeros((len(found), 1, MASK_SIZE, MASK_SIZE), np.float32)
        out_boxes = np.zeros((len(found), 4), np.float32)
        for j, (_, rect) in enumerate(found):
            masks[j, 0] = _coverage(rect)
            lo = np.clip(rect.min(axis=0), 0, MODEL_SIZE)
            hi = np.clip(rect.max(axis=0), 0, MODEL_SIZE)
            out_boxes[j] = np.concatenate([lo, hi]) / MODEL_SIZE
        return Detections(out_boxes, np.array([f[0] for f in found], np.float32), masks)


def _unclipped_rect(points: np.ndarray) -> np.ndarray | None:
    """DB's box of one region (pixel xy points): its minimum rotated rectangle grown by the unclip distance
    (area x ratio / perimeter, round joins), as that grown shape's minimum rotated rectangle (4 x 2 px)."""
    import cv2
    import shapely

    pts = np.concatenate([points, points + (1, 0), points + (0, 1), points + (1, 1)]).astype(np.float32)
    rect = cv2.minAreaRect(pts)
    if min(rect[1]) < MIN_SIDE:
        return None
    poly = shapely.Polygon(cv2.boxPoints(rect))
    grown = poly.buffer(poly.area * UNCLIP_RATIO / poly.length, join_style="round")
    rect = cv2.minAreaRect(np.asarray(grown.exterior.coords, np.float32))
    if min(rect[1]) < MIN_SIDE + 2:
        return None
    return cv2.boxPoints(rect).astype(np.float64)


def _coverage(rect: np.ndarray) -> np.ndarray:
    """The fraction of each 288-grid cell (3.5 px) the polygon covers: a probability-like mask."""
    import cv2

    fine = np.zeros((MODEL_SIZE, MODEL_SIZE), np.uint8)
    cv2.fillPoly(fine, [np.round(rect * 16).astype(np.int32)], 1, lineType=cv2.LINE_8, shift=4)
    return cv2.resize(fine.astype(np.float32), (MASK_SIZE, MASK_SIZE), interpolation=cv2.INTER_AREA)


def build(spec) -> DBTextRuntime:
    """The `sam3tiles.backends` entry point: `--model` may name another DB .onnx file (or its folder)."""
    return DBTextRuntime(spec.model_dir, device=spec.device, threads=spec.intra_op_threads or 0)
