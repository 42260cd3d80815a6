"""Rule 5's pairing across a fusing region (`apart.fused_groups` finds it): the groups of views on either side
of a tile that fused two objects, joined where they are stretches of one object.

Groups no tile drew apart that only the fusing parts connect are one object's stretches on either side of
them (its views end at that tile's window). Pairs sharing a fusing part are joined those lying most in line
first (`_off_line`: a stretch of a strip lies on its other stretch's axis, its neighbour's stretch a width
off it); where two groups drawn apart face two others, the two objects keep their order across the region
(`_in_order`), and a group alone on its side goes with the one whose meeting with the region lies on its
own side of the region's axis (`_lone_side`)."""

from __future__ import annotations

from collections import Counter
from typing import Callable

import numpy as np
import shapely

from .parts import spread

#: Two groups lying further off each other's axis than this many widths are not paired (`paired`).
OFF_LINE = 1.5


def paired(groups: list, fusers: set, links: dict, tiles: np.ndarray, close: Callable[[int, int], bool],
            geoms: np.ndarray) -> list:
    """`groups` (parts, without the fusing parts) with those that only the fusing parts connect and no tile drew
    apart joined: stretches of one object on either side of a tile that fused it with its neighbour (its
    views end at that tile's window; the fusing parts' area is divided among the joined groups after). Two
    groups are apart where a tile drew a part of each as neighbours (`close`); pairs sharing a fusing part
    are joined those lying most in line first (`_off_line`: a stretch of a strip lies on its other stretch's
    axis, the neighbour's stretch a width off it), up to `OFF_LINE` widths off, never two whose joined
    groups hold groups that are apart."""
    n = len(groups)
    if n < 3:
        return groups
    via = [{j for i in g.tolist() for j in links[i] if j in fusers} for g in groups]
    apart = _drawn_apart(groups, tiles, close, set(range(n)))
    shapes = np.asarray([shapely.union_all(geoms[g]) for g in groups], dtype=object)
    joins = {(x, y) for x in range(n) for y in range(x + 1, n) if (x, y) not in apart and via[x] & via[y]}
    times = Counter(g for p in apart for g in p)  # (how many groups each is drawn apart from)
    order, crossed = _in_order(joins, apart, shapes, times)
    lone, across = _lone_side(joins, apart, shapes, via, geoms, times)
    order, crossed = (order | lone) - (crossed | across), crossed | across
    axes: dict = {}
    meets = []
    for x, y in sorted(joins - crossed):
        off = -1.0 if (x, y) in order else _off_line(shapes, x, y, axes)
        if off <= OFF_LINE:
            meets.append((off, x, y))
    root, held = list(range(n)), {k: {k} for k in range(n)}

    def find(k: int) -> int:
        while root[k] != k:
            k = root[k]
        return k
    for _, x, y in sorted(meets):
        rx, ry = find(x), find(y)
        if rx != ry and not any((min(a, b), max(a, b)) in apart for a in held[rx] for b in held[ry]):
            root[ry] = rx
            held[rx] |= held.pop(ry)
    if len(held) == n:
        return groups
    return [np.sort(np.concatenate([groups[k] for k in sorted(held[r])])) for r in sorted(held)]


def _in_order(joins: set, apart: set, shapes: np.ndarray, times: Counter) -> tuple[set, set]:
    """(The pairs of groups to join first, those never to join): where two groups a tile drew apart (`apart`) face
    two others drawn apart across fusing parts (each may join each: `joins`), the two objects keep their order
    across: of the two ways to pair them, the one whose lines between the groups' centres do not cross, where
    the other's do. A strip bent inside the fusing tile lies far off its other stretch's axis (`_off_line`),
    as far as off its neighbour's; its order beside the neighbour holds. Only groups drawn apart from one other
    group each (`times`): one drawn apart from two (a strip beside a neighbour and a sliver) has no one order."""
    centre = [np.asarray(g.centroid.coords[0]) for g in shapes]
    order, crossed = set(), set()
    for x1, x2 in apart:
        for y1, y2 in apart:
            if (len({x1, x2, y1, y2}) < 4 or any(times[g] > 1 for g in (x1, x2, y1, y2))
                    or not all(_pair(a, b) in joins for a in (x1, x2) for b in (y1, y2))):
                continue
            one, two = ((x1, y1), (x2, y2)), ((x1, y2), (x2, y1))
            for keep, drop in ((one, two), (two, one)):
                if _crosses(*(centre[k] for p in drop for k in p)) and not _crosses(*(centre[k] for p in keep
                                                                                         for k in p)):
                    order |= {_pair(*p) for p in keep}
                    crossed |= {_pair(*p) for p in drop}
    return order - crossed, crossed


def _lone_side(joins: set, apart: set, shapes: np.ndarray, via: list, geoms: np.ndarray,
               times: Counter) -> tuple[set, set]:
    """(Pairs to join first, pairs never to join) where a group drawn apart from none (alone on its side of the
    fusing parts: the tile there drew only one of the two objects) faces two drawn apart across them: it goes
    with the one whose meeting with the fusing parts lies on its own side of their axis (the fused region holds
    the two objects side by side, one lane each), where it meets them at least a quarter of the way from the
    middle of the two towards one (else `_off_line` decides). As in `_in_order`, only groups drawn apart from one
    other group each (`times`), and only where one such pair faces the lone group."""
    order, crossed = set(), set()
    for x in range(len(shapes)):
        if times[x]:
            continue
        mine: set = set()
        for y1, y2 in apart:
            shared = via[x] & via[y1] & via[y2]
            if times[y1] > 1 or times[y2] > 1 or not shared or not {_pair(x, y1), _pair(x, y2)} <= joins:
                continue
            region = shapely.union_all(geoms[sorted(shared)])
            _, c, u = spread(region)
            lat = []
            for g in (x, y1, y2):
                meet = shapely.intersection(shapes[g], region)
                if meet.is_empty:
                    break
                e = np.asarray(meet.centroid.coords[0]) - c
                lat.append(u[0] * e[1] - u[1] * e[0])
            if len(lat) < 3 or abs(lat[0] - (lat[1] + lat[2]) / 2) < abs(lat[1] - lat[2]) / 4:
                continue
            near, far = (y1, y2) if abs(lat[0] - lat[1]) < abs(lat[0] - lat[2]) else (y2, y1)
            mine.add((_pair(x, near), _pair(x, far)))
        if len(mine) == 1:
            (near, far), = mine
            order.add(near)
            crossed.add(far)
    return order, crossed


def _pair(a: int, b: int) -> tuple[int, int]:
    return (a, b) if a < b else (b, a)


def _crosses(p, q, r, s) -> bool:
    """Whether the segments p-q and r-s cross (each one's ends strictly either side of the other's line)."""
    def side(a, b, c):
        return (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0])
    return side(p, q, r) * side(p, q, s) < 0 and side(r, s, p) * side(r, s, q) < 0


def _off_line(geoms: np.ndarray, i: int, j: int, axes: dict) -> float:
    """How far objects `i` and `j` lie off each other's axis: the larger of the distances of each one's centre
    from the other's axis, in that one's widths. Two stretches of one strip end to end lie on one line (0);
    a strip's neighbour lies a width or so off it."""
    out = 0.0
    for a, b in ((i, j), (j, i)):
        if a not in axes:
            axes[a] = _axis(geoms[a])
        c, u, width = axes[a]
        d = np.asarray(geoms[b].centroid.coords[0]) - c
        out = max(out, abs(d[0] * u[1] - d[1] * u[0]) / width)
    return out


def _axis(g) -> tuple:
    """(centre, unit direction of the longest spread of its outline's points, its area over its length along
    that direction: a strip's width) of polygon(s) `g`."""
    xy, c, u = spread(g)
    along = (xy - c) @ u
    return c, u, g.area / max(float(np.ptp(along)), 1e-300)


def _drawn_apart(groups: list, tiles: np.ndarray, close: Callable[[int, int], bool], among: set) -> set:
    """The pairs of `groups` (by index, among `among`) that a tile drew a part of each of as neighbours."""
    ids = sorted(among)
    return {(gx, gy) for x, gx in enumerate(ids) for gy in ids[x + 1:]
            if neighbour_pairs(groups[gx].tolist(), groups[gy].tolist(), tiles, close)}


def neighbour_pairs(xs: list, ys: list, tiles: np.ndarray, close: Callable[[int, int], bool]) -> dict:
    """Per tile, the pairs (j of `xs`, k of `ys`) of its parts that it drew as neighbours (`close`)."""
    out: dict = {}
    for j in xs:
        for k in ys:
            if tiles[j] == tiles[k] and close(j, k):
                out.setdefault(int(tiles[j]), []).append((j, k))
    return out
