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
5. *Slivers.* A cut piece that no neighbour matched (or a group of cut pieces linked only to each other),
   lying outside its own tile's core and within one mask cell of another object, is the edge of an
   object another tile owns (at SAM 3's 3.5 px mask cells, a few pixels poking into a tile rarely match
   in shape): it is dropped and counted.
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
#: Candidate pairs compared at a time (bounds the clipped geometries held at once).
PAIR_CHUNK = 20_000
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
    """Merge `pieces` (from any number of tiles) into objects. `frames` maps tile index -> TileFrame.

    The result depends only on the pieces and their order (tile order, as the pipeline concatenates
    them): ties between equally strong links are broken by that order, never by a spatial index's.
    """
    part = _merge_part(pieces, frames, iou_min, ios_min)
    return part.merged, part.stats


@dataclass
class _Part:
    """One pass of the merge over some pieces: the objects it decided, and what it left to a later pass."""

    merged: Merged
    first: np.ndarray  # per object: order key of its first piece (objects come out in this order)
    stats: MergeStats
    deferred: np.ndarray  # local indices of pieces whose objects a later pass decides
    inside: np.ndarray  # per piece: wholly in its tile's exclusive area (never compared)
    near: np.ndarray  # per piece: another tile's piece lies within the sliver tolerance (in this pass)


def _merge_part(pieces: Pieces, frames: Mapping[int, TileFrame], iou_min: float, ios_min: float, *,
                order=None, foreign=(), reach: float = 0.0, inside=None, near=None, block=None) -> _Part:
    """The merge over `pieces` (given in ascending `order`, their position in the whole job).

    Block pass (`foreign`: windows of tiles outside the block): pieces within `reach` of a foreign window
    can meet other blocks' pieces, so every object they could belong to (the connected component of their
    candidate links) is left undecided (`deferred`). Final pass (`inside`, `near` from the block passes,
    `block` per piece): decides the deferred pieces; pairs within one block were counted there already.
    """
    stats = MergeStats()
    n = len(pieces)
    out = Merged([], [], [], [])
    if n == 0:
        e = np.zeros(0, dtype=np.int64)
        return _Part(out, e, stats, e, np.zeros(0, bool), np.zeros(0, bool))
    order = np.arange(n, dtype=np.int64) if order is None else np.asarray(order, dtype=np.int64)
    geoms = np.asarray(pieces.geometry, dtype=object)
    keys = np.asarray(pieces.tile_key, dtype=np.int64)
    tiles = keys // 1024
    prompts = np.asarray(pieces.prompt)
    complete = np.asarray(pieces.complete, dtype=bool)
    edge = np.asarray(pieces.edge_dist, dtype=float)
    scores = np.asarray(pieces.score, dtype=float)
    final = inside is not None

    if not final:
        stats.pieces = n
        # 1. candidates: not wholly inside the tile's exclusive area (tiles with several passes: all pieces)
        ukeys = np.unique(keys)
        ut = ukeys // 1024
        multi_pass = np.unique(ut[1:][ut[1:] == ut[:-1]])
        excl = np.asarray([frames[int(t)].exclusive for t in tiles], dtype=object)
        inside = shapely.within(geoms, excl)
        if len(multi_pass):
            inside &= ~np.isin(tiles, multi_pass)
        near = np.zeros(n, dtype=bool)
    else:
        inside = np.asarray(inside, dtype=bool)
        near = np.asarray(near, dtype=bool)
    cand = np.flatnonzero(~inside)
    if not final:
        stats.band_pieces = len(cand)

    la = lb = np.zeros(0, dtype=np.int64)  # accepted-candidate links, strongest first
    if len(cand) > 1:
        cg = geoms[cand]
        tree = shapely.STRtree(cg)
        a, b = tree.query(cg, predicate="intersects")
        sel = (a < b)
        a, b = cand[a[sel]], cand[b[sel]]
        sel = (keys[a] != keys[b]) & (prompts[a] == prompts[b])
        a, b = a[sel], b[sel]
        stats.pairs_compared = int((block[a] != block[b]).sum()) if block is not None else len(a)
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
            area_a, area_b, inter = (np.empty(len(a)) for _ in range(3))
            for lo in range(0, len(a), PAIR_CHUNK):  # the clipped copies of one chunk at a time
                sl = slice(lo, lo + PAIR_CHUNK)
                ga = shapely.intersection(geoms[a[sl]], bands[sl])
                gb = shapely.intersection(geoms[b[sl]], bands[sl])
                area_a[sl], area_b[sl] = shapely.area(ga), shapely.area(gb)
                inter[sl] = shapely.area(shapely.intersection(ga, gb))
                del ga, gb
            union = area_a + area_b - inter
            smaller = np.minimum(area_a, area_b)
            iou = np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)
            ios = np.divide(inter, smaller, out=np.zeros_like(inter), where=smaller > 0)
            ok = (iou >= iou_min) | (ios >= ios_min)
            # strongest first; equal strengths in the pieces' order (the same in every partition)
            rank = np.lexsort((order[b[ok]], order[a[ok]], -ios[ok], -iou[ok]))
            la, lb = a[ok][rank], b[ok][rank]

    deferred = np.zeros(n, dtype=bool)
    if len(foreign):
        # 2'. a block pass: pieces within reach of another block's windows, and everything linked to them
        hit = np.unique(shapely.STRtree(np.asarray(foreign, dtype=object)).query(
            geoms, predicate="dwithin", distance=reach)[0])
        if len(hit):
            from scipy.sparse import coo_matrix
            from scipy.sparse.csgraph import connected_components

            graph = coo_matrix((np.ones(len(la), dtype=np.int8), (la, lb)), shape=(n, n))
            _, comp = connected_components(graph, directed=False)
            deferred = np.isin(comp, np.unique(comp[hit]))

    uf = _UnionFind(keys)
    for i, j in zip(la.tolist(), lb.tolist()):
        if deferred[i]:
            continue
        r = uf.union(i, j)
        if r == "joined":
            stats.links += 1
        elif r == "conflict":
            stats.refused_links += 1

    groups: dict[int, list[int]] = {}
    for i in np.flatnonzero(~deferred).tolist():
        groups.setdefault(uf.find(i), []).append(i)

    slivers = _slivers(groups, geoms, complete, tiles, frames, near)
    first = []
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
            first.append(order[i])
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
            if geom.area <= 0.05 * shapely.area(geoms[m]).max() and _beside_another(m, geoms, tiles, frames, near):
                # rule 5 for linked slivers: cut pieces that all lie outside their own tiles' cores, next to
                # an object another tile owns
                stats.slivers_dropped += len(m)
                stats.merged_groups -= 1
                continue
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
        first.append(order[m[0]])
    stats.objects = len(out.geometry)
    left = np.flatnonzero(deferred)
    if len(left):
        # what the final pass cannot see: another tile's piece of this block within the sliver tolerance
        near = near.copy()
        lone = left[~complete[left]]
        near[lone] |= _near_other_tile(lone, geoms, tiles, frames)
    return _Part(out, np.asarray(first, dtype=np.int64), stats, left, inside, near)


def _near_other_tile(idx: np.ndarray, geoms, tiles, frames) -> np.ndarray:
    """Whether a piece of another tile lies within the sliver tolerance of each piece in `idx`."""
    out = np.zeros(len(idx), dtype=bool)
    if not len(idx):
        return out
    tree = shapely.STRtree(geoms)
    for k, i in enumerate(idx.tolist()):
        near = tree.query(geoms[i], predicate="dwithin", distance=4 * frames[int(tiles[i])].pixel)
        out[k] = bool((tiles[near] != tiles[i]).any())
    return out


def _beside_another(members: np.ndarray, geoms, tiles, frames, near=None) -> bool:
    """Whether a piece outside the group `members`, of a tile outside it, lies within the sliver
    tolerance of one of them (or an earlier pass saw one: `near`)."""
    if near is not None and near[members].any():
        return True
    tree = shapely.STRtree(geoms)
    mine, own = set(members.tolist()), set(tiles[members].tolist())
    for i in members.tolist():
        hits = tree.query(geoms[i], predicate="dwithin", distance=4 * frames[int(tiles[i])].pixel)
        if any(j not in mine and int(tiles[j]) not in own for j in hits.tolist()):
            return True
    return False


def _slivers(groups, geoms, complete, tiles, frames, near=None) -> set[int]:
    """Unmatched cut pieces outside their own core that lie against another object (see rule 5).
    `near`: per piece, another tile's piece is known to lie within the tolerance (from an earlier pass)."""
    lone = [m[0] for m in groups.values() if len(m) == 1 and not complete[m[0]]]
    if not lone:
        return set()
    lone_arr = np.asarray(lone)
    cores = np.asarray([frames[int(tiles[i])].core for i in lone_arr], dtype=object)
    owned = shapely.area(shapely.intersection(geoms[lone_arr], cores))
    outside = lone_arr[owned <= 0.05 * shapely.area(geoms[lone_arr])]
    if not len(outside):
        return set()
    out = {i for i in outside.tolist() if near is not None and near[i]}
    rest = np.asarray([i for i in outside.tolist() if i not in out], dtype=np.int64)
    hits = _near_other_tile(rest, geoms, tiles, frames)
    out.update(rest[hits].tolist())
    return out


_COLUMNS = ("geometry", "score", "prompt", "tile_key", "complete", "edge_dist")


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
    pieces = pieces.unpack(Pieces)
    part = _merge_part(pieces, frames, iou_min, ios_min, order=order, foreign=foreign, reach=reach)
    d = part.deferred
    return BlockPart(Packed.of(part.merged), part.first, part.stats, Packed.of(_take(pieces, d)),
                     np.asarray(order)[d], part.inside[d], part.near[d])


def _take(pieces: Pieces, idx) -> Pieces:
    idx = list(map(int, idx))
    return Pieces(*([getattr(pieces, name)[i] for i in idx] for name in _COLUMNS))


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
    """

    def __init__(self, frames: Mapping[int, TileFrame], blocks: Mapping[int, int], submit=None,
                 iou_min: float = IOU_MIN, ios_min: float = IOS_MIN):
        self.frames, self.blocks = dict(frames), dict(blocks)
        self.submit = submit
        self.iou_min, self.ios_min = iou_min, ios_min
        self.reach = 8 * max(f.pixel for f in frames.values()) if frames else 0.0
        self._tile_ids = np.asarray(sorted(frames), dtype=np.int64)
        self._windows = np.asarray([frames[int(t)].window for t in self._tile_ids], dtype=object)
        self._tile_block = np.asarray([self.blocks[int(t)] for t in self._tile_ids], dtype=np.int64)
        self._wtree = shapely.STRtree(self._windows) if len(self._windows) else None
        self._waiting: dict[int, set] = {}
        self._members: dict[int, list] = {}
        for t, b in self.blocks.items():
            self._waiting.setdefault(b, set()).add(int(t))
            self._members.setdefault(b, []).append(int(t))
        self._pending: dict[int, dict[int, Packed]] = {}
        self.parts: list = []  # BlockPart, or futures of them
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

    def close(self) -> None:
        """Merge the blocks still open: their missing tiles (failed ones) will never arrive."""
        for b in sorted(self._waiting):
            self._run(b)

    def finish(self, gather=None) -> tuple[Merged, MergeStats]:
        """Close the open blocks, gather every block's part (`gather` for futures), then the final pass."""
        self.close()
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
