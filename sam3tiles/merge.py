"""Merging pieces across tiles: each object once and whole, whatever the tiles' answers looked like.

A real SAM 3 does not return the same clean instance for an object in every tile (../shared/model-
behaviour.md): masks hold several separate regions, a prompt can come back as one semantic mask, an
instance can be split in two or fused with a neighbour, masks differ by a cell between tiles, and a cut
mask can stop short of the tile edge. The rules, in order:

0. *Parts.* Every piece is split into its connected regions; regions closer than `JOIN_CELLS` (1.5) mask
   cells stay one part, kept as a MultiPolygon (an instance behind a thin occluder, or a mask that dipped
   under 0.5 for a cell: at the mask's resolution nothing separates them). Regions farther apart are
   separate parts (a concept answer such as "water", one mask per prompt, two instances in one mask), each
   linked, owned and stitched on its own: no region is dropped because another region of its mask linked
   elsewhere. A part's seam flags are measured on the part.
1. *Candidates.* A part that lies wholly in its tile's exclusive area (covered by no other window) has no
   counterpart anywhere: it is final. Only parts in overlap bands are compared, and only pairs from
   different tiles (an R-tree query), so the cost is near-linear in the number of pieces.
2. *Links by mask overlap in the shared band.* Two parts of one prompt from tiles A and B are compared
   inside A's window intersected with B's: there both tiles saw the same pixels, so two views of one
   object agree (IoU >= 0.5), also when one view is cut by its tile edge. Intersection over the smaller
   >= 0.8 links part-whole views. Masks move by a mask cell between tiles (a grown copy beside a shrunk
   one, a half beside a shrunk whole: for a 3 x 6 cell vehicle IoU and IoS fall far below those bounds), so
   a pair that fails both is compared once more with `LINK_CELLS` (1) cell of tolerance: the smaller
   clipped part lying >= 0.8 within one cell of the other. A neighbour one cell away shares only a strip
   of one cell with that tolerance, so touching objects wider than about 2 cells do not link. Boxes are
   never used: touching neighbours do not fuse.
3. *Components.* The connected components of the links are settled one at a time; no link is refused.
   Tiles that disagree (whole in one, two halves in another; two neighbours fused in one) are settled by
   rule 4 and counted as `disagreements`, not as rule violations.
4. *Ownership.* The complete parts of a component (cut at no interior tile edge, `EDGE_MARGIN`) are taken
   in order of authority: owned by their own tile (the centre of the object, their box grown by the boxes
   of the parts they link to, lies in its core) first, then farther
   from their tile's edges, in steps of `AUTHORITY_CELLS` mask cells (one cell of difference does not flip
   the choice), then tile order; scores never decide (they differ between tiles by chance). A complete
   part is kept unless it is linked to a kept part of another tile (it is then another view of that
   object: a duplicate). So the tile owning an object decides what it is (one whole, two halves, two
   neighbours fused), and a copy another tile sees whole wins where the owner saw it cut or not at all;
   but a complete part its tile does not own that lies inside an object stitched from the owners' cut
   parts (a blob inside a field that only a neighbour reported) is another view of that object.
5. *Stitching.* A cut part is a duplicate when what it says inside its own tile's core is at least half
   covered by the kept complete parts. The other cut parts are clipped to their tiles' cores (grown by one
   pixel so neighbours overlap; in the cores of tiles that have no part in the component, a miss, they keep
   their area) and unioned; the union's regions (rule 0's gap) are objects. Objects larger
   than the overlap, up to "stuff" spanning many tiles, come out as their connected regions, each stitched
   across the seams it crosses.
6. *Slivers.* A cut part that no neighbour matched (or cut parts linked only to each other), lying outside
   its own tile's core and within one mask cell of another object, is the edge of an object another tile
   owns (a few pixels poking into a tile rarely match in shape): it is dropped and counted. "Beside" is
   within `SLIVER_CELLS` (2) mask cells: each of the two copies can move by a cell.

*Coverage.* For every prompt, the output covers what each tile said is object inside its own core, apart
from the drops of rules 4-6. `MergeStats.coverage` holds per prompt the area the tiles own (each part
inside its own tile's core, the cores not grown: they partition the image), the area out, and the owned area each rule dropped that no output covers
(slivers: their whole owned area), in CRS units squared. Area no rule accounts for never disappears.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Iterator, Mapping, MutableMapping

import numpy as np
import shapely
from shapely.geometry import MultiLineString, MultiPolygon, Polygon

from .grid import Tile
from .vectorize import EDGE_MARGIN, MASK_CELL, Pieces

IOU_MIN = 0.5
IOS_MIN = 0.8
#: Candidate pairs compared at a time (bounds the clipped geometries held at once).
PAIR_CHUNK = 20_000
#: Regions of one mask closer than this many mask cells are one part (rule 0).
JOIN_CELLS = 1.5
#: Link tolerance for pairs that fail IoU and IoS (rule 2): masks move by this many cells between tiles.
LINK_CELLS = 1.0
#: A cut part within this many mask cells of another tile's part lies beside it (rule 6).
SLIVER_CELLS = 2.0
#: Ownership compares distances to the tile edge in steps of this many mask cells (rule 4).
AUTHORITY_CELLS = 8
#: A cut part whose own-core area is covered this much by kept parts is a duplicate (rule 5).
COVERED = 0.5
#: Order keys of parts: the piece's order key * PARTS + the part's index in its piece.
PARTS = 1 << 16


@dataclass(frozen=True)
class TileFrame:
    """A tile's window, core and exclusive area in the output CRS (polygons), and its interior edges.

    Nothing assumes one uniform grid: tiles of different sizes and scales (sub-tiles of a finer grid whose
    cores partition their parent's core) merge alike, each with its own frame and `pixel`.
    """

    window: Polygon
    core: Polygon  # grown by one tile pixel
    exclusive: Polygon  # the part of the window no other tile sees (may be empty)
    pixel: float = 1.0  # one tile pixel in CRS units
    edges: object = None  # the window's edges that border another tile (lines), None when none do


def _poly(transform, x0, y0, x1, y1) -> Polygon:
    pts = [transform @ (x, y) for x, y in ((x0, y0), (x1, y0), (x1, y1), (x0, y1))]
    return Polygon(pts)


def tile_frame(tile: Tile, overlap: int) -> TileFrame:
    """Window, core (+1 px), exclusive area and interior edges of `tile` in CRS coordinates."""
    t = tile.transform
    vw, vh = tile.valid_wh
    cx0, cy0, cx1, cy1 = tile.core_tile_px
    left, top, right, bottom = tile.interior
    ex = (overlap if left else 0, overlap if top else 0, vw - (overlap if right else 0), vh - (overlap if bottom else 0))
    excl = _poly(t, *ex) if ex[2] > ex[0] and ex[3] > ex[1] else Polygon()
    segs = [s for s, on in (([(0, 0), (0, vh)], left), ([(0, 0), (vw, 0)], top), ([(vw, 0), (vw, vh)], right),
                            ([(0, vh), (vw, vh)], bottom)) if on]
    edges = MultiLineString([[t @ p for p in s] for s in segs]) if segs else None
    return TileFrame(window=_poly(t, 0, 0, vw, vh), core=_poly(t, cx0 - 1, cy0 - 1, cx1 + 1, cy1 + 1),
                     exclusive=excl, pixel=abs(t.a * t.e - t.b * t.d) ** 0.5, edges=edges)


class TileFrames(MutableMapping):
    """Tile index -> `TileFrame` of a grid's tiles, made when asked and not kept (four polygons, ~2 KB a
    tile: 200 MB for a 10^5-tile grid held for nothing); frames set here (a refined tile's shared frame,
    its sub-tiles') are kept."""

    def __init__(self, tiles: Mapping[int, Tile], overlap: int):
        self.tiles, self.overlap, self._set = tiles, overlap, {}

    def __getitem__(self, i: int) -> TileFrame:
        f = self._set.get(i)
        return f if f is not None else tile_frame(self.tiles[i], self.overlap)

    def __setitem__(self, i: int, frame: TileFrame) -> None:
        self._set[int(i)] = frame

    def __delitem__(self, i: int) -> None:
        raise TypeError("a tile's frame cannot be removed")

    def __iter__(self) -> Iterator[int]:
        yield from self.tiles
        yield from (i for i in self._set if i not in self.tiles)

    def __len__(self) -> int:
        return len(self.tiles) + sum(i not in self.tiles for i in self._set)


COVERAGE_KEYS = ("owned", "out", "duplicates", "slivers")


@dataclass
class MergeStats:
    pieces: int = 0
    objects: int = 0
    band_pieces: int = 0  # parts that lie in an overlap band (compared)
    pairs_compared: int = 0
    links: int = 0  # links between parts
    merged_groups: int = 0  # components of 2+ parts
    stitched: int = 0  # objects unioned from cut parts
    duplicates_dropped: int = 0  # parts dropped as another view of a kept object
    largest_group: int = 0
    slivers_dropped: int = 0  # cut parts outside their tile's core, beside an object another tile owns
    parts_split: int = 0  # pieces whose separate regions became separate parts (rule 0)
    disagreements: int = 0  # components where one tile gave 2+ parts (split, fused): settled by ownership
    unlinked_cut_pieces: int = 0  # rule violation: a part cut at a seam that no neighbour saw
    #: per prompt: {"owned", "out", "duplicates", "slivers"} areas in CRS units squared (see the module)
    coverage: dict = field(default_factory=dict, compare=False)

    @property
    def rule_violations(self) -> int:
        return self.unlinked_cut_pieces

    def as_dict(self) -> dict:
        d = asdict(self)
        d["rule_violations"] = self.rule_violations
        d["coverage"] = {str(k): {n: round(float(v), 6) for n, v in c.items()} for k, c in self.coverage.items()}
        return d

    def add(self, other: "MergeStats") -> None:
        for k, v in asdict(other).items():
            if k == "largest_group":
                self.largest_group = max(self.largest_group, v)
            elif k == "coverage":
                for p, c in other.coverage.items():
                    mine = self.coverage.setdefault(p, dict.fromkeys(COVERAGE_KEYS, 0.0))
                    for n in COVERAGE_KEYS:
                        mine[n] += c.get(n, 0.0)
            else:
                setattr(self, k, getattr(self, k) + v)

    def count(self, prompt, name: str, area: float) -> None:
        """Add `area` to the coverage figure `name` of `prompt`."""
        c = self.coverage.setdefault(prompt, dict.fromkeys(COVERAGE_KEYS, 0.0))
        c[name] += float(area)


@dataclass
class Merged:
    """Merged objects: one row per object."""

    geometry: list
    score: list
    prompt: list
    n_tiles: list


def merge_pieces(pieces: Pieces, frames: Mapping[int, TileFrame], iou_min: float = IOU_MIN,
                 ios_min: float = IOS_MIN) -> tuple[Merged, MergeStats]:
    """Merge `pieces` (from any number of tiles) into objects. `frames` maps tile index -> TileFrame.

    The result depends only on the pieces and their order (tile order, as the pipeline concatenates
    them): ties are broken by that order, never by a spatial index's.
    """
    part = _merge_part(pieces, frames, iou_min, ios_min)
    return part.merged, part.stats


@dataclass
class _Part:
    """One pass of the merge over some pieces: the objects it decided, and what it left to a later pass."""

    merged: Merged
    first: np.ndarray  # per object: order key of its first part (objects come out in this order)
    stats: MergeStats
    deferred: np.ndarray  # indices (into `cols`) of parts whose objects a later pass decides
    inside: np.ndarray  # per part: wholly in its tile's exclusive area (never compared)
    near: np.ndarray  # per part: another tile's part lies within the sliver tolerance (in this pass)
    cols: "_Cols | None" = None  # the parts this pass saw


@dataclass
class _Cols:
    """Parts as arrays (one row per part)."""

    geoms: np.ndarray
    score: np.ndarray
    prompt: np.ndarray
    keys: np.ndarray
    complete: np.ndarray
    edge: np.ndarray
    order: np.ndarray

    @classmethod
    def of(cls, pieces: Pieces, order) -> "_Cols":
        return cls(np.asarray(pieces.geometry, dtype=object), np.asarray(pieces.score, dtype=float),
                   np.asarray(pieces.prompt), np.asarray(pieces.tile_key, dtype=np.int64),
                   np.asarray(pieces.complete, dtype=bool), np.asarray(pieces.edge_dist, dtype=float),
                   np.asarray(order, dtype=np.int64))

    @property
    def tiles(self) -> np.ndarray:
        return self.keys // 1024

    def take(self, idx) -> "_Cols":
        return _Cols(*(getattr(self, f)[idx] for f in self.__dataclass_fields__))

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


def _regions(geom, gap: float) -> list:
    """The connected regions of `geom`, regions within `gap` of each other joined (MultiPolygons)."""
    polys = _polygons(geom)
    if len(polys) <= 1:
        return polys or [geom]
    arr = np.asarray(polys, dtype=object)
    a, b = shapely.STRtree(arr).query(arr, predicate="dwithin", distance=gap)
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    _, lab = connected_components(coo_matrix((np.ones(len(a), np.int8), (a, b)), shape=(len(arr),) * 2),
                                  directed=False)
    out, seen = [], {}
    for i, l in enumerate(lab.tolist()):
        seen.setdefault(l, []).append(polys[i])
    for ps in seen.values():
        out.append(ps[0] if len(ps) == 1 else MultiPolygon(ps))
    return out


def _edge_dist(geoms: np.ndarray, frame: TileFrame) -> np.ndarray:
    """Distance of each geometry to the frame's interior edges, in tile pixels (inf: no interior edge)."""
    if frame.edges is None:
        return np.full(len(geoms), np.inf)
    return shapely.distance(geoms, frame.edges) / frame.pixel


def _explode(c: _Cols, frames: Mapping[int, TileFrame], stats: MergeStats) -> _Cols:
    """Rule 0: one row per part; parts of a cut piece get their own seam flags."""
    c.order = c.order * PARTS
    odd = np.flatnonzero(~np.isin(shapely.get_type_id(c.geoms), (3, 6)))  # not (Multi)Polygon: areal part only
    for i in odd.tolist():
        c.geoms[i] = _polygonal(c.geoms[i])
    multi = np.flatnonzero(shapely.get_num_geometries(c.geoms) > 1)
    units = {}
    for i in multi.tolist():
        frame = frames[int(c.keys[i] // 1024)]
        u = _regions(c.geoms[i], JOIN_CELLS * MASK_CELL * frame.pixel)
        if len(u) > 1:
            units[i] = u
    if not units:
        return c
    stats.parts_split += len(units)
    k = np.ones(len(c.geoms), dtype=np.int64)
    for i, u in units.items():
        k[i] = len(u)
    start = np.cumsum(k) - k
    rep = np.repeat(np.arange(len(k)), k)
    out = c.take(rep)
    out.order = out.order + (np.arange(len(rep)) - start[rep])
    for i, u in units.items():
        sl = slice(int(start[i]), int(start[i] + k[i]))
        g = np.empty(len(u), dtype=object)
        g[:] = u
        out.geoms[sl] = g
        if not c.complete[i]:
            e = _edge_dist(g, frames[int(c.keys[i] // 1024)])
            out.edge[sl] = e
            out.complete[sl] = e >= EDGE_MARGIN
    return out


def _merge_part(pieces: Pieces, frames: Mapping[int, TileFrame], iou_min: float, ios_min: float, *,
                order=None, foreign=(), reach: float = 0.0, inside=None, near=None, block=None) -> _Part:
    """The merge over `pieces` (given in ascending `order`, their position in the whole job).

    First pass (`inside` None): splits the pieces into parts (rule 0). Block pass (`foreign`: windows of
    tiles outside the block): parts within `reach` of a foreign window can meet other blocks' parts, so
    every component they belong to is left undecided (`deferred`). Final pass (`inside`, `near` from the
    block passes, `block` per part): decides the deferred parts; pairs within one block were counted there.
    """
    stats = MergeStats()
    n = len(pieces)
    if n == 0:
        e = np.zeros(0, dtype=np.int64)
        return _Part(Merged([], [], [], []), e, stats, e, np.zeros(0, bool), np.zeros(0, bool))
    c = _Cols.of(pieces, np.arange(n, dtype=np.int64) if order is None else order)
    if inside is None:
        stats.pieces = n
        c = _explode(c, frames, stats)
        inside = _inside(c, frames)
        near = np.zeros(len(c.geoms), dtype=bool)
        stats.band_pieces = int((~inside).sum())
    else:
        inside, near = np.asarray(inside, dtype=bool), np.asarray(near, dtype=bool)
    la, lb = _links(c, np.flatnonzero(~inside), frames, iou_min, ios_min, block, stats)
    comp = _components(len(c.geoms), la, lb)
    deferred = np.zeros(len(c.geoms), dtype=bool)
    if len(foreign):
        # a block pass: parts within reach of another block's windows, and everything linked to them
        hit = np.unique(shapely.STRtree(np.asarray(foreign, dtype=object)).query(
            c.geoms, predicate="dwithin", distance=reach)[0])
        if len(hit):
            deferred = np.isin(comp, np.unique(comp[hit]))
    live = ~deferred[la]
    stats.links = int(live.sum())
    out, first = _Resolver(c, frames, la[live], lb[live], inside, near, stats).run(comp, deferred)
    stats.objects = len(out.geometry)
    left = np.flatnonzero(deferred)
    if len(left):
        # what the final pass cannot see: another tile's part of this block within the sliver tolerance
        near = near.copy()
        lone = left[~c.complete[left]]
        near[lone] |= _near_other_tile(lone, c.geoms, c.tiles, frames)
    return _Part(out, first, stats, left, inside, near, c)


def _inside(c: _Cols, frames: Mapping[int, TileFrame]) -> np.ndarray:
    """Rule 1: parts wholly in their tile's exclusive area (tiles with several passes: none)."""
    tiles = c.tiles
    ukeys = np.unique(c.keys)
    ut = ukeys // 1024
    multi_pass = np.unique(ut[1:][ut[1:] == ut[:-1]])
    excl = np.asarray([frames[int(t)].exclusive for t in tiles], dtype=object)
    inside = shapely.within(c.geoms, excl)
    if len(multi_pass):
        inside &= ~np.isin(tiles, multi_pass)
    return inside


def _links(c: _Cols, cand: np.ndarray, frames, iou_min, ios_min, block, stats) -> tuple[np.ndarray, np.ndarray]:
    """Rule 2: pairs of candidate parts (one prompt, different tiles) whose masks agree in the shared band."""
    e = np.zeros(0, dtype=np.int64)
    if len(cand) < 2:
        return e, e
    tiles = c.tiles
    cg = c.geoms[cand]
    a, b = shapely.STRtree(cg).query(cg, predicate="intersects")
    sel = a < b
    a, b = cand[a[sel]], cand[b[sel]]
    sel = (c.keys[a] != c.keys[b]) & (c.prompt[a] == c.prompt[b])
    a, b = a[sel], b[sel]
    stats.pairs_compared = int((block[a] != block[b]).sum()) if block is not None else len(a)
    if not len(a):
        return e, e
    band_cache: dict[tuple[int, int], object] = {}
    bands = np.empty(len(a), dtype=object)
    for i, (ta, tb) in enumerate(zip(tiles[a].tolist(), tiles[b].tolist())):
        k = (ta, tb) if ta <= tb else (tb, ta)
        band = band_cache.get(k)
        if band is None:
            band = frames[ta].window.intersection(frames[tb].window) if ta != tb else frames[ta].window
            band_cache[k] = band
        bands[i] = band
    area_a, area_b, inter = (np.empty(len(a)) for _ in range(3))
    for lo in range(0, len(a), PAIR_CHUNK):  # the clipped copies of one chunk at a time
        sl = slice(lo, lo + PAIR_CHUNK)
        ga = shapely.intersection(c.geoms[a[sl]], bands[sl])
        gb = shapely.intersection(c.geoms[b[sl]], bands[sl])
        area_a[sl], area_b[sl] = shapely.area(ga), shapely.area(gb)
        inter[sl] = shapely.area(shapely.intersection(ga, gb))
        del ga, gb
    union = area_a + area_b - inter
    smaller = np.minimum(area_a, area_b)
    iou = np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)
    ios = np.divide(inter, smaller, out=np.zeros_like(inter), where=smaller > 0)
    ok = (iou >= iou_min) | (ios >= ios_min)
    retry = np.flatnonzero(~ok & (inter > 0))
    if len(retry):
        ok[retry] = _tolerant(c, a[retry], b[retry], bands[retry], area_a[retry], area_b[retry], frames, ios_min)
    return a[ok], b[ok]


def _tolerant(c: _Cols, a, b, bands, area_a, area_b, frames, ios_min) -> np.ndarray:
    """Rule 2's second look: the smaller of each pair (clipped to the band) lies >= `ios_min` within
    `LINK_CELLS` mask cells of the larger (masks that moved by a cell between tiles)."""
    small_a = area_a <= area_b
    s, l = np.where(small_a, a, b), np.where(small_a, b, a)
    ut, inv = np.unique(np.r_[c.tiles[a], c.tiles[b]], return_inverse=True)
    pix = np.asarray([frames[int(t)].pixel for t in ut.tolist()])[inv.ravel()]  # one frame per tile (lazy frames)
    tol = LINK_CELLS * MASK_CELL * np.maximum(pix[: len(a)], pix[len(a):])
    gs = shapely.intersection(c.geoms[s], bands)
    gl = shapely.buffer(shapely.intersection(c.geoms[l], bands), tol, quad_segs=2)
    area_s = np.minimum(area_a, area_b)
    inter = shapely.area(shapely.intersection(gs, gl))
    return inter >= ios_min * area_s


def _components(n: int, la: np.ndarray, lb: np.ndarray) -> np.ndarray:
    """Rule 3: the connected component of every part (a label per part)."""
    if not len(la):
        return np.arange(n)
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    _, comp = connected_components(coo_matrix((np.ones(len(la), np.int8), (la, lb)), shape=(n, n)),
                                   directed=False)
    return comp


class _Resolver:
    """Rules 4-6 over the decided components of one pass, with the coverage accounting."""

    def __init__(self, c: _Cols, frames, la, lb, inside, near, stats: MergeStats):
        from scipy.sparse import coo_matrix

        self.c, self.frames, self.inside, self.near, self.stats = c, frames, inside, near, stats
        n = len(c.geoms)
        self.tiles = c.tiles
        adj = coo_matrix((np.ones(2 * len(la), np.int8), (np.r_[la, lb], np.r_[lb, la])), shape=(n, n)).tocsr()
        self.ptr, self.nbr = adj.indptr, adj.indices
        cand = np.flatnonzero(~inside)
        self.cores = np.empty(n, dtype=object)
        self.cores[cand] = [frames[int(t)].core for t in self.tiles[cand]]
        # the cores exactly (not grown): they partition the image, so what tiles own is never counted twice
        exact = {t: frames[t].core.buffer(-frames[t].pixel, join_style="mitre") for t in
                 np.unique(self.tiles[cand]).tolist()}
        self.exact = np.empty(n, dtype=object)
        self.exact[cand] = [exact[t] for t in self.tiles[cand].tolist()]
        self.owned_area = shapely.area(c.geoms)
        if len(cand):  # the part inside its own core: most parts lie wholly inside or outside it
            cg, cc = c.geoms[cand], self.exact[cand]
            oa = self.owned_area[cand]
            inside_core = shapely.within(cg, cc)
            cross = ~inside_core
            cross[cross] = shapely.intersects(cg[cross], cc[cross])
            oa[~inside_core & ~cross] = 0.0
            oa[cross] = shapely.area(shapely.intersection(cg[cross], cc[cross]))
            self.owned_area[cand] = oa
        self.owned = np.ones(n, dtype=bool)
        if len(cand):
            # owned: the centre of the object (the part's box grown by the boxes of the parts it links to:
            # the other tiles' views of it) lies in the part's own tile's core. So a tile that splits an
            # object owns neither half unless it owns the object, and one owner decides for all its parts.
            b = shapely.bounds(c.geoms)
            ext = b.copy()
            for k, fn in ((0, np.minimum), (1, np.minimum), (2, np.maximum), (3, np.maximum)):
                fn.at(ext[:, k], la, b[lb, k])
                fn.at(ext[:, k], lb, b[la, k])
            e = ext[cand]
            self.owned[cand] = shapely.contains_xy(self.cores[cand], (e[:, 0] + e[:, 2]) / 2, (e[:, 1] + e[:, 3]) / 2)
        pixel = np.asarray([frames[int(t)].pixel for t in np.unique(self.tiles)])
        self.edge_q = np.floor(c.edge / (AUTHORITY_CELLS * MASK_CELL))
        self.gap = JOIN_CELLS * MASK_CELL * (pixel.max() if len(pixel) else 1.0)
        self.dropped: list[tuple[int, str, float]] = []  # (part, rule, owned area no output covers)
        self._tree = None

    def run(self, comp: np.ndarray, deferred: np.ndarray) -> tuple[Merged, np.ndarray]:
        """Objects of every component not deferred, in the order of their first part."""
        c, st = self.c, self.stats
        live = np.flatnonzero(~deferred)
        idx = live[np.argsort(comp[live], kind="stable")]
        cuts = np.flatnonzero(np.diff(comp[idx])) + 1
        starts, ends = np.r_[0, cuts], np.r_[cuts, len(idx)]
        single = (ends - starts) == 1
        geoms, first, score, prompt, ntiles = self._singles(idx[starts[single]])
        # the common case at scale, vectorized: two complete views of one object from two tiles
        s2 = starts[~single & ((ends - starts) == 2)]
        a, b = idx[s2], idx[s2 + 1]
        fast = c.complete[a] & c.complete[b] & (self.tiles[a] != self.tiles[b])
        for col, got in zip((geoms, first, score, prompt, ntiles), self._pairs(a[fast], b[fast])):
            col.extend(got)
        # ... and a complete view beside a cut view that its own core area mostly lies under
        one = c.complete[a] ^ c.complete[b]
        full, cut = np.where(c.complete[a], a, b)[one], np.where(c.complete[a], b, a)[one]
        covered = np.zeros(len(a), dtype=bool)
        covered[np.flatnonzero(one)] = done = self._covered_pairs(full, cut)
        for col, got in zip((geoms, first, score, prompt, ntiles), self._kept(full[done], cut[done])):
            col.extend(got)
        general = np.ones(len(starts), dtype=bool)
        general[single] = False
        general[np.flatnonzero(~single & ((ends - starts) == 2))[fast | covered]] = False
        for s, e in zip(starts[general].tolist(), ends[general].tolist()):
            for g, f, sc, nt in self._component(idx[s:e]):
                geoms.append(g)
                first.append(f)
                score.append(sc)
                prompt.append(c.prompt[idx[s]])
                ntiles.append(nt)
        first = np.asarray(first, dtype=np.int64)
        rank = np.argsort(first, kind="stable")
        out = Merged([geoms[i] for i in rank], [float(score[i]) for i in rank],
                     [_item(prompt[i]) for i in rank], [int(ntiles[i]) for i in rank])
        _count(st, "owned", c.prompt[live], self.owned_area[live])
        _count(st, "out", np.asarray(out.prompt), shapely.area(np.asarray(out.geometry, dtype=object))
               if out.geometry else np.zeros(0))
        for rule in ("duplicates", "slivers"):
            d = [(i, a) for i, r, a in self.dropped if r == rule]
            if d:
                _count(st, rule, c.prompt[[i for i, _ in d]], np.asarray([a for _, a in d]))
        return out, first[rank]

    def _singles(self, lone: np.ndarray):
        """Components of one part: kept as they are, unless a sliver (rule 6)."""
        c, st = self.c, self.stats
        cut = lone[~c.complete[lone]]
        slivers = _slivers(cut, c.geoms, self.tiles, self.frames, self.near, self.owned_area)
        if slivers:
            drop = np.isin(lone, np.fromiter(slivers, dtype=np.int64, count=len(slivers)))
            for i in lone[drop].tolist():
                self.dropped.append((i, "slivers", float(self.owned_area[i])))
            st.slivers_dropped += int(drop.sum())
            lone = lone[~drop]
        st.unlinked_cut_pieces += int((~c.complete[lone] & ~self.inside[lone] & (c.edge[lone] < np.inf)).sum())
        return (list(c.geoms[lone]), c.order[lone].tolist(), c.score[lone].tolist(), list(c.prompt[lone]),
                [1] * len(lone))

    def _pairs(self, a: np.ndarray, b: np.ndarray):
        """Rule 4 for components of two complete parts of two tiles: the one of more authority is kept."""
        c = self.c
        oa, ob = ~self.owned[a], ~self.owned[b]
        ea, eb = self.edge_q[a], self.edge_q[b]
        a_wins = (oa < ob) | ((oa == ob) & ((ea > eb) | ((ea == eb) & (c.order[a] < c.order[b]))))
        win, lose = np.where(a_wins, a, b), np.where(a_wins, b, a)
        acc = lose[self.owned_area[lose] > 0]
        if len(acc):
            acc_win = win[self.owned_area[lose] > 0]
            own = shapely.difference(shapely.intersection(c.geoms[acc], self.exact[acc]), c.geoms[acc_win])
            self.dropped.extend((i, "duplicates", v) for i, v in zip(acc.tolist(), shapely.area(own).tolist()))
        return self._kept(win, lose)

    def _covered_pairs(self, full: np.ndarray, cut: np.ndarray) -> np.ndarray:
        """Whether each cut part's own-core area lies mostly under its complete partner (rule 5), for
        pairs of different tiles; the uncovered owned area of those is counted."""
        ok = self.tiles[full] != self.tiles[cut]
        clip = shapely.intersection(self.c.geoms[cut[ok]], self.exact[cut[ok]])
        area = shapely.area(clip)
        cov = shapely.area(shapely.intersection(clip, self.c.geoms[full[ok]]))
        done = np.zeros(len(full), dtype=bool)
        done[np.flatnonzero(ok)] = got = cov >= COVERED * area
        self.dropped.extend((i, "duplicates", v) for i, v in zip(cut[ok][got].tolist(),
                                                                 (area - cov)[got].clip(0).tolist()))
        return done

    def _kept(self, win: np.ndarray, lose: np.ndarray):
        """Objects of two-part components whose `win` part is kept and `lose` part dropped as a duplicate."""
        c, st = self.c, self.stats
        st.merged_groups += len(win)
        st.largest_group = max(st.largest_group, 2 if len(win) else 0)
        st.duplicates_dropped += len(win)
        return (list(c.geoms[win]), c.order[win].tolist(), c.score[win].tolist(), list(c.prompt[win]),
                [2] * len(win))

    def _component(self, m: np.ndarray) -> list:
        """Rules 4 and 5 for one component of 2+ parts: [(geometry, first, score, n_tiles)]."""
        c, st, tiles = self.c, self.stats, self.tiles
        st.merged_groups += 1
        st.largest_group = max(st.largest_group, len(m))
        if len(set(c.keys[m].tolist())) < len(m):
            st.disagreements += 1
        ntiles = len(set(tiles[m].tolist()))
        full = m[c.complete[m]]
        kept: list[int] = []
        drops: list[tuple[int, str]] = []
        if len(full):
            keptset: set[int] = set()
            for i in full[np.lexsort((c.order[full], -self.edge_q[full], ~self.owned[full]))].tolist():
                ti = tiles[i]
                if any(j in keptset and tiles[j] != ti for j in self.nbr[self.ptr[i]:self.ptr[i + 1]].tolist()):
                    drops.append((i, "duplicates"))
                else:
                    kept.append(i)
                    keptset.add(i)
        outs = [(c.geoms[i], int(c.order[i]), float(c.score[i]), ntiles) for i in kept]
        stitch = m[~c.complete[m]]
        if kept and len(stitch):
            clipped = shapely.intersection(c.geoms[stitch], self.exact[stitch])
            ku = c.geoms[kept[0]] if len(kept) == 1 else shapely.union_all(c.geoms[kept])
            covered = shapely.area(shapely.intersection(clipped, ku)) >= COVERED * shapely.area(clipped)
            drops += [(i, "duplicates") for i in stitch[covered].tolist()]
            stitch = stitch[~covered]
        if len(stitch):
            got = self._stitch(stitch, np.unique(tiles[m]))
            if got is None:
                drops += [(i, "slivers") for i in stitch.tolist()]
            else:
                nested = self._nested(kept, got)
                drops += [(kept[k], "duplicates") for k in nested]
                outs = [o for k, o in enumerate(outs) if k not in nested] + got
        st.duplicates_dropped += sum(r == "duplicates" for _, r in drops)
        st.slivers_dropped += sum(r == "slivers" for _, r in drops)
        self._account(drops, [g for g, *_ in outs])
        return outs

    def _nested(self, kept: list, stitched: list) -> set:
        """Positions in `kept` of complete parts whose box centre lies outside their tile's core that lie
        (>= `IOS_MIN`) inside one stitched object: the tiles owning that area said it is part of the larger object, so the part
        is another view of it (rule 4: the owner decides)."""
        if not kept or not stitched:
            return set()
        regions = np.asarray([g for g, *_ in stitched], dtype=object)
        out = set()
        for k, i in enumerate(kept):
            g = self.c.geoms[i]
            x0, y0, x1, y1 = g.bounds
            # its own centre, not the one grown by its links: those are the large object's cut parts
            if shapely.contains_xy(self.cores[i], (x0 + x1) / 2, (y0 + y1) / 2):
                continue
            inter = shapely.area(shapely.intersection(regions, g))
            if inter.max() >= IOS_MIN * shapely.area(g):
                out.add(k)
        return out

    def _stitch(self, s: np.ndarray, comp_tiles: np.ndarray):
        """Rule 5: cut parts clipped to their cores, unioned, split into regions; None for slivers.

        Where a tile said nothing about the object (a miss, a score under the threshold at its edge: it has
        no part in the component), the parts reaching into its core keep their area there."""
        c = self.c
        clipped = shapely.intersection(c.geoms[s], self.cores[s])
        areas = shapely.area(clipped)
        geom = shapely.union_all(clipped[areas > 0]) if (areas > 0).any() else Polygon()
        if geom.area <= 0.05 * shapely.area(c.geoms[s]).max() and self._beside_another(s):
            return None  # rule 6 for linked slivers: all outside their own cores, next to another object
        if geom.is_empty:
            geom = shapely.union_all(c.geoms[s])
        else:
            said = shapely.union_all([self.frames[int(t)].core for t in comp_tiles.tolist()])
            unclaimed = shapely.difference(c.geoms[s], said)
            unclaimed = unclaimed[shapely.area(unclaimed) > 0]
            if len(unclaimed):
                geom = shapely.union_all([geom, *unclaimed])
        outs = []
        for r in _regions(_polygonal(geom), self.gap):
            hit = shapely.intersects(clipped, r) & (areas > 0)
            if not hit.any():
                hit = np.ones(len(s), dtype=bool)
            w = areas[hit]
            sc = float(np.average(c.score[s[hit]], weights=w)) if w.sum() > 0 else float(c.score[s[hit]].mean())
            outs.append((r, int(c.order[s[hit]].min()), sc, len(np.unique(self.tiles[s[hit]]))))
        self.stats.stitched += len(outs)
        return outs

    def _beside_another(self, members: np.ndarray) -> bool:
        """Whether a part outside `members`, of a tile outside them, lies within the sliver tolerance of one
        of them (or an earlier pass saw one: `near`)."""
        if self.near[members].any():
            return True
        if self._tree is None:
            self._tree = shapely.STRtree(self.c.geoms)
        mine, own = set(members.tolist()), set(self.tiles[members].tolist())
        for i in members.tolist():
            hits = self._tree.query(self.c.geoms[i], predicate="dwithin",
                                    distance=_sliver_tol(self.frames[int(self.tiles[i])]))
            if any(j not in mine and int(self.tiles[j]) not in own for j in hits.tolist()):
                return True
        return False

    def _account(self, drops: list, outs: list) -> None:
        """The owned area of each dropped part that no output of its component covers."""
        todo = [(i, r) for i, r in drops if self.owned_area[i] > 0]
        if not todo:
            return
        idx = np.asarray([i for i, _ in todo])
        own = shapely.intersection(self.c.geoms[idx], self.exact[idx])
        if outs:
            own = shapely.difference(own, outs[0] if len(outs) == 1 else shapely.union_all(outs))
        for (i, r), a in zip(todo, shapely.area(own).tolist()):
            self.dropped.append((i, r, a))


def _item(v):
    return v.item() if hasattr(v, "item") else v


def _count(stats: MergeStats, name: str, prompts: np.ndarray, areas: np.ndarray) -> None:
    """Add `areas` to the coverage figure `name`, per prompt."""
    if not len(prompts):
        return
    keys, inv = np.unique(prompts, return_inverse=True)
    sums = np.bincount(inv.ravel(), weights=areas, minlength=len(keys))
    for k, s in zip(keys.tolist(), sums.tolist()):
        stats.count(k, name, s)


def _sliver_tol(frame: TileFrame) -> float:
    """Rule 6's distance in CRS units: `SLIVER_CELLS` mask cells of the tile."""
    return SLIVER_CELLS * MASK_CELL * frame.pixel


def _near_other_tile(idx: np.ndarray, geoms, tiles, frames) -> np.ndarray:
    """Whether a part of another tile lies within the sliver tolerance of each part in `idx`."""
    out = np.zeros(len(idx), dtype=bool)
    if not len(idx):
        return out
    tree = shapely.STRtree(geoms)
    for k, i in enumerate(idx.tolist()):
        near = tree.query(geoms[i], predicate="dwithin", distance=_sliver_tol(frames[int(tiles[i])]))
        out[k] = bool((tiles[near] != tiles[i]).any())
    return out


def _slivers(lone: np.ndarray, geoms, tiles, frames, near, owned_area) -> set[int]:
    """Unmatched cut parts outside their own core that lie against another object (rule 6).
    `near`: per part, another tile's part is known to lie within the tolerance (from an earlier pass)."""
    if not len(lone):
        return set()
    outside = lone[owned_area[lone] <= 0.05 * shapely.area(geoms[lone])]
    if not len(outside):
        return set()
    out = set(outside[near[outside]].tolist())
    rest = outside[~near[outside]]
    out.update(rest[_near_other_tile(rest, geoms, tiles, frames)].tolist())
    return out




@dataclass
class Packed:
    """Pieces (or merged objects) as arrays, geometries as WKB: pickles an order of magnitude faster than
    lists of shapely objects, so a block's merge can cross processes cheaply. Coordinates stay exact."""

    wkb: np.ndarray
    columns: dict

    @classmethod
    def of(cls, obj) -> "Packed":
        names = [f for f in obj.__dataclass_fields__ if f != "geometry"]
        return cls(shapely.to_wkb(np.asarray(obj.geometry, dtype=object)) if len(obj.geometry) else
                   np.zeros(0, dtype=object), {n: np.asarray(getattr(obj, n)) for n in names})

    def unpack(self, kind):
        geoms = list(shapely.from_wkb(self.wkb)) if len(self.wkb) else []
        return kind(geometry=geoms, **{n: v.tolist() for n, v in self.columns.items()})

    def __len__(self) -> int:
        return len(self.wkb)

    def take(self, idx) -> "Packed":
        """The rows `idx`, sharing the WKB bytes (no copy of the geometries)."""
        idx = np.asarray(idx, dtype=np.int64)
        return Packed(self.wkb[idx], {n: v[idx] for n, v in self.columns.items()})

    @classmethod
    def concat(cls, parts) -> "Packed":
        """Rows of `parts` one after the other; empty parts are skipped (their columns have no dtype)."""
        parts = [p for p in parts if len(p)]
        if not parts:
            return cls.of(Pieces())
        wkb = np.empty(sum(len(p) for p in parts), dtype=object)
        wkb[:] = [w for p in parts for w in p.wkb]
        return cls(wkb, {n: np.concatenate([p.columns[n] for p in parts]) for n in parts[0].columns})


@dataclass
class BlockPart:
    """What one block's merge hands the final pass: its decided objects and its undecided pieces."""

    objects: Packed  # Merged
    first: np.ndarray
    stats: MergeStats
    pieces: Packed  # undecided pieces (Pieces), in job order
    order: np.ndarray
    inside: np.ndarray
    near: np.ndarray


def merge_block(pieces: Packed, order, frames: Mapping[int, TileFrame], foreign, reach: float,
                iou_min: float = IOU_MIN, ios_min: float = IOS_MIN) -> BlockPart:
    """The merge of one block of tiles (a Dask task): `frames` holds the block's tiles, `foreign` the
    windows of other tiles within `reach` of them."""
    part = _merge_part(pieces.unpack(Pieces), frames, iou_min, ios_min, order=order, foreign=foreign, reach=reach)
    d = part.deferred
    cols = part.cols
    rest = Packed.of(cols.pieces(d)) if cols is not None else Packed.of(Pieces())
    return BlockPart(Packed.of(part.merged), part.first, part.stats, rest,
                     cols.order[d] if cols is not None else np.zeros(0, np.int64), part.inside[d], part.near[d])


def tile_blocks(tiles, block: int) -> dict[int, int]:
    """Tile index -> block id: squares of `block` x `block` tiles of the grid."""
    out = {}
    for t in tiles:
        out[t.index] = (t.row // block) * 1_000_003 + (t.col // block)
    return out


#: Order keys of pieces: tile index * ORDER_TILE + position in the tile (tile order, as a whole job's).
ORDER_TILE = 1 << 24


class BlockMerger:
    """`merge_pieces` by spatial partition, fed tile by tile as tiles finish.

    A block of tiles is merged (`submit(merge_block, job)`: on Dask workers, or here) as soon as its last
    tile arrives, and its pieces are dropped: only decided objects (as WKB) and the few pieces near block
    edges wait for the small final pass of `finish`, so memory follows the objects, not the pieces of
    the whole image. The result equals `merge_pieces` over all pieces in tile order: same objects, same
    order, same statistics.

    `on_block(objects: Packed, first: np.ndarray)`: when given, decided objects are handed over as soon as
    their block's merge is in (`drain`) instead of being held until `finish`; `first` is each object's
    order key (sorting by it gives `merge_pieces`'s order). `finish` then returns no objects, only the
    statistics, and memory no longer follows the objects either.
    """

    def __init__(self, frames: Mapping[int, TileFrame], blocks: Mapping[int, int], submit=None,
                 iou_min: float = IOU_MIN, ios_min: float = IOS_MIN, on_block=None):
        self.on_block = on_block
        self.emitted = 0  # objects handed to on_block
        self.frames = frames if isinstance(frames, TileFrames) else dict(frames)  # lazy ones stay lazy
        self.blocks = dict(blocks)
        self.submit = submit
        self.iou_min, self.ios_min = iou_min, ios_min
        self._tile_ids = np.asarray(sorted(frames), dtype=np.int64)
        pixel, windows = 0.0, []
        for t in self._tile_ids.tolist():  # one frame at a time: only the windows are kept
            f = frames[t]
            pixel = max(pixel, f.pixel)
            windows.append(f.window)
        self.reach = 8 * pixel
        self._windows = np.asarray(windows, dtype=object)
        self._tile_block = np.asarray([self.blocks[int(t)] for t in self._tile_ids], dtype=np.int64)
        self._wtree = shapely.STRtree(self._windows) if len(self._windows) else None
        self._waiting: dict[int, set] = {}
        self._members: dict[int, list] = {}
        for t, b in self.blocks.items():
            self._waiting.setdefault(b, set()).add(int(t))
            self._members.setdefault(b, []).append(int(t))
        self._pending: dict[int, dict[int, Packed]] = {}
        self.parts: list = []  # BlockPart, or futures of them
        self._undrained: list[int] = []  # indices in `parts` whose objects `drain` has not handed over
        self.single = len(self._waiting) <= 1

    def expect(self, tile_index: int, frame: TileFrame, block: int) -> None:
        """Register a tile that appears while the run goes (a refined tile's sub-tile), or replace a tile's
        frame, before its pieces are added: its block waits for it. Its window must lie within the windows
        given at construction (a sub-tile lies within its parent's): other blocks are found by those."""
        t = int(tile_index)
        if block not in self._waiting or self.blocks.get(t, block) != block:
            raise ValueError(f"tile {t}: block {block} was merged already, or the tile is in another block")
        if t not in self.blocks:
            self.blocks[t] = block
            self._members[block].append(t)
            self._waiting[block].add(t)
        self.frames[t] = frame

    def add(self, tile_index: int, pieces: "Pieces | Packed | None") -> None:
        """A finished tile's pieces (its tile keys say which tile); merges its block when it is complete."""
        b = self.blocks[int(tile_index)]
        if pieces is not None and len(pieces):
            self._pending.setdefault(b, {})[int(tile_index)] = (pieces if isinstance(pieces, Packed)
                                                                else Packed.of(pieces))
        waiting = self._waiting.get(b)
        if waiting is not None:
            waiting.discard(int(tile_index))
            if not waiting:
                self._run(b)

    def _run(self, b: int) -> None:
        self._waiting.pop(b, None)
        got = self._pending.pop(b, {})
        if not got:
            return
        tiles = sorted(got)
        pieces = Packed.concat([got[t] for t in tiles])
        order = np.concatenate([t * ORDER_TILE + np.arange(len(got[t]), dtype=np.int64) for t in tiles])
        mask = self._tile_block == b
        mine = self._members.get(b, [])
        if self.single:
            foreign = []
        else:
            near = np.unique(self._wtree.query(self._windows[mask], predicate="dwithin", distance=2 * self.reach)[1])
            foreign = list(self._windows[near[self._tile_block[near] != b]])
        job = (pieces, order, {int(t): self.frames[int(t)] for t in mine}, foreign, self.reach, self.iou_min,
               self.ios_min)
        self.parts.append(self.submit(merge_block, job) if self.submit is not None else merge_block(*job))
        self._undrained.append(len(self.parts) - 1)

    def close(self) -> None:
        """Merge the blocks still open: their missing tiles (failed ones) will never arrive."""
        for b in sorted(self._waiting):
            self._run(b)

    def drain(self, gather=None, wait: bool = False) -> int:
        """Hand the decided objects of every merged block to `on_block` (without `wait`: only blocks whose
        merge has finished) and keep only what the final pass needs. Returns the objects handed over."""
        if self.on_block is None:
            return 0
        local = [i for i in self._undrained if isinstance(self.parts[i], BlockPart)]
        ready = [i for i in self._undrained if not isinstance(self.parts[i], BlockPart)
                 and (wait or self.parts[i].done())]
        got = dict(zip(ready, gather([self.parts[i] for i in ready]) if ready else []))
        got.update({i: self.parts[i] for i in local})
        self._undrained = [i for i in self._undrained if i not in got]
        n = 0
        for i, part in sorted(got.items()):
            if len(part.first):
                self.on_block(part.objects, part.first)
                n += len(part.first)
            self.parts[i] = replace(part, objects=Packed.of(Merged([], [], [], [])), first=part.first[:0])
        self.emitted += n
        return n

    def finish(self, gather=None) -> tuple[Merged, MergeStats]:
        """Close the open blocks, gather every block's part (`gather` for futures), then the final pass.
        With `on_block`, the objects go there (the returned `Merged` is empty)."""
        self.close()
        if self.on_block is not None:
            self.drain(gather, wait=True)
            gather = None
        parts = gather(self.parts) if gather is not None else self.parts
        self.parts = []
        stats = MergeStats()
        for p in parts:
            stats.add(p.stats)
        # the final pass: every undecided piece, in tile order
        order = np.concatenate([p.order for p in parts]) if parts else np.zeros(0, np.int64)
        sort = np.argsort(order, kind="stable")
        rest = Packed.concat([p.pieces for p in parts]).take(sort).unpack(Pieces) if len(order) else Pieces()
        piece_block = np.asarray([self.blocks[int(k) // 1024] for k in rest.tile_key], dtype=np.int64)
        fin = _merge_part(rest, self.frames, self.iou_min, self.ios_min, order=order[sort],
                          inside=np.concatenate([p.inside for p in parts])[sort] if parts else np.zeros(0, bool),
                          near=np.concatenate([p.near for p in parts])[sort] if parts else np.zeros(0, bool),
                          block=piece_block)
        stats.add(fin.stats)
        if self.on_block is not None:
            if len(fin.first):
                self.on_block(Packed.of(fin.merged), fin.first)
            self.emitted += len(fin.first)
            stats.objects = self.emitted
            return Merged([], [], [], []), stats
        firsts = np.concatenate([p.first for p in parts] + [fin.first])
        objs = []
        for k in range(len(parts)):  # one part at a time: its WKB goes as its shapely objects come
            objs.append(parts[k].objects.unpack(Merged))
            parts[k] = None
        objs.append(fin.merged)
        del parts
        rank = np.argsort(firsts, kind="stable")
        out = Merged([], [], [], [])
        for name in ("geometry", "score", "prompt", "n_tiles"):
            col = [v for o in objs for v in getattr(o, name)]
            setattr(out, name, [col[i] for i in rank.tolist()])
        stats.objects = len(out.geometry)
        return out, stats


def merge_blocked(pieces: "Pieces | Packed", frames: Mapping[int, TileFrame], blocks: Mapping[int, int],
                  map_blocks=None, iou_min: float = IOU_MIN,
                  ios_min: float = IOS_MIN) -> tuple[Merged, MergeStats]:
    """`merge_pieces` by spatial partition (see `BlockMerger`), over pieces already gathered in tile order.
    `map_blocks(fn, list_of_argument_tuples) -> results` runs the blocks' merges (e.g. on Dask workers)."""
    packed = pieces if isinstance(pieces, Packed) else Packed.of(pieces)
    n = len(packed)
    if n == 0 or len(set(blocks.values())) <= 1:
        return merge_pieces(packed.unpack(Pieces), frames, iou_min, ios_min)
    jobs: list = []
    merger = BlockMerger(frames, blocks, submit=(lambda fn, job: jobs.append(job) or len(jobs) - 1)
                         if map_blocks is not None else None, iou_min=iou_min, ios_min=ios_min)
    tiles = np.asarray(packed.columns["tile_key"], dtype=np.int64) // 1024
    bounds = np.flatnonzero(np.diff(tiles)) + 1
    for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, n]):
        merger.add(int(tiles[lo]), packed.take(np.arange(lo, hi)))
    for t in frames:
        merger.add(int(t), None)
    if map_blocks is None:
        return merger.finish()
    merger.close()
    results = list(map_blocks(merge_block, jobs))
    return merger.finish(gather=lambda idx: [results[i] for i in idx])


def _polygonal(geom):
    """Keep the areal part of a union (clipping can leave slivers of lines or points)."""
    if not geom.is_valid:
        geom = shapely.make_valid(geom)
    if geom.geom_type in ("Polygon", "MultiPolygon"):
        return geom
    polys = [g for g in getattr(geom, "geoms", [geom]) if g.geom_type in ("Polygon", "MultiPolygon")]
    return shapely.union_all(polys) if polys else geom
