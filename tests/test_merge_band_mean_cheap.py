"""The band mean's cheaper steps give what the full ones give (issue 49: the merge's CPU under `wobble`):
the meander test from windows tried only up to `TURNING_CELLS`, and the views' nearest points from the
segments of their outlines near the bands the tiles share."""

from __future__ import annotations

import numpy as np
import shapely
from shapely.geometry import box

from sam3tiles.merge.bandmean import FAR_CELLS, TURNING_CELLS, _inner, _nearest, _segments, _shared
from sam3tiles.merge.smooth import ring_windows


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


def test_windows_tried_up_to_the_meander_bound_tell_the_same_meanders():
    # min(full window, the first size tried at or past the bound) at every vertex: the points under the
    # bound, and so the meander test, are the full windows' own; on meanders, straight bands and between
    rng = np.random.default_rng(3)
    cases = 0
    for bend, period in [(40, 160), (25, 300), (10, 600), (0, 1e9), (60, 120), (15, 400)]:
        for amp in (0.0, 2.0, 6.0):
            xy = _ring(rng, bend, period, amp)
            full, cut = ring_windows(xy, 4.0), ring_windows(xy, 4.0, TURNING_CELLS)
            assert np.array_equal(cut, np.minimum(full, 32.5))  # (sizes 34, 42, 52, 65 points of half a cell)
            assert ((full < TURNING_CELLS).mean() > 0.5) == ((cut < TURNING_CELLS).mean() > 0.5)
            cases += (full < TURNING_CELLS).mean() > 0.5
    assert 0 < cases < 18  # (both kinds of ring seen)


def test_the_nearest_points_from_the_band_segments_are_the_whole_outlines():
    # a view's outline cut to the segments near the parts of its window that other windows share: for every
    # point two windows cover, the same nearest point, direction and distance as from the whole outline
    rng = np.random.default_rng(8)
    windows = {0: box(0, 0, 1008, 1008), 1: box(752, 0, 1760, 1008), 2: box(0, 752, 1008, 1760)}
    inner = {t: _inner(w, 16.0) for t, w in windows.items()}
    xy = _ring(rng, 40, 160, 6.0, length=1700.0) + [0, 400]
    view = shapely.Polygon(xy).intersection(windows[0])
    line = shapely.boundary(shapely.orient_polygons(view))
    cell, far = 4.0, FAR_CELLS * 4.0
    pts = rng.uniform([0, 0], [1760, 1760], size=(20000, 2))
    pts = np.vstack([pts, shapely.get_coordinates(line)[::3] + rng.normal(0, 3, (len(line.coords[::3]), 2))])
    cover = sum(shapely.contains_xy(box(*inner[t]), pts[:, 0], pts[:, 1]).astype(int) for t in inner)
    pts = pts[(cover >= 2) & shapely.contains_xy(box(*inner[0]), pts[:, 0], pts[:, 1])]
    near = _shared(inner, 0, (FAR_CELLS + 1) * cell)
    assert len(near) == 2
    whole, cut = _segments(line, cell), _segments(line, cell, near)
    assert len(cut[2]) < 0.5 * len(whole[2])
    a, b = _nearest(pts, whole, far, cell), _nearest(pts, cut, far, cell)
    found = np.isfinite(a[0][:, 0])
    assert found.sum() > 200
    assert np.array_equal(np.isfinite(b[0][:, 0]), found)
    assert np.array_equal(a[0][found], b[0][found]) and np.array_equal(a[1][found], b[1][found])


def test_no_shared_bounds_for_a_window_that_is_no_rectangle():
    inner = {0: _inner(box(0, 0, 100, 100), 4.0), 1: _inner(shapely.Polygon([(50, 0), (150, 50), (50, 100)]), 4.0)}
    assert _shared(inner, 0, 1.0) is None
