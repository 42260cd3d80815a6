"""A slide's tissue, from a low-resolution picture of it: where the run need not encode empty glass.

`tissue_mask(values)` takes the whole slide at about `MASK_SIDE` px on its longer side (a pyramid level,
its own values before the stretch: `readers.Source.overview`) and returns a boolean mask. The rule, in
order (docs/area-of-interest.md):

1. *Values to [0, 1].* Divided by the 99.9th percentile of every band's values together (colours keep
   their ratios: glass is about 1 in brightfield).
2. *Brightfield or fluorescence.* The median brightness (mean of the bands) of the slide's border ring
   (`BORDER` of each side: glass lies at the edges of a scanned slide) decides: >= 0.5, a light
   background (brightfield: glass is the brightest thing there is); below, a dark one (fluorescence).
3. *The signal* s, 0 on the background: brightfield `max(saturation, 1 - brightness)` (saturation:
   max - min of the bands; stained tissue is coloured, darker than glass, or both); fluorescence
   `max over the bands` of each band divided by its own 99.9th percentile (tissue fluoresces in some
   channel, glass in none). A 3 x 3 mean smooths the noise.
4. *The background's level and noise* from the border ring. Level m = the ring's median, noise sigma =
   1.4826 x its median absolute deviation (at least `MIN_SIGMA`). Tissue: s > m + `K_SIGMA` sigma, and at
   least `MIN_STEP` above m.
5. *No glass found* (tissue to the edges): when fewer than `GLASS_RING` of the ring's pixels are
   background, or the background is not flat (sigma > `MAX_SIGMA`), or in brightfield not glass-like
   (its signal above `MAX_LEVEL`: glass is white and grey, stained tissue is not), every pixel is tissue:
   nothing is skipped (said in the plan and the log).
6. *Holes and specks.* Holes in the tissue are filled (a lumen, fat, a tear: glass inside tissue is
   tissue's), then specks of at most `SPECK` mask pixels are dropped (dust on the glass). The mask is then
   grown by one pixel: the smoothing's mean of tissue and glass can fall under the threshold on tissue's
   outermost pixel.

The selection (`tiling.selection.MaskSkip`) then dilates the mask by two mask pixels, so a tile beside
the tissue's edge is never skipped when the mask's coarse pixels cut the tissue it holds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: The mask's longer side in pixels (one mask pixel: the slide's longer side / MASK_SIDE level-0 pixels).
MASK_SIDE = 1024
BORDER = 0.04  # the border ring: this share of each side
GLASS_RING = 0.5  # at least this share of the ring must be background, or the slide has no glass
K_SIGMA = 6.0  # tissue lies this many noise sigmas above the background
MIN_SIGMA = 0.002  # the noise's floor (a perfectly flat, synthetic or clipped background)
MIN_STEP = 0.01  # tissue lies at least this far above the background (values in [0, 1])
MAX_SIGMA = 0.05  # a background noisier than this is no glass (tissue to the edges)
MAX_LEVEL = 0.1  # nor, in brightfield, one whose signal lies higher
SPECK = 16  # tissue components of at most this many mask pixels (2 x 2 before the 3 x 3 smoothing) are dust


@dataclass(frozen=True)
class TissueMask:
    """The tissue mask (`mask` [h, w] bool), how it was found (`mode`: brightfield | fluorescence), the
    background level and the threshold in normalised units, and a note when nothing could be skipped."""

    mask: np.ndarray
    mode: str
    background: float
    threshold: float
    note: str = ""

    @property
    def share(self) -> float:
        """The share of the slide that is tissue."""
        return float(self.mask.mean()) if self.mask.size else 1.0


def tissue_mask(values: np.ndarray) -> TissueMask:
    """The tissue of a slide from its overview `values` ([bands, h, w], the slide's own values; NaN where
    there is no data)."""
    from scipy import ndimage

    v = np.asarray(values, np.float32)
    valid = np.isfinite(v).all(axis=0)
    if not valid.any():
        return TissueMask(np.zeros(v.shape[1:], bool), "none", 0.0, 0.0, "the slide holds no valid pixel")
    v = np.where(valid, v, 0.0)
    ring = _ring(v.shape[1:]) & valid
    if not ring.any():
        ring = valid
    joint = np.clip(v / max(float(np.percentile(v[:, valid], 99.9)), 1e-12), 0.0, 1.0)
    bright = float(np.median(joint.mean(axis=0)[ring])) >= 0.5
    if bright:
        sat = joint.max(axis=0) - joint.min(axis=0) if len(v) > 1 else np.zeros(v.shape[1:], np.float32)
        s = np.maximum(sat, 1.0 - joint.mean(axis=0))
    else:
        top = np.array([np.percentile(b[valid], 99.9) for b in v], np.float32)
        s = np.clip(v / np.maximum(top, 1e-12)[:, None, None], 0.0, 1.0).max(axis=0)
    s = ndimage.uniform_filter(s, 3, mode="nearest")
    mode = "brightfield" if bright else "fluorescence"
    level = float(np.median(s[ring]))
    sigma = max(MIN_SIGMA, 1.4826 * float(np.median(np.abs(s[ring] - level))))
    threshold = level + max(K_SIGMA * sigma, MIN_STEP)
    tissue = (s > threshold) & valid
    glass_ring = float((~tissue[ring]).mean())
    if glass_ring < GLASS_RING or sigma > MAX_SIGMA or (bright and level > MAX_LEVEL):
        note = (f"no glass found at the slide's edges ({glass_ring:.0%} of its border ring is background, level "
                f"{level:.3f}, noise {sigma:.3f}): every tile is taken for tissue")
        return TissueMask(np.ones(s.shape, bool), mode, level, threshold, note)
    tissue = ndimage.binary_fill_holes(tissue)
    labels, n = ndimage.label(tissue, np.ones((3, 3), bool))
    if n:
        sizes = np.bincount(labels.ravel(), minlength=n + 1)
        tissue = (sizes > SPECK)[labels] & tissue
    tissue = ndimage.binary_dilation(tissue, np.ones((3, 3), bool)) & valid
    return TissueMask(tissue, mode, level, threshold)


def _ring(shape: tuple[int, int]) -> np.ndarray:
    """The border ring of an image of `shape`: `BORDER` of each side, at least one pixel."""
    h, w = shape
    by, bx = max(1, round(h * BORDER)), max(1, round(w * BORDER))
    ring = np.zeros(shape, bool)
    ring[:by], ring[-by:], ring[:, :bx], ring[:, -bx:] = True, True, True, True
    return ring
