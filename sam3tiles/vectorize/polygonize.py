"""One tile's instance masks to polygons in one pass: upsample, threshold and polygonize batched.

Per object, the work is tiny (a vehicle is a few hundred pixels) and the fixed cost of each numpy call
and of each `rasterio.features.shapes` call (a GDAL dataset, an environment) dominated: about 0.8 ms an
object. Here every instance's box is laid out, without overlap, on one packed canvas (shelf packing),
each instance's thresholded mask is written there with its own label, and ONE `shapes` call over that
canvas polygonizes them all: GDAL traces each label's regions on its own, so each instance gets the
same rings as when polygonized alone (4-connected, holes kept), only shifted by its place on the canvas,
which `_to_tile` undoes before the tile's affine transform is applied with the same arithmetic as
`Affine @ Affine.translation(x0, y0)` (coordinates identical to per-object polygonizing).

Frames: box and canvas coordinates are tile pixels (integers); output coordinates are the source CRS.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import rasterio.features
import shapely
from affine import Affine
from rasterio.errors import NotGeoreferencedWarning

from ..model.runtime import MASK_SIZE, MODEL_SIZE

_K = MASK_SIZE / MODEL_SIZE
#: Objects with more box pixels than this are upsampled separably on their own (rows, then columns):
#: cheaper per pixel than the batched per-pixel gather, and their per-call cost is negligible.
_LARGE_PX = 65536


@dataclass(frozen=True)
class Boxes:
    """The instances' boxes in tile pixels (int64 arrays, end exclusive) and their 288-grid crops."""

    x0: np.ndarray
    y0: np.ndarray
    w: np.ndarray
    h: np.ndarray
    r0: np.ndarray  # first crop cell (row) on the 288 grid
    c0: np.ndarray  # first crop cell (column)
    ph: np.ndarray  # crop rows
    pw: np.ndarray  # crop columns

    @classmethod
    def of(cls, crops) -> "Boxes":
        a = np.array([(*c.box_px, *c.cell0, *c.probs.shape) for c in crops], dtype=np.int64).reshape(-1, 8)
        return cls(a[:, 0], a[:, 1], a[:, 2] - a[:, 0], a[:, 3] - a[:, 1], a[:, 4], a[:, 5], a[:, 6], a[:, 7])


def _interp_axis(p0: int, p1: int, c0: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    g = (np.arange(p0, p1) + 0.5) * _K - 0.5
    g = np.clip(g, 0, MASK_SIZE - 1)
    i0 = np.floor(g).astype(np.int64)
    w = (g - i0).astype(np.float32)
    i1 = np.minimum(i0 + 1, MASK_SIZE - 1)
    return np.clip(i0 - c0, 0, n - 1), np.clip(i1 - c0, 0, n - 1), w


def upsample(crop) -> np.ndarray:
    """One instance's (`vectorize.InstanceCrop`) binary mask over its box, bool [y1-y0, x1-x0]: bilinear
    probabilities > 0.5."""
    x0, y0, x1, y1 = crop.box_px
    r0, c0 = crop.cell0
    p = crop.probs.astype(np.float32)
    ri0, ri1, wr = _interp_axis(y0, y1, r0, p.shape[0])
    ci0, ci1, wc = _interp_axis(x0, x1, c0, p.shape[1])
    rows = p[ri0] * (1 - wr)[:, None] + p[ri1] * wr[:, None]
    full = rows[:, ci0] * (1 - wc)[None, :] + rows[:, ci1] * wc[None, :]
    mask = full > 0.5
    if crop.valid is not None:
        mask &= crop.valid
    return mask


def shelf_pack(w: np.ndarray, h: np.ndarray) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    """Canvas origins (sx, sy) for boxes of sizes w x h, none overlapping, and the canvas (height, width).
    Tallest first, left to right in shelves about as wide as the square root of the total area."""
    n = len(w)
    sx, sy = np.zeros(n, np.int64), np.zeros(n, np.int64)
    width = max(int(w.max()), math.ceil(1.2 * math.sqrt(float((w * h).sum()))))
    x = y = shelf_h = 0
    for k in np.argsort(-h, kind="stable").tolist():
        if x + w[k] > width:
            x, y, shelf_h = 0, y + shelf_h, 0
        sx[k], sy[k] = x, y
        x += int(w[k])
        shelf_h = max(shelf_h, int(h[k]))
    return sx, sy, (y + shelf_h, width)


def _axis(p0: np.ndarray, c0: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bilinear source cells (crop-relative) and weights for tile pixels p0 (one per pixel), as
    `_interp_axis`: cell centres at (i + 0.5) * 3.5 px, clamped to the 288 grid and the crop."""
    g = np.clip((p0 + 0.5) * _K - 0.5, 0, MASK_SIZE - 1)
    i0 = np.floor(g).astype(np.int64)
    w = (g - i0).astype(np.float32)
    i1 = np.minimum(i0 + 1, MASK_SIZE - 1)
    return np.clip(i0 - c0, 0, n - 1), np.clip(i1 - c0, 0, n - 1), w


def _small_masks(crops, idx: np.ndarray, b: Boxes, sx, sy, width: int):
    """Thresholded bilinear masks of the instances `idx`, all at once and separably as
    `upsample` does it (crop rows interpolated to pixel rows, then to pixel columns), with the
    same float32 arithmetic in the same order (bit-identical): a handful of gathers over every box pixel
    instead of a dozen numpy calls per object. Returns, per pixel that is on: its flat canvas index, its
    instance, and its row and column in the instance's box."""
    w, h, pw, ph = b.w[idx], b.h[idx], b.pw[idx], b.ph[idx]
    # one entry per box row r (instance kr, row i in its box)
    kr = np.repeat(np.arange(len(idx)), h)
    i = np.arange(len(kr)) - np.repeat(np.cumsum(h) - h, h)
    ri0, ri1, wr = _axis(b.y0[idx][kr] + i, b.r0[idx][kr], ph[kr])
    # rows of the crop interpolated to box rows: one entry per (box row, crop column)
    flat = np.concatenate([crops[k].probs.ravel() for k in idx.tolist()]).astype(np.float32)
    pstart = (np.cumsum(ph * pw) - ph * pw)[kr]
    n_t = pw[kr]
    tr = np.repeat(np.arange(len(kr)), n_t)
    tstart = np.cumsum(n_t) - n_t
    cc = np.arange(len(tr)) - tstart[tr]
    base = pstart[tr] + cc
    wrt = wr[tr]
    tab = flat[base + ri0[tr] * n_t[tr]] * (1 - wrt) + flat[base + ri1[tr] * n_t[tr]] * wrt
    # one entry per box column (instance kc, column j in its box)
    kc = np.repeat(np.arange(len(idx)), w)
    jc = np.arange(len(kc)) - np.repeat(np.cumsum(w) - w, w)
    ci0, ci1, wc = _axis(b.x0[idx][kc] + jc, b.c0[idx][kc], pw[kc])
    cstart = np.cumsum(w) - w
    # one entry per box pixel: row r, column cstart[kr[r]] + j
    n_p = w[kr]
    pr = np.repeat(np.arange(len(kr)), n_p)
    col = np.arange(len(pr)) - np.repeat(np.cumsum(n_p) - n_p, n_p) + cstart[kr][pr]
    t0 = tstart[pr]
    wcp = wc[col]
    on = tab[t0 + ci0[col]] * (1 - wcp) + tab[t0 + ci1[col]] * wcp > 0.5
    if any(crops[k].valid is not None for k in idx.tolist()):  # nodata inside some boxes
        on &= np.concatenate([np.ones(int(b.w[k] * b.h[k]), bool) if crops[k].valid is None
                              else crops[k].valid.ravel() for k in idx.tolist()])
    pr, col = pr[on], col[on]
    ko = kr[pr]
    j = col - cstart[ko]
    ii = i[pr]
    k = idx[ko]
    return (sy[k] + ii) * width + sx[k] + j, k, ii, j


def _paint(crops, b: Boxes, sx: np.ndarray, sy: np.ndarray, shape) -> tuple[np.ndarray, np.ndarray]:
    """The packed label canvas (instance k has label k + 1) and each instance's mask extent in box
    pixels, int64 [n, 4] (col0, row0, col1, row1, end exclusive; -1 where the mask is empty)."""
    canvas = np.zeros(shape, np.int32)
    ext = np.full((len(crops), 4), -1, np.int64)
    large = b.w * b.h > _LARGE_PX
    for k in np.flatnonzero(large).tolist():
        m = upsample(crops[k])
        rows, cols = np.flatnonzero(m.any(axis=1)), np.flatnonzero(m.any(axis=0))
        if len(rows):
            canvas[sy[k]:sy[k] + b.h[k], sx[k]:sx[k] + b.w[k]][m] = k + 1
            ext[k] = cols[0], rows[0], cols[-1] + 1, rows[-1] + 1
    small = np.flatnonzero(~large)
    if len(small):
        at, ko, i, j = _small_masks(crops, small, b, sx, sy, shape[1])
        canvas.ravel()[at] = ko + 1
        if len(ko):  # pixels are grouped by instance: one reduction per instance that has any
            first = np.flatnonzero(np.r_[True, ko[1:] != ko[:-1]])
            ks = ko[first]
            ext[ks, 0] = np.minimum.reduceat(j, first)
            ext[ks, 1] = np.minimum.reduceat(i, first)
            ext[ks, 2] = np.maximum.reduceat(j, first) + 1
            ext[ks, 3] = np.maximum.reduceat(i, first) + 1
    return canvas, ext


def _rings(canvas: np.ndarray) -> tuple[list[np.ndarray], list[int], np.ndarray]:
    """Every region of the canvas as rings: (coordinate arrays in canvas pixels, rings per polygon,
    instance index per polygon), in the order GDAL traces them."""
    coords, nrings, owner = [], [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotGeoreferencedWarning)
        for g, v in rasterio.features.shapes(canvas, mask=canvas > 0, connectivity=4):
            rings = g["coordinates"]
            coords.extend(np.asarray(r, dtype=np.float64) for r in rings)
            nrings.append(len(rings))
            owner.append(int(v) - 1)
    return coords, nrings, np.asarray(owner, dtype=np.int64)


def _to_crs(xy: np.ndarray, k: np.ndarray, b: Boxes, sx, sy, base: Affine) -> np.ndarray:
    """Canvas pixel coordinates of instance k's rings -> source CRS, as `base @ translation(x0, y0)`
    applied to box-relative coordinates would compute them (the per-object path's arithmetic)."""
    sa, sb, sc, sd, se, sf = base[:6]
    x0, y0 = b.x0[k].astype(np.float64), b.y0[k].astype(np.float64)
    c, f = sa * x0 + sb * y0 + sc, sd * x0 + se * y0 + sf
    vx, vy = xy[:, 0] - sx[k], xy[:, 1] - sy[k]
    return np.column_stack([vx * sa + vy * sb + c, vx * sd + vy * se + f])


def polygonize_crops(crops, base: Affine) -> tuple[list, np.ndarray]:
    """Each instance's mask (bilinear probabilities over its box > 0.5, nodata dropped) as a valid
    Polygon/MultiPolygon in the CRS of `base` (the tile's pixel -> CRS transform), None where the mask
    is empty, and its extent in box pixels (int64 [n, 4]: col0, row0, col1, row1, end exclusive)."""
    n = len(crops)
    if n == 0:
        return [], np.zeros((0, 4), np.int64)
    b = Boxes.of(crops)
    sx, sy, shape = shelf_pack(b.w, b.h)
    canvas, ext = _paint(crops, b, sx, sy, shape)
    coords, nrings, owner = _rings(canvas)
    geoms: list = [None] * n
    if not owner.size:
        return geoms, ext
    counts = np.array([len(c) for c in coords], dtype=np.int64)
    ring_owner = np.repeat(owner, nrings)
    xy = _to_crs(np.concatenate(coords), np.repeat(ring_owner, counts), b, sx, sy, base)
    polys = shapely.from_ragged_array(shapely.GeometryType.POLYGON, xy,
                                      (np.r_[0, np.cumsum(counts)], np.r_[0, np.cumsum(nrings)]))
    order = np.argsort(owner, kind="stable")  # each instance's polygons in GDAL's order
    cuts = np.flatnonzero(np.r_[True, owner[order][1:] != owner[order][:-1], True])
    for s, e in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
        k = int(owner[order[s]])
        geoms[k] = polys[order[s]] if e - s == 1 else shapely.MultiPolygon(list(polys[order[s:e]]))
    have = [k for k in range(n) if geoms[k] is not None]
    arr = np.empty(len(have), dtype=object)
    arr[:] = [geoms[k] for k in have]
    for k in np.asarray(have)[~shapely.is_valid(arr)].tolist():
        geoms[k] = shapely.make_valid(geoms[k])
    return geoms, ext
