"""Masks to polygons: SAM 3's 288x288 probability maps to valid geometries in the source CRS.

Two steps, split so that the model worker ships little data:

1. `crop_detections` (on the model worker): each instance's probabilities cropped to its box (plus the
   cells bilinear interpolation needs), float16: kilobytes per object instead of 330 KB.
2. `pieces_from_crops` (anywhere): upsample each crop bilinearly to the tile's pixels (the 288 grid's
   cell centres sit at (i + 0.5) * 3.5 px), keep > 0.5, drop padding and nodata, polygonize with the
   tile's affine transform. Every piece knows whether it touches an interior tile edge (then it may be cut
   and is stitched by the merge) and how far it stays from those edges.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import rasterio.features
import shapely
from affine import Affine
from rasterio.errors import NotGeoreferencedWarning
from shapely.geometry import MultiPolygon, shape

from .grid import Tile
from .piecekey import piece_key
from .model.runtime import MASK_SIZE, MODEL_SIZE, Detections

_K = MASK_SIZE / MODEL_SIZE
#: One cell of the 288 mask grid in tile pixels (3.5): the resolution of every mask, whatever the scale.
MASK_CELL = MODEL_SIZE / MASK_SIZE
#: A mask that comes within this many tile pixels of an interior tile edge counts as cut there: a cut
#: object's mask can stop up to two cells short of the edge (low-res logits fade toward image borders,
#: then upsampling and thresholding), so 2.5 cells; a complete object that close to the edge is seen
#: whole by the neighbour, which then owns it.
EDGE_MARGIN = math.ceil(2.5 * MASK_CELL)


@dataclass
class InstanceCrop:
    """One detected instance, compactly: its box in tile pixels and the probabilities around it."""

    prompt: int  # index into the job's prompts
    pass_index: int  # decoder pass (several when a tile has more boxes than the graph has slots)
    score: float
    box_px: tuple[int, int, int, int]  # x0, y0, x1, y1 in tile pixels, clipped to the valid area
    cell0: tuple[int, int]  # (row, col) of the crop's first cell on the 288 grid
    probs: np.ndarray  # float16 [rows, cols] crop of the 288 grid
    valid: np.ndarray | None = None  # bool [y1-y0, x1-x0] where nodata lies inside the box, else None
    cut: bool = False  # clipped where a pasted exemplar hides tile content (see exemplars): never complete


def _cells_for(p0: int, p1: int) -> tuple[int, int]:
    """The 288-grid cells bilinear interpolation reads for pixels p0..p1-1 (end exclusive)."""
    g0 = (p0 + 0.5) * _K - 0.5
    g1 = (p1 - 0.5) * _K - 0.5
    return max(0, int(np.floor(g0))), min(MASK_SIZE, int(np.floor(g1)) + 2)


def crop_detections(det: Detections, prompt: int, pass_index: int, valid_wh: tuple[int, int],
                    valid: np.ndarray | None = None) -> list[InstanceCrop]:
    """Compact one decoder pass. `valid` is the tile's validity mask (only consulted where it has holes)."""
    out: list[InstanceCrop] = []
    vw, vh = valid_wh
    has_holes = valid is not None and not valid[:vh, :vw].all()
    for i in range(len(det)):
        bx0, by0, bx1, by1 = (float(v) * MODEL_SIZE for v in det.boxes[i])
        x0, y0 = max(0, int(np.floor(bx0))), max(0, int(np.floor(by0)))
        x1, y1 = min(vw, int(np.ceil(bx1))), min(vh, int(np.ceil(by1)))
        if x1 <= x0 or y1 <= y0:
            continue  # the box lies in the padding
        r0, r1 = _cells_for(y0, y1)
        c0, c1 = _cells_for(x0, x1)
        crop = det.masks[i, 0, r0:r1, c0:c1].astype(np.float16)
        vcrop = valid[y0:y1, x0:x1].copy() if has_holes else None
        out.append(InstanceCrop(prompt, pass_index, float(det.scores[i]), (x0, y0, x1, y1), (r0, c0), crop, vcrop))
    return out


def _interp_axis(p0: int, p1: int, c0: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    g = (np.arange(p0, p1) + 0.5) * _K - 0.5
    g = np.clip(g, 0, MASK_SIZE - 1)
    i0 = np.floor(g).astype(np.int64)
    w = (g - i0).astype(np.float32)
    i1 = np.minimum(i0 + 1, MASK_SIZE - 1)
    return np.clip(i0 - c0, 0, n - 1), np.clip(i1 - c0, 0, n - 1), w


def upsample(crop: InstanceCrop) -> np.ndarray:
    """The instance's binary mask over its box, bool [y1-y0, x1-x0]: bilinear probabilities > 0.5."""
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


@dataclass
class Pieces:
    """Column store of polygon pieces from one or more tiles (cheap to ship, concatenate and index)."""

    geometry: list = field(default_factory=list)
    score: list = field(default_factory=list)
    prompt: list = field(default_factory=list)
    tile_key: list = field(default_factory=list)
    complete: list = field(default_factory=list)
    edge_dist: list = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.geometry)

    def extend(self, other: "Pieces") -> None:
        for name in ("geometry", "score", "prompt", "tile_key", "complete", "edge_dist"):
            getattr(self, name).extend(getattr(other, name))

    @classmethod
    def concat(cls, many: Sequence["Pieces"]) -> "Pieces":
        out = cls()
        for p in many:
            out.extend(p)
        return out


def tile_key(tile: Tile, pass_index: int = 0) -> int:
    """Pieces of one tile and one decoder pass share a key; the merge never fuses two pieces of one key."""
    return piece_key(tile.index, pass_index)


def mask_to_geometry(mask: np.ndarray, transform: Affine):
    """Polygonize a boolean mask (4-connected regions, holes kept) -> Polygon/MultiPolygon or None."""
    if not mask.any():
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotGeoreferencedWarning)
        polys = [shape(g) for g, v in rasterio.features.shapes(mask.view(np.uint8), mask=mask,
                                                              transform=transform) if v == 1]
    geom = polys[0] if len(polys) == 1 else MultiPolygon(polys)
    if not geom.is_valid:
        geom = shapely.make_valid(geom)
    return geom


def pieces_from_crops(crops: Sequence[InstanceCrop], tile: Tile, edge_margin: int = EDGE_MARGIN) -> Pieces:
    """Polygons in the source CRS for one tile's instances, with their seam flags."""
    out = Pieces()
    left, top, right, bottom = tile.interior
    vw, vh = tile.valid_wh
    base = tile.transform
    for c in crops:
        mask = upsample(c)
        if not mask.any():
            continue
        x0, y0 = c.box_px[0], c.box_px[1]
        rows = np.flatnonzero(mask.any(axis=1))
        cols = np.flatnonzero(mask.any(axis=0))
        mx0, mx1 = x0 + cols[0], x0 + cols[-1] + 1
        my0, my1 = y0 + rows[0], y0 + rows[-1] + 1
        dists = []
        if left:
            dists.append(mx0)
        if top:
            dists.append(my0)
        if right:
            dists.append(vw - mx1)
        if bottom:
            dists.append(vh - my1)
        edge_dist = 0.0 if c.cut else float(min(dists)) if dists else float("inf")
        geom = mask_to_geometry(mask, base @ Affine.translation(x0, y0))
        if geom is None or geom.is_empty:
            continue
        out.geometry.append(geom)
        out.score.append(c.score)
        out.prompt.append(c.prompt)
        out.tile_key.append(tile_key(tile, c.pass_index))
        out.complete.append(edge_dist >= edge_margin and not c.cut)
        out.edge_dist.append(edge_dist)
    return out
