"""A slide's tissue, from a low-resolution picture of it: where the run need not encode empty glass.

`tissue_mask(values)` takes the whole slide at about `MASK_SIDE` px on its longer side (a pyramid level,
its own values before the stretch: `readers.Source.overview`) and returns a boolean mask. The rule, in
order (docs/area-of-interest.md):

1. *Flat channels out.* A channel whose 0.1th and 99.9th percentiles differ by at most `FLAT` of their
   size (one value: constant, saturated, all zero; a few hot pixels aside) says nothing about the tissue and
   is left out; when every channel is flat, every pixel is tissue (nothing is skipped).
2. *Brightfield or fluorescence.* Brightfield when the median of the slide's border ring (`BORDER` of
   each side: glass lies at the edges of a scanned slide) lies in the upper half of every channel's range
   (0.1th to 99.9th percentile: glass is the brightest thing there is); else fluorescence (dark glass).
3. *The signal* s, 0 on the background: brightfield `max(saturation, 1 - brightness)` of the values
   divided by the 99.9th percentile of every channel together (saturation: max - min of the channels;
   stained tissue is coloured, darker than glass, or both); fluorescence, each channel divided by its own
   99.9th percentile, on its own (tissue fluoresces in some channel, glass in none; a channel bright
   everywhere must not hide another's tissue). A 3 x 3 mean smooths the noise.
4. *The background's level and noise* from the border ring, per signal. Level m = the ring's median, noise
   sigma = 1.4826 x its median absolute deviation (at least `MIN_SIGMA`). Tissue: s > m + `K_SIGMA` sigma,
   and at least `MIN_STEP` above m, in any channel; a channel where nothing stands so high has no say.
5. *Unsure: every pixel is tissue* (nothing is skipped, said in the plan and the log, with the reason) when
   nothing stands out anywhere (all glass, or tissue to the edges), when fewer than `GLASS_RING` of the
   ring's pixels are background, when the background is not flat (sigma > `MAX_SIGMA`), or in brightfield
   not glass-like (its signal above `MAX_LEVEL`: glass is white and grey, stained tissue is not), or when
   only dust is left after step 6.
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
FLAT = 1e-3  # a channel whose values spread less than this share of their size is flat: no information
UNSURE_FLAT = "every channel of the slide has one value throughout"
UNSURE_NONE = "nothing on the slide differs from its border: all glass, or tissue to the edges"
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
    lo, hi = np.percentile(v[:, valid], (0.1, 99.9), axis=1)
    varies = hi - lo > FLAT * np.maximum(np.maximum(np.abs(lo), np.abs(hi)), 1e-12)
    if not varies.any():
        return _everything(v, "unknown", 0.0, 0.0, UNSURE_FLAT)
    # a flat channel (one value, saturated, empty, a hot pixel aside) says nothing about where the tissue is
    v, lo, hi = v[varies], lo[varies], hi[varies]
    border = np.median(v[:, ring], axis=1)
    bright = bool((border - lo >= 0.5 * (hi - lo)).all())  # glass at the top of every channel's range
    joint = np.clip(v / max(float(np.percentile(v[:, valid], 99.9)), 1e-12), 0.0, 1.0)
    if bright:
        sat = joint.max(axis=0) - joint.min(axis=0) if len(v) > 1 else np.zeros(v.shape[1:], np.float32)
        found = [_above(np.maximum(sat, 1.0 - joint.mean(axis=0)), ring)]
    else:  # each channel against its own glass: a channel bright everywhere hides no other channel's tissue
        found = [_above(np.clip(b / max(float(np.percentile(b[valid], 99.9)), 1e-12), 0.0, 1.0), ring)
                 for b in v]
    mode = "brightfield" if bright else "fluorescence"
    found = [f for f in found if (f[0] & valid).any()]  # a channel that shows no tissue has no say
    if not found:
        return _everything(v, mode, 0.0, 1.0, UNSURE_NONE)
    tissue = np.logical_or.reduce([f[0] for f in found]) & valid
    level, threshold, sigma = max(f[1] for f in found), min(f[2] for f in found), max(f[3] for f in found)
    unsure = _unsure(float((~tissue[ring]).mean()), sigma, bright and level > MAX_LEVEL)
    if unsure:
        return _everything(v, mode, level, threshold, unsure)
    tissue = ndimage.binary_fill_holes(tissue)
    labels, n = ndimage.label(tissue, np.ones((3, 3), bool))
    if n:
        sizes = np.bincount(labels.ravel(), minlength=n + 1)
        tissue = (sizes > SPECK)[labels] & tissue
    if not tissue.any():  # dust alone: an empty slide is rare enough that running it is the safe guess
        return _everything(v, mode, level, threshold, UNSURE_NONE)
    tissue = ndimage.binary_dilation(tissue, np.ones((3, 3), bool)) & valid
    return TissueMask(tissue, mode, level, threshold)


def _above(s: np.ndarray, ring: np.ndarray) -> tuple[np.ndarray, float, float, float]:
    """Where the signal `s` (0 on glass) stands above the border ring's level by `K_SIGMA` noise sigmas and
    `MIN_STEP`, after a 3 x 3 mean: (tissue, level, threshold, sigma)."""
    from scipy import ndimage

    s = ndimage.uniform_filter(s, 3, mode="nearest")
    level = float(np.median(s[ring]))
    sigma = max(MIN_SIGMA, 1.4826 * float(np.median(np.abs(s[ring] - level))))
    threshold = level + max(K_SIGMA * sigma, MIN_STEP)
    return s > threshold, level, threshold, sigma


def _unsure(glass_ring: float, sigma: float, coloured: bool) -> str:
    """Why the border ring is no empty glass to measure the tissue against ("" when it is)."""
    if glass_ring < GLASS_RING:
        return (f"the tissue seems to reach the slide's edges (only {glass_ring:.0%} of the border looks like empty "
                "glass)")
    if sigma > MAX_SIGMA:
        return "the slide's border is too uneven to be empty glass"
    if coloured:
        return "the slide's border is coloured or darker than empty glass (stain or tissue at the edges)"
    return ""


def _everything(v: np.ndarray, mode: str, level: float, threshold: float, why: str) -> TissueMask:
    """The whole slide taken for tissue, and why, in the words of the plan and the report."""
    note = f"{why}: tissue cannot be told from glass, so every tile is segmented (none skipped)"
    return TissueMask(np.ones(v.shape[1:], bool), mode, level, threshold, note)


def _ring(shape: tuple[int, int]) -> np.ndarray:
    """The border ring of an image of `shape`: `BORDER` of each side, at least one pixel."""
    h, w = shape
    by, bx = max(1, round(h * BORDER)), max(1, round(w * BORDER))
    ring = np.zeros(shape, bool)
    ring[:by], ring[-by:], ring[:, :bx], ring[:, -bx:] = True, True, True, True
    return ring
