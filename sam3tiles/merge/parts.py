"""A merge's parts as columns, their regions, and the merge's thresholds (see `sam3tiles.merge`).

Coordinates are the output CRS's; tolerances are given in mask cells (`MASK_CELL` tile pixels) and turned
into CRS units with each tile's `TileFrame.pixel`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import shapely
from shapely.geometry import MultiPolygon

from ..tiling.frame import TileFrame
from ..tiling.piecekey import tile_of
from ..vectorize.pieces import Pieces

IOU_MIN = 0.5
IOS_MIN = 0.8
#: Candidate pairs compared at a time (bounds the clipped geometries held at once).
PAIR_CHUNK = 20_000
#: Regions of one mask closer than this many mask cells are one part (rule 0).
JOIN_CELLS = 1.5
#: Link tolerance for pairs that fail IoU and IoS (rule 2): masks move by this many cells between tiles.
LINK_CELLS = 1.0
#: Two cut parts overlapping over a region this many mask cells across share a stretch of one object (rule 2).
THICK_CELLS = 4.0
#: A part this many times longer than it is wide (along the longest spread of its outline's points) is
#: elongated: two such views linked by rule 2's third look overlap across it (`links._continued`).
ELONGATED = 2.0
#: A cut part within this many mask cells of another tile's part lies beside it (rule 6).
SLIVER_CELLS = 2.0
#: Ownership compares distances to the tile edge in steps of this many mask cells (rule 4).
AUTHORITY_CELLS = 8
#: A cut part whose own-core area is covered this much by kept parts is a duplicate (rule 5).
COVERED = 0.5
#: The most rule 5 moves a point of an outline, in mask cells (the smoothing, the band mean, the consensus move).
CAP_CELLS = 2.0


@dataclass
class Merged:
    """Merged objects: one row per object."""

    geometry: list
    score: list
    prompt: list
    n_tiles: list



@dataclass
class Cols:
    """Parts as arrays (one row per part)."""

    geoms: np.ndarray
    score: np.ndarray
    prompt: np.ndarray
    keys: np.ndarray
    complete: np.ndarray
    edge: np.ndarray
    order: np.ndarray

    @classmethod
    def of(cls, pieces: Pieces, order) -> "Cols":
        return cls(np.asarray(pieces.geometry, dtype=object), np.asarray(pieces.score, dtype=float),
                   np.asarray(pieces.prompt), np.asarray(pieces.tile_key, dtype=np.int64),
                   np.asarray(pieces.complete, dtype=bool), np.asarray(pieces.edge_dist, dtype=float),
                   np.asarray(order, dtype=np.int64))

    @property
    def tiles(self) -> np.ndarray:
        return tile_of(self.keys)

    def take(self, idx) -> "Cols":
        return Cols(*(getattr(self, f)[idx] for f in self.__dataclass_fields__))

    def pieces(self, idx) -> Pieces:
        idx = np.asarray(idx, dtype=np.int64)
        return Pieces(list(self.geoms[idx]), self.score[idx].tolist(), self.prompt[idx].tolist(),
                      self.keys[idx].tolist(), self.complete[idx].tolist(), self.edge[idx].tolist())


def _polygons(geom) -> list:
    """The polygons of `geom` (nested collections flattened; lines and points dropped)."""
    out = []
    for g in shapely.get_parts(geom):
        if g.geom_type == "Polygon":
            if not g.is_empty:
                out.append(g)
        elif g.geom_type in ("MultiPolygon", "GeometryCollection"):
            out.extend(_polygons(g))
    return out


def regions(geom, gap: float) -> list:
    """The connected regions of `geom`, regions within `gap` of each other joined (MultiPolygons)."""
    polys = _polygons(geom)
    if len(polys) <= 1:
        return polys or [geom]
    arr = np.asarray(polys, dtype=object)
    # each pair whose boxes lie within `gap` tested once, the first polygon prepared (an index of its edges: a
    # smoothed outline beside its fragments; the tree's own test measures every pair both ways, unindexed)
    x0, y0, x1, y1 = shapely.bounds(arr).T
    a, b = shapely.STRtree(arr).query(shapely.box(x0 - gap, y0 - gap, x1 + gap, y1 + gap))
    a, b = a[a < b], b[a < b]
    shapely.prepare(arr[a])
    near = shapely.dwithin(arr[a], arr[b], gap)
    a, b = a[near], b[near]
    out, seen = [], {}
    for i, l in enumerate(_components(len(arr), a, b)):
        seen.setdefault(l, []).append(polys[i])
    for ps in seen.values():
        out.append(ps[0] if len(ps) == 1 else MultiPolygon(ps))
    return out


def edge_dist(geoms: np.ndarray, frame: TileFrame) -> np.ndarray:
    """Distance of each geometry to the frame's interior edges, in tile pixels (inf: no interior edge)."""
    if frame.edges is None:
        return np.full(len(geoms), np.inf)
    return shapely.distance(geoms, frame.edges) / frame.pixel


def polygonal(geom, valid: bool = False):
    """Keep the areal part of a union (clipping can leave slivers of lines or points). `valid`: `geom` is an
    overlay's result (GEOS makes those valid), not checked again (a check costs as much as a small overlay)."""
    if not valid and not geom.is_valid:
        geom = shapely.make_valid(geom)
    if geom.geom_type in ("Polygon", "MultiPolygon"):
        return geom
    polys = [g for g in getattr(geom, "geoms", [geom]) if g.geom_type in ("Polygon", "MultiPolygon")]
    return shapely.union_all(polys) if polys else geom


def union_parts(geoms: np.ndarray):
    """The union of the polygons of `geoms` (valid: overlays' results; their slivers of line and points left
    out, which made the union a collection whose polygons were unioned again), parts clipped to their cores,
    which overlap by a pixel or two. GEOS's buffer by 0 of them read as one multipolygon: one noding of all
    their edges, a third of the CPU of a cascaded union where masks' staircases overlap along core lines (the
    same area, to 1e-13, on 178 merges' stitches and on random overlapping sets). Checked: polygonal, no
    smaller than the largest part and no larger than all of them; the cascaded union where not."""
    polys = shapely.get_parts(shapely.get_parts(geoms))  # (a collection's multipolygon, too)
    polys = polys[shapely.get_type_id(polys) == 3]
    if len(polys) < 2:
        return shapely.union_all(polys)
    try:
        out = shapely.buffer(shapely.multipolygons(polys), 0)
    except shapely.errors.GEOSException:
        return shapely.union_all(polys)
    area = shapely.area(polys)
    kept = area.max() * (1 - 1e-9) <= out.area <= area.sum() * (1 + 1e-9)
    return out if kept and out.geom_type in ("Polygon", "MultiPolygon") else shapely.union_all(polys)


def beyond(geoms: np.ndarray, region) -> list:
    """What of each of `geoms` lies outside `region`, where that has an area (an overlay each). A geometry
    whose bounding box `region` covers has nothing outside it: not overlaid (in rule 5, most cut parts lie
    within the cores of their component's tiles)."""
    out, rest = _beyond(geoms, region)
    return list(rest[shapely.area(rest) > 0])


def _beyond(geoms: np.ndarray, region) -> tuple[np.ndarray, np.ndarray]:
    """(Which of `geoms` may reach outside `region` (one for all, or one each), what of those lies outside)."""
    out = ~shapely.covers(region, shapely.box(*shapely.bounds(geoms).T))
    return out, shapely.difference(geoms[out], region if np.ndim(region) == 0 else region[out])


def said_region(frames, tiles: np.ndarray):
    """The cores of `tiles` (those with a part in a component: where another view of its objects may speak)."""
    return shapely.union_all([frames[t].core for t in np.unique(tiles).tolist()])


def said_area(geoms: np.ndarray, own: np.ndarray, said) -> np.ndarray:
    """What each of `geoms` (cut parts) says of an object that no other view of it does: its area in its own
    tile's core (`own`, one each) and outside `said` (the cores of every tile with a part in its component: one
    for all, or one each), where a tile drew nothing of the object (rule 5 keeps that area: `beyond`)."""
    out = shapely.intersection(geoms, own)
    far, rest = _beyond(geoms, said)
    has = shapely.area(rest) > 0
    k = np.flatnonzero(far)[has]
    out[k] = shapely.union(out[k], rest[has])
    return out


def _components(n: int, a: np.ndarray, b: np.ndarray) -> list[int]:
    """A label a node (the smallest node of its component: components labelled in the order of their first
    node, as scipy's `connected_components` numbers them) of the graph of `n` nodes and edges `a`-`b`. A few
    parts: a union-find here (scipy's sparse graph cost ~0.4 ms a call, a smoothed outline's check two calls);
    many edges: scipy's."""
    if len(a) > 4096:
        from scipy.sparse import coo_matrix
        from scipy.sparse.csgraph import connected_components

        _, lab = connected_components(coo_matrix((np.ones(len(a), np.int8), (a, b)), shape=(n, n)), directed=False)
        return lab.tolist()
    root = list(range(n))

    def find(i: int) -> int:
        while root[i] != i:
            root[i] = root[root[i]]
            i = root[i]
        return i

    for i, j in zip(a.tolist(), b.tolist()):
        ri, rj = find(i), find(j)
        if ri != rj:
            root[max(ri, rj)] = min(ri, rj)
    return [find(i) for i in range(n)]


def same_shape(before, after, gap: float, *, smoothed: bool = False) -> bool:
    """Whether `after` keeps the shape of `before` (a boundary moved): its parts, its regions (parts within
    `gap` are one: rule 0) and its holes. `smoothed` (the smoothing's result): parts of one region joined and
    holes closed are the noise's doing (a point moves `CAP_CELLS` cells at most: a hole it closes, a gap in a
    region it bridges, is the noise's size); a part split, a hole opened or a region joined or split is not.
    A move to the views' consensus moves each tile's view as a whole: a moved view keeps its shape, and one
    that changes is no steady offset. `after` is valid (`smooth.smooth_outline` keeps valid polygons only,
    `consensus.shift_views` gives an overlay's result): not checked again."""
    if after.is_empty:
        return False
    pb, pa = shapely.get_parts(before), shapely.get_parts(after)
    if (len(pa) > len(pb) if smoothed else len(pa) != len(pb)) or any(not isinstance(p, shapely.Polygon) for p in pa):
        return False
    if len(pb) > 1 and len(regions(before, gap)) != len(regions(after, gap)):
        return False
    holes = [len(p.interiors) for p in pb], [len(p.interiors) for p in pa]
    return sum(holes[1]) <= sum(holes[0]) if smoothed else sorted(holes[0]) == sorted(holes[1])


def north_up_bounds(poly) -> tuple | None:
    """The bounds of the polygon `poly` where it is a north-up rectangle (four corners, its box's area), else
    None: a rectangle is clipped to, or tested against, by its bounds alone."""
    x0, y0, x1, y1 = poly.bounds
    if len(poly.exterior.coords) == 5 and abs(poly.area - (x1 - x0) * (y1 - y0)) <= 1e-9 * poly.area:
        return x0, y0, x1, y1
    return None


def ccw(xy: np.ndarray) -> bool:
    """Whether the closed ring `xy` (its last point its first) runs counter-clockwise (its shoelace sum > 0)."""
    x, y = xy[:, 0], xy[:, 1]
    return bool((x[:-1] * y[1:] - x[1:] * y[:-1]).sum() > 0)


def inward_area(before: np.ndarray, after: np.ndarray, hole: bool) -> float:
    """The area between a ring's segments and the same segments moved (each vertex by its own move) on the
    polygon's inner side: per segment, the strip between them across it (the moves along the segment are
    a shift of the outline within itself), split where the moved segment crosses the old one."""
    x, y = before[:, 0], before[:, 1]  # (x and y apart: one pass over each, no n x 2 temporaries)
    sx, sy = x[1:] - x[:-1], y[1:] - y[:-1]
    length = np.hypot(sx, sy)
    mx, my = after[:, 0] - x, after[:, 1] - y
    d0x, d0y, d1x, d1y = mx[:-1], my[:-1], mx[1:], my[1:]
    ok = length > 0
    if not ok.all():
        sx, sy, length, d0x, d0y, d1x, d1y = (v[ok] for v in (sx, sy, length, d0x, d0y, d1x, d1y))
    lx, ly = -sy / length, sx / length
    side = 1.0 if ccw(before) != hole else -1.0  # the polygon lies left of a ccw shell and right of a ccw hole
    u0, u1 = side * (d0x * lx + d0y * ly), side * (d1x * lx + d1y * ly)
    same = u0 * u1 >= 0
    full = np.where(same & (u0 + u1 > 0), length * (u0 + u1) / 2, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        f = np.where(same, 0.0, u0 / (u0 - u1))  # where the moved segment crosses the old one
    part = np.where(~same, length * np.where(u0 > 0, f * u0, (1 - f) * u1) / 2, 0.0)
    return float((full + part).sum())


def spread(g) -> tuple:
    """(The points of `g`'s outline, their centre, the unit direction of their longest spread): an object's
    axis, as a strip or a text line lies along it."""
    xy = shapely.get_coordinates(shapely.boundary(g))
    c = xy.mean(axis=0)
    return xy, c, np.linalg.svd(xy - c, full_matrices=False)[2][0]


def long_side(g) -> np.ndarray:
    """The unit direction of the longer side of `g`'s least rotated rectangle (its axis, however few or
    unevenly spaced its outline's points are)."""
    xy = shapely.get_coordinates(shapely.oriented_envelope(g))
    d = np.diff(xy[:3], axis=0)
    side = d[int(np.argmax(np.hypot(*d.T)))]
    return side / max(float(np.hypot(*side)), 1e-300)
