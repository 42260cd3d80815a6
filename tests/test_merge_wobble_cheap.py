"""The merge's cheaper forms under a noisy model (issue 49) against the plain ones they replace, on generated
cases: the same results, to the byte."""

import numpy as np
import pytest
import shapely
import shapely.affinity
from rasterio.features import shapes
from rasterio.transform import Affine

from sam3tiles.merge import knots, links, smooth
from sam3tiles.merge.parts import beyond


def _curve(rng, n=240, harmonics=4):
    """A random closed curve (random Fourier terms in x and y): crosses itself often, now and then not."""
    t = np.linspace(0.0, 2 * np.pi, n, endpoint=False)
    xy = np.zeros((n, 2))
    for k in range(1, harmonics + 1):
        amp = rng.normal(size=(2, 2)) * (40.0 / k)
        xy += np.column_stack([amp[0, 0] * np.cos(k * t) + amp[0, 1] * np.sin(k * t),
                               amp[1, 0] * np.cos(k * t) + amp[1, 1] * np.sin(k * t)])
    xy += rng.uniform(-1, 1, size=2) * 5e5  # at map coordinates
    return np.vstack([xy, xy[:1]])


def _degenerate(rng):
    """Rings whose self-intersection is no proper crossing: a spike out and back along itself, a ring through
    one of its own vertices, a loop touching the ring from inside, a ring drawn twice round (make_valid: one
    polygon without holes)."""
    c = rng.uniform(-1, 1, size=2) * 5e5
    sq = np.asarray([[0, 0], [100, 0], [100, 100], [0, 100]], dtype=float)
    spike = np.vstack([sq[:2], [[100, 50], [160, 50], [100, 50]], sq[2:], sq[:1]])
    eight = np.asarray([[0, 0], [50, 50], [100, 0], [100, 100], [50, 50], [0, 100], [0, 0]], dtype=float)
    inner = np.asarray([[0, 0], [100, 0], [100, 100], [50, 100], [70, 50], [30, 50], [50, 100], [0, 100],
                        [0, 0]], dtype=float)
    twice = np.vstack([sq, sq, sq[:1]])
    return [r + c for r in (spike, eight, inner, twice)]


def _make_valid_says_one_plain_polygon(poly) -> bool:
    got = shapely.make_valid(poly)
    return isinstance(got, shapely.Polygon) and not got.is_empty and len(got.interiors) == 0


def test_crossing_only_where_make_valid_gives_no_polygon_without_holes():
    rng = np.random.default_rng(49)
    crossed = plain = 0
    cases = [_curve(rng, n=int(rng.integers(30, 400)), harmonics=int(rng.integers(2, 7))) for _ in range(300)]
    for xy in cases + [r for _ in range(5) for r in _degenerate(rng)]:
        poly = shapely.Polygon(xy)
        if poly.is_valid:
            continue
        if knots._crossing(poly, xy, 1.0):
            crossed += 1
            assert not _make_valid_says_one_plain_polygon(poly)
        else:
            plain += 1
    assert crossed >= 100  # most random curves that cross themselves are decided without make_valid
    assert plain >= 10  # and the degenerate ones are not


def test_crossing_refuses_the_degenerate_rings():
    rng = np.random.default_rng(3)
    for xy in _degenerate(rng):
        poly = shapely.Polygon(xy)
        assert not poly.is_valid
        assert not knots._crossing(poly, xy, 1.0)  # (make_valid decides these)
    assert _make_valid_says_one_plain_polygon(shapely.Polygon(_degenerate(rng)[-1]))  # (one a shortcut gets wrong)



def test_a_fold_of_no_width_is_dropped_and_the_smoothing_kept():
    """A smoothed ring whose only flaw is a spike out and back along itself (a pixel step folded over its
    neighbour: no area) is the polygon without the spike; a ring folded into two areas (a bow tie, a loop
    turned inside out) still keeps the owners' outline (None). (GEOS's `linework` repair keeps the spike as a
    line beside the polygon, which refused the smoothing, at ~10 x the CPU of the `structure` repair.)"""
    rng = np.random.default_rng(5)
    spike, eight, inner, twice = _degenerate(rng)
    square = shapely.Polygon(spike[[0, 1, 5, 6]])
    for ring, want in ((spike, square), (twice, square)):
        got = knots.valid_part(square, [ring.copy()], 1.0, [None])
        assert isinstance(got, shapely.Polygon) and got.is_valid and got.equals(want)
    assert knots.valid_part(square, [eight.copy()], 1.0, [None]) is None  # (two triangles)
    twisted = np.asarray([[0, 0], [10, 0], [10, 10], [6, 10], [4, 12], [6, 12], [4, 10], [0, 10], [0, 0]], float)
    assert knots.valid_part(square, [twisted + spike[0]], 1.0, [None]) is None  # (a loop inside out: two parts)
    assert knots.valid_part(square, [inner.copy()], 1.0, [None]) is None  # (touching the ring: a hole)

def _drawn(rng, wobble=2.0, pixel=0.29):
    """A mask's outline as a noisy model draws it (a cell is 1.0): a random blob, its outline moved in and out
    by a smooth noise (~`wobble` cells, over ~12 cells along it), rasterised at `pixel` and traced (a pixel
    staircase). Smoothing such outlines now and then folds a pixel step over its neighbour."""
    xy = _curve(rng, n=200, harmonics=4)
    blob = max(shapely.get_parts(shapely.make_valid(shapely.Polygon(xy - xy.min(axis=0) + 10))),
               key=lambda g: g.area if g.geom_type == "Polygon" else 0.0)
    ring = np.asarray(shapely.segmentize(blob.exterior, 0.5).coords)[:-1]
    noise = np.cumsum(rng.normal(size=(len(ring) + 24, 2)), axis=0)
    ring = ring + (noise[24:] - noise[:-24]) / np.sqrt(24) * wobble
    blob = shapely.make_valid(shapely.Polygon(np.vstack([ring, ring[:1]])))
    size = int(np.ceil(ring.max() / pixel)) + 40
    yy, xx = np.mgrid[0:size, 0:size] * pixel
    mask = shapely.contains_xy(blob, xx.ravel(), yy.ravel()).reshape(size, size).astype(np.uint8)
    at = Affine(pixel, 0, 5e5, 0, pixel, 4e6)
    return [g for g, _ in ((shapely.geometry.shape(s), v) for s, v in shapes(mask, mask=mask > 0, transform=at))
            if g.area > 400]


def test_smooth_outline_same_as_with_make_valid(monkeypatch):
    rng = np.random.default_rng(7)
    drawn = [g for _ in range(8) for g in _drawn(rng)]
    geoms = drawn + [shapely.Polygon(g.exterior) for g in drawn]  # (with holes: make_valid every time)
    decided = []
    real = knots._crossing

    def counted(*args, where=False):
        got = real(*args, where=where)
        decided.append(got is not None if where else got)
        return got

    fast, small = [], []
    collapse = knots._collapsed

    def refused(*args):  # (a crossing refused, as `_untangled` does for a loop of a cell or more)
        small.append(collapse(*args) is not None)
        return None

    # (a loop under a cell is collapsed, not refused: `test_merge_untangle`; make_valid may keep such a one's
    # outline as one polygon, so an outline where one was refused here is not compared)
    monkeypatch.setattr(knots, "_collapsed", refused)
    compared = 0
    for g in geoms:
        monkeypatch.setattr(knots, "_crossing", counted)
        small.clear()
        fast.append(smooth.smooth_outline(g, 1.0))
        if any(small):
            continue
        # the plain form: make_valid every time
        monkeypatch.setattr(knots, "_crossing", lambda *args, where=False: None if where else False)
        out, inward = smooth.smooth_outline(g, 1.0)
        assert shapely.to_wkb(fast[-1][0]) == shapely.to_wkb(out)
        assert fast[-1][1] == inward
        compared += 1
    assert sum(decided) >= 3  # some smoothed outlines crossed themselves: decided without make_valid
    assert compared > len(geoms) // 2


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_beyond_same_as_every_difference(seed):
    rng = np.random.default_rng(seed)
    cores = [shapely.box(x, y, x + 100, y + 100) for x in (0, 100, 200) for y in (0, 100)]
    region = shapely.union_all([c for c in cores if rng.random() < 0.8] or cores[:1])
    xy = rng.uniform(-20, 320, size=(200, 2))
    geoms = shapely.buffer(shapely.points(xy), rng.uniform(1, 30, size=200), quad_segs=int(rng.integers(2, 9)))
    geoms[:20] = shapely.box(*np.column_stack([xy[:20], xy[:20] + 50]).T)  # boxes, some along the region's edge
    plain = shapely.difference(geoms, region)
    plain = list(plain[shapely.area(plain) > 0])
    got = beyond(geoms, region)
    assert [shapely.to_wkb(g) for g in got] == [shapely.to_wkb(g) for g in plain]
    assert 0 < len(got) < len(geoms)


def test_clip_pairs_same_as_clipping_each_pair():
    rng = np.random.default_rng(5)
    xy = rng.uniform(0, 300, size=(60, 2)) + 5e5
    geoms = shapely.buffer(shapely.points(xy), rng.uniform(5, 60, size=60), quad_segs=int(rng.integers(3, 9)))
    rect = [shapely.box(5e5 + x, 5e5 + y, 5e5 + x + 120, 5e5 + y + 80) for x, y in rng.uniform(0, 200, (4, 2))]
    tilted = [shapely.affinity.rotate(r, 20) for r in rect[:2]]
    uniq = rect + tilted  # one object per tile pair, as `_bands` gives them
    box = np.asarray([r.bounds for r in rect] + [[np.nan] * 4] * len(tilted))
    which = rng.integers(0, len(uniq), size=400)
    a, b = rng.integers(0, 60, size=400), rng.integers(0, 60, size=400)  # parts in many pairs of one band
    bands = np.asarray(uniq, dtype=object)[which]
    ga, gb = links._clip_pairs(geoms, a, b, bands, box[which])
    for got, part in ((ga, a), (gb, b)):
        plain = links._clip(geoms[part], bands, box[which])
        assert [shapely.to_wkb(g) for g in got] == [shapely.to_wkb(g) for g in plain]


def test_clip_to_cores_is_the_overlay_by_area_and_the_overlay_where_a_core_is_tilted():
    # rules 4-5 clip each part to its tile's core: a north-up core by its bounds (GEOS's rectangle clip), any
    # other by the overlay; on noisy staircases of mask pixels the area is the overlay's (each part valid)
    rng = np.random.default_rng(11)
    drawn = [g for _ in range(8) for g in _drawn(rng)]
    geoms = np.asarray(drawn, dtype=object)
    x0, y0, x1, y1 = shapely.total_bounds(geoms)
    cores = [shapely.box(x, y, x + (x1 - x0) / 2, y + (y1 - y0) / 2) for x, y in
             rng.uniform([x0, y0], [(x0 + x1) / 2, (y0 + y1) / 2], (3, 2))]
    cores.append(shapely.affinity.rotate(cores[0], 15))
    areas = np.asarray(cores, dtype=object)[np.arange(len(geoms)) % len(cores)]
    got = links.clip_to(geoms, areas)
    want = shapely.intersection(geoms, areas)
    assert shapely.is_valid(got).all()
    assert np.allclose(shapely.area(got), shapely.area(want), rtol=1e-9, atol=1e-9 * shapely.area(geoms).max())
    tilted = np.fromiter((a is cores[-1] for a in areas), dtype=bool, count=len(areas))
    assert tilted.any() and shapely.equals_exact(got[tilted], want[tilted], 0).all()
