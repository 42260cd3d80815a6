"""`sam3tiles model check`: do the installed model files answer as published?

The seed article reports, for the v0.6.0 export, on two generated scenes (800 x 600 and 1280 x 720: a
noisy gradient with a red circle, a blue rectangle, a green triangle and a yellow ellipse): IoU 0.99 for
each colour-and-shape prompt, all four shapes under "visual", nothing for "shape" or "cat", and the
circle alone for an example box around it. `run_check` redraws those scenes (same content and sizes;
the shapes' exact placement is ours), runs the same prompts the way the published callers do (the scene
stretched to 1008 x 1008, masks brought back per the contract: the 288 map cropped to the box, resized
bilinearly to the box's pixels, > 0.5) and compares.

Tolerance (`IOU_TOLERANCE`): each expected shape's best mask must reach IoU 0.95 (the published 0.99
less 0.04: the scenes are redrawn and the stretch resamples their edges), and the number of objects
must be exactly the published one (one per shape prompt, four for "visual", none for "shape" and "cat",
one for the box). Scores are printed, not compared (the article gives none).

Clicks (the four-graph layout, when the point decoder loads and fits: `clicks_problem`): a click at each
shape's centre, decoded as a point run decodes it (two passes, the best candidate by predicted IoU, holes
filled: `model.points`), on the same encode as the prompts; the write-up measured IoU 0.9949-0.9996 against
the drawn shapes after the second pass, so each click must give exactly that shape at IoU >= 0.95 (0.99 less
the same 0.04: the redrawn scenes, the 288 mask grid).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw

from .runtime import MASK_SIZE, MODEL_SIZE, VISUAL_PROMPT, Click, ExampleBox, TileImage, clicks_problem

PUBLISHED_IOU = 0.99
IOU_TOLERANCE = 0.04
SCENES = ((800, 600), (1280, 720))
SHAPES = ("circle", "rectangle", "triangle", "ellipse")
COLOURS = {"circle": (255, 0, 0), "rectangle": (0, 0, 255), "triangle": (0, 255, 0), "ellipse": (255, 255, 0)}


@dataclass(frozen=True)
class Probe:
    """One prompt of the article: its text, an optional example box (around a shape) and the shapes it
    should find."""

    label: str
    text: str
    expected: tuple[str, ...]
    box_around: str | None = None
    click_on: str | None = None  # a click at the shape's centre instead of a text (the point decoder)


PROBES = (
    Probe("red circle", "red circle", ("circle",)),
    Probe("blue rectangle", "blue rectangle", ("rectangle",)),
    Probe("green triangle", "green triangle", ("triangle",)),
    Probe("yellow ellipse", "yellow ellipse", ("ellipse",)),
    Probe("visual", VISUAL_PROMPT, SHAPES),
    Probe("shape", "shape", ()),
    Probe("cat", "cat", ()),
    Probe("box around the circle", VISUAL_PROMPT, ("circle",), box_around="circle"),
)
#: The write-up's clicks: one at each shape's centre (run when the model has a point decoder it can drive).
CLICK_PROBES = tuple(Probe(f"click on the {s}", "", (s,), click_on=s) for s in SHAPES)


@dataclass(frozen=True)
class Scene:
    """A drawn scene: `rgb` uint8 [H, W, 3] and each shape's mask, bool [H, W] (scene pixels)."""

    rgb: np.ndarray
    masks: dict

    @property
    def size(self) -> tuple[int, int]:
        return self.rgb.shape[1], self.rgb.shape[0]


@dataclass(frozen=True)
class ProbeResult:
    """What one probe found on one scene: objects found, each expected shape's best IoU and score."""

    scene: tuple[int, int]
    probe: Probe
    found: int
    ious: tuple[float, ...]
    scores: tuple[float, ...]

    @property
    def ok(self) -> bool:
        return self.found == len(self.probe.expected) and all(
            v >= PUBLISHED_IOU - IOU_TOLERANCE for v in self.ious)

    @property
    def published(self) -> str:
        n = len(self.probe.expected)
        return "nothing" if not n else f"{n} object{'s' if n > 1 else ''}, IoU {PUBLISHED_IOU}"


def draw_scene(width: int, height: int, seed: int = 0) -> Scene:
    """The article's scene: a noisy diagonal gradient and four flat shapes, placed by fractions of the
    size so both scenes hold the same picture."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    t = (xx / width + yy / height) / 2
    base = np.stack([90 + 80 * t, 110 + 60 * t, 140 - 50 * t], axis=-1) + rng.normal(0, 8, (height, width, 3))
    img = Image.fromarray(np.clip(base, 0, 255).astype(np.uint8))
    w, h = width, height
    geoms = {
        "circle": ("ellipse", [0.25 * w - 0.13 * h, 0.17 * h, 0.25 * w + 0.13 * h, 0.43 * h]),
        "rectangle": ("rectangle", [0.55 * w, 0.15 * h, 0.82 * w, 0.42 * h]),
        "triangle": ("polygon", [(0.12 * w, 0.88 * h), (0.28 * w, 0.56 * h), (0.44 * w, 0.88 * h)]),
        "ellipse": ("ellipse", [0.58 * w, 0.58 * h, 0.86 * w, 0.86 * h]),
    }
    draw = ImageDraw.Draw(img)
    masks = {}
    for name, (kind, xy) in geoms.items():
        getattr(draw, kind)(xy, fill=COLOURS[name])
        m = Image.new("1", (w, h), 0)
        getattr(ImageDraw.Draw(m), kind)(xy, fill=1)
        masks[name] = np.asarray(m, bool)
    return Scene(np.asarray(img), masks)


def stretched(scene: Scene) -> TileImage:
    """The scene as the published callers feed it: stretched (bilinear) to 1008 x 1008."""
    rgb = np.asarray(Image.fromarray(scene.rgb).resize((MODEL_SIZE, MODEL_SIZE), Image.BILINEAR))
    return TileImage(np.ascontiguousarray(rgb.transpose(2, 0, 1)), np.ones((MODEL_SIZE, MODEL_SIZE), bool))


def masks_in_scene(det, size: tuple[int, int]) -> list[np.ndarray]:
    """Each detection's mask in scene pixels (the contract's way back: the 288 map cropped to the box,
    resized bilinearly to the box's pixel size, > 0.5)."""
    w, h = size
    out = []
    for box, prob in zip(det.boxes, det.masks[:, 0]):
        x0, x1 = (np.clip(box[[0, 2]], 0, 1) * w).round().astype(int)
        y0, y1 = (np.clip(box[[1, 3]], 0, 1) * h).round().astype(int)
        full = np.zeros((h, w), bool)
        c0, c1 = int(box[0] * MASK_SIZE), int(np.ceil(box[2] * MASK_SIZE))
        r0, r1 = int(box[1] * MASK_SIZE), int(np.ceil(box[3] * MASK_SIZE))
        crop = prob[max(r0, 0):max(r1, r0 + 1), max(c0, 0):max(c1, c0 + 1)]
        if x1 > x0 and y1 > y0 and crop.size:
            up = Image.fromarray(crop.astype(np.float32), mode="F").resize((x1 - x0, y1 - y0), Image.BILINEAR)
            full[y0:y1, x0:x1] = np.asarray(up) > 0.5
        out.append(full)
    return out


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    union = np.logical_or(a, b).sum()
    return float(np.logical_and(a, b).sum() / union) if union else 0.0


def _box_of(mask: np.ndarray, size: tuple[int, int]) -> ExampleBox:
    """A box around a shape with a few pixels of margin, normalised (cx, cy, w, h) of the 1008 input."""
    ys, xs = np.nonzero(mask)
    w, h = size
    x0, x1, y0, y1 = xs.min() - 4, xs.max() + 5, ys.min() - 4, ys.max() + 5
    return ExampleBox(((x0 + x1) / 2 / w, (y0 + y1) / 2 / h, (x1 - x0) / w, (y1 - y0) / h))


def _click_at(mask: np.ndarray, size: tuple[int, int]) -> Click:
    """A click at a shape's centre (the mean of its pixels), in the stretched 1008 input's pixels."""
    ys, xs = np.nonzero(mask)
    w, h = size
    return Click(((xs.mean() + 0.5) * MODEL_SIZE / w, (ys.mean() + 0.5) * MODEL_SIZE / h))


def check_scene(runtime, scene: Scene, clicks: bool = False) -> list[ProbeResult]:
    """Every probe on one scene: one encode, one decode per probe (with `clicks`, the click probes too, on
    the same encode)."""
    emb = runtime.encode(stretched(scene), clicks=True) if clicks else runtime.encode(stretched(scene))
    out = []
    for probe in PROBES + (CLICK_PROBES if clicks else ()):
        boxes = [_box_of(scene.masks[probe.box_around], scene.size)] if probe.box_around else []
        if probe.click_on:
            det = runtime.decode_clicks(emb, [_click_at(scene.masks[probe.click_on], scene.size)])
        else:
            det = runtime.decode(emb, runtime.prepare_prompt(probe.text), boxes)
        masks = masks_in_scene(det, scene.size)
        ious, scores = [], []
        for shape in probe.expected:
            best = max(range(len(masks)), key=lambda j: _iou(masks[j], scene.masks[shape]), default=None)
            ious.append(0.0 if best is None else _iou(masks[best], scene.masks[shape]))
            scores.append(0.0 if best is None else float(det.scores[best]))
        out.append(ProbeResult(scene.size, probe, len(det), tuple(ious), tuple(scores)))
    return out


def run_check(runtime) -> list[ProbeResult]:
    """Both scenes, every probe; the click probes when the runtime answers clicks (`clicks_problem`)."""
    clicks = clicks_problem(runtime) is None
    return [r for w, h in SCENES for r in check_scene(runtime, draw_scene(w, h), clicks)]


def format_results(results: list[ProbeResult]) -> str:
    """A table: scene, prompt, published figure, objects found, IoU (min over expected shapes), score."""
    head = f"{'scene':<9} {'prompt':<22} {'published':<22} {'found':>5} {'IoU':>6} {'score':>6}  verdict"
    lines = [head, "-" * len(head)]
    for r in results:
        iou = f"{min(r.ious):.3f}" if r.ious else "-"
        score = f"{min(r.scores):.3f}" if r.scores else "-"
        lines.append(f"{f'{r.scene[0]}x{r.scene[1]}':<9} {r.probe.label:<22} {r.published:<22} {r.found:>5} "
                     f"{iou:>6} {score:>6}  {'ok' if r.ok else 'DIFFERS'}")
    return "\n".join(lines)
