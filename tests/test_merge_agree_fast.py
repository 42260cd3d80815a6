"""Rule 5's measure of how far the tiles' views of an object lie apart (`merge.smooth`) costs less and gives
what the plain form gave (issue 49: the reference merge spent its time measuring views that agree): each
tile pair's band found once per merge pass, its rectangle test in scalar arithmetic, every side of every
pair measured by one shapely call a step, the outward normals taken only where `shift_views` needs them,
the agreement decided before the offsets are, and from part of the points where over half of them agree.
The plain form here is the code before, per pair.

Views are mask outlines as the vectorizer makes them (staircases of mask cells of thresholded random
fields at UTM coordinates, 0.3 m pixels), each tile's view the object in its window: equal views, views a
cell apart (one grown, one shifted), views that differ only outside the bands, views with their own noise,
an object that reaches only some bands; north-up frames (rectangle clips) and rotated ones (overlays)."""

from __future__ import annotations

import numpy as np
import pytest
import rasterio.features
import shapely
from affine import Affine
from scipy.ndimage import gaussian_filter

from sam3tiles.merge import consensus, smooth
from sam3tiles.merge.parts import polygonal
from sam3tiles.tiling.frame import TileFrames
from sam3tiles.tiling.grid import TileGrid
from sam3tiles.vectorize.pieces import EDGE_MARGIN, MASK_CELL

PIXEL = 0.3
NORTH_UP = Affine(PIXEL, 0, 500000.0, 0, -PIXEL, 4100000.0)
GRIDS = {"north-up": NORTH_UP, "rotated": NORTH_UP @ Affine.rotation(20)}
W, H = 2500, 1800  # 3 x 3 tiles of 1008 px, 256 px overlap


def _plain_pair_signed(a, b, polys, lines, frames):
    """The signed distances and outward normals of views `a` and `b` in their band, as the code before
    measured them (None where they share no band or one has no boundary there)."""
    fa, fb = frames[a], frames[b]
    if not shapely.intersects(fa.window, fb.window):
        return None
    band = shapely.intersection(fa.window, fb.window)
    cell = MASK_CELL * max(fa.pixel, fb.pixel)
    band = shapely.buffer(band, -EDGE_MARGIN * cell / MASK_CELL, join_style="mitre")
    if band.is_empty:
        return None
    x0, y0, x1, y1 = band.bounds
    clip = ((lambda g: shapely.clip_by_rect(g, x0, y0, x1, y1)) if np.isclose(band.area, (x1 - x0) * (y1 - y0))
            else (lambda g: shapely.intersection(g, band)))
    la, lb = clip(lines[a]), clip(lines[b])
    if la.is_empty or lb.is_empty:
        return None
    la, lb = (shapely.simplify(x, 0.2 * cell, preserve_topology=False) for x in (la, lb))
    la, lb = (_no_points(x) for x in (la, lb))  # (the code before failed here: see the speck's test)
    if la.is_empty or lb.is_empty:
        return None
    out, normals = [], []
    for one, other, own, poly, sign in ((la, lb, polys[a], polys[b], 1.0), (lb, la, polys[b], polys[a], -1.0)):
        xy = shapely.get_coordinates(shapely.segmentize(one, max(cell, one.length / smooth.SAMPLES)))
        pick = slice(None, None, max(1, len(xy) // smooth.SAMPLES))
        pts = xy[pick]
        outside = ~shapely.contains_xy(poly, pts[:, 0], pts[:, 1])
        out.append(sign * np.where(outside, 1.0, -1.0) * shapely.distance(shapely.points(pts), other))
        normals.append(consensus._outward(xy, own, cell, pick))
    # a point whose views lie DECIDED_CELLS apart or more is left out; over half of a side's points so: no pair
    near = [np.abs(d) < smooth.DECIDED_CELLS * cell for d in out]
    if any(2 * k.sum() < len(k) for k in near) or near[0].sum() + near[1].sum() < smooth.MIN_POINTS:
        return None
    return (np.concatenate([d[k] for d, k in zip(out, near)]),
            np.concatenate([m[k] for m, k in zip(normals, near)]))


def _no_points(line):
    """`line` (lines) without its lines of no length."""
    parts = [g for g in shapely.get_parts(line).tolist() if g.length > 0]
    return line if len(parts) == len(shapely.get_parts(line)) else shapely.multilinestrings(parts)


def _plain_pairs(views, frames, tiles) -> list:
    polys = {t: v if (v := views[t]).geom_type in ("Polygon", "MultiPolygon") else polygonal(v) for t in tiles}
    lines = {t: shapely.boundary(polys[t]) for t in tiles}
    out = []
    for i, a in enumerate(tiles):
        for b in tiles[i + 1:]:
            got = _plain_pair_signed(a, b, polys, lines, frames)
            if got is not None:
                out.append((a, b, *got))
    return out


def _mask_outline(field: np.ndarray, t: Affine):
    """The cells of `field` over 0, as one (multi)polygon of cell staircases through `t`."""
    mask = (field > 0).astype(np.uint8)
    polys = [shapely.geometry.shape(g) for g, v in rasterio.features.shapes(mask, transform=t) if v == 1]
    return polygonal(shapely.union_all(polys)) if polys else shapely.Polygon()


def _objects(rng, transform: Affine, n: int) -> list:
    """`n` objects, each as (the tiles' views, the owners' stitch); the views of each made in one of the
    ways the module docstring lists."""
    frames = dict(TileFrames(TileGrid(W, H, transform=transform)))
    cellt = transform @ Affine.scale(MASK_CELL)  # the image's mask cells
    shape = (int(H / MASK_CELL), int(W / MASK_CELL))
    out = []
    for k in range(n):
        base = gaussian_filter(rng.normal(size=shape), rng.uniform(3, 9)) + rng.uniform(0.0, 0.15)
        if k % 7 == 6:  # an object in one corner: some bands see no boundary of it
            base[shape[0] // 3:] = base[:, shape[1] // 3:] = -1
        obj = _mask_outline(base, cellt)
        cell = MASK_CELL * PIXEL
        views = {}
        for t, f in frames.items():
            way = (k + t) % 5 if k % 7 not in (0, 6) else 0
            if way == 1:  # its own noise
                v = _mask_outline(base + gaussian_filter(rng.normal(size=shape), 4) * 0.3, cellt)
            elif way == 2:  # grown by a cell
                v = shapely.buffer(obj, cell, join_style="mitre")
            elif way == 3:  # shifted by a cell
                v = shapely.affinity.translate(obj, cell, -cell)
            elif way == 4:  # changed only in the tile's own area (no other tile's window)
                v = shapely.symmetric_difference(obj, shapely.buffer(f.exclusive, -5 * cell))
            else:
                v = obj
            views[t] = shapely.intersection(polygonal(v), f.window)
        stitch = shapely.union_all([shapely.intersection(v, frames[t].core) for t, v in views.items()])
        out.append(({t: v for t, v in views.items() if not v.is_empty}, polygonal(stitch)))
    return frames, out


@pytest.mark.parametrize("kind", sorted(GRIDS))
def test_the_pairs_measure_what_the_plain_form_measured(kind):
    rng = np.random.default_rng(49 if kind == "north-up" else 50)
    frames, objects = _objects(rng, GRIDS[kind], 14)
    bands: dict = {}  # kept over the objects, as a merge pass keeps them
    seen = {"pairs": 0, "equal": 0, "empty": 0, "overlay": 0, "decided early": 0}
    for views, _ in objects:
        tiles = list(views)
        got = smooth._pairs(views, frames, tiles, bands)
        want = _plain_pairs(views, frames, tiles)
        assert [(a, b) for a, b, *_ in got] == [(a, b) for a, b, *_ in want]
        for (_, _, d, sides), (_, _, wd, wn) in zip(got, want):
            np.testing.assert_array_equal(d, wd)
            np.testing.assert_array_equal(consensus._normals(sides), wn)
            seen["equal"] += bool(np.abs(d).max() < 1e-6)
        if want:
            assert smooth._apart(got) == smooth._offsets(want)[0]
            assert smooth._offsets(got) == smooth._offsets(want)
            # told the bar of agreement, views whose every pair agrees within it are known from part of their
            # points ([]), the others measured in full
            for bar in np.asarray([0.05, 0.3, 0.5, 1.0, 2.0]) * MASK_CELL * PIXEL:
                told = smooth._pairs(views, frames, tiles, bands, bar)
                if told:
                    assert all((a, b) == (wa, wb) and np.array_equal(d, wd)
                               for (a, b, d, _), (wa, wb, wd, _) in zip(told, want, strict=True))
                else:  # every pair agrees (so do they pooled): no pair differs steadily either
                    assert smooth._offsets(want)[0] < bar
                    assert all(np.median(np.abs(wd)) < bar for _, _, wd, _ in want)
                    seen["decided early"] += 1
        seen["pairs"] += len(want)
        seen["empty"] += sum(1 for i, a in enumerate(tiles) for b in tiles[i + 1:]
                             if frames[a].window.intersects(frames[b].window)) - len(want)
    seen["overlay"] = sum(1 for band in bands.values() if band and band[1] is None)
    # every way the views were made was measured: equal views, pairs with no boundary in their band, and
    # overlays exactly where the frames are rotated
    assert seen["pairs"] > 100 and seen["equal"] > 10 and seen["empty"] > 0 and seen["decided early"] > 5, seen
    assert (seen["overlay"] > 0) == (kind == "rotated"), seen


def test_the_bands_rectangle_test_is_iscloses():
    for kind, t in GRIDS.items():
        frames = dict(TileFrames(TileGrid(W, H, transform=t)))
        for a in frames:
            for b in frames:
                band = smooth._band(frames[a], frames[b])
                if not band:
                    continue
                x0, y0, x1, y1 = band[0].bounds
                assert (band[1] is not None) == bool(np.isclose(band[0].area, (x1 - x0) * (y1 - y0))), (kind, a, b)


def test_smooth_views_with_bands_kept_over_objects_gives_what_it_gives_alone():
    # the answers of a merge pass (bands kept by the resolver) are those of each object measured alone, on
    # objects that agree (unchanged), differ steadily (shifted to the consensus) and differ by a noise
    # (smoothed)
    rng = np.random.default_rng(7)
    frames, objects = _objects(rng, NORTH_UP, 21)
    bands: dict = {}
    moved = unchanged = 0
    for views, stitch in objects:
        got, inward = smooth.smooth_views(stitch, views, frames, bands)
        alone, inward_alone = smooth.smooth_views(stitch, views, frames)
        assert shapely.to_wkb(got) == shapely.to_wkb(alone) and inward == inward_alone
        moved += got is not stitch
        unchanged += got is stitch
    assert moved > 0 and unchanged > 0, (moved, unchanged)


def test_a_speck_in_a_band_is_no_boundary_and_no_failure():
    # a view with a speck (a ring under a fifth of a mask cell across, the sliver an overlay leaves) in the band
    # two tiles share: the simplification makes it one point twice, which GEOS's segmentize refused (the
    # merge failed with a GEOSException); it is no stretch of the boundary: the answer is the one without it
    grid = TileGrid(1760, 1008, transform=Affine(1, 0, 0, 0, 1, 0))  # band x 752..1008
    frames = dict(TileFrames(grid))
    rng = np.random.default_rng(4)
    xs = np.linspace(0, 1760, 89)
    blob = shapely.Polygon([*zip(xs, 400 + rng.uniform(-7, 7, 89)), *zip(xs[::-1], 600 + rng.uniform(-7, 7, 89))])
    speck = shapely.box(880, 800, 880.1, 800.1)
    for other in (blob, shapely.affinity.translate(blob, 0, 2 * MASK_CELL)):
        views = {0: blob.intersection(frames[0].window), 1: other.intersection(frames[1].window)}
        stitch = shapely.union_all([views[0].intersection(frames[0].core), views[1].intersection(frames[1].core)])
        want = smooth.smooth_views(stitch, views, frames)
        with_speck = {0: views[0], 1: shapely.union_all([views[1], speck])}
        got = smooth.smooth_views(stitch, with_speck, frames)
        assert shapely.to_wkb(got[0]) == shapely.to_wkb(want[0]) and got[1] == want[1]


def test_the_fused_groups_held_parts_are_the_plain_forms():
    # rule 5's guard asks which parts are close before which a fusing part holds (an overlay each): the
    # same parts come back as the plain form, on every truth of the three tests over up to five parts of a
    # tile (held: 0 no, 1 inside but ending in the band, 2 reaching its window's edge there; side: two
    # facing each other along their length, held however they end)
    from sam3tiles.merge.apart import _held

    rng = np.random.default_rng(5)
    for _ in range(600):
        js = [int(j) for j in rng.choice(50, size=int(rng.integers(2, 6)), replace=False)]
        held = {j: int(rng.choice(3, p=[0.4, 0.2, 0.4])) for j in js}
        near = {(j, k): bool(rng.random() < 0.3) for j in js for k in js}
        side = {(j, k): bool(rng.random() < 0.5) for j in js for k in js}
        pairs = [(j, k) for a, j in enumerate(js) for k in js[a + 1:] if near[j, k]]
        edge = [j for j in js if held[j] == 2]
        if any(held[j] == 2 and held[k] == 2 for j, k in pairs):
            plain = edge
        else:
            beside = {x for j, k in pairs if held[j] and held[k] and 1 in (held[j], held[k]) and side[j, k]
                      for x in (j, k)}
            plain = [j for j in js if j in beside or held[j] == 2] if beside else []
        asked = []
        got = _held(0, js, lambda i, j: asked.append(j) or held[j], lambda j, k: near[j, k], lambda j, k: side[j, k])
        assert got == plain
        assert (asked == []) == (not pairs) and len(asked) == len(set(asked)) and set(asked) <= set(js)


def test_the_medians_of_many_arrays_are_nps():
    rng = np.random.default_rng(11)
    arrays = [np.round(rng.normal(0, 2, int(rng.integers(1, 60))), int(rng.integers(0, 3))) for _ in range(300)]
    got = smooth._medians(arrays)
    assert [float(x) for x in got] == [float(np.median(a)) for a in arrays]
