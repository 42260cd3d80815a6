"""Rule 5's band mean (`sam3tiles.merge.bandmean`): on a meandering outline, whose smoothing windows stop at
every bend, the points in a band two tiles share move to the mean of the two views there; straight outlines
keep the smoothing alone (issue 49)."""

from __future__ import annotations

import numpy as np
import shapely
from affine import Affine
from shapely.geometry import Polygon, box

from sam3tiles.merge import merge_pieces
from sam3tiles.merge.bandmean import band_mean
from sam3tiles.merge.smooth import CAP_CELLS, smooth_outline
from sam3tiles.testing import frames_and_pieces
from sam3tiles.tiling.frame import TileFrames
from sam3tiles.tiling.grid import TileGrid
from sam3tiles.vectorize.pieces import MASK_CELL

GRID = TileGrid(1760, 1008, transform=Affine(1, 0, 0, 0, 1, 0))  # band x 752..1008, core line 880
W0, W1 = box(0, 0, 1008, 1008), box(752, 0, 1760, 1008)
C0, C1 = box(0, 0, 881, 1008), box(879, 0, 1760, 1008)
BAND = box(780, 0, 980, 1008)  # inside the band, clear of the windows' edge margins


def _noisy(xs: np.ndarray, rng, amp: float, length: float = 40.0) -> np.ndarray:
    knots = np.arange(xs.min(), xs.max() + length, length)
    return np.interp(xs, knots, rng.uniform(-amp, amp, len(knots)))


def _river(rng, amp: float, period: float, bend: float, width: float = 50.0) -> Polygon:
    """A river across the scene whose centre line meanders (`bend` px up and down over `period` px), its banks
    each moved in and out by up to `amp` px, smoothly (a tile's noise; 0: the truth)."""
    xs = np.linspace(0, 1760, 881)
    mid = 500 + bend * np.sin(2 * np.pi * xs / period)
    top = mid - width / 2 + (_noisy(xs, rng, amp) if amp else 0)
    bottom = mid + width / 2 + (_noisy(xs, rng, amp) if amp else 0)
    return Polygon([*zip(xs, top), *zip(xs[::-1], bottom[::-1])])


def _merged(views):
    frames, pieces = frames_and_pieces(GRID, [((0, 0), views[0].intersection(W0), False),
                                              ((0, 1), views[1].intersection(W1), False)], complete_edge_dist=50.0)
    merged, stats = merge_pieces(pieces, frames)
    assert len(merged.geometry) == 1 and stats.rule_violations == 0
    return merged.geometry[0]


def test_a_meandering_river_in_the_band_comes_to_the_views_mean():
    # each tile draws the river's banks moved in and out by up to 1.5 mask cells, independently; the river
    # bends over ~40 px, so the smoothing's windows stop at every bend. In the band both tiles drew it: the
    # merged outline there lies closer to the truth than the owners' stitch (two independent noises averaged:
    # about 1 / sqrt(2) of one), pooled over seeds; and no worse where only one tile saw it
    truth = _river(None, 0, 160.0, 40.0)
    band_err, stitch_err, out_err, out_stitch = 0.0, 0.0, 0.0, 0.0
    for seed in range(6):
        rng = np.random.default_rng(500 + seed)
        views = [_river(rng, 1.5 * MASK_CELL, 160.0, 40.0) for _ in range(2)]
        g = _merged(views)
        assert g.is_valid and len(shapely.get_parts(g)) == 1
        stitch = shapely.union_all([views[0].intersection(C0), views[1].intersection(C1)])
        band_err += g.symmetric_difference(truth).intersection(BAND).area
        stitch_err += stitch.symmetric_difference(truth).intersection(BAND).area
        out_err += g.symmetric_difference(truth).difference(BAND).area
        out_stitch += stitch.symmetric_difference(truth).difference(BAND).area
    assert band_err < 0.85 * stitch_err, (band_err, stitch_err)
    assert out_err <= 1.01 * out_stitch, (out_err, out_stitch)


def test_a_straight_outline_keeps_the_smoothing_alone():
    # a straight river (long windows along it): band_mean hands back each ring it is given
    rng = np.random.default_rng(9)
    views = [_river(rng, 1.5 * MASK_CELL, 1e9, 0.0) for _ in range(2)]
    stitch = shapely.union_all([views[0].intersection(C0), views[1].intersection(C1)])
    smoothed, _ = smooth_outline(stitch, MASK_CELL)
    frames = dict(TileFrames(GRID))
    mean, kept = band_mean({0: views[0].intersection(W0), 1: views[1].intersection(W1)}, frames, [0, 1],
                           MASK_CELL, CAP_CELLS * MASK_CELL), []

    def spy(xy, windows, hole):
        out = mean(xy, windows, hole)
        kept.append(out is xy)
        return out
    got, _ = smooth_outline(stitch, MASK_CELL, spy)
    assert kept and all(kept) and shapely.to_wkb(got) == shapely.to_wkb(smoothed)


def test_a_thin_objects_far_side_is_not_its_mean():
    # a meandering stream 3 cells wide, one tile's view shrunk to a sliver on one side: a point of the other
    # view's bank never moves toward the far bank (its direction runs the other way), so the stream keeps
    # at least its narrower view's width in the band
    truth = _river(None, 0, 160.0, 40.0, width=3 * MASK_CELL)
    rng = np.random.default_rng(4)
    views = [_river(rng, 0.5 * MASK_CELL, 160.0, 40.0, width=3 * MASK_CELL) for _ in range(2)]
    g = _merged(views)
    assert g.is_valid
    inside = g.intersection(BAND).area / truth.intersection(BAND).area
    assert 0.8 < inside < 1.2, inside


def test_the_views_nearest_points_are_the_outlines_nearest_points():
    """`_nearest` (a grid of the outline's pieces, each point's cell and the eight beside it) finds what
    a distance to the whole outline finds, on a mask's staircase with long straight runs and two parts, and
    nothing past `far`."""
    from sam3tiles.merge.bandmean import _nearest, _segments

    rng = np.random.default_rng(5)
    x = np.cumsum(rng.integers(1, 12, 120) * 4.0)  # a staircase: runs of 4 to 44 px across, 0 to 12 up or down
    y = np.clip(np.cumsum(rng.integers(-3, 4, 120) * 4.0), -100, 300)
    path = np.column_stack([np.repeat(x, 2)[:-1], np.repeat(y, 2)[1:]])
    stair = shapely.Polygon([(0, y[0]), *path, (x[-1], -200), (0, -200)])
    view = shapely.union_all([stair, box(x[-1] + 30, 0, x[-1] + 90, 900)])
    assert view.geom_type == "MultiPolygon" and view.is_valid
    line = shapely.boundary(shapely.orient_polygons(view))
    pts = rng.uniform([-20, -220], [x[-1] + 100, 400], size=(3000, 2))
    far, piece = 12.0, 4.0
    near, ahead = _nearest(pts, np.zeros(len(pts), dtype=int), _segments([view], piece, far), far)
    want = shapely.distance(shapely.points(pts), line)
    got = np.hypot(*(near - pts).T)
    assert (np.isnan(got) == (want > far)).all() and (want <= far).sum() > 200
    assert np.allclose(got[want <= far], want[want <= far], rtol=0, atol=1e-9)
    assert shapely.dwithin(shapely.points(near[want <= far]), line, 1e-9).all()
    assert np.isfinite(ahead[want <= far]).all()
    # the first of the nearest segments, as every segment of the outline measured one by one finds it
    rings = shapely.get_parts(line)
    segs = np.concatenate([np.column_stack([c[:-1], c[1:]]) for c in (shapely.get_coordinates(r) for r in rings)])
    for p in np.flatnonzero(want <= far)[:300].tolist():
        a, d = segs[:, :2], segs[:, 2:] - segs[:, :2]
        u = np.clip(((pts[p] - a) * d).sum(axis=1) / np.maximum((d * d).sum(axis=1), 1e-300), 0.0, 1.0)
        foot = a + u[:, None] * d
        dist = np.hypot(*(pts[p] - foot).T)
        assert np.array_equal(near[p], foot[int(np.argmin(dist))])
