"""The band mean's cheaper steps (issue 49: the merge's CPU under `wobble`): it runs inside the smoothing on
its rings, taking the smoothing's own windows as the meander test, one validity test and the moved area from
the rings; the views' nearest points from the segments of their outlines near the bands the tiles share give
what the whole outlines give."""

from __future__ import annotations

import numpy as np
import pytest
import shapely
from affine import Affine
from shapely.geometry import box

from sam3tiles.merge.bandmean import FAR_CELLS, _inner, _nearest, _segments, band_mean
from sam3tiles.merge.smooth import CAP_CELLS, smooth_outline
from sam3tiles.tiling.frame import TileFrames
from sam3tiles.tiling.grid import TileGrid
from sam3tiles.vectorize.pieces import MASK_CELL


def _ring(rng, bend: float, period: float, amp: float, length: float = 1500.0) -> np.ndarray:
    """A closed ring around a band 40 px wide whose centre line meanders (`bend` px over `period` px), its
    banks moved in and out by up to `amp` px over ~12 px (a tile's noise)."""
    xs = np.linspace(0, length, int(length))
    mid = bend * np.sin(2 * np.pi * xs / period)
    knots = np.arange(0, length + 12, 12)
    noise = [np.interp(xs, knots, rng.uniform(-amp, amp, len(knots))) for _ in range(2)]
    ring = np.concatenate([np.column_stack([xs, mid - 20 + noise[0]]),
                           np.column_stack([xs[::-1], (mid + 20 + noise[1])[::-1]])])
    return np.vstack([ring, ring[:1]])


def _river_case(seed: int):
    """(The owners' stitch of a river meandering across two tiles' band (40 px up and down over 160 px, 50
    px wide), each tile's view with its own noise (banks in and out by up to 1.5 cells over ~40 px), the
    views, the frames)."""
    grid = TileGrid(1760, 1008, transform=Affine(1, 0, 0, 0, 1, 0))  # band x 752..1008, core line 880
    rng = np.random.default_rng(seed)
    xs = np.linspace(0, 1760, 881)
    mid = 500 + 40 * np.sin(2 * np.pi * xs / 160)
    knots = np.arange(0, 1800, 40.0)
    views = []
    for _ in range(2):
        top, bottom = (mid + side * 25 + np.interp(xs, knots, rng.uniform(-6, 6, len(knots))) for side in (-1, 1))
        views.append(shapely.Polygon([*zip(xs, top), *zip(xs[::-1], bottom[::-1])]))
    own = [views[0].intersection(box(0, 0, 881, 1008)), views[1].intersection(box(879, 0, 1760, 1008))]
    seen = {0: views[0].intersection(box(0, 0, 1008, 1008)), 1: views[1].intersection(box(752, 0, 1760, 1008))}
    return shapely.union_all(own), seen, dict(TileFrames(grid))


def test_a_clockwise_shell_takes_the_same_mean():
    # the mean runs on the rings as the smoothing has them (no orienting of the whole part first): a shell
    # drawn clockwise takes the mean as one drawn counter-clockwise does (its views' direction test turned)
    for seed in (1, 2):
        stitch, views, frames = _river_case(seed)
        mean = band_mean(views, frames, [0, 1], MASK_CELL, CAP_CELLS * MASK_CELL)
        alone, _ = smooth_outline(stitch, MASK_CELL)
        ccw, _ = smooth_outline(shapely.orient_polygons(stitch), MASK_CELL, mean)
        cw, _ = smooth_outline(shapely.orient_polygons(stitch, exterior_cw=True), MASK_CELL, mean)
        moved = ccw.symmetric_difference(alone).area
        assert moved > 20 * MASK_CELL ** 2  # (the mean moved it)
        assert cw.symmetric_difference(ccw).area < 0.15 * moved  # (the points the mean is taken at differ)


def test_the_area_the_mean_gives_up_is_counted_from_the_rings():
    # the area moved inward (coverage "blended") from the rings' own moves, no overlay: within 2 % of it
    for seed in (3, 4):
        stitch, views, frames = _river_case(seed)
        mean = band_mean(views, frames, [0, 1], MASK_CELL, CAP_CELLS * MASK_CELL)
        out, inward = smooth_outline(stitch, MASK_CELL, mean)
        alone, _ = smooth_outline(stitch, MASK_CELL)
        assert out.symmetric_difference(alone).area > 20 * MASK_CELL ** 2
        assert inward == pytest.approx(stitch.difference(out).area, rel=0.02)


def test_the_nearest_points_of_all_views_at_once_are_each_views_own():
    # the views' outlines in one grid (each view's pieces under keys of their own): for every point two windows
    # cover and each view whose window covers it, the nearest point and direction of that view's whole outline,
    # and its distance
    rng = np.random.default_rng(8)
    windows = {0: box(0, 0, 1008, 1008), 1: box(752, 0, 1760, 1008), 2: box(0, 752, 1008, 1760)}
    inner = {t: _inner(w, 16.0) for t, w in windows.items()}
    views = [shapely.Polygon(_ring(rng, 40, 160, 6.0, length=1760.0) + [0, 400 + 330 * (t == 2)]).intersection(w)
             for t, w in windows.items()]
    assert all(not v.is_empty for v in views)
    cell, far = 4.0, FAR_CELLS * 4.0
    pts = rng.uniform([0, 0], [1760, 1760], size=(30000, 2))
    lines = [shapely.boundary(shapely.orient_polygons(v)) for v in views]
    on_lines = [shapely.get_coordinates(g)[::3] for g in lines]
    pts = np.vstack([pts, *(q + rng.normal(0, 3, q.shape) for q in on_lines)])
    cover = np.array([shapely.contains_xy(box(*inner[t]), pts[:, 0], pts[:, 1]) for t in inner])
    pts, cover = pts[cover.sum(axis=0) >= 2], cover[:, cover.sum(axis=0) >= 2]
    view, on = np.nonzero(cover)
    every = _segments(views, cell, far)
    near, ahead = _nearest(pts[on], view, every, far)
    found = np.isfinite(near[:, 0])
    for t, v in enumerate(views):
        mine = view == t
        alone = _nearest(pts[on[mine]], np.zeros(mine.sum(), dtype=int), _segments([v], cell, far), far)
        want = shapely.distance(shapely.points(pts[on[mine]]), lines[t])
        assert (want <= far).sum() > 30
        assert np.array_equal(np.isfinite(alone[0][:, 0]), found[mine]) and np.array_equal(found[mine], want <= far)
        got = found[mine]
        assert np.array_equal(alone[0][got], near[mine][got]) and np.array_equal(alone[1][got], ahead[mine][got])
        assert np.allclose(np.hypot(*(near[mine][got] - pts[on[mine]][got]).T), want[got], rtol=0, atol=1e-9)

