"""The reference backend: a deterministic stand-in with SAM 3's geometry (no weights, no GPU).

It lets the demo, the tests and the benchmarks run the whole pipeline exactly as the real model would
shape its outputs:

* a text prompt is a colour name that `PIL.ImageColor.getrgb` accepts (case-insensitive); other text
  finds nothing;
* on the 1008x1008 input a pixel matches when its Euclidean RGB distance to the colour is <= 60
  (padding never matches); the match map is area-averaged (PIL BOX) to the 288x288 mask grid;
* instances are the 8-connected components of (grid > 0.5); an instance's mask is the grid values inside
  its component, 0 elsewhere; its score their mean; its box the component's extent; at most 200, largest
  first;
* a positive example box replaces the colour by the median colour inside the box(es); a negative example
  box drops instances that overlap it and, like SAM 3's negative exemplars, instances of its kind: those
  whose mean colour lies nearer the median colour inside the negative box than the prompt colour;
* clicks (`decode_clicks`): the region under the click. Each positive click's colour is the median of the
  valid pixels within `CLICK_RADIUS` of it; a pixel matches a click within `MATCH_DISTANCE` of its colour and
  nearer it than every negative click's colour; the instance is the union of the 8-connected components of
  the mask grid (> 0.5) that hold a positive click (its cell, or the nearest matched cell within one), score
  their mean. A click on background answers the background around it, as the real point decoder does (the
  caller checks the area: docs/points.md).
"""

from __future__ import annotations

import hashlib
from typing import Sequence

import numpy as np
from PIL import Image, ImageColor
from scipy import ndimage

from .runtime import (MASK_SIZE, MAX_QUERIES, MODEL_SIZE, Click, Detections, ExampleBox, PreparedPrompt, TileImage,
                       VISUAL_PROMPT)
from ..wording import opt

MATCH_DISTANCE = 60.0
#: Pixels around a click whose median colour is the click's colour.
CLICK_RADIUS = 2
_EIGHT = np.ones((3, 3), bool)


def colour_of(text: str) -> tuple[int, int, int] | None:
    """The RGB of a colour name PIL knows, or None."""
    try:
        rgb = ImageColor.getrgb(text.strip().lower())
    except (ValueError, AttributeError):
        return None
    return tuple(int(v) for v in rgb[:3])  # type: ignore[return-value]


class ReferenceRuntime:
    """Colour matching with SAM 3's inputs and outputs. Thread-safe (no state but counters)."""

    name = "reference"
    box_slots = 16

    def __init__(self) -> None:
        self.counters = {"encodes": 0, "prompts": 0, "decodes": 0}

    @property
    def identity(self) -> str:
        src = open(__file__, "rb").read()
        return "reference:" + hashlib.sha256(src).hexdigest()[:12]

    def encode(self, image: TileImage, clicks: bool = False) -> TileImage:
        self.counters["encodes"] += 1
        return image

    def decode_clicks(self, embedding: TileImage, clicks: Sequence[Click]) -> Detections:
        """The region under the positive clicks (module doc), 0 or 1 object."""
        self.counters["click_decodes"] = self.counters.get("click_decodes", 0) + 1
        return _decode_whole(embedding, clicks)

    def decode_clicks_many(self, embedding: TileImage, asks: Sequence[Sequence[Click]]) -> list[Detections]:
        """`decode_clicks` for each ask on one embedding, the same answers at a cost that follows the object's
        size, not the tile's: an ask of one positive click computes its region in a window of the grid around
        the click, grown until the region closes inside it (`_decode_local`). A subclass with a `decode_clicks` of
        its own is asked that, one ask a call."""
        if type(self).decode_clicks is not ReferenceRuntime.decode_clicks:  # a subclass answers clicks its way
            return [self.decode_clicks(embedding, clicks) for clicks in asks]
        self.counters["click_decodes"] = self.counters.get("click_decodes", 0) + len(asks)
        negs_of: dict = {}
        out = []
        for clicks in asks:
            key = tuple(c.xy for c in clicks if not c.positive)
            if key not in negs_of:  # the colours of a window's negative points, once per set of them
                negs_of[key] = [col for col in (_colour_at(embedding, c) for c in clicks if not c.positive)
                                if col is not None]
            out.append(_decode_local(embedding, clicks, negs_of[key]))
        return out

    def prepare_prompt(self, text: str) -> PreparedPrompt:
        self.counters["prompts"] += 1
        if text == VISUAL_PROMPT:
            return PreparedPrompt(text, payload=None, usable=True)
        rgb = colour_of(text)
        if rgb is None:
            return PreparedPrompt(text, None, usable=False,
                                  note=f"the reference backend knows colour names only; {text!r} is not one, "
                                       f"so it finds nothing (use a colour such as 'red', or {opt('backend', 'onnx')})")
        return PreparedPrompt(text, payload=rgb)

    def decode(self, embedding: TileImage, prompt: PreparedPrompt,
               boxes: Sequence[ExampleBox] = ()) -> Detections:
        self.counters["decodes"] += 1
        image = embedding
        colour = prompt.payload
        positives = [b for b in boxes if b.positive]
        if positives:
            colour = _median_colour(image, positives)
        if colour is None:
            return Detections.empty()
        match = (colour_match(image.rgb, colour) & image.valid).astype(np.float32)
        grid = np.asarray(Image.fromarray(match, mode="F").resize((MASK_SIZE, MASK_SIZE), Image.BOX))
        labels, n = ndimage.label(grid > 0.5, structure=_EIGHT)
        if n == 0:
            return Detections.empty()
        slices = ndimage.find_objects(labels)
        sizes = np.bincount(labels.ravel())[1:]
        negatives = [_cell_box(b) for b in boxes if not b.positive]
        kinds = _negative_kinds(image, boxes, colour, grid, labels, n, match)
        order = sorted(range(n), key=lambda i: (-sizes[i], slices[i][0].start, slices[i][1].start))
        out_boxes, scores, kept = [], [], []
        for i in order:
            sl = slices[i]
            r0, r1, c0, c1 = sl[0].start, sl[0].stop, sl[1].start, sl[1].stop
            if any(r0 < nr1 and nr0 < r1 and c0 < nc1 and nc0 < c1 for nr0, nr1, nc0, nc1 in negatives):
                continue
            if kinds is not None and kinds[i]:
                continue
            out_boxes.append([c0 / MASK_SIZE, r0 / MASK_SIZE, c1 / MASK_SIZE, r1 / MASK_SIZE])
            scores.append(float(grid[sl][labels[sl] == i + 1].mean()))
            kept.append(i + 1)
            if len(scores) == MAX_QUERIES:
                break
        if not scores:
            return Detections.empty()
        # one [N, 1, 288, 288] array filled in place, as the model returns it (a list of masks stacked and
        # copied held three times its size at 200 objects: ~200 MB per decode)
        masks = np.zeros((len(kept), 1, MASK_SIZE, MASK_SIZE), np.float32)
        for k, lid in enumerate(kept):
            np.copyto(masks[k, 0], grid, where=labels == lid)
        return Detections(np.asarray(out_boxes, np.float32), np.asarray(scores, np.float32), masks)


def colour_match(rgb: np.ndarray, colour) -> np.ndarray:
    """Pixels of `rgb` [3, h, w] within MATCH_DISTANCE of `colour` (bool [h, w]): the float32 squared
    distance against the float32 threshold.

    For uint8 pixels and a whole-number colour (every named colour) a pixel with a channel more than
    MATCH_DISTANCE away cannot match, so the distance is computed only where every channel is within it
    (uint8 comparisons first): the same pixels, at a fraction of the CPU on a tile mostly of other
    colours (the stand-in for the model's answer should cost little beside the pipeline's own work)."""
    threshold = np.float32(MATCH_DISTANCE**2)
    if rgb.dtype != np.uint8 or not all(float(c).is_integer() for c in colour):
        f = rgb.astype(np.float32)
        return sum((f[c] - colour[c]) ** 2 for c in range(3)) <= threshold
    reach = int(MATCH_DISTANCE)
    near = None
    for c in range(3):
        lo, hi = int(colour[c]) - reach, int(colour[c]) + reach
        m = (rgb[c] >= max(lo, 0)) & (rgb[c] <= min(hi, 255))
        near = m if near is None else near & m
    out = np.zeros(rgb.shape[1:], bool)
    idx = np.flatnonzero(near)
    if len(idx):
        f = rgb.reshape(3, -1)[:, idx].astype(np.float32)
        out.ravel()[idx] = sum((f[c] - colour[c]) ** 2 for c in range(3)) <= threshold
    return out


def _median_colour(image: TileImage, boxes: Sequence[ExampleBox]) -> tuple[int, int, int] | None:
    pixels = []
    for b in boxes:
        x0, y0, x1, y1 = (int(round(v)) for v in b.xyxy_px)
        x0, y0 = max(x0, 0), max(y0, 0)
        x1, y1 = min(x1, MODEL_SIZE), min(y1, MODEL_SIZE)
        if x1 <= x0 or y1 <= y0:
            continue
        sel = image.valid[y0:y1, x0:x1]
        pixels.append(image.rgb[:, y0:y1, x0:x1][:, sel])
    if not pixels:
        return None
    allpx = np.concatenate(pixels, axis=1)
    if allpx.shape[1] == 0:
        return None
    return tuple(int(v) for v in np.median(allpx, axis=1))  # type: ignore[return-value]


def _negative_kinds(image: TileImage, boxes: Sequence[ExampleBox], colour, grid: np.ndarray, labels: np.ndarray,
                    n: int, match: np.ndarray) -> np.ndarray | None:
    """Per instance (component label - 1): whether its mean colour is nearer a negative box's median colour
    than the prompt colour. None without negative boxes."""
    negs = [c for c in (_median_colour(image, [b]) for b in boxes if not b.positive) if c is not None]
    if not negs:
        return None
    weight = np.bincount(labels.ravel(), weights=grid.ravel(), minlength=n + 1)[1:]
    dist_pos = np.zeros(n)
    best_neg = np.full(n, np.inf)
    mean = []
    for c in range(3):  # the matched pixels' colour averaged per mask cell, then per instance
        chan = np.where(match > 0, image.rgb[c].astype(np.float32), 0.0).astype(np.float32)
        cell = np.asarray(Image.fromarray(chan, mode="F").resize((MASK_SIZE, MASK_SIZE), Image.BOX))
        cell = np.divide(cell, grid, out=np.zeros_like(cell), where=grid > 0)
        mean.append(np.bincount(labels.ravel(), weights=(cell * grid).ravel(), minlength=n + 1)[1:]
                    / np.maximum(weight, 1e-9))
    for c in range(3):
        dist_pos += (mean[c] - colour[c]) ** 2
    for neg in negs:
        best_neg = np.minimum(best_neg, sum((mean[c] - neg[c]) ** 2 for c in range(3)))
    return best_neg < dist_pos


def _cell_box(b: ExampleBox) -> tuple[int, int, int, int]:
    """A box's extent on the 288 mask grid: (r0, r1, c0, c1), end exclusive."""
    x0, y0, x1, y1 = (v * MASK_SIZE / MODEL_SIZE for v in b.xyxy_px)
    return (int(np.floor(y0)), int(np.ceil(y1)), int(np.floor(x0)), int(np.ceil(x1)))


def _colour_at(image: TileImage, click: Click) -> tuple[int, int, int] | None:
    """The median colour of the valid pixels within `CLICK_RADIUS` of a click (None: none valid there)."""
    x, y = int(np.floor(click.xy[0])), int(np.floor(click.xy[1]))
    y0, y1 = max(y - CLICK_RADIUS, 0), min(y + CLICK_RADIUS + 1, MODEL_SIZE)
    x0, x1 = max(x - CLICK_RADIUS, 0), min(x + CLICK_RADIUS + 1, MODEL_SIZE)
    if y1 <= y0 or x1 <= x0:
        return None
    sel = image.valid[y0:y1, x0:x1]
    if not sel.any():
        return None
    return tuple(int(v) for v in np.median(image.rgb[:, y0:y1, x0:x1][:, sel], axis=1))  # type: ignore[return-value]


def _click_match(rgb: np.ndarray, valid: np.ndarray, colour, negatives) -> np.ndarray:
    """Valid pixels within MATCH_DISTANCE of `colour` and nearer it than every negative click's colour."""
    match = colour_match(rgb, colour) & valid
    if negatives and match.any():
        idx = np.flatnonzero(match)
        f = rgb.reshape(3, -1)[:, idx].astype(np.float32)
        d_pos = sum((f[c] - colour[c]) ** 2 for c in range(3))
        for neg in negatives:
            d_neg = sum((f[c] - neg[c]) ** 2 for c in range(3))
            match.ravel()[idx[d_neg <= d_pos]] = False
    return match


def _label_at(labels: np.ndarray, click: Click) -> int:
    """The component holding a click's cell, or the nearest one within a cell of it (0: none)."""
    r, c = _cell_of(click)
    if labels[r, c]:
        return int(labels[r, c])
    near = labels[max(r - 1, 0):r + 2, max(c - 1, 0):c + 2]
    return int(near.max())


#: The first window `_decode_local` tries: this many mask cells on each side of the click (an even number).
LOCAL_CELLS = 8
#: Input pixels per two mask cells: windows start on even cells, where a cell's edge is a whole pixel.
_PAIR_PX = 2 * MODEL_SIZE // MASK_SIZE


def _detections(keep: np.ndarray, grid_sum: np.ndarray) -> Detections:
    if not keep.any():
        return Detections.empty()
    mask = np.where(keep, grid_sum, 0.0).astype(np.float32)
    rows, cols = np.flatnonzero(keep.any(axis=1)), np.flatnonzero(keep.any(axis=0))
    box = np.asarray([[cols[0], rows[0], cols[-1] + 1, rows[-1] + 1]], np.float32) / MASK_SIZE
    return Detections(box, np.asarray([float(mask[keep].mean())], np.float32), mask[None, None])


def _decode_whole(image: TileImage, clicks: Sequence[Click]) -> Detections:
    """`decode_clicks` on the whole tile: each positive click's match over the tile, its component."""
    pos = [(c, _colour_at(image, c)) for c in clicks if c.positive]
    negs = [col for col in (_colour_at(image, c) for c in clicks if not c.positive) if col is not None]
    grid_sum = np.zeros((MASK_SIZE, MASK_SIZE), np.float32)
    keep = np.zeros((MASK_SIZE, MASK_SIZE), bool)
    for click, colour in pos:
        if colour is None:
            continue
        match = _click_match(image.rgb, image.valid, colour, negs)
        grid = _box_grid(match, MASK_SIZE, MASK_SIZE)
        labels, n = ndimage.label(grid > 0.5, structure=_EIGHT)
        lid = _label_at(labels, click)
        if lid:
            keep |= labels == lid
            grid_sum = np.maximum(grid_sum, grid)
    return _detections(keep, grid_sum)


def _box_grid(match: np.ndarray, cols: int, rows: int) -> np.ndarray:
    return np.asarray(Image.fromarray(match.astype(np.float32), mode="F").resize((cols, rows), Image.BOX))


def _decode_local(image: TileImage, clicks: Sequence[Click], negs: list) -> Detections:
    """`_decode_whole`'s answer for an ask of one positive click, computed in a window of the mask grid around
    it: cells from an even index (a whole input pixel, 3.5 px a cell), so the window's cells are the tile's
    cells (the same box filter over the same pixels); the window grows (x4, then the whole tile) until the
    click's component reaches none of its sides inside the tile (then it is the tile's component, whole).
    Several positive clicks (their masks are joined over the whole grid), or a click between components, are
    decoded on the whole tile."""
    pos = [c for c in clicks if c.positive]
    if len(pos) != 1:
        return _decode_whole(image, clicks)
    click = pos[0]
    colour = _colour_at(image, click)
    if colour is None:
        return Detections.empty()
    r, c = _cell_of(click)
    half = LOCAL_CELLS
    while True:
        r0, c0 = max(0, (r - half) // 2 * 2), max(0, (c - half) // 2 * 2)
        r1, c1 = min(MASK_SIZE, (r + half) // 2 * 2 + 2), min(MASK_SIZE, (c + half) // 2 * 2 + 2)
        y0, y1, x0, x1 = r0 // 2 * _PAIR_PX, r1 // 2 * _PAIR_PX, c0 // 2 * _PAIR_PX, c1 // 2 * _PAIR_PX
        match = _click_match(image.rgb[:, y0:y1, x0:x1], image.valid[y0:y1, x0:x1], colour, negs)
        grid = _box_grid(match, c1 - c0, r1 - r0)
        labels, _ = ndimage.label(grid > 0.5, structure=_EIGHT)
        if labels[r - r0, c - c0]:
            lid = int(labels[r - r0, c - c0])
        else:
            near = labels[max(r - 1, 0) - r0:r + 2 - r0, max(c - 1, 0) - c0:c + 2 - c0]
            ids = np.unique(near[near > 0])
            if len(ids) > 1:  # which one the whole tile's numbering picks depends on cells outside
                return _decode_whole(image, clicks)
            lid = int(ids[0]) if len(ids) else 0
        if not lid:
            return Detections.empty()
        comp = labels == lid
        open_sides = ((r0 > 0 and comp[0].any()) or (r1 < MASK_SIZE and comp[-1].any())
                      or (c0 > 0 and comp[:, 0].any()) or (c1 < MASK_SIZE and comp[:, -1].any()))
        if not open_sides:
            return _window_detections(comp, grid, r0, c0)
        half = MASK_SIZE if half >= LOCAL_CELLS * 4 else half * 4


def _window_detections(comp: np.ndarray, grid: np.ndarray, r0: int, c0: int) -> Detections:
    """`_detections` of a component closed inside a window of the grid at (r0, c0): the same box, score and
    mask, computed on the window."""
    rows, cols = np.flatnonzero(comp.any(axis=1)), np.flatnonzero(comp.any(axis=0))
    part = np.where(comp, grid, 0.0).astype(np.float32)
    mask = np.zeros((1, 1, MASK_SIZE, MASK_SIZE), np.float32)
    mask[0, 0, r0:r0 + comp.shape[0], c0:c0 + comp.shape[1]] = part
    box = np.asarray([[c0 + cols[0], r0 + rows[0], c0 + cols[-1] + 1, r0 + rows[-1] + 1]], np.float32) / MASK_SIZE
    return Detections(box, np.asarray([float(part[comp].mean())], np.float32), mask)


def _cell_of(click: Click) -> tuple[int, int]:
    return (min(int(click.xy[1] * MASK_SIZE / MODEL_SIZE), MASK_SIZE - 1),
            min(int(click.xy[0] * MASK_SIZE / MODEL_SIZE), MASK_SIZE - 1))
