"""Merging pieces across tiles: each object once and whole.

The rules, in order:

1. *Candidates.* A piece that lies wholly in its tile's exclusive area (covered by no other window) has no
   counterpart anywhere: it is final. Only pieces in overlap bands are compared, and only pairs from
   different tiles (an R-tree query), so the cost is near-linear in the number of pieces.
2. *Links by mask overlap in the shared band.* Two pieces of one prompt from tiles A and B are compared
   inside A's window intersected with B's: there both tiles saw the same pixels, so two views of one
   object agree (IoU >= 0.5), also when one view is cut by its tile edge. Intersection over the smaller
   >= 0.8 links part-whole duplicates. Boxes are never used: touching neighbours do not fuse.
3. *Groups without chains.* Links are accepted from the strongest down (Kruskal); a link that would put
   two pieces of one tile into one object is refused and counted as a rule violation, which stops the
   A-B-C chains that fuse distinct neighbours.
4. *One copy or a stitch.* A group with a complete copy (not touching any interior tile edge) keeps the
   complete copy farthest from its tile's edges (ownership). A group cut everywhere (larger than the
   overlap, up to objects spanning many tiles) is stitched: each piece clipped to its tile's core (grown
   by one pixel so neighbours overlap), then unioned.
5. *Slivers.* A cut piece that no neighbour matched, lying outside its own tile's core and within one
   mask cell of another object, is the edge of an object another tile owns (at SAM 3's 3.5 px mask
   cells, a few pixels poking into a tile rarely match in shape): it is dropped and counted.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Mapping

import numpy as np
import shapely
from shapely.geometry import Polygon

from .grid import Tile
from .vectorize import Pieces

IOU_MIN = 0.5
IOS_MIN = 0.8


@dataclass(frozen=True)
class TileFrame:
    """A tile's window, core and exclusive area in the output CRS (polygons)."""

    window: Polygon
    core: Polygon  # grown by one tile pixel
    exclusive: Polygon  # the part of the window no other tile sees (may be empty)
    pixel: float = 1.0  # one tile pixel in CRS units


def _poly(transform, x0, y0, x1, y1) -> Polygon:
    pts = [transform @ (x, y) for x, y in ((x0, y0), (x1, y0), (x1, y1), (x0, y1))]
    return Polygon(pts)


def tile_frame(tile: Tile, overlap: int) -> TileFrame:
    """Window, core (+1 px) and exclusive area of `tile` in CRS coordinates."""
    t = tile.transform
    vw, vh = tile.valid_wh
    cx0, cy0, cx1, cy1 = tile.core_tile_px
    left, top, right, bottom = tile.interior
    ex = (overlap if left else 0, overlap if top else 0, vw - (overlap if right else 0), vh - (overlap if bottom else 0))
    excl = _poly(t, *ex) if ex[2] > ex[0] and ex[3] > ex[1] else Polygon()
    return TileFrame(window=_poly(t, 0, 0, vw, vh), core=_poly(t, cx0 - 1, cy0 - 1, cx1 + 1, cy1 + 1),
                     exclusive=excl, pixel=abs(t.a * t.e - t.b * t.d) ** 0.5)


@dataclass
class MergeStats:
    pieces: int = 0
    objects: int = 0
    band_pieces: int = 0  # pieces that lie in an overlap band (compared)
    pairs_compared: int = 0
    links: int = 0  # accepted links between pieces
    merged_groups: int = 0  # objects made of 2+ pieces
    stitched: int = 0  # objects unioned from cut pieces
    duplicates_dropped: int = 0  # extra complete copies removed
    largest_group: int = 0
    slivers_dropped: int = 0  # cut pieces outside their tile's core, beside an object another tile owns
    refused_links: int = 0  # rule violation: a link that would fuse two pieces of one tile
    unlinked_cut_pieces: int = 0  # rule violation: a piece cut at a seam that no neighbour saw

    @property
    def rule_violations(self) -> int:
        return self.refused_links + self.unlinked_cut_pieces

    def as_dict(self) -> dict:
        d = asdict(self)
        d["rule_violations"] = self.rule_violations
        return d

    def add(self, other: "MergeStats") -> None:
        for k, v in asdict(other).items():
            if k == "largest_group":
                self.largest_group = max(self.largest_group, v)
            else:
                setattr(self, k, getattr(self, k) + v)


@dataclass
class Merged:
    """Merged objects: one row per object."""

    geometry: list
    score: list
    prompt: list
    n_tiles: list


class _UnionFind:
    def __init__(self, keys: np.ndarray):
        self.parent = list(range(len(keys)))
        self.tiles = [{int(k)} for k in keys]

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def union(self, a: int, b: int) -> str:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return "same"
        if self.tiles[ra] & self.tiles[rb]:
            return "conflict"
        if len(self.tiles[ra]) < len(self.tiles[rb]):
            ra, rb = rb, ra
        self.parent[rb] = ra
        self.tiles[ra] |= self.tiles[rb]
        self.tiles[rb] = set()
        return "joined"


def merge_pieces(pieces: Pieces, frames: Mapping[int, TileFrame], iou_min: float = IOU_MIN,
                 ios_min: float = IOS_MIN) -> tuple[Merged, MergeStats]:
    """Merge `pieces` (from any number of tiles) into objects. `frames` maps tile index -> TileFrame."""
    stats = MergeStats(pieces=len(pieces))
    n = len(pieces)
    out = Merged([], [], [], [])
    if n == 0:
        return out, stats
    geoms = np.asarray(pieces.geometry, dtype=object)
    keys = np.asarray(pieces.tile_key, dtype=np.int64)
    tiles = keys // 1024
    prompts = np.asarray(pieces.prompt)
    complete = np.asarray(pieces.complete, dtype=bool)
    edge = np.asarray(pieces.edge_dist, dtype=float)
    scores = np.asarray(pieces.score, dtype=float)

    # 1. candidates: not wholly inside the tile's exclusive area (tiles with several passes: all pieces)
    multi_pass = {t for t in np.unique(tiles) if len(np.unique(keys[tiles == t])) > 1}
    excl = np.asarray([frames[int(t)].exclusive for t in tiles], dtype=object)
    inside = shapely.within(geoms, excl)
    if multi_pass:
        inside &= ~np.isin(tiles, list(multi_pass))
    cand = np.flatnonzero(~inside)
    stats.band_pieces = len(cand)

    uf = _UnionFind(keys)
    if len(cand) > 1:
        cg = geoms[cand]
        tree = shapely.STRtree(cg)
        a, b = tree.query(cg, predicate="intersects")
        sel = (a < b)
        a, b = cand[a[sel]], cand[b[sel]]
        sel = (keys[a] != keys[b]) & (prompts[a] == prompts[b])
        a, b = a[sel], b[sel]
        stats.pairs_compared = len(a)
        if len(a):
            band_cache: dict[tuple[int, int], object] = {}
            bands = np.empty(len(a), dtype=object)
            for i, (ta, tb) in enumerate(zip(tiles[a].tolist(), tiles[b].tolist())):
                k = (ta, tb) if ta <= tb else (tb, ta)
                band = band_cache.get(k)
                if band is None:
                    band = frames[ta].window.intersection(frames[tb].window) if ta != tb else frames[ta].window
                    band_cache[k] = band
                bands[i] = band
            ga = shapely.intersection(geoms[a], bands)
            gb = shapely.intersection(geoms[b], bands)
            area_a, area_b = shapely.area(ga), shapely.area(gb)
            inter = shapely.area(shapely.intersection(ga, gb))
            union = area_a + area_b - inter
            smaller = np.minimum(area_a, area_b)
            iou = np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)
            ios = np.divide(inter, smaller, out=np.zeros_like(inter), where=smaller > 0)
            ok = (iou >= iou_min) | (ios >= ios_min)
            order = np.lexsort((-ios[ok], -iou[ok]))
            for i, j in zip(a[ok][order].tolist(), b[ok][order].tolist()):
                r = uf.union(i, j)
                if r == "joined":
                    stats.links += 1
                elif r == "conflict":
                    stats.refused_links += 1

    groups: dict[int, list[int]] = {}
    for i in range(n):
        groups.setdefault(uf.find(i), []).append(i)

    slivers = _slivers(groups, geoms, complete, tiles, frames)
    for members in groups.values():
        if len(members) == 1:
            i = members[0]
            if i in slivers:
                stats.slivers_dropped += 1
                continue
            if not complete[i] and not inside[i] and edge[i] < np.inf:
                stats.unlinked_cut_pieces += 1
            out.geometry.append(geoms[i])
            out.score.append(float(scores[i]))
            out.prompt.append(prompts[i].item() if hasattr(prompts[i], "item") else prompts[i])
            out.n_tiles.append(1)
            continue
        m = np.asarray(members)
        stats.merged_groups += 1
        stats.largest_group = max(stats.largest_group, len(m))
        full = m[complete[m]]
        if len(full):
            # ownership: the complete copy farthest from its tile's interior edges
            best = full[np.lexsort((keys[full], -scores[full], -edge[full]))[0]]
            stats.duplicates_dropped += len(m) - 1
            geom = geoms[best]
            score = float(scores[best])
        else:
            cores = np.asarray([frames[int(t)].core for t in tiles[m]], dtype=object)
            parts = shapely.intersection(geoms[m], cores)
            geom = shapely.union_all(parts[~shapely.is_empty(parts)])
            if geom.is_empty:
                geom = shapely.union_all(geoms[m])
            geom = _polygonal(geom)
            areas = shapely.area(parts)
            score = float(np.average(scores[m], weights=areas)) if areas.sum() > 0 else float(scores[m].mean())
            stats.stitched += 1
        out.geometry.append(geom)
        out.score.append(score)
        out.prompt.append(prompts[m[0]].item() if hasattr(prompts[m[0]], "item") else prompts[m[0]])
        out.n_tiles.append(len(np.unique(tiles[m])))
    stats.objects = len(out.geometry)
    return out, stats


def _slivers(groups, geoms, complete, tiles, frames) -> set[int]:
    """Unmatched cut pieces outside their own core that lie against another object (see rule 5)."""
    lone = [m[0] for m in groups.values() if len(m) == 1 and not complete[m[0]]]
    if not lone:
        return set()
    lone_arr = np.asarray(lone)
    cores = np.asarray([frames[int(tiles[i])].core for i in lone_arr], dtype=object)
    owned = shapely.area(shapely.intersection(geoms[lone_arr], cores))
    outside = lone_arr[owned <= 0.05 * shapely.area(geoms[lone_arr])]
    if not len(outside):
        return set()
    tol = np.asarray([4 * frames[int(tiles[i])].pixel for i in outside])
    tree = shapely.STRtree(geoms)
    out = set()
    for i, d in zip(outside.tolist(), tol.tolist()):
        near = tree.query(geoms[i], predicate="dwithin", distance=d)
        if any(tiles[j] != tiles[i] for j in near.tolist()):
            out.add(i)
    return out


def _polygonal(geom):
    """Keep the areal part of a union (clipping can leave slivers of lines or points)."""
    if not geom.is_valid:
        geom = shapely.make_valid(geom)
    if geom.geom_type in ("Polygon", "MultiPolygon"):
        return geom
    polys = [g for g in getattr(geom, "geoms", [geom]) if g.geom_type in ("Polygon", "MultiPolygon")]
    return shapely.union_all(polys) if polys else geom
