"""Masks to polygons: SAM 3's 288x288 probability maps to valid geometries in the source CRS.

Two steps, split so that the model worker ships little data:

1. `crop_detections` (on the model worker): each instance's probabilities cropped to its box (plus the
   cells bilinear interpolation needs), float16: kilobytes per object instead of 330 KB. A prompt decoded
   in several passes (more example boxes than the decoder has slots) gives one answer: `merge_passes`.
2. `pieces_from_crops` (anywhere): upsample each crop bilinearly to the tile's pixels (the 288 grid's
   cell centres sit at (i + 0.5) * 3.5 px), keep > 0.5, drop padding and nodata, polygonize with the
   tile's affine transform. Every piece knows whether it touches an interior tile edge (then it may be cut
   and is stitched by the merge) and how far it stays from those edges.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np
import rasterio.features
import shapely
from affine import Affine
from shapely.geometry import MultiPolygon, shape

from ..model.runtime import MASK_SIZE, MODEL_SIZE, Detections
from ..tiling.grid import Tile
from ..tiling.piecekey import piece_key
from .polygonize import polygonize_crops, upsample  # noqa: F401 - tests and benchmarks import upsample from here

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


#: Two detections of one prompt from two decoder passes on one tile are one object when their masks (cells
#: of the 288 grid over 0.5) overlap at IoU >= PASS_IOU, or the smaller lies >= PASS_IOS inside the larger.
#: Each pass with a positive box returns every object like it, on the same embedding and grid, so the
#: passes return the same objects, a mask grown or shrunk by a cell at its edge (a 3 x 6 cell object grown
#: all round: IoU 0.45, inside 1.0); two touching objects overlap in no cell. A pair one pass fused and
#: another split: the better-scored answer stays. (The merge's first look at two tiles' views of one
#: object uses the same bounds: `merge.parts.IOU_MIN`, `IOS_MIN`.)
PASS_IOU = 0.5
PASS_IOS = 0.8


def _cells_for(p0: int, p1: int) -> tuple[int, int]:
    """The 288-grid cells bilinear interpolation reads for pixels p0..p1-1 (end exclusive)."""
    g0 = (p0 + 0.5) * _K - 0.5
    g1 = (p1 - 0.5) * _K - 0.5
    return max(0, int(np.floor(g0))), min(MASK_SIZE, int(np.floor(g1)) + 2)


def half(probs: np.ndarray) -> np.ndarray:
    """Probabilities as float16 on one grid of 1/2048 steps across [0, 1], so p and 1 - p round alike: a pixel
    midway between cells of p and 1 - p stays at 0.5 exactly (off, as with 0/1 masks). Plain float16 rounds
    0.99995 to 1 and keeps 0.00005, which put such pixels (one in seven on each axis) over 0.5."""
    return (np.rint(np.asarray(probs, np.float32) * 2048) / 2048).astype(np.float16)


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
        crop = half(det.masks[i, 0, r0:r1, c0:c1])
        vcrop = valid[y0:y1, x0:x1].copy() if has_holes else None
        out.append(InstanceCrop(prompt, pass_index, float(det.scores[i]), (x0, y0, x1, y1), (r0, c0), crop, vcrop))
    return out


def merge_passes(passes: Sequence[Sequence[InstanceCrop]]) -> tuple[list[InstanceCrop], int]:
    """One answer from the crops of several decoder passes of one prompt on one tile, and how many crops
    were another pass's object. A crop is kept unless its mask matches (`PASS_IOU`, `PASS_IOS`) a kept
    crop of another pass; crops are taken best score first (then earlier pass, then position), so of one object
    the best-scored mask stays; crops of one pass are never compared (that is the model's own answer).
    The kept crops come in their passes' order, all as pass 0: one answer, one piece key."""
    crops = [c for p in passes for c in p]
    if len(passes) <= 1:
        return crops, 0
    n = len(crops)
    pas = np.asarray([k for k, p in enumerate(passes) for _ in p], dtype=np.int64)
    masks = [c.probs > 0.5 for c in crops]
    area = np.asarray([m.sum() for m in masks], dtype=np.int64)
    ext = np.asarray([(c.cell0[0], c.cell0[1], c.cell0[0] + m.shape[0], c.cell0[1] + m.shape[1])
                      for c, m in zip(crops, masks)], dtype=np.int64).reshape(n, 4)
    keep = np.zeros(n, dtype=bool)
    for i in np.lexsort((np.arange(n), pas, -np.asarray([c.score for c in crops]))).tolist():
        e = ext[i]
        near = np.flatnonzero(keep & (pas != pas[i]) & (ext[:, 0] < e[2]) & (e[0] < ext[:, 2])
                              & (ext[:, 1] < e[3]) & (e[1] < ext[:, 3]))
        keep[i] = not any(_same_object(masks[i], e, masks[j], ext[j], area[i], area[j]) for j in near.tolist())
    return [replace(crops[i], pass_index=0) for i in np.flatnonzero(keep).tolist()], int(n - keep.sum())


def _same_object(a: np.ndarray, ea, b: np.ndarray, eb, area_a: int, area_b: int) -> bool:
    """Whether two cell masks placed at extents `ea`, `eb` (r0, c0, r1, c1) of the 288 grid are one object:
    IoU >= `PASS_IOU` or the smaller >= `PASS_IOS` inside the larger."""
    r0, c0, r1, c1 = max(ea[0], eb[0]), max(ea[1], eb[1]), min(ea[2], eb[2]), min(ea[3], eb[3])
    if r1 <= r0 or c1 <= c0:
        return False
    sa = a[r0 - ea[0]:r1 - ea[0], c0 - ea[1]:c1 - ea[1]]
    inter = int((sa & b[r0 - eb[0]:r1 - eb[0], c0 - eb[1]:c1 - eb[1]]).sum())
    if inter == 0:
        return False
    return inter >= PASS_IOU * (int(area_a) + int(area_b) - inter) or inter >= PASS_IOS * min(int(area_a), int(area_b))


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
    """Pieces of one tile and one decoder pass share a key; the merge never fuses two pieces of one key.
    The pipeline's crops are all of pass 0 (`merge_passes`): one key a tile."""
    return piece_key(tile.index, pass_index)


def mask_to_geometry(mask: np.ndarray, transform: Affine):
    """Polygonize a boolean mask (4-connected regions, holes kept) -> Polygon/MultiPolygon or None."""
    if not mask.any():
        return None
    # (a NotGeoreferencedWarning for an identity transform is filtered per run: `sam3tiles.quiet`;
    # warnings.catch_warnings here, in worker threads, was not thread-safe)
    polys = [shape(g) for g, v in rasterio.features.shapes(mask.view(np.uint8), mask=mask,
                                                          transform=transform) if v == 1]
    geom = polys[0] if len(polys) == 1 else MultiPolygon(polys)
    if not geom.is_valid:
        geom = shapely.make_valid(geom)
    return geom


def pieces_from_crops(crops: Sequence[InstanceCrop], tile: Tile, edge_margin: int = EDGE_MARGIN) -> Pieces:
    """Polygons in the source CRS for one tile's instances, with their seam flags. All instances are
    upsampled and polygonized in one batch (`polygonize.polygonize_crops`); the result equals doing it
    per instance with `upsample` and `mask_to_geometry`."""
    out = Pieces()
    left, top, right, bottom = tile.interior
    vw, vh = tile.valid_wh
    geoms, ext = polygonize_crops(crops, tile.transform)
    for c, geom, (ex0, ey0, ex1, ey1) in zip(crops, geoms, ext.tolist()):
        if geom is None or geom.is_empty:
            continue
        x0, y0 = c.box_px[0], c.box_px[1]
        mx0, mx1, my0, my1 = x0 + ex0, x0 + ex1, y0 + ey0, y0 + ey1
        dists = [d for d, interior in ((mx0, left), (my0, top), (vw - mx1, right), (vh - my1, bottom))
                 if interior]
        edge_dist = 0.0 if c.cut else float(min(dists)) if dists else float("inf")
        out.geometry.append(geom)
        out.score.append(c.score)
        out.prompt.append(c.prompt)
        out.tile_key.append(tile_key(tile, c.pass_index))
        out.complete.append(edge_dist >= edge_margin and not c.cut)
        out.edge_dist.append(edge_dist)
    return out
