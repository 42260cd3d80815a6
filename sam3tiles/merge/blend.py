"""Rule 5's boundary where tiles overlap: the views of every tile that saw a stretch, averaged.

An object cut in its owner is stitched from each tile's part inside that tile's core (`_Resolver._stitch`),
so inside an overlap band its boundary jumps, at the band's middle, from one tile's view to the other's. A
real SAM 3 answers a changed context with a changed boundary, a cell or two in or out independently per
tile, and the jump is that difference: a step in the outline at every seam, and the owner's noise alone.
Here, where two or more tiles that saw the object overlap and their views disagree by up to `BLEND_CELLS`
mask cells, the boundary is their signed distances averaged, each weighted by the point's distance to that
tile's interior edges (feathering, as a mosaic blends overlapping orthophotos: a tile's view is weakest at
its edge, where its context is cut). The weight of a tile falls to zero at its window's edge, so the result
meets what a tile alone saw outside the band without a step.

A disagreement wider than `BLEND_CELLS` (a split, a miss, a line's end, a neighbour drawn in) is a decision,
not noise: there the tile of most weight decides, which is the owner's view (the cores cut each band where
the weights are equal). The blend lies between the views' intersection and their union, so it never grows an
object past what a tile saw, nor closes a hole every tile drew; a stretch whose blend would join two regions
or split one keeps the owners' stitch, and a hole or a crumb only the raster made is filled or dropped. The
owned area a blend gives up is counted (the merge's coverage, `blended`). Views that differ by a mask cell
at most (two tiles' grids of cells), or only at a window's edge (a mask stopping short), are left as the
owners drew them: nothing to average there, and no cost.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np
import rasterio.features
import shapely
from affine import Affine
from scipy import ndimage

from ..tiling.frame import TileFrame
from ..vectorize.pieces import EDGE_MARGIN, MASK_CELL

#: Views closer than this many mask cells are one boundary seen twice (averaged); farther apart, the owner's.
BLEND_CELLS = 3.0
#: The blend's raster step, in mask cells (the views are drawn in whole cells: half a cell keeps their shape).
STEP_CELLS = 0.5
#: Raster cells of one band's stretch at most (a stretch beyond it keeps the owners' boundary).
MAX_BLEND_PX = 4_000_000


def blend_views(geom, views: Mapping[int, object], frames: Mapping[int, TileFrame]):
    """`geom` (the owners' stitch of an object) with its boundary averaged where tiles in `views` (tile ->
    that tile's parts of the object, one geometry) overlap and disagree by up to `BLEND_CELLS` cells."""
    tiles = [t for t, v in views.items() if not v.is_empty and frames[t].edges is not None]
    if len(tiles) < 2:
        return geom
    step = STEP_CELLS * MASK_CELL * min(frames[t].pixel for t in tiles)
    where, keep, done = [], [], []
    bands = [(band.area, a, b, band) for i, a in enumerate(tiles) for b in tiles[i + 1:]
             if (band := shapely.intersection(frames[a].window, frames[b].window)).area > 0]
    # the widest bands first: a corner shared by four tiles lies in the bands of its sides, done with them
    for _, a, b, band in sorted(bands, key=lambda x: -x[0]):
        va, vb = (shapely.clip_by_rect(views[t], *band.bounds) for t in (a, b))
        if va.is_empty and vb.is_empty:
            continue
        box = np.asarray([g.bounds for g in (va, vb) if not g.is_empty])
        box = shapely.box(*box[:, :2].min(axis=0), *box[:, 2:].max(axis=0))
        if done and shapely.covers(shapely.union_all(done), box) or not _apart(va, vb, band, frames[a].pixel, step):
            continue
        done.append(box)
        got = _blend_stretch(box.bounds, geom, views, frames, tiles, step)
        if got is not None:
            where.append(got[0])
            keep.append(got[1])
    if not where:
        return geom
    return _splice(geom, shapely.union_all(where), keep, step)


def _apart(va, vb, band, pixel: float, step: float) -> bool:
    """Whether two views of a band disagree by more than a mask cell (two steps) somewhere `EDGE_MARGIN`
    inside it: a cell is what two tiles' grids of mask cells put between one boundary (rule 2 links across
    it; averaging it would move the boundary by less than the masks resolve), and at a window's edge, where
    a mask stops short, that tile's weight is nil (the blend would change nothing)."""
    x0, y0, x1, y1 = band.bounds
    m = EDGE_MARGIN * pixel
    if x1 - x0 <= 2 * m or y1 - y0 <= 2 * m:
        return False
    differ = shapely.clip_by_rect(shapely.symmetric_difference(va, vb), x0 + m, y0 + m, x1 - m, y1 - m)
    return not shapely.buffer(differ, -1.05 * step, join_style="mitre").is_empty


def _splice(geom, where, keep: list, step: float):
    """`geom` outside `where`, `keep` (the blend, inside `where`) in it. `where` is whole raster cells, and
    `geom`'s vector edge does not follow them: the slivers between the two that the blend closed around
    (holes `geom` did not have) are filled, and crumbs at its edge smaller than a mask cell dropped."""
    out = shapely.make_valid(shapely.union_all([shapely.difference(geom, where), *keep]))
    holes = shapely.union_all([shapely.Polygon(r) for p in shapely.get_parts(geom).tolist()
                               if isinstance(p, shapely.Polygon) for r in p.interiors])
    parts, filled, cell = [], False, (2 * step) ** 2  # a mask cell: no mask draws less
    for p in shapely.get_parts(out).tolist():
        if isinstance(p, shapely.Polygon) and (p.area >= cell or not shapely.intersects(p, where)):
            rings = [r for r in p.interiors if shapely.intersects(shapely.Polygon(r), holes)]
            filled |= len(rings) < len(p.interiors)
            parts.append(shapely.Polygon(p.exterior, rings))
    if not parts:
        return out
    # the parts of one valid geometry are apart, unless a filled hole held one
    return shapely.union_all(parts) if filled else parts[0] if len(parts) == 1 else shapely.MultiPolygon(parts)


def _blend_stretch(bounds, geom, views, frames, tiles, step: float):
    """The blend inside `bounds` (an overlap band's stretch of the object) on a raster of `step`: (the area
    where the blend moves `geom`'s boundary, the blended object inside it), or None where it moves nothing.
    Elsewhere `geom` stays as it is, to the vertex."""
    reach = step * BLEND_CELLS / STEP_CELLS
    pad = reach + 2 * step
    x0, y0, x1, y1 = bounds[0] - pad, bounds[1] - pad, bounds[2] + pad, bounds[3] + pad
    w, h = int(np.ceil((x1 - x0) / step)), int(np.ceil((y1 - y0) / step))
    if w * h > MAX_BLEND_PX:
        return None
    transform = Affine(step, 0, x0, 0, step, y0)
    f = _Field((h, w), transform, (x0, y0, x1, y1), reach)
    for t in tiles:
        f.add(frames[t], views[t])
    differ = (f.cover >= 2) & (f.seen > 0) & (f.drawn > 0)
    if not differ.any():
        return None
    # a disagreement thicker than the reach (an end the other tile drew on, a bank one tile added) is a
    # decision, not one boundary seen twice: the owner's there (an opening by a square, which keeps the
    # corners of a cut end)
    half = reach / 2 / step
    inner = ndimage.distance_transform_cdt(differ, metric="chessboard") > half
    thick = differ & (ndimage.distance_transform_cdt(~inner, metric="chessboard") <= half) if inner.any() else inner
    near = ndimage.binary_dilation(differ, iterations=max(1, int(round(reach / step)))) & (f.cover >= 2)
    blended = near & np.where(f.far | thick, f.owner, f.num > 0)
    owners = f.raster(geom)
    changed = near & (blended != owners)
    if not changed.any():
        return None
    where = ndimage.binary_dilation(changed) & near
    if not _same_shape(owners, np.where(where, blended, owners)):
        return None
    return _polygons(where, transform), _polygons(where & blended, transform)


def _same_shape(before: np.ndarray, after: np.ndarray) -> bool:
    """Whether the blend keeps the owners' regions on the raster (regions a cell apart are one, crumbs under
    a mask cell do not count): it moves a boundary, and leaves joining two regions or splitting one to the
    owners (a tile that drew two neighbours as one blob is not a boundary seen twice). Holes need no check:
    one that every tile drew stays (the blend lies between the views' intersection and their union), and
    one only the raster opened `_splice` fills."""
    full = np.ones((3, 3), bool)

    def regions(x):
        lab, n = ndimage.label(ndimage.binary_dilation(x, structure=full), structure=full)
        return int((np.bincount(lab[x], minlength=n + 1)[1:] >= 4).sum())

    return regions(before) == regions(after)


class _Field:
    """The tiles' views of one stretch on a raster: their weighted signed distances summed (`num`), the
    view of the tile of most weight (`owner`), where some view is farther than the reach from its boundary
    (`far`), and how many windows cover each cell (`cover`) and say in (`seen`) or out (`drawn`)."""

    def __init__(self, shape, transform: Affine, extent, reach: float):
        self.shape, self.transform, self.extent, self.reach = shape, transform, extent, reach
        h, w = shape
        step = transform.a
        self.px, self.py = np.meshgrid(extent[0] + (np.arange(w) + 0.5) * step,
                                       extent[1] + (np.arange(h) + 0.5) * step)
        self.num, self.best = np.zeros(shape), np.zeros(shape)
        self.owner, self.far = np.zeros(shape, bool), np.zeros(shape, bool)
        self.cover, self.seen, self.drawn = (np.zeros(shape, np.int16) for _ in range(3))

    def raster(self, geom) -> np.ndarray:
        """The cells whose centres `geom` covers."""
        g = shapely.clip_by_rect(geom, *self.extent)
        if g.is_empty:
            return np.zeros(self.shape, bool)
        return rasterio.features.rasterize([(g, 1)], out_shape=self.shape, transform=self.transform) > 0

    def _weight(self, frame: TileFrame) -> tuple[np.ndarray, np.ndarray]:
        """The cells inside the frame's window, and each one's distance to the window's interior edges (0
        outside). A north-up window (the common case) by its rows and columns; any other by its polygon."""
        x0, y0, x1, y1 = frame.window.bounds
        if not np.isclose(frame.window.area, (x1 - x0) * (y1 - y0)):
            inside = self.raster(frame.window)
            return inside, np.where(inside, _edge_distance(self.px, self.py, frame.edges), 0.0)
        xs, ys = self.px[0], self.py[:, 0]
        inside = ((ys >= y0) & (ys <= y1))[:, None] & ((xs >= x0) & (xs <= x1))[None, :]
        dist = np.full(self.shape, np.inf)
        for line in shapely.get_parts(frame.edges).tolist():
            (ax, ay), (bx, by) = np.asarray(line.coords)[[0, -1]]
            # the distance to a segment along one axis: across it, and past its ends along it
            across = np.abs(xs - ax)[None, :] if ax == bx else np.abs(ys - ay)[:, None]
            lo, hi = (min(ay, by), max(ay, by)) if ax == bx else (min(ax, bx), max(ax, bx))
            along = ys[:, None] if ax == bx else xs[None, :]
            dist = np.minimum(dist, np.hypot(across, np.clip(lo - along, 0, None) + np.clip(along - hi, 0, None)))
        return inside, np.where(inside, dist, 0.0)

    def add(self, frame: TileFrame, view) -> None:
        if not shapely.intersects(frame.window, shapely.box(*self.extent)):
            return
        inside, weight = self._weight(frame)
        m = self.raster(view)
        if m.any():
            step = self.transform.a
            # signed distance to the view's edge (half a cell past the centres of its edge cells), one transform
            d = ndimage.distance_transform_edt(~(m & ~ndimage.binary_erosion(m, border_value=1)))
            sd = np.where(m, d + 0.5, 0.5 - d) * step
            self.num += weight * sd
            self.far |= inside & (np.abs(sd) > self.reach)
        else:  # it saw none of the object here: farther than the reach from its boundary
            self.far |= inside
        top = weight > self.best
        self.owner[top], self.best[top] = m[top], weight[top]
        self.cover += inside
        self.seen += inside & m
        self.drawn += inside & ~m


def _polygons(mask: np.ndarray, transform: Affine):
    """The cells of `mask` as one (multi)polygon in map coordinates."""
    shapes = [shapely.geometry.shape(g) for g, v in rasterio.features.shapes(
        mask.astype("uint8"), mask=mask, transform=transform) if v]
    # the components of one raster, 4-connected: apart, or touching at a corner (a valid MultiPolygon)
    return shapely.MultiPolygon(shapes) if len(shapes) > 1 else shapes[0] if shapes else shapely.Polygon()


def _edge_distance(px: np.ndarray, py: np.ndarray, edges) -> np.ndarray:
    """Each point's distance to the nearest of `edges` (line segments: a tile's interior edges)."""
    out = np.full(px.shape, np.inf)
    for line in shapely.get_parts(edges).tolist():
        xy = np.asarray(line.coords)
        for (ax, ay), (bx, by) in zip(xy[:-1], xy[1:]):
            dx, dy = bx - ax, by - ay
            t = np.clip(((px - ax) * dx + (py - ay) * dy) / max(dx * dx + dy * dy, 1e-300), 0.0, 1.0)
            out = np.minimum(out, np.hypot(px - ax - t * dx, py - ay - t * dy))
    return out
