"""Rule 4's halves: complete parts that come out stitched with the cut parts of their component rather than
beside them (`Halves`, the part of `rules._Resolver` that decides them).

A complete part is a tile's whole view of an object, and rule 4 keeps the one of most authority. But a tile
may see whole only a piece of what others see as one object: it split it (a text line broken at a word gap,
a strip broken by a model's noise), or its view stops where the owner's goes on. Such a part is half of the
object, not a rival of it: it is stitched with the cut parts (rule 5), each inside its own core, where the
owner saw the object cut or not at all (`_halves`), where the owner's own complete view stops short of what
a neighbour saw of it inside the neighbour's core (`_split_outside_core`), and dropped where it lies inside
an object stitched from the tiles owning its area (`_nested`)."""

from __future__ import annotations

import numpy as np
import shapely

from ..vectorize.pieces import MASK_CELL
from .parts import IOS_MIN, THICK_CELLS, said_area
from .slivers import sliver_tol


class Halves:
    """Rule 4's halves over a resolver's parts (`rules._Resolver`: its columns `c`, tiles, links `ptr` / `nbr`,
    ownership, cores and the cover test `_covered`)."""

    def _halves(self, kept: list, stitch: np.ndarray, said) -> list:
        """Kept complete parts their tile does not own linked to a cut part of another tile whose said area
        (`parts.said_area`; `said`: the component's cores) they do not cover, in a component its owner saw cut
        or not at all (their tile split what others saw as one, or saw part of it: the owner decides by
        stitching, rule 4; a silent owner leaves it to the views of its core), or whose tile has a cut part
        in the component (it split the object: a piece of it; owned too, but for one mostly inside its own
        core: a split there stands). They are stitched with it, each inside its own core (the cut part need
        not be the owner's: across many tiles, the half's neighbour is not its owner)."""
        if not self.owned[stitch].any() and self.owned[kept].any():
            return []
        cut, out = set(stitch.tolist()), []
        for i in kept:
            ti = self.tiles[i]
            nb = [j for j in self.nbr[self.ptr[i]:self.ptr[i + 1]].tolist() if j in cut and self.tiles[j] != ti]
            if nb and (self.tiles[stitch] == ti).any() and (  # (its tile split the object)
                    not self.owned[i] or self.owned_area[i] < 0.5 * shapely.area(self.c.geoms[i])):
                out.append(i)
            if not nb or self.owned[i] or i in out:
                continue
            nb = np.asarray(nb)
            clip = said_area(self.c.geoms[nb], self.exact[nb], said)
            area = shapely.area(clip)
            kept_i = np.full(len(nb), self.c.geoms[i], dtype=object)
            if (~self._covered(clip, kept_i, nb, area) & (area > 0)).any():
                out.append(i)
        return out

    def _split_outside_core(self, kept: list, stitch: np.ndarray) -> list:
        """Kept complete parts their tile owns whose object another tile's cut part, linked to it, reaches
        past inside that tile's own core, where the owner (a) split it from a cut stub lying outside its
        core (the stub within rule 0's gap of the part, with no area in its own core): the split lies where
        the other tile owns the area, and it drew both as one (a text line the owner split at a word gap in
        its neighbour's core); or (b) reported nothing over a stretch `THICK_CELLS` across that the cut part
        covers next to it, inside its window or past it (`_missed`: it stops short of its window's edge where
        the cut part goes on). They are stitched with it (rule 5), each inside its own core.
        A split inside the owner's core, or another object the owner drew there, stands (it decides)."""
        c, cut = self.c, set(stitch.tolist())
        out = []
        for i in kept:
            if not self.owned[i]:
                continue  # `_halves`
            ti = self.tiles[i]
            nb = sorted({k for j in [i, *(j for j in stitch.tolist() if self.tiles[j] == ti)]
                         for k in self.nbr[self.ptr[j]:self.ptr[j + 1]].tolist() if k in cut and self.tiles[k] != ti})
            if not nb:
                continue
            nb = np.asarray(nb)
            clip = shapely.intersection(c.geoms[nb], self.exact[nb])
            area = shapely.area(clip)
            past = ~self._covered(clip, np.full(len(nb), c.geoms[i], dtype=object), nb, area) & (area > 0)
            stubs = [j for j in stitch.tolist() if self.tiles[j] == ti and self.owned_area[j] <= 0.05 * shapely.area(
                c.geoms[j]) and shapely.distance(c.geoms[j], c.geoms[i]) < self.gap]
            split = [bool(p and shapely.intersects(g, c.geoms[i])
                          and any(shapely.distance(g, c.geoms[j]) < self.gap for j in stubs))
                     for p, g in zip(past.tolist(), clip)]
            if any(split) or any(p and not self._fuses(int(k), i) and self._missed(int(k), i)
                                 for p, k in zip(past.tolist(), nb.tolist())):
                out.append(i)
        return out

    def _fuses(self, k: int, i: int) -> bool:
        """Whether cut part `k` also links to another part of `i`'s tile lying beside `i` (`_close`): `k` drew
        two objects the owner drew apart as one (the next text line), so where it covers a stretch of the
        owner's window the owner left empty, that stretch is the other object's, not a part of `i` missed."""
        return any(j != i and self.tiles[j] == self.tiles[i] and self._close(i, j)
                   for j in self.nbr[self.ptr[k]:self.ptr[k + 1]].tolist())

    def _missed(self, k: int, i: int) -> bool:
        """Whether cut part `k` covers a stretch `THICK_CELLS` across next to `i`, beyond the sliver tolerance
        of every part of `i`'s tile and prompt: the tile (its owner) said nothing there, inside its window, or
        could not, past it. A model's mask of an object cut by the tile edge can stop short of that edge
        (../shared/model-behaviour.md; the DB text detector shrinks a line's box where its text runs off the
        image), so the owner sees it complete inside its window: a neighbour's view going on from its end,
        inside the window or past it, is the same object seen further, however far short the end stops (one
        test for both: a separate look past the window reached 16 px and the miss inside it began at 21, and
        a road drawn 17-20 px short came out as three objects). The stretch's part inside the owner's core is
        kept as rule 5 keeps a miss (`_stitch`)."""
        c, ti = self.c, int(self.tiles[i])
        frame = self.frames[ti]
        if self._tree is None:
            self._tree = shapely.STRtree(c.geoms)
        tol = sliver_tol(frame)
        stretch = c.geoms[k]
        mine = [j for j in self._tree.query(stretch, predicate="dwithin", distance=tol).tolist()
                if self.tiles[j] == ti and c.prompt[j] == c.prompt[i]]
        if mine:
            stretch = shapely.difference(stretch, shapely.buffer(shapely.union_all(c.geoms[mine]), tol, quad_segs=2))
        half = THICK_CELLS * MASK_CELL * frame.pixel / 2
        thick = shapely.buffer(shapely.buffer(stretch, -half, join_style="mitre"), half + tol + frame.pixel,
                               join_style="mitre")
        if thick.is_empty or shapely.distance(thick, c.geoms[i]) > frame.pixel:
            return False
        self.missed.append(shapely.intersection(shapely.intersection(c.geoms[k], thick), frame.core))
        return True

    def _nested(self, kept: list, stitched: list) -> set:
        """Positions in `kept` of complete parts whose box centre lies outside their tile's core that lie
        (>= `IOS_MIN`) inside one stitched object: the tiles owning that area said it is part of the larger
        object, so the part is another view of it (rule 4: the owner decides)."""
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
