"""Rule 5's guard: a stitch never joins what the tile owning an object kept apart.

Two neighbouring objects (field strips, text lines, parcels a couple of mask cells apart) are each cut in
the tile that owns them, which draws them as two masks, touching where each boundary moved out by a cell.
A tile that does not own them may draw both as one region (a fused answer); in the band it shares with the
owner that region links to both of the owner's views, so the component holds both objects, and the union
of every part inside its own core would be one object (both fused, each IoU about 0.5). The owner decides
(rule 4): the owner's views are stitched in groups of their own links; the region that fused them is
divided among those groups (`shares`), or stands alone where it links to fewer than two.
Views side by side along their length, or one lying alongside the other however short (a stretch of a wide
strip), are two objects however long a model's boundary noise makes them touch (`side_by_side`); two halves
of an object a tile split across are not neighbours (`neighbours`). Two regions may fuse the same objects,
each where the other leaves them joined (`_together`). Groups no tile drew apart that only the fusing region
connects are one object's stretches, joined by `pairing.paired`."""

from __future__ import annotations

from typing import Callable

import numpy as np
import shapely

from ..vectorize.pieces import MASK_CELL
from .pairing import neighbour_pairs, paired
from .parts import THICK_CELLS, long_side

#: Two views of one tile this close (mask cells) can be neighbours another tile drew as one region: each
#: boundary moves by a cell or so, so two objects two cells apart come within a cell or touch.
FUSE_CELLS = 3.0
#: Two views of one tile that face each other along more than this many times the thinner one's depth (its
#: area over that length: f^2 > SIDE_RATIO x area) are two long objects side by side (strips, text lines),
#: however long they touch. A split (`../shared/model-behaviour.md`: two queries each take half of an
#: elongated object) cuts across an object's length: its halves meet along its width, deep behind the cut
#: (the testing model cuts across the longer side at 0.35-0.65: at most 1 / 0.35 = 2.9 for a square).
SIDE_RATIO = 3.5
#: Two views of one tile face each other where their outlines lie within this many mask cells (`facing`):
#: neighbours a cell or two apart, each view drawn a cell or two inside its object (a real model's boundary
#: moves that much), face each other along their length.
FACING_CELLS = 2 * FUSE_CELLS
#: One tile's two parts side by side in its own core decide two objects where the smaller holds at least
#: this share of the larger's area (`_Apart._decides`): a speck beside an object decides nothing.
DECIDES_RATIO = 0.25
#: A view that faces another along this share of its length, the other running on past it, lies alongside it
#: (`_alongside`): a strip's stretch beside its neighbour.
ALONG = 0.75
#: ... running on past it by more than this share of its depth (`_alongside`; held-out scenes: the halves of
#: one object at most 0.34, two objects 0.37-0.45 three times, else 0.93 and more).
PAST = 0.5
#: What a part holding no pair of one tile holds of two groups overlaps along its axis by this share of the
#: shorter where it fuses them (`_Apart.spans`): two objects side by side, not one object's views end to end.
SPANS_OVERLAP = 0.5
#: A view smaller than this many mask cells (2 x 2: a model's boundary moving a cell in on each side leaves
#: nothing of it) is a speck: no object a tile drew beside another (`neighbours`).
SPECK_CELLS = 4.0


def fused_groups(s: np.ndarray, tiles: np.ndarray, owned: np.ndarray, ptr: np.ndarray, nbr: np.ndarray,
                 holds: Callable[[int, int], int], close: Callable[[int, int], bool],
                 side: Callable[[int, int], bool], geoms: np.ndarray,
                 inside: np.ndarray, specks: Callable[[np.ndarray], set] = lambda s: set()
                 ) -> tuple[list[np.ndarray], np.ndarray] | None:
    """For cut parts `s` of one component (links: CSR `ptr`, `nbr` over all parts): the groups to stitch
    apart and the fusing parts, or None where nothing fuses what the owners kept apart.

    A fusing part `i` holds (`holds(i, j)`: `j` lies inside it where their tiles overlap, as rule 2 links
    part and whole, and reaches its own tile's edge there) two or more parts of one other tile, two of them
    `close` (side by side, a cell or two apart: two arms of one object bent through the other tile lie
    farther apart, and a tile's split across an object leaves one half short of that edge; two that face
    each other along their length, `side` (within `FACING_CELLS`), are held where one ends in the band: an
    object's own end, not a split's), that, without the fusing parts' links, lie in different groups that
    tiles drew apart (`_Apart`; `inside`: each part's area inside its own tile's core); two tiles that split
    one object at different places overlap each other's halves only in part (rule 2's third look): no fuse.
    Groups that only the fusing parts connect and no tile drew apart are stretches of one object on either
    side of them: paired (`pairing.paired`, `geoms` the parts'). A part that alone connects two parts one tile owns and
    drew as neighbours fuses them too (`_bridges`: the tiles beside it each drew one of the two). A speck
    (`specks(s)`: those of `s`, asked where a part holds two of one tile or a tile owns two) links to one part
    only (`_unspecked`), where the fusing parts are looked for and, without them, in the groups."""
    inset = set(s.tolist())
    links = {i: [j for j in nbr[ptr[i]:ptr[i + 1]].tolist() if j in inset] for i in s.tolist()}
    held = _holding(s, links, tiles, holds, close, side)
    mine = _owned_by_tile(s, tiles, owned)
    if not held and not mine:
        return None
    # all at once (two tiles that fused the same two objects), then each alone (a tile that split one object
    # it holds two parts of as well), where the others found left out too still leave its parts apart (held-
    # out seed 615: with the regions fusing two other strips linked, a clean view holding a split of its own
    # strip looked like one); a speck links to one part only (`_unspecked`)
    sp = specks(s)
    plain = _unspecked(links, set(), geoms, sp) if sp else links
    apart = _Apart(s, plain, owned, tiles, close, side, geoms, inside, holds)
    fusers = {i for i in held if apart(set(held), held[i])}
    single = {i for i in held if i not in fusers and apart({i}, held[i])}
    fusers |= {i for i in single if apart(fusers | single, held[i])}
    # then a part holding parts of two groups drawn apart, those found left out (a fusing part's link to a
    # clean view beside it makes that view look like one)
    fusers |= {i for i in held if i not in fusers and apart.joins(fusers | {i}, i)}
    if fusers:  # (and one holding no pair of one tile, where what it holds of each lies apart: `_Apart.spans`)
        fusers |= {i for i in s.tolist() if i not in fusers and i not in held and len(plain[i]) > 1
                   and apart.joins(fusers | {i}, i, apart.spans)}
    fusers |= _bridges(s, plain, mine, fusers, holds, close, tiles)
    if not fusers and held:
        fusers = _together(s, plain, mine, held, apart, holds, close, tiles)
    if not fusers:
        return None
    label = _labels(s, _unspecked(links, fusers, geoms, sp), fusers)
    rest = [i for i in s.tolist() if i not in fusers]
    groups = paired([np.asarray([i for i in rest if label[i] == lab], dtype=s.dtype)
                      for lab in sorted({label[i] for i in rest})], fusers, links, tiles, close, geoms)
    alone = sorted(fusers)
    return groups + [np.asarray([i], dtype=s.dtype) for i in alone], np.asarray(alone, dtype=s.dtype)


def _holding(s: np.ndarray, links: dict, tiles: np.ndarray, holds, close, side) -> dict[int, list[list[int]]]:
    """Per part of `s` holding two or more parts of one other tile (`_held`): those parts, per such tile."""
    held: dict[int, list[list[int]]] = {}
    for i in s.tolist():
        by_tile: dict[int, list[int]] = {}
        for j in links[i]:
            if tiles[j] != tiles[i]:
                by_tile.setdefault(int(tiles[j]), []).append(j)
        two = [h for h in (_held(i, js, holds, close, side) for js in by_tile.values() if len(js) > 1) if h]
        if two:
            held[i] = two
    return held


def speck(area, pixel):
    """Whether a view of `area` (CRS units squared; `pixel`: its tile's pixel) is a speck (`SPECK_CELLS`)."""
    return area < SPECK_CELLS * (MASK_CELL * pixel) ** 2


def _unspecked(links: dict, cut: set, geoms: np.ndarray, specks: set) -> dict:
    """`links` where each speck (`specks`: parts `speck` says are) linked to two or more parts not in `cut`
    keeps only its link to the one it overlaps most (the larger, then the lower-left, on a tie): a speck
    cannot say two views are one object. Rule 3's guard (`links._bridges`) keeps such links where the
    fusing parts' links keep both views one component (held-out seed 266: a speck of 1 m^2 between two
    strips' clean views joined the strips once the region fusing them was left out; 287: two specks at a
    window's edge, each linked to both strips' views, kept the region that fused them from being found)."""
    out = dict(links)
    for i in sorted(specks - cut):
        on = [j for j in links[i] if j not in cut and j not in specks]
        if len(on) < 2:
            continue
        key = [(-shapely.area(shapely.intersection(geoms[i], geoms[j])), -geoms[j].area, *geoms[j].bounds[:2])
               for j in on]
        best = on[min(range(len(on)), key=key.__getitem__)]
        out[i] = [j for j in links[i] if j == best or j in cut or j in specks]
        for j in on:
            if j != best:
                out[j] = [x for x in out[j] if x != i]
    return out


def _owned_by_tile(s: np.ndarray, tiles: np.ndarray, owned: np.ndarray) -> list:
    """The parts of `s` a tile owns, for each tile that owns two or more of them."""
    by: dict = {}
    for i in s.tolist():
        if owned[i]:
            by.setdefault(int(tiles[i]), []).append(i)
    return [js for js in by.values() if len(js) > 1]


def _bridges(s: np.ndarray, links: dict, mine: list, fusers: set, holds, close, tiles: np.ndarray) -> set:
    """Parts that alone connect two parts one tile owns (`mine`: per tile) and drew as neighbours (`close`),
    holding a part on each side: a region that fused the two objects where no tile beside it drew both (each
    drew one of them, the other missed), so that it holds no pair of one tile (`_held`). A part that alone
    connects two lies on every path between them: the parts of one path are tried (a walk of the links each),
    `close` and `holds` asked only of one that separates them. Of those that do, the first that leaves no two
    parts another tile drew as neighbours in one group (`_drawn_together`), else the one that leaves fewest:
    a clean view of one object beside the region that fused the two separates them as well, where the
    region's link to a view of that object puts the view on the other side."""
    out: set = set()
    for js in mine:
        for n, j in enumerate(js):
            for k in js[n + 1:]:
                cut = fusers | out
                path = _path(links, j, k, cut)
                found = []
                for i in (path or [])[1:-1]:
                    label = _labels(s, links, cut | {i})
                    if (label[j] != label[k] and close(j, k) and _holds_side(i, links, label, label[j], cut, holds)
                            and _holds_side(i, links, label, label[k], cut, holds)):
                        found.append((_drawn_together(s, label, cut | {i}, tiles, close, (j, k)), len(found), i))
                        if found[-1][0] == 0:
                            break
                if found:
                    out.add(min(found)[2])
    return out


def _together(s: np.ndarray, links: dict, mine: list, held: dict, apart, holds, close, tiles: np.ndarray) -> set:
    """Two regions that fused the same two objects, each where the other leaves them joined (held-out seed 473:
    a tile's view of one strip took in the other's edge at its window's edge, another tile's view held both
    strips): the parts holding pairs (`held`) left out together, a part that alone still connects two parts
    one tile owns and drew as neighbours (`_bridges`), lying inside one's views and holding the other's, is
    the second. Those of `held` whose pairs that leaves in groups drawn apart, with it; else none."""
    def either(i: int, j: int) -> int:
        return holds(i, j) or holds(j, i)
    extra = _bridges(s, links, mine, set(held), either, close, tiles)
    found = {i for i in held if extra and apart(set(held) | extra, held[i])}
    return found | extra if found else set()


def _drawn_together(s: np.ndarray, label: dict, cut: set, tiles: np.ndarray, close, owned: tuple) -> int:
    """How many pairs of parts of one tile that it drew as neighbours (`close`) lie in one group (`label`),
    the parts in `cut` and the tile of the `owned` pair left out."""
    by: dict = {}
    for x in s.tolist():
        if x not in cut and tiles[x] != tiles[owned[0]]:
            by.setdefault((int(tiles[x]), label[x]), []).append(x)
    return sum(close(a, b) for xs in by.values() for n, a in enumerate(xs) for b in xs[n + 1:])


def _path(links: dict, a: int, b: int, cut: set) -> list | None:
    """A shortest path of links from `a` to `b` avoiding the parts in `cut` (its parts, both ends included);
    None where there is none."""
    if a in cut or b in cut:
        return None
    back = {a: a}
    todo = [a]
    for i in todo:  # (breadth first: the list grows as it is walked)
        if i == b:
            path = [b]
            while path[-1] != a:
                path.append(back[path[-1]])
            return path[::-1]
        for j in links[i]:
            if j not in back and j not in cut:
                back[j] = i
                todo.append(j)
    return None


def _holds_side(i: int, links: dict, label: dict, lab: int, cut: set, holds) -> bool:
    """Whether part `i` holds one of its linked parts in group `lab`."""
    return any(holds(i, x) for x in links[i] if x not in cut and label[x] == lab)


def _held(i: int, js: list, holds, close, side) -> list:
    """The parts `js` (of one tile) that `i` holds where two of them it holds are `close`, else []. Which are
    close is asked first: it says no at once for parts farther apart than `FUSE_CELLS` cells, the most
    common case, where `holds` overlays each part with the band. Two that face each other along their length
    (`side`: neighbours, not the halves of a split across, which meet along the cut only) are held however
    they end in the band: a strip that starts inside it stops short of its window's edge as a split's half
    does."""
    near = [(j, k) for a, j in enumerate(js) for k in js[a + 1:] if close(j, k)]
    if not near:
        return []
    how: dict = {}

    def held(j: int) -> int:  # (asked once a part, those in close pairs first)
        if j not in how:
            how[j] = holds(i, j)
        return how[j]
    for j in js:
        if any(j in pair for pair in near):
            held(j)
    if any(how[j] == 2 and how[k] == 2 for j, k in near):
        return [j for j in js if held(j) == 2]
    beside = {x for j, k in near if how[j] and how[k] and 1 in (how[j], how[k]) and side(j, k) for x in (j, k)}
    return [j for j in js if j in beside or held(j) == 2] if beside else []


def neighbours(a, b, pixel: float) -> bool:
    """Whether views `a` and `b` of one tile (`pixel`: a tile pixel in CRS units) are two objects a tile could
    draw as one region, not the halves of one object it split across: they face each other along their
    length or one lies alongside the other (`side_by_side`: within `FACING_CELLS`), or, within `FUSE_CELLS`,
    they touch along less than `THICK_CELLS` cells (halves meet along the cut) and face each other along a
    side of a compact object (`f^2 > ` the smaller one's area / `SIDE_RATIO`). Halves of an elongated object
    that a split left a gap between face each other across its width only; two halves of a compact object
    cannot be told from two compact neighbours but by their touching. A speck (`SPECK_CELLS`) is no neighbour:
    a view clipped at its window's edge to a cell beside a strip's end drew nothing apart from it (held-out
    seed 266)."""
    cell = MASK_CELL * pixel
    least = min(a.area, b.area)
    if speck(least, pixel) or not shapely.dwithin(a, b, FACING_CELLS * cell):
        return False
    f = facing(a, b, cell)
    if f * f > SIDE_RATIO * least or _alongside(a, b, f, cell):
        return True
    if not shapely.dwithin(a, b, FUSE_CELLS * cell):
        return False
    shared = shapely.intersection(shapely.boundary(a), shapely.buffer(b, pixel))
    return shared.length < THICK_CELLS * cell and f * f > least / SIDE_RATIO


def side_by_side(a, b, cell: float) -> bool:
    """Whether views `a` and `b` of one tile (`cell`: a mask cell in CRS units) face each other along a length
    `f` (`facing`) long beside the thinner one's depth (`f^2 > SIDE_RATIO x` its area): two long objects side
    by side, not the halves of one object split across; or one lies alongside the other (`_alongside`: a short
    stretch of a wide strip beside its neighbour). A model's boundary noise makes such neighbours touch along
    stretches of any length, so the length they touch along cannot tell them from halves."""
    f = facing(a, b, cell)
    return f > 0 and (f * f > SIDE_RATIO * min(a.area, b.area) or _alongside(a, b, f, cell))


def _alongside(a, b, f: float, cell: float) -> bool:
    """Whether one of views `a` and `b` lies alongside the other: along the other's axis (`long_side`) it faces
    the other (`f`: `facing`) over at least `ALONG` of its own extent there (an extent longer than the corners
    `facing` leaves out: a fragment faces nothing), and the other, reaching over that extent (to within a
    quarter of it, or `FACING_CELLS`), runs on past it by more than `PAST` of its depth (its area over that
    extent); the two touch along less than half of `f` (the halves of a split meet all along the cut). A
    stretch of a wide strip beside its neighbour, however short (held-out seed 455: 171 x 74 m beside a strip
    298 m long in one tile). The halves of a split lie end to end along an elongated object; across a compact
    one each reaches about as far along the cut as the other (a tilted parcel's halves: one past the other by
    up to a third of its depth on held-out scenes)."""
    for x, y in ((a, b), (b, a)):
        u = long_side(y)
        along, past = (shapely.get_coordinates(shapely.boundary(g)) @ u for g in (x, y))
        lo, hi = float(along.min()), float(along.max())
        if f < ALONG * (hi - lo) or hi - lo <= 2 * FACING_CELLS * cell:
            continue
        before, after = lo - float(past.min()), float(past.max()) - hi
        tol = max(FACING_CELLS * cell, (hi - lo) / 4)
        if min(before, after) > -tol and max(before, 0.0) + max(after, 0.0) > PAST * x.area / (hi - lo):
            touch = shapely.intersection(shapely.boundary(a), shapely.buffer(b, cell / MASK_CELL)).length
            return touch < f / 2
    return False


def facing(a, b, cell: float) -> float:
    """How long views `a` and `b` face each other: the longer of the stretches of either outline within
    `FACING_CELLS` mask cells of the other (its segments, cut a cell long, both of whose ends are), less that
    reach at each end (the corners). (The points' distances to the other, prepared: a buffer of a long view's
    noisy outline cost 15 ms.)"""
    near, best = FACING_CELLS * cell, 0.0
    for x, y in ((a, b), (b, a)):
        rings = shapely.get_parts(shapely.boundary(x))
        xy, at = shapely.get_coordinates(shapely.segmentize(rings, cell), return_index=True)
        shapely.prepare(y)
        ok = shapely.dwithin(shapely.points(xy), y, near)
        both = ok[1:] & ok[:-1] & (at[1:] == at[:-1])
        best = max(best, float(np.hypot(*np.diff(xy, axis=0)[both].T).sum()))
    return best - 2 * near


class _Apart:
    """Whether, without the parts in `cut`, the parts a fusing part holds (`two`: per tile, its parts the fusing
    part holds) lie in different groups drawn apart: by two of those tiles, or, held in one tile, by two or
    more tiles that drew a part of each group as neighbours (`close`: the tiles along the objects), or by one
    tile whose two such parts it both owns (the owner of two neighbours of comparable size, `_comparable`: a
    speck it drew beside an object decides nothing; held-out seed 634, a river in two), or by one tile whose two
    such parts lie side by side in its own core (`_decides`). One tile that split a long object across draws one
    pair however many of its views own it (a long object's middle parts each do); and two tiles that drew two
    neighbours apart outweigh the one that fused them, owner or not."""

    def __init__(self, s: np.ndarray, links: dict, owned: np.ndarray, tiles: np.ndarray, close, side,
                 geoms: np.ndarray, inside: np.ndarray, holds):
        self.s, self.links, self.owned, self.tiles, self.close = s, links, owned, tiles, close
        self.side, self.geoms, self.inside, self.holds = side, geoms, inside, holds

    def __call__(self, cut: set, two: list) -> bool:
        label = _labels(self.s, self.links, cut)
        split = [sorted({label[j] for j in h}) for h in two]
        drawn = [(x, y) for labs in split for n, x in enumerate(labs) for y in labs[n + 1:]]
        if len(drawn) > len(set(drawn)):  # (two tiles the fusing part holds drew the same two groups apart)
            return True
        return any(self._drawn(label, cut, x, y) for labs in split for n, x in enumerate(labs) for y in labs[n + 1:])

    def joins(self, cut: set, i: int, also=None) -> bool:
        """Whether part `i` holds (`holds`) parts of two groups drawn apart, the parts in `cut` left out: the
        pair of one tile it holds may lie in two groups no tile drew apart (one strip's stretch that links to
        the rest of that strip only through `i`), while two other groups it holds a part of were (long scene,
        held-out seed 261, every behaviour at once: two strips fused, 0.43 and 0.29 IoU against their owners'
        own views' 0.75 and 0.42). `also(i, xs, ys)`, where given, is asked of `i`'s links in the two groups
        too."""
        label = _labels(self.s, self.links, cut)
        labs = sorted({label[j] for j in self.links[i] if j not in cut})
        # (drawn apart asked first: `holds` overlays the parts, most often for nothing)
        return any(self._drawn(label, cut, x, y) and _holds_side(i, self.links, label, x, cut, self.holds)
                   and _holds_side(i, self.links, label, y, cut, self.holds)
                   and (also is None or also(i, *([j for j in self.links[i] if j not in cut and label[j] == z]
                                                  for z in (x, y))))
                   for n, x in enumerate(labs) for y in labs[n + 1:])

    def spans(self, i: int, xs: list, ys: list) -> bool:
        """Whether what part `i` holds of one group (`xs`, its links there) and of the other (`ys`) lie side by
        side across it: along its axis (`long_side`) the two overlap by at least `SPANS_OVERLAP` of the
        shorter. A region over two objects side by side, not a view of one object whose views on either side
        of it a cut left in two groups (held-out seed 470: a clean view of one strip holding its views in the
        bands at both its ends)."""
        u = long_side(self.geoms[i])
        span = []
        for zs in (xs, ys):
            held = shapely.intersection(self.geoms[zs], self.geoms[i])
            xy = shapely.get_coordinates(held) @ u
            if not len(xy):
                return False
            span.append((float(xy.min()), float(xy.max())))
        (a0, a1), (b0, b1) = span
        return min(a1, b1) - max(a0, b0) >= SPANS_OVERLAP * max(min(a1 - a0, b1 - b0), 1e-300)

    def _drawn(self, label: dict, cut: set, x: int, y: int) -> bool:
        """Whether groups `x` and `y` (labels) are drawn apart. A part left out (`cut`) that links to one of
        them only stands for it: a tile that drew it beside a part of the other drew the two apart, though
        that part fused the one with a third object."""
        xs, ys = ([i for i in self.s.tolist() if i not in cut and label[i] == lab] for lab in (x, y))
        sx, sy = set(xs), set(ys)
        for c in sorted(cut):
            on = set(self.links[c])
            if on & sx and not on & sy:
                xs.append(c)
            elif on & sy and not on & sx:
                ys.append(c)
        pairs = neighbour_pairs(xs, ys, self.tiles, self.close)
        return len(pairs) >= 2 or any(self.owned[j] and self.owned[k] and self._comparable(j, k) or self._decides(j, k)
                                      for ps in pairs.values() for j, k in ps)

    def _comparable(self, j: int, k: int) -> bool:
        """Whether parts `j` and `k` are of comparable size (`DECIDES_RATIO`): not a speck beside an object."""
        area = shapely.area(self.geoms[[j, k]])
        return bool(area.min() >= DECIDES_RATIO * area.max())

    def _decides(self, j: int, k: int) -> bool:
        """Whether one tile's parts `j` and `k` lie mostly inside its own core (where its view is the one the
        merge keeps), of comparable size (`DECIDES_RATIO`: not a speck beside an object), side by side along
        their length: two objects there that tile decides, as two tiles drawing them apart do (long scene,
        held-out seed 248: the owner fused two strips, one tile along them drew them apart)."""
        area = shapely.area(self.geoms[[j, k]])
        return bool((2 * self.inside[[j, k]] > area).all() and self._comparable(j, k) and self.side(j, k))


def _labels(s: np.ndarray, links: dict, cut: set) -> dict:
    """Connected groups of `s` by `links`, the parts in `cut` left out (each alone)."""
    label: dict = {}
    for start in s.tolist():
        if start in label:
            continue
        label[start] = start
        if start in cut:
            continue
        todo = [start]
        while todo:
            i = todo.pop()
            for j in links[i]:
                if j not in label and j not in cut:
                    label[j] = start
                    todo.append(j)
    return label
