"""The merge's cheaper forms of its geometry work (issue 49's cost under a real model's outlines) give what the
plain forms give: a rectangle clip the overlay's area, a buffer of a part's stretch near a box the whole
part's buffer inside it, an erosion tried on a square of a region first the whole region's verdict, rule 2's
second look with its bound the look without it, the smoothing's windows and normals what the loops gave.

Shapes are mask outlines as the vectorizer makes them: pixel staircases of thresholded random fields, at map
coordinates of a UTM grid (x ~ 5e5, y ~ 4e6, 0.3 m pixels)."""

from __future__ import annotations

import numpy as np
import pytest
import rasterio.features
import shapely
import shapely.affinity
from affine import Affine
from scipy.ndimage import gaussian_filter

from sam3tiles.merge import links
from sam3tiles.merge.parts import IOS_MIN, polygonal
from sam3tiles.merge.consensus import _outward
from sam3tiles.merge.smooth import TURN, _cone, _windows

PIXEL = 0.3
ORIGIN = (500000.0, 4099774.4)


def _masks(rng, n: int, size: int = 120, sigma: float = 4.0, level: float = 0.0) -> list:
    """`n` mask outlines (pixel staircases; blobs, strips and ragged shapes) in map coordinates."""
    t = Affine(PIXEL, 0, ORIGIN[0] + float(rng.integers(0, 50)), 0, -PIXEL, ORIGIN[1])
    out = []
    while len(out) < n:
        field = gaussian_filter(rng.normal(size=(size, size)), sigma * rng.uniform(0.5, 2.0))
        mask = (field > level + rng.normal(0, 0.01)).astype(np.uint8)
        polys = [shapely.geometry.shape(g) for g, v in rasterio.features.shapes(mask, transform=t) if v == 1]
        if polys:
            out.append(polygonal(shapely.union_all(polys)))
    return out


def _rects(rng, geoms) -> np.ndarray:
    """A rectangle per geometry cutting across it (some holding it whole, some missing it)."""
    b = shapely.bounds(np.asarray(geoms, dtype=object))
    w, h = b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]
    x0 = b[:, 0] + w * rng.uniform(-0.3, 0.8, len(b))
    y0 = b[:, 1] + h * rng.uniform(-0.3, 0.8, len(b))
    return np.c_[x0, y0, x0 + w * rng.uniform(0.1, 1.6, len(b)), y0 + h * rng.uniform(0.1, 1.6, len(b))]


def _arr(geoms) -> np.ndarray:
    out = np.empty(len(geoms), dtype=object)
    out[:] = geoms
    return out


def test_a_rectangle_clip_has_the_overlays_area_and_is_valid():
    rng = np.random.default_rng(3)
    geoms = _arr(_masks(rng, 60))
    rects = _rects(rng, geoms)
    got = links.clip_rects(geoms, rects)
    want = shapely.intersection(geoms, shapely.box(*rects.T))
    assert shapely.is_valid(got).all()
    np.testing.assert_allclose(shapely.area(got), shapely.area(want), rtol=1e-9, atol=1e-9)
    assert shapely.equals(shapely.buffer(got, 0), shapely.buffer(want, 0))[shapely.area(want) > 0].all()
    # a part whose bounds lie within its rectangle is itself, not a copy an overlay made
    whole = np.c_[shapely.bounds(geoms)[:, :2] - 1, shapely.bounds(geoms)[:, 2:] + 1]
    assert all(g is h for g, h in zip(links.clip_rects(geoms, whole), geoms))


def test_a_rectangle_clip_is_the_overlay_where_geos_clip_gives_a_valid_wrong_part():
    """GEOS's rectangle clip (3.14) returns a valid polygon of the wrong region where an outline that is no pixel
    staircase touches the rectangle's side at a vertex and passes through its corner: a V-shaped notch whose tip
    lies on the bottom side (the clip kept the notch, not the two wedges beside it). Such a part, with a vertex
    on its rectangle's edges, is clipped by the overlay."""
    notch = [shapely.Polygon([(0, 0), (0, 56), (76, 56), (78, 28), (82, 56), (100, 56), (100, 0)]),
             shapely.Polygon([(0, 0), (0, 64), (26, 64), (38, 33), (69, 64), (100, 64), (100, 0)]),
             shapely.Polygon([(10, 0), (10, 60), (50, 20), (90, 60), (90, 0)])]
    rects = np.asarray([(11, 28, 82, 56), (7, 33, 55, 50), (30, 20, 70, 40)], dtype=float)
    for dx, dy in ((0, 0), ORIGIN):  # (at map coordinates as well)
        geoms = _arr([shapely.affinity.translate(g, dx, dy) for g in notch])
        at = rects + [dx, dy, dx, dy]
        want = shapely.intersection(geoms, shapely.box(*at.T))
        assert not shapely.equals(shapely.clip_by_rect(geoms[2], *at[2]), want[2])  # (GEOS's own clip is wrong)
        got = links.clip_rects(geoms, at)
        assert shapely.is_valid(got).all()
        np.testing.assert_allclose(shapely.area(shapely.symmetric_difference(got, want)), 0, atol=1e-6)


def test_lying_near_with_its_bound_and_clip_says_what_the_whole_buffer_says():
    """`lies_near` (rule 2's second look, rule 5's part-whole test) buffers only the larger's stretch near
    the smaller's box, and not at all where the smaller's area near the larger's box falls short."""
    rng = np.random.default_rng(4)
    gs = _arr(_masks(rng, 40))
    gl = _arr([shapely.affinity.translate(g, *rng.uniform(-3, 3, 2) * 3.5 * PIXEL) if k % 3 else
               shapely.affinity.translate(g, (g.bounds[2] - g.bounds[0]) * rng.uniform(0.6, 1.0), 0)
               for k, g in enumerate(_masks(rng, 40))])
    gl[::2] = [shapely.affinity.translate(g, *rng.uniform(-3, 3, 2) * 3.5 * PIXEL) for g in gs[::2]]
    tol = 3.5 * PIXEL
    plain = shapely.area(shapely.intersection(gs, shapely.buffer(gl, tol, quad_segs=2)))
    for frac in (0.3, 0.8, 0.95):
        need = frac * shapely.area(gs)
        clear = np.abs(plain - need) > 1e-6 * need  # GEOS simplifies a buffer's input by 1 % of `tol`
        got = links.lies_near(gs, gl, tol, need)
        np.testing.assert_array_equal(got[clear], (plain >= need)[clear])
    assert 0 < (plain >= 0.8 * shapely.area(gs)).sum() < len(gs)


@pytest.mark.parametrize("cells", [0.5, 1.0, 2.0])
def test_the_erosion_tried_on_a_square_first_says_what_the_whole_erosion_says(cells):
    rng = np.random.default_rng(int(cells * 10))
    strips = [shapely.box(ORIGIN[0], ORIGIN[1], ORIGIN[0] + 400, ORIGIN[1] + w) for w in (0.5, 1.0, 2.0, 3.0)]
    geoms = _arr(_masks(rng, 24, size=60, sigma=2.0) + strips + [shapely.Polygon()])
    r = np.full(len(geoms), cells * 3.5 * PIXEL)
    want = ~shapely.is_empty(shapely.buffer(geoms, -r, quad_segs=2))
    assert 0 < want.sum() < len(want) or cells == 0.5
    np.testing.assert_array_equal(links._thick(geoms, r), want)


def test_an_overlap_under_the_area_bound_erodes_to_nothing():
    """`_continued` buffers no overlap under 2 r^2: none such has a region 2 r across."""
    rng = np.random.default_rng(5)
    geoms = _arr(_masks(rng, 200, size=40, sigma=1.5, level=0.3))
    for cells in (1.0, 2.0):
        r = cells * 3.5 * PIXEL
        small = geoms[shapely.area(geoms) < 2.0 * r * r]
        assert len(small)
        assert shapely.is_empty(shapely.buffer(small, -r, quad_segs=2)).all()


def _plain_tolerant(ga, gb, tol):
    """Rule 2's second look as the rule states it: the smaller lies >= IOS_MIN within `tol` of the larger."""
    a, b = shapely.area(ga), shapely.area(gb)
    gs, gl = np.where(a <= b, ga, gb), np.where(a <= b, gb, ga)
    inter = shapely.area(shapely.intersection(gs, shapely.buffer(gl, tol, quad_segs=2)))
    return inter >= IOS_MIN * np.minimum(a, b)


def test_the_second_looks_bound_gives_the_verdicts_of_the_plain_look(monkeypatch):
    """Pairs of views of one object moved by up to two cells, and of neighbours meeting at their ends: the
    bound (the smaller's area within the larger's box + the tolerance) skips buffers, never a verdict."""
    rng = np.random.default_rng(6)
    base = _masks(rng, 40)
    ga, gb = [], []
    for g in base:
        dx, dy = rng.uniform(-2, 2, 2) * 3.5 * PIXEL
        ga.append(g)
        gb.append(shapely.affinity.translate(g, dx, dy) if rng.random() < 0.6 else
                  shapely.affinity.translate(g, (g.bounds[2] - g.bounds[0]) * rng.uniform(0.7, 1.0), 0))
    ga, gb = _arr(ga), _arr(gb)
    a, b = np.arange(len(ga)), np.arange(len(ga)) + len(ga)

    class C:  # the columns `_tolerant` reads: the parts' tiles (for their pixel)
        tiles = np.zeros(2 * len(ga), dtype=np.int64)

    class F:
        pixel = PIXEL

    want = _plain_tolerant(ga, gb, 3.5 * PIXEL)
    inter = shapely.area(shapely.intersection(ga, gb))
    for known in (None, inter):  # with the area the two share, the bound of what a buffer can add too
        got = links._tolerant(C, a, b, ga, gb, shapely.area(ga), shapely.area(gb), {0: F}, IOS_MIN, known)
        np.testing.assert_array_equal(got, want)
    assert 0 < want.sum() < len(want)


def test_what_a_buffer_adds_is_within_its_bound():
    """`added`: the edges' strips and the corners' sectors hold all a buffer adds (the second look skips the
    buffer where the shared area and that bound fall short); a box's bound is its exact buffer's."""
    rng = np.random.default_rng(9)
    holed = shapely.box(0, 0, 10, 10).difference(shapely.box(3, 3, 6, 6))
    g = _arr(_masks(rng, 30) + [holed, shapely.MultiPolygon([shapely.box(0, 0, 1, 1), shapely.box(5, 5, 7, 6)])])
    for cells in (0.5, 1.0, 3.0):
        r = np.full(len(g), cells * 3.5 * PIXEL)
        grown = shapely.area(shapely.buffer(g, r, quad_segs=8)) - shapely.area(g)
        assert (grown <= links.added(g, r)).all()
    assert links.added(_arr([shapely.box(0, 0, 10, 10)]), np.array([1.0]))[0] == pytest.approx(40 + np.pi)
    odd = links.added(_arr([shapely.LineString([(0, 0), (1, 1)]), shapely.Polygon()]), np.array([1.0, 1.0]))
    assert odd[0] == np.inf and odd[1] == 0.0


def _cone_loop(half):
    out = half.copy()
    for k in range(1, int(half.max()) + 1):
        np.minimum(out, np.roll(half, k) + k, out=out)
        np.minimum(out, np.roll(half, -k) + k, out=out)
    return out


def test_the_windows_cone_is_the_loops():
    rng = np.random.default_rng(7)
    for _ in range(3000):
        n = int(rng.integers(1, 300))
        half = rng.integers(0, int(rng.integers(1, 60)), n)
        if rng.random() < 0.5:
            half = np.minimum(half, n // 3)
        np.testing.assert_array_equal(_cone(half), _cone_loop(half))
    ring = np.c_[np.cos(np.linspace(0, 2 * np.pi, 400)), np.sin(np.linspace(0, 2 * np.pi, 400))] * 100
    assert (_windows(ring, 58, 34) > 0).all() and TURN > 0


def _outward_all(xy, poly, cell):
    """The normals at every point (np.gradient over all of them), as `_outward` computed them before."""
    tan = np.gradient(xy, axis=0)
    n = np.column_stack([tan[:, 1], -tan[:, 0]]) / np.maximum(np.hypot(tan[:, 0], tan[:, 1]), 1e-300)[:, None]
    probe = xy + 0.3 * cell * n
    return np.where(shapely.contains_xy(poly, probe[:, 0], probe[:, 1])[:, None], -n, n)


def test_normals_at_the_picked_points_are_those_of_all_points_picked():
    rng = np.random.default_rng(8)
    for g in _masks(rng, 20):
        for step in (1, 3, 7, 24):
            xy = shapely.get_coordinates(shapely.segmentize(g.boundary, 1.0))
            pick = slice(None, None, step)
            np.testing.assert_array_equal(_outward(xy, g, 1.05, pick), _outward_all(xy, g, 1.05)[pick])
        one = xy[:1]
        assert _outward(one, g, 1.05, pick).shape == (1, 2)
