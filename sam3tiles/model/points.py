"""The point decoder of the four-graph layout (v0.6.0): clicks on an encoded tile -> one object's mask.

What is known (the v0.6.0 write-up, measured on the real files) and what is inferred (docs/points.md):

* known: the decoder reads the encoder's `image_embeddings`, `high_res_features1`, `high_res_features2` and
  the clicks (`num_points` its only dynamic axis); it answers three candidate masks and a predicted IoU for
  each, in no quality order, so the argmax of the predicted IoU is taken; the published post-processing runs
  two passes (the second feeds the best mask back as `mask_input`), fills holes up to 256 px, then resizes;
  several positive clicks give one mask (their union);
* inferred (from the same author's SAM 2 export): the click inputs' names, dtypes and frame (`point_coords`
  float32 [1, N, 2] in model-input pixels, `point_labels` float32 [1, N] 1/0, `mask_input` float32 [1, 1, M, M]
  logits, `has_mask_input` float32 [1]) and logits thresholded at 0. The graph's own interface is read at
  load (`contract.check_point_graph`); one that differs is refused with its inputs printed, never guessed.

Holes are filled on the decoder's mask grid (M x M, the 4E grid SAM 2 fills on, before its resize): every
region of logits <= 0 of at most `HOLE_CELLS` cells (8-connected, as SAM 2's `fill_holes_in_mask_scores`).
The answer is a SAM 3-shaped `Detections` of 0 or 1 object: the 288 grid of probabilities (sigmoid of the
logits, resized bilinearly when M is not 288), the mask's extent, the predicted IoU as its score.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from PIL import Image
from scipy import ndimage

from .contract import PointInterface
from .runtime import MASK_SIZE, Click, Detections

#: Passes of the published post-processing: the second feeds the first's best mask back.
PASSES = 2
#: The largest hole filled, in cells of the decoder's mask grid ("fills holes up to 256 px").
HOLE_CELLS = 256
_EIGHT = np.ones((3, 3), bool)
_ZERO, _ONE = np.zeros(1, np.float32), np.ones(1, np.float32)


def click_inputs(clicks: Sequence[Click]) -> dict[str, np.ndarray]:
    """`point_coords` float32 [1, N, 2] (x, y model-input pixels) and `point_labels` float32 [1, N] (1, 0)."""
    coords = np.asarray([[c.xy for c in clicks]], np.float32).reshape(1, len(clicks), 2)
    labels = np.asarray([[1.0 if c.positive else 0.0 for c in clicks]], np.float32).reshape(1, len(clicks))
    return {"point_coords": coords, "point_labels": labels}


def fill_holes(logits: np.ndarray, max_cells: int = HOLE_CELLS) -> np.ndarray:
    """`logits` [M, M] with every background region (logit <= 0, 8-connected) of at most `max_cells` cells set
    inside (as SAM 2 fills them: such a region touching the border is filled too)."""
    labels, n = ndimage.label(logits <= 0, structure=_EIGHT)
    if n == 0:
        return logits
    sizes = np.bincount(labels.ravel())
    small = np.flatnonzero(sizes <= max_cells)
    small = small[small > 0]
    if not len(small):
        return logits
    out = logits.copy()
    out[np.isin(labels, small)] = 10.0  # SAM 2 sets filled holes to the threshold + 10
    return out


def to_detections(logits: np.ndarray, score: float) -> Detections:
    """One mask's logits [M, M] -> `Detections` of 0 or 1 object on the 288 grid (probabilities)."""
    if logits.shape != (MASK_SIZE, MASK_SIZE):  # the SAM 2 way: bilinear on logits, then the threshold
        logits = np.asarray(Image.fromarray(logits.astype(np.float32), mode="F").resize((MASK_SIZE, MASK_SIZE),
                                                                                       Image.BILINEAR))
    probs = (1.0 / (1.0 + np.exp(-np.clip(logits, -60, 60)))).astype(np.float32)
    inside = probs > 0.5
    if not inside.any():
        return Detections.empty()
    rows, cols = np.flatnonzero(inside.any(axis=1)), np.flatnonzero(inside.any(axis=0))
    box = np.asarray([[cols[0], rows[0], cols[-1] + 1, rows[-1] + 1]], np.float32) / MASK_SIZE
    return Detections(box, np.asarray([score], np.float32), probs[None, None])


class PointDecoder:
    """One point decoder session driven as the published post-processing drives it (`decode`)."""

    def __init__(self, session: Any, interface: PointInterface):
        self.session, self.interface = session, interface
        self.outputs = [interface.mask_output, interface.iou_output]

    def _pass(self, base: dict, clicks: dict, mask: np.ndarray | None) -> tuple[np.ndarray, float]:
        """One decoder pass: `base` holds the features and the empty mask input (`_shared`), prepared once."""
        feeds = {**base, **clicks}
        if mask is not None:
            feeds["mask_input"] = mask[None, None].astype(np.float32)
            feeds["has_mask_input"] = _ONE
        masks, ious = self.session.run(self.outputs, feeds)
        best = int(np.argmax(ious[0]))  # index order is not quality order
        return np.asarray(masks[0, best], np.float32), float(ious[0, best])

    def _shared(self, features: Mapping[str, np.ndarray]) -> dict:
        """The feeds every click of a tile shares: its features, no mask input."""
        m = self.interface.mask_size
        return {**features, "mask_input": np.zeros((1, 1, m, m), np.float32), "has_mask_input": _ZERO}

    def decode(self, features: Mapping[str, np.ndarray], clicks: Sequence[Click]) -> Detections:
        """The object under the positive `clicks` (one mask; negatives push away): `PASSES` passes, the best
        candidate of each by predicted IoU, holes filled, thresholded at 0."""
        return self.decode_many(features, [clicks])[0]

    def decode_many(self, features: Mapping[str, np.ndarray], asks: Sequence[Sequence[Click]]) -> list[Detections]:
        """`decode` for each ask on one tile's features, the shared feeds prepared once. The graph takes one
        set of clicks a call (`point_coords` [1, N, 2]: no batch axis to stack asks on), so each ask is its own
        `PASSES` calls."""
        base = self._shared(features)
        out = []
        for clicks in asks:
            if not any(c.positive for c in clicks):
                out.append(Detections.empty())
                continue
            inputs = click_inputs(clicks)
            logits, score = None, 0.0
            for _ in range(PASSES):
                logits, score = self._pass(base, inputs, logits)
            out.append(to_detections(fill_holes(logits), score))
        return out
