"""Mask crops keep p and 1 - p alike (`vectorize.pieces.crop_detections`): a pixel midway between a cell of
probability p and one of 1 - p (one pixel in seven on each axis, with 3.5 px cells) interpolates to exactly 0.5
and stays off, whatever the logits' size. Stored as plain float16, 1 - sigmoid(-10) rounded to 1.0 while
sigmoid(-10) kept its value: such pixels came out at 0.50002 and every edge there grew by one pixel (a raw
decoder with mask logits +-10 gave union IoU 0.989 against the seed's 0/1 masks; +-4 and +-30 gave 1.0)."""

from __future__ import annotations

import numpy as np
import pytest

from sam3tiles.model.runtime import Detections
from sam3tiles.vectorize.pieces import crop_detections
from sam3tiles.vectorize.polygonize import upsample


def _det(inside: float, outside: float) -> Detections:
    masks = np.full((1, 1, 288, 288), outside, np.float32)
    masks[0, 0, 41:81, 51:101] = inside  # edges at odd cells: a pixel centre lies midway (143.5, 283.5, ...)
    return Detections(np.asarray([[0.1, 0.1, 0.4, 0.4]], np.float32), np.asarray([0.9], np.float32), masks)


@pytest.mark.parametrize("logit", [4.0, 10.0, 12.0, 30.0])
def test_a_raw_decoders_mask_gives_the_binary_masks_pixels(logit):
    sig = 1 / (1 + np.exp(-np.float32(logit)))
    binary = upsample(crop_detections(_det(1.0, 0.0), 0, 0, (1008, 1008))[0])
    soft = upsample(crop_detections(_det(float(sig), float(1 - sig)), 0, 0, (1008, 1008))[0])
    assert binary.sum() > 0 and np.array_equal(soft, binary), (logit, int(soft.sum()), int(binary.sum()))


def test_crops_keep_the_probabilities_to_a_2048th():
    rng = np.random.default_rng(0)
    det = _det(1.0, 0.0)
    det.masks[0, 0] = rng.random((288, 288), dtype=np.float32)
    crop = crop_detections(det, 0, 0, (1008, 1008))[0]
    x0, y0 = crop.cell0[1], crop.cell0[0]
    ref = det.masks[0, 0, y0:y0 + crop.probs.shape[0], x0:x0 + crop.probs.shape[1]]
    assert crop.probs.dtype == np.float16 and np.abs(crop.probs.astype(np.float32) - ref).max() <= 1 / 4096 + 1e-7
