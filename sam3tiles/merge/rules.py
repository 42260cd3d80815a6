"""The merge's rules over one pass of pieces (rules 0-6 of `sam3tiles.merge`): `merge_pass` makes the parts,
their links and components (rules 0-3, `merge.links`), then `_Resolver` decides each component: ownership,
stitching and slivers (rules 4-6; rule 4's halves: `merge.halves`; rule 6's test: `merge.slivers`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np
import shapely
from shapely.geometry import Polygon

from ..tiling.frame import TileFrame
from ..vectorize.pieces import EDGE_MARGIN, MASK_CELL, Pieces
from .apart import fused_groups, neighbours, side_by_side, speck
from .halves import Halves
from .links import _bridges, _components, _explode, _inside, _links, clip_to, covered, lies_near
from .shares import absorb, fused_shares, orphaned
from .smooth import smooth_views
from .parts import (AUTHORITY_CELLS, COVERED, IOS_MIN, IOU_MIN, JOIN_CELLS, LINK_CELLS, Cols,
                    Merged, beyond, polygonal, regions, said_area, said_region, union_parts)
from .slivers import NEAR_SAME, lone_slivers, near_other_tile, sliver_tol
from .stats import MergeStats, count_by_prompt


def merge_pieces(pieces: Pieces, frames: Mapping[int, TileFrame], iou_min: float = IOU_MIN,
                 ios_min: float = IOS_MIN) -> tuple[Merged, MergeStats]:
    """Merge `pieces` (from any number of tiles) into objects. `frames` maps tile index -> TileFrame.

    The result depends only on the pieces and their order (tile order, as the pipeline concatenates
    them): ties are broken by that order, never by a spatial index's."""
    part = merge_pass(pieces, frames, iou_min, ios_min)
    return part.merged, part.stats


@dataclass
class _Part:
    """One pass of the merge over some pieces: the objects it decided, and what it left to a later pass."""

    merged: Merged
    first: np.ndarray  # per object: order key of its first part (objects come out in this order)
    stats: MergeStats
    deferred: np.ndarray  # indices (into `cols`) of parts whose objects a later pass decides
    inside: np.ndarray  # per part: wholly in its tile's exclusive area (never compared)
    near: np.ndarray  # per part: NEAR_ANY | NEAR_SAME, another tile's part within the sliver tolerance
    cols: "Cols | None" = None  # the parts this pass saw


def merge_pass(pieces: Pieces, frames: Mapping[int, TileFrame], iou_min: float, ios_min: float, *,
                order=None, foreign=(), reach: float = 0.0, inside=None, near=None, block=None,
                known: Mapping | None = None, trace: dict | None = None) -> _Part:
    """The merge over `pieces` (given in ascending `order`, their position in the whole job).

    First pass (`inside` None): splits the pieces into parts (rule 0). Block pass (`foreign`: windows of
    tiles outside the block): parts within `reach` of a foreign window can meet other blocks' parts, so
    every component they belong to is left undecided (`deferred`). Final pass (`inside`, `near` from the
    block passes, `block` per part): decides the deferred parts; pairs within one block were counted there.
    `known`: rule 2's verdicts already computed for pairs of parts, by their order keys (`early.EarlyLinks`)."""
    stats = MergeStats()
    n = len(pieces)
    if n == 0:
        e = np.zeros(0, dtype=np.int64)
        return _Part(Merged([], [], [], []), e, stats, e, np.zeros(0, bool), np.zeros(0, np.uint8))
    c = Cols.of(pieces, np.arange(n, dtype=np.int64) if order is None else order)
    if inside is None:
        stats.pieces = n
        c = _explode(c, frames, stats)
        inside = _inside(c, frames)
        near = np.zeros(len(c.geoms), dtype=np.uint8)
        stats.band_pieces = int((~inside).sum())
    else:
        inside, near = np.asarray(inside, dtype=bool), np.asarray(near, dtype=np.uint8)
    la, lb = _links(c, np.flatnonzero(~inside), frames, iou_min, ios_min, block, stats, known)
    deferred = np.zeros(len(c.geoms), dtype=bool)
    if len(foreign):
        # a block pass: parts within reach of another block's windows, and all linked to them (before `_bridges`:
        # a speck and all it links to are decided in one pass). (`whole`: the components before `_bridges`)
        hit = np.unique(shapely.STRtree(np.asarray(foreign, dtype=object)).query(c.geoms, "dwithin", distance=reach)[0])
        if len(hit):
            deferred = np.isin(whole := _components(len(c.geoms), la, lb), np.unique(whole[hit]))
    la, lb = _bridges(c, la, lb, frames, iou_min)
    comp = _components(len(c.geoms), la, lb)
    live = ~deferred[la]
    stats.links = int(live.sum())
    res = _Resolver(c, frames, la[live], lb[live], inside, near, stats)
    if trace is not None:  # investigation: every part's fate, the components and links
        res.trace = trace
        trace["_comp"], trace["_links"], trace["_resolver"] = comp, (la[live], lb[live]), res
    out, first = res.run(comp, deferred)
    stats.objects = len(out.geometry)
    left = np.flatnonzero(deferred)
    if len(left):
        # what the final pass cannot see: another tile's part of this block, decided here (the deferred
        # ones go on to the final pass, which sees them itself: they may be this part's own component)
        near = near.copy()
        lone = left[~c.complete[left]]
        near[lone] |= near_other_tile(lone, c.geoms, c.tiles, c.prompt, frames, among=np.flatnonzero(~deferred))
    return _Part(out, first, stats, left, inside, near, c)


class _Resolver(Halves):
    """Rules 4-6 over the decided components of one pass, with the coverage accounting."""

    def __init__(self, c: Cols, frames, la, lb, inside, near, stats: MergeStats):
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
            oa[cross] = shapely.area(clip_to(cg[cross], cc[cross]))
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
        self._tree, self.bands = None, {}  # (the bands of tile pairs `smooth_views` found: its frames stay)
        self.missed: list = []  # stretches of the component's objects their owner did not report (`_missed`)
        self.trace: dict | None = None

    def _note(self, idx, why: str) -> None:
        if self.trace is not None:
            for i in np.atleast_1d(np.asarray(idx, dtype=np.int64)).tolist():
                self.trace.setdefault(int(i), []).append(why)

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
        count_by_prompt(st, "owned", c.prompt[live], self.owned_area[live])
        count_by_prompt(st, "out", np.asarray(out.prompt), shapely.area(np.asarray(out.geometry, dtype=object))
               if out.geometry else np.zeros(0))
        for rule in ("duplicates", "slivers"):
            d = [(i, a) for i, r, a in self.dropped if r == rule]
            if d:
                count_by_prompt(st, rule, c.prompt[[i for i, _ in d]], np.asarray([a for _, a in d]))
        return out, first[rank]

    def _singles(self, lone: np.ndarray):
        """Components of one part: kept as they are, unless a sliver (rule 6)."""
        c, st = self.c, self.stats
        cut = lone[~c.complete[lone]]
        slivers = lone_slivers(cut, c.geoms, self.tiles, c.prompt, self.frames, self.near, self.owned_area)
        if slivers:
            drop = np.isin(lone, np.fromiter(slivers, dtype=np.int64, count=len(slivers)))
            for i in lone[drop].tolist():
                self.dropped.append((i, "slivers", float(self.owned_area[i])))
            self._note(lone[drop], "DROP sliver (rule 6, lone cut part outside its core beside another tile's part)")
            st.slivers_dropped += int(drop.sum())
            lone = lone[~drop]
        st.unlinked_cut_pieces += int((~c.complete[lone] & ~self.inside[lone] & (c.edge[lone] < np.inf)).sum())
        self._note(lone, "kept alone")
        return (list(c.geoms[lone]), c.order[lone].tolist(), c.score[lone].tolist(), list(c.prompt[lone]),
                [1] * len(lone))

    def _pairs(self, a: np.ndarray, b: np.ndarray):
        """Rule 4 for components of two complete parts of two tiles: the one of more authority is kept."""
        c = self.c
        oa, ob = ~self.owned[a], ~self.owned[b]
        ea, eb = self.edge_q[a], self.edge_q[b]
        a_wins = (oa < ob) | ((oa == ob) & ((ea > eb) | ((ea == eb) & (c.order[a] < c.order[b]))))
        win, lose = np.where(a_wins, a, b), np.where(a_wins, b, a)
        if self.trace is not None:  # investigation only: not on a run's path
            self._note(win, "kept (rule 4 pair, won)")
            for w, l in zip(win.tolist(), lose.tolist()):
                self._note(l, f"DROP duplicate (rule 4 pair: linked to kept complete part {w})")
        acc = lose[self.owned_area[lose] > 0]
        if len(acc):
            acc_win = win[self.owned_area[lose] > 0]
            own = shapely.difference(shapely.intersection(c.geoms[acc], self.exact[acc]), c.geoms[acc_win])
            self.dropped.extend((i, "duplicates", v) for i, v in zip(acc.tolist(), shapely.area(own).tolist()))
        return self._kept(win, lose)

    def _covered_pairs(self, full: np.ndarray, cut: np.ndarray) -> np.ndarray:
        """Whether what each cut part says (`parts.said_area`) lies mostly under its complete partner (rule 5),
        for pairs of different tiles; the uncovered area of those is counted."""
        ok = self.tiles[full] != self.tiles[cut]
        said = shapely.union(*([self.frames[t].core for t in self.tiles[x[ok]].tolist()] for x in (full, cut)))
        clip = said_area(self.c.geoms[cut[ok]], self.exact[cut[ok]], said)
        area = shapely.area(clip)
        cov = shapely.area(shapely.intersection(clip, self.c.geoms[full[ok]]))
        done = np.zeros(len(full), dtype=bool)
        done[np.flatnonzero(ok)] = got = self._covered(clip, self.c.geoms[full[ok]], cut[ok], area)
        if self.trace is not None:  # investigation only: not on a run's path
            for f, k in zip(full[ok][got].tolist(), cut[ok][got].tolist()):
                self._note(f, "kept (complete, rule 5 pair)")
                self._note(k, f"DROP duplicate (rule 5 pair: what it says covered by complete part {f})")
        self.dropped.extend((i, "duplicates", v) for i, v in zip(cut[ok][got].tolist(),
                                                                 (area - cov)[got].clip(0).tolist()))
        return done

    def _covered(self, clipped, kept, cut: np.ndarray, area) -> np.ndarray:
        """Rule 5's test: each cut part's own-core area (`clipped`) lies at least `COVERED` under the kept
        parts, within `LINK_CELLS` mask cells of them (as rule 2 links: a copy moves by a cell between
        tiles, so a cut copy grown by a cell beside a whole one shrunk by a cell is the same object, not a
        strip of its own): `links.covered`."""
        tol = LINK_CELLS * MASK_CELL * np.asarray([self.frames[int(t)].pixel for t in self.tiles[cut].tolist()])
        return covered(clipped, kept, tol, COVERED * np.asarray(area, dtype=float))

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
                hit = [j for j in self.nbr[self.ptr[i]:self.ptr[i + 1]].tolist() if j in keptset and tiles[j] != ti]
                if hit:
                    drops.append((i, "duplicates"))
                    self._note(i, f"DROP duplicate (rule 4: linked to kept complete part {hit[0]})")
                else:
                    kept.append(i)
                    keptset.add(i)
                    self._note(i, "kept (rule 4, complete)")
        stitch = m[~c.complete[m]]
        self.missed = []
        if kept and len(stitch):  # (the later test runs only where this one did: `said` is set)
            said = said_region(self.frames, self.tiles[m])
            halves = list(dict.fromkeys(self._halves(kept, stitch, said) + self._split_outside_core(kept, stitch)))
            if halves:
                self._note(halves, "rule 4 half: stitched with the cut parts")
                stitch = np.r_[stitch, np.asarray(halves, dtype=stitch.dtype)]
                kept = [i for i in kept if i not in halves]
        outs = [(c.geoms[i], int(c.order[i]), float(c.score[i]), ntiles) for i in kept]
        if kept and len(stitch):
            clipped = said_area(c.geoms[stitch], self.exact[stitch], said)
            ku = c.geoms[kept[0]] if len(kept) == 1 else shapely.union_all(c.geoms[kept])
            covered = self._covered(clipped, ku, stitch, shapely.area(clipped))
            drops += [(i, "duplicates") for i in stitch[covered].tolist()]
            self._note(stitch[covered], "DROP duplicate (rule 5: what it says covered by kept complete parts)")
            stitch = stitch[~covered]
        if len(stitch):
            got, slivers = self._stitch_apart(stitch, m)
            if len(slivers):
                drops += [(i, "slivers") for i in slivers.tolist()]
                self._note(slivers, "DROP sliver (rule 6, linked cut parts outside their cores beside another object)")
            if got:
                self._note(stitch, f"stitched (rule 5) into {len(got)} object(s)")
                nested = self._nested(kept, got)
                self._note([kept[k] for k in nested], "DROP duplicate (rule 4 nested in a stitched object)")
                drops += [(kept[k], "duplicates") for k in nested]
                outs = [o for k, o in enumerate(outs) if k not in nested] + got
        st.duplicates_dropped += sum(r == "duplicates" for _, r in drops)
        st.slivers_dropped += sum(r == "slivers" for _, r in drops)
        self._account(drops, [g for g, *_ in outs])
        return outs

    def _stitch_apart(self, s: np.ndarray, m: np.ndarray) -> tuple[list, np.ndarray]:
        """Rule 5 for cut parts `s` of component `m`: (objects, the parts dropped as slivers). Where a tile not
        owning the object fused parts its owner kept apart (`apart.fused_groups`), each group is stitched alone;
        the fusing part's area in its core goes to the groups it fused (`shares.divide`), or stands alone."""
        split = fused_groups(s, self.tiles, self.owned, self.ptr, self.nbr, self._holds, self._close, self._side,
                             self.c.geoms, self.owned_area, self._specks)
        if split is None:
            got = self._stitch(s, m)
            return (got, s[:0]) if got is not None else ([], s)
        groups, fusers = split
        self._note(fusers, "fused what the owner kept apart (rule 5): divided among the groups it fused")
        cells = {f: MASK_CELL * self.frames[int(self.tiles[f])].pixel for f in fusers.tolist()}
        shares, left = fused_shares(groups, fusers, self.ptr, self.nbr, self.c.geoms, self.cores, cells, self.tiles,
                                    self.frames, m)
        outs, slivers, missed, orphans = [], [], self.missed, []
        for k, g in enumerate(groups):
            alone = len(g) == 1 and g[0] in fusers
            if alone and g[0] not in left:
                continue
            # a stretch the owner did not report goes with the views that cover it
            self.missed = [] if alone else [x for x in missed if shapely.intersects(self.c.geoms[g], x).any()]
            # (a tile that drew only the other groups said nothing of this one: its parts keep their area there)
            got = self._stitch(g, m if alone else g)
            if got is None:
                slivers += g.tolist()
                orphans += shares.get(k, [])  # a group dropped as slivers: its shares go to the objects beside
            else:
                outs += absorb(got, shares.get(k, []), self.gap, one=True)
        if orphans:  # (with no object beside, the fusing parts are one of their own)
            cell = MASK_CELL * min(self.frames[int(t)].pixel for t in self.tiles[fusers].tolist())
            outs = orphaned(outs, orphans, self.gap, cell) if outs else self._stitch(fusers, m) or []
        return outs, np.asarray(slivers, dtype=s.dtype)

    def _close(self, j: int, k: int) -> bool:
        """Whether parts `j` and `k` (of one tile) are neighbours it could have drawn as one region, not two
        halves of one object it split (`apart.neighbours`)."""
        return neighbours(self.c.geoms[j], self.c.geoms[k], self.frames[int(self.tiles[j])].pixel)

    def _holds(self, i: int, j: int) -> int:
        """Whether part `j` lies (`IOS_MIN`, within `LINK_CELLS` cells) inside part `i` where their tiles'
        windows overlap (rule 2's part-whole link): 0 not; 2 reaching its own window's edge there (going on
        into `i`'s tile beside the other: a split's half stops short of it), 1 ending in the band."""
        fi, fj = self.frames[int(self.tiles[i])], self.frames[int(self.tiles[j])]
        gj = shapely.intersection(self.c.geoms[j], shapely.intersection(fi.window, fj.window))
        if gj.area <= 0:
            return 0
        gj = np.asarray([gj], dtype=object)
        if not lies_near(gj, self.c.geoms[[i]], LINK_CELLS * MASK_CELL * fi.pixel, IOS_MIN * gj[0].area)[0]:
            return 0
        return 2 if shapely.dwithin(gj[0], shapely.intersection(fj.window.exterior, fi.window),
                                    EDGE_MARGIN * fj.pixel) else 1

    def _specks(self, s: np.ndarray) -> set:
        """The parts of `s` that are specks (`apart.speck`)."""
        pixel = np.asarray([self.frames[int(t)].pixel for t in self.tiles[s].tolist()])
        return set(s[speck(shapely.area(self.c.geoms[s]), pixel)].tolist())

    def _side(self, j: int, k: int) -> bool:
        """Whether parts `j` and `k` of one tile face each other along their length (`apart.side_by_side`)."""
        return side_by_side(self.c.geoms[j], self.c.geoms[k], MASK_CELL * self.frames[int(self.tiles[j])].pixel)

    def _stitch(self, s: np.ndarray, members: np.ndarray):
        """Rule 5: cut parts clipped to their cores, unioned (the outline smoothed where the tiles' views disagree:
        `smooth_views`), split into regions; None for slivers.

        Where a tile said nothing about the object (a miss, a score under the threshold at its edge: it has
        no part in the component, or none within the gap of the part nor linked to it: `_unsaid`), the parts
        reaching into its core keep their area there, where that joins the object (a piece alone is none of it).
        `members`: the parts of the component (or group) whose tiles count."""
        c = self.c
        clipped = clip_to(c.geoms[s], self.cores[s])
        areas = shapely.area(clipped)
        geom = union_parts(clipped[areas > 0]) if (areas > 0).any() else Polygon()
        if geom.area <= 0.05 * shapely.area(c.geoms[s]).max() and self._beside_another(s):
            return None  # rule 6 for linked slivers: all outside their own cores, next to another object
        if geom.is_empty:
            geom = shapely.union_all(c.geoms[s])
        else:
            owned = geom
            views = {}
            for t in np.unique(self.tiles[s]).tolist():
                mine = c.geoms[s[self.tiles[s] == t]]
                views[int(t)] = mine[0] if len(mine) == 1 else shapely.union_all(mine)
            geom, inward = smooth_views(geom, views, self.frames, self.bands)
            if geom is not owned:
                self.stats.count(_item(c.prompt[s[0]]), "blended", inward)
                self._note(s, "outline smoothed where the views disagree (rule 5)")
            said = said_region(self.frames, self.tiles[members])
            unsaid = self._unsaid(s, members)
            unsaid = [g for g in unsaid if shapely.dwithin(g, geom, self.gap)] if unsaid else unsaid
            unclaimed = [*beyond(c.geoms[s], said), *self.missed, *unsaid]
            if len(unclaimed):
                geom = shapely.union_all([geom, *unclaimed])
        outs = []
        regs = regions(polygonal(geom, valid=True), self.gap)  # (a union, or smooth_views' valid one)
        for r in regs:  # (one region: made of every part with an area in its core; else of those it meets)
            hit = areas > 0
            if len(regs) > 1:
                shapely.prepare(r)  # (a smoothed outline is long: one index of its edges for all the parts)
                hit &= shapely.intersects(r, clipped)
            if not hit.any():
                hit = np.ones(len(s), dtype=bool)
            w = areas[hit]
            sc = float(np.average(c.score[s[hit]], weights=w)) if w.sum() > 0 else float(c.score[s[hit]].mean())
            outs.append((r, int(c.order[s[hit]].min()), sc, len(np.unique(self.tiles[s[hit]]))))
        self.stats.stitched += len(outs)
        return outs

    def _unsaid(self, s: np.ndarray, members: np.ndarray) -> list:
        """Each cut part's (`s`) area in the core of another tile of the component (`members`) that links no part
        to it and has none within the gap of it: that tile drew something else of the component (another object
        beside it, joined to it by a third tile's region), nothing of this, and said no more of it than a tile
        with no part (long scene seed 229, every behaviour at once: a strip's stretch lost, 0.553 against its
        owners' view 0.783)."""
        c, ts, tm = self.c, self.tiles[s], self.tiles[members]
        b = shapely.bounds(c.geoms[s])
        pairs = []  # (part of s, a tile of the component whose core its box reaches into)
        for t in np.unique(tm).tolist():
            x0, y0, x1, y1 = self.frames[t].core.bounds
            reach = (ts != t) & (b[:, 0] < x1) & (b[:, 2] > x0) & (b[:, 1] < y1) & (b[:, 3] > y0)
            pairs += [(q, t) for q in np.flatnonzero(reach).tolist()]
        out = []
        for p, t in pairs:
            # (a tile said something of a part it links to, or one its own parts come within the gap of)
            linked = self.tiles[self.nbr[self.ptr[s[p]]:self.ptr[s[p] + 1]]]
            if (linked == t).any() or shapely.dwithin(c.geoms[s[p]], c.geoms[members[tm == t]], self.gap).any():
                continue
            got = clip_to(c.geoms[s[[p]]], np.asarray([self.frames[t].core], dtype=object))[0]
            if got.area > 0:
                out.append(got)
        return out

    def _beside_another(self, members: np.ndarray) -> bool:
        """Whether a part outside `members`, of their prompt and a tile outside them, lies within the sliver
        tolerance of one of them (or an earlier pass saw one: `near`). Cut parts two tiles linked are the
        edge of an object only when one of their own prompt lies beside them: another prompt's mask says
        nothing of them (the views of an object its owners missed are kept)."""
        if (self.near[members] & NEAR_SAME).any():
            return True
        if self._tree is None:
            self._tree = shapely.STRtree(self.c.geoms)
        mine, own = set(members.tolist()), set(self.tiles[members].tolist())
        for i in members.tolist():
            hits = self._tree.query(self.c.geoms[i], predicate="dwithin",
                                    distance=sliver_tol(self.frames[int(self.tiles[i])]))
            pr = self.c.prompt[i]
            if any(j not in mine and int(self.tiles[j]) not in own and self.c.prompt[j] == pr
                   for j in hits.tolist()):
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
