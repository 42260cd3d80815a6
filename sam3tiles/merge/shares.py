"""Rule 5's division of a region that fused what the owners kept apart (`apart.fused_groups` finds it): its
area in its own core goes to the groups it fused, each taking the stretch nearer its own outline (`divide`),
and the groups' views keep their area in its core as well. A tile that drew none of a group's parts said
nothing of it in its core: the group takes the fusing region's stretch there too; a tile that drew a group's
parts said where it is not: that stretch goes to another (`fused_shares`). The shares then join the objects
stitched from the groups (`absorb`), a dropped group's share the object it continues (`orphaned`)."""

from __future__ import annotations

import numpy as np
import shapely

from ..vectorize.pieces import MASK_CELL
from .apart import FUSE_CELLS, side_by_side
from .parts import THICK_CELLS, long_side, polygonal


#: The stretch of a group's views that `_carried` takes its axis from: within this share of the fusing region's
#: size around it.
CARRY_REACH = 0.5
#: The least cosine between a carried group's axis and the stretch of another group beside the carry (10
#: degrees: a strip bends, its neighbour bends with it).
ALIGNED = 0.985


def divide(region, views: list, cell: float, denied: list | None = None) -> list:
    """`region` (a fusing part inside its own core) divided among the groups it fused: each group (`views`:
    the geometry of its parts) takes the stretch nearer its own outline than any other's (the owner's
    outlines, where they end at its window, carried on into the fusing tile). One geometry per group; the
    shares do not overlap and together keep all of `region` (what the cells leave out goes to the share it
    borders). `denied`: per group, where its own tiles said it is not (`_undenied`)."""
    if region.is_empty or region.area <= 0:  # the part said nothing inside its own core
        return [shapely.Polygon() for _ in views]
    # in pixels from the region's corner: GEOS is robust near 0, and the outlines lie on the pixel lattice
    lo, px = np.asarray(region.bounds[:2]), cell / MASK_CELL
    local = [shapely.transform(g, lambda xy: (xy - lo) / px) for g in (region, *views)]
    # snap-rounded overlays (GEOS raises on the floating overlays of these cells) on a power-of-two grid, a
    # millionth of a pixel: the lattice's whole and half pixels lie on it (the region's outline stays put)
    grid = 2.0 ** -20
    whole = polygonal(shapely.set_precision(local[0], grid))
    pts, who = [], []
    for k, v in enumerate(local[1:]):
        xy = shapely.get_coordinates(shapely.segmentize(shapely.boundary(v), MASK_CELL))
        pts.append(xy)
        who.append(np.full(len(xy), k))
    xy, who = np.concatenate(pts), np.concatenate(who)
    xy, first = np.unique(xy, axis=0, return_index=True)  # a ring's closing point, points two outlines share
    who = who[first]
    # outlines on the pixel lattice put four points on one circle again and again, where GEOS's Voronoi cells
    # overlap: a fixed jitter of a thousandth of a cell breaks those ties
    xy = xy + np.random.default_rng(0).uniform(-1e-3, 1e-3, xy.shape) * MASK_CELL
    frame = shapely.box(*np.minimum(xy.min(axis=0), whole.bounds[:2]), *np.maximum(xy.max(axis=0), whole.bounds[2:]))
    cells = np.asarray(shapely.get_parts(shapely.voronoi_polygons(shapely.multipoints(xy), extend_to=frame,
                                                                  ordered=True)), dtype=object)
    bits = shapely.intersection(whole, cells, grid_size=grid)
    got, taken = [], None
    for k in range(len(views)):
        g = polygonal(shapely.union_all(bits[who == k], grid_size=grid))
        if taken is not None:
            g = polygonal(shapely.difference(g, taken, grid_size=grid))
        taken = g if taken is None else shapely.union(taken, g, grid_size=grid)
        got.append(g)
    rest = polygonal(shapely.difference(whole, taken, grid_size=grid))
    for piece in shapely.get_parts(rest):
        if piece.area > 0:
            k = _bordering(piece, got, local[1:], grid)
            got[k] = polygonal(shapely.union(got[k], piece, grid_size=grid))
    if denied is not None:
        got = _undenied(got, [shapely.transform(d, lambda xy: (xy - lo) / px) for d in denied], local[1:], grid)
    return [shapely.transform(g, lambda xy: xy * px + lo) for g in got]


def _undenied(got: list, denied: list, views: list, grid: float) -> list:
    """Shares `got` with what each one's tiles said is not of it (`denied`) moved to the share it borders
    longest among those not denying it (kept where every share denies it)."""
    for k in range(len(got)):
        if denied[k].is_empty or got[k].is_empty:
            continue
        bad = polygonal(shapely.intersection(got[k], denied[k], grid_size=grid))
        if bad.is_empty or bad.area <= 0:
            continue
        got[k] = polygonal(shapely.difference(got[k], bad, grid_size=grid))
        for piece in shapely.get_parts(bad):
            inside = piece.representative_point()
            free = [j for j in range(len(got)) if j != k and not shapely.intersects(denied[j], inside)]
            if not free:
                got[k] = polygonal(shapely.union(got[k], piece, grid_size=grid))
                continue
            j = free[_bordering(piece, [got[x] for x in free], [views[x] for x in free], grid)]
            got[j] = polygonal(shapely.union(got[j], piece, grid_size=grid))
    return got


def _bordering(piece, shares: list, views: list, grid: float) -> int:
    """The share `piece` borders along the longest stretch, else the one whose view lies nearest."""
    edge = shapely.boundary(piece)
    shared = [shapely.intersection(edge, g, grid_size=grid).length if not g.is_empty else 0.0 for g in shares]
    if max(shared) > 0:
        return int(np.argmax(shared))
    return int(np.argmin([shapely.distance(piece, v) for v in views]))


def fused_shares(groups: list, fusers: np.ndarray, ptr, nbr, geoms, cores, cells: dict, tiles: np.ndarray,
                 frames: dict, members: np.ndarray) -> tuple[dict, set]:
    """{group: [its stretches of the fusing parts]}, and the fusing parts linked to fewer than two groups (they
    stand alone). Each fusing part is divided among the groups it links to (`divide`; `cells`: a mask cell per
    fusing part) inside its own core (`cores`), and inside the core of another tile of the component (`members`,
    `frames` by tile) for a group whose views reach in there and of which that tile drew no part: it said
    nothing of that group, as rule 5 keeps a part's area there (`_unsaid`), unless its parts cover half of the
    group's stretch there (`_said`: a region it fused). A tile that drew a group's parts said where it is not
    (`_denied`): that stretch goes to another group. (Long scene, held-out seed 261, every behaviour at once: a
    strip's stretch in the core of a tile that drew only its neighbour went to the neighbour, whose outline ran
    beside it all along, and was dropped there: 0.43 IoU against its owners' own views' 0.75.)"""
    shares: dict = {}
    left = set()
    for f in fusers.tolist():
        nb = set(nbr[ptr[f]:ptr[f + 1]].tolist())
        near = [k for k, g in enumerate(groups) if not (len(g) == 1 and g[0] in fusers) and nb & set(g.tolist())]
        if len(near) < 2:
            left.add(f)
            continue
        reach = _unsaid_cores(f, [groups[k] for k in near], geoms, tiles, frames, members)
        other = {t: frames[t].core for t in sorted(set().union(*reach))}
        region = shapely.intersection(geoms[f], shapely.union_all([cores[f], *other.values()]))
        denied = [_denied(region, geoms[groups[k]], tiles[groups[k]], tiles[f], frames, FUSE_CELLS * cells[f])
                  for k in near]
        views = [shapely.union_all(geoms[groups[k]]) for k in near]
        edges = [shapely.union_all([frames[t].window.exterior for t in np.unique(tiles[groups[k]]).tolist()])
                 for k in near]
        got = divide(region, [_carried(v, region, cells[f], e, shapely.union_all(views[:n] + views[n + 1:]))
                              for n, (v, e) in enumerate(zip(views, edges))], cells[f], denied)
        for k, r, g in zip(near, reach, got):
            gone = [c for t, c in other.items() if t not in r or _said(g, c, geoms[members[tiles[members] == t]])]
            if gone:  # (never what lies in the fusing part's own core: cores overlap by a pixel at their seams)
                g = polygonal(shapely.difference(g, shapely.difference(shapely.union_all(gone), cores[f])))
            shares.setdefault(k, []).append(g)
    return shares, left


def _carried(view, region, cell: float, edges, others):
    """`view` (one group's parts) carried on along its axis over the fusing `region` from an end that stops at
    its tiles' windows (`edges`: their outlines) short of the region's far side, where another group
    (`others`) runs on past that end alongside it (its stretch beside the carried one within `ALIGNED` of its
    direction): the end's cross-section swept on to the far side. A strip whose views end at the next window
    lies on in the region as it ran, beside the strip whose views run along it (held-out seed 537: the nearest
    outline gave its stretch to that neighbour). An object not elongated near the region, an end of its own,
    or one no other group runs on beside in line (a bend) stays as drawn."""
    if region.is_empty or region.area <= 0:  # (the fusing part said nothing inside its own core)
        return view
    size = max(region.bounds[2] - region.bounds[0], region.bounds[3] - region.bounds[1])
    reach = shapely.buffer(shapely.envelope(region), CARRY_REACH * size)
    near = polygonal(shapely.intersection(view, reach))
    if near.is_empty or near.area <= 0:
        return view
    u = long_side(near)
    n = np.asarray([-u[1], u[0]])
    xy = shapely.get_coordinates(shapely.boundary(near))
    a, b = xy @ u, xy @ n
    ra = shapely.get_coordinates(region) @ u
    length = float(a.max() - a.min())
    width = near.area / max(length, cell)
    if length < 2 * width:
        return view
    out = [view]
    for end, far, side in ((a.max(), ra.max(), 1.0), (a.min(), ra.min(), -1.0)):
        if side * (far - end) <= 2 * cell:
            continue
        tip = xy[side * (a - end) >= -2 * cell]
        if not shapely.dwithin(shapely.multipoints(tip), edges, 2 * cell):
            continue  # (the object's own end, not its window's)
        last = side * (a - end) >= -2 * width  # (its cross-section: the end's last stretch, two widths long)
        lo, hi = float(b[last].min()), float(b[last].max())
        swept = _rectangle(u, n, (end, far), (lo, hi))
        lane = _rectangle(u, n, (end + side * width, far), (lo - width, hi + width))  # (past the end, a width wider)
        beside = polygonal(shapely.intersection(others, lane))
        if beside.is_empty or beside.area <= 0 or abs(float(long_side(beside) @ u)) < ALIGNED:
            continue  # (no other group runs on past the end beside it, in line)
        out.append(swept)
    return polygonal(shapely.union_all(out)) if len(out) > 1 else view


def _rectangle(u, n, along: tuple, across: tuple):
    """The rectangle spanning `along` on axis `u` and `across` on its normal `n`."""
    return shapely.Polygon([a * u + b * n for a, b in ((along[0], across[0]), (along[1], across[0]),
                                                       (along[1], across[1]), (along[0], across[1]))])


def _unsaid_cores(f: int, groups: list, geoms, tiles: np.ndarray, frames: dict, members: np.ndarray) -> list:
    """Per group of `groups`: the tiles of the component (`members`), but fusing part `f`'s, whose core `f` and
    the group's views reach into and that drew none of the group's parts."""
    out: list = [set() for _ in groups]
    for t in np.unique(tiles[members]).tolist():
        core = frames[t].core
        if t == tiles[f] or not shapely.intersects(geoms[f], core):
            continue
        for n, g in enumerate(groups):
            if not (tiles[g] == t).any() and shapely.intersects(geoms[g], core).any():
                out[n].add(t)
    return out


def _said(share, core, parts: np.ndarray) -> bool:
    """Whether a tile's `parts` cover half of `share` inside its core `core`: it drew something of that stretch
    (a region it fused with a neighbour, say), not nothing."""
    here = shapely.intersection(share, core)
    if here.is_empty or here.area <= 0 or not len(parts):
        return False
    return shapely.intersection(here, shapely.union_all(parts)).area >= 0.5 * here.area


def _denied(region, parts: np.ndarray, tiles: np.ndarray, fusing: int, frames: dict, reach: float):
    """Where the tiles that drew `parts` (one group's), the fusing tile aside, said the group is not, inside
    `region`: their windows beyond `reach` of their parts (a model's boundary moves by a cell or two)."""
    out = []
    for t in np.unique(tiles[tiles != fusing]).tolist():
        w = shapely.intersection(region, frames[t].window)
        if not w.is_empty:
            out.append(shapely.difference(w, shapely.buffer(shapely.union_all(parts[tiles == t]), reach, quad_segs=2)))
    return polygonal(shapely.union_all(out)) if out else shapely.Polygon()


def absorb(outs: list, shares: list, gap: float, one: bool = False) -> list:
    """Stitched objects `outs` [(geometry, first, score, n_tiles)] with the stretches `shares` of fusing parts
    joined to those within `gap` of them (the nearest where none is). `one`: `outs` are one group's, and
    objects one stretch joins are one (two stretches of an object on either side of the fusing tile,
    `pairing.paired`); else each takes it (objects of several groups beside a dropped group's share)."""
    shares = [g for g in shares if not g.is_empty and g.area > 0]
    if not shares or not outs:
        return outs
    outs = [list(o) for o in outs]
    for g in shares:
        geoms = np.asarray([o[0] for o in outs], dtype=object)
        d = shapely.distance(geoms, g)
        hit = np.flatnonzero(d <= gap).tolist() if (d <= gap).any() else [int(np.argmin(d))]
        if not one:
            for k in hit:
                outs[k][0] = polygonal(shapely.union(geoms[k], g))
            continue
        k = hit[0]
        outs[k][0] = polygonal(shapely.union_all([*geoms[hit], g]))
        if len(hit) > 1:
            area = shapely.area(geoms[hit])
            outs[k][1] = min(outs[j][1] for j in hit)
            outs[k][2] = float(np.average([outs[j][2] for j in hit], weights=area)) if area.sum() > 0 else outs[k][2]
            outs[k][3] = max(outs[j][3] for j in hit)
            outs = [o for j, o in enumerate(outs) if j not in hit[1:]]
    return [tuple(o) for o in outs]


def orphaned(outs: list, orphans: list, gap: float, cell: float) -> list:
    """Stitched objects `outs` with the shares `orphans` of groups dropped as slivers (`absorb`: each joins the
    objects within `gap`). A share that holds a region `THICK_CELLS` mask cells across (`cell`) and lies side by
    side with some of those objects, not all, is a stretch of another object the fusing tile drew beside them:
    it joins only the others (the object it continues), as the group it was left by would have (long scenes,
    held-out seeds 249 / 264, every behaviour at once: a neighbour's stretch joined to a strip beside it,
    0.667 and 0.752 IoU against its owners' own views' 0.925 and 0.928)."""
    rest = []
    for g in orphans:
        near = [k for k, o in enumerate(outs) if shapely.dwithin(o[0], g, gap)] if g.area > 0 else []
        if len(near) < 2 or shapely.buffer(g, -THICK_CELLS * cell / 2).is_empty:
            rest.append(g)
            continue
        ends = [k for k in near if not side_by_side(g, outs[k][0], cell)]
        if not ends or len(ends) == len(near):
            rest.append(g)
            continue
        outs = [(polygonal(shapely.union(o[0], g)), *o[1:]) if k in ends else o for k, o in enumerate(outs)]
    return absorb(outs, rest, gap)
