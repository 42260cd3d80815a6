"""Rule 5's smoothed outlines thinned (`merge/knots.py`, issue 49): a smoothed ring keeps the vertices of the
pixel staircase it was, each moved; where the smoothing's windows were long it is a smooth curve, and one
vertex a mask cell draws it (`FEW_CELLS`): half the vertices to test for validity, to write and to read back.
Corners and meanders (short windows) keep every vertex; a knot untangled is thinned as well; a thinned ring
that is not valid gives way to the whole one."""

from __future__ import annotations

import numpy as np
import shapely

from sam3tiles.merge import knots
from sam3tiles.merge.smooth import smooth_outline
from sam3tiles.vectorize.pieces import MASK_CELL

from test_merge_smooth_reach import _strip


def _both(ring: np.ndarray, monkeypatch):
    """`smooth_outline` of the polygon `ring`: thinned, and with every vertex kept."""
    poly = shapely.Polygon(ring)
    thinned, inward = smooth_outline(poly, MASK_CELL)
    with monkeypatch.context() as m:
        m.setattr(knots, "FEW_CELLS", 1e-9)  # (every vertex in a step of its own: all kept)
        whole, inward_whole = smooth_outline(poly, MASK_CELL)
    assert inward == inward_whole  # (the moved area is the smoothing's, before thinning)
    return thinned, whole


def test_a_smoothed_strip_keeps_one_vertex_a_cell_on_its_sides_and_every_one_at_its_corners(monkeypatch):
    for seed in range(6):
        ring, (c, s) = _strip(np.random.default_rng(300 + seed))
        thinned, whole = _both(ring, monkeypatch)
        assert thinned.is_valid and whole.is_valid
        n_thin, n_whole = shapely.get_num_coordinates(thinned), shapely.get_num_coordinates(whole)
        assert n_thin < 0.65 * n_whole, (n_thin, n_whole)
        # within half a step of the whole outline, and next to none of its area moved
        assert shapely.hausdorff_distance(thinned.exterior, whole.exterior) <= knots.FEW_CELLS / 2 * MASK_CELL
        assert thinned.symmetric_difference(whole).area < 0.02 * MASK_CELL * whole.length
        # the corners (short windows) keep every vertex of the smoothed outline near them
        corners = np.array([[0, 0], [3000, 0], [3000, 180], [0, 180]]) @ np.array([[c, s], [-s, c]])
        kept = {tuple(p) for p in np.asarray(thinned.exterior.coords).round(9).tolist()}
        xy = np.asarray(whole.exterior.coords)
        near = (np.hypot(*(xy[:, None, :] - corners[None]).transpose(2, 0, 1)).min(axis=1)) < 3 * MASK_CELL
        assert near.sum() >= 4 and all(tuple(p) in kept for p in xy[near].round(9).tolist())


def test_a_ring_not_smoothed_keeps_every_vertex():
    ring = np.array([[0, 0], [10, 0], [10, 10], [5, 12], [0, 10], [0, 0]], dtype=float)
    got = knots.valid_polygon([ring], [None], 1.0)
    assert np.array_equal(np.asarray(got.exterior.coords), ring)


def test_a_thinned_ring_that_is_not_valid_gives_way_to_the_whole_one(monkeypatch):
    ring = np.array([[0, 0], [4, 0], [4, 4], [2, 5], [0, 4], [0, 0]], dtype=float)
    bow = np.array([[0, 0], [4, 4], [4, 0], [0, 4], [0, 0]], dtype=float)  # (a bow tie: crosses itself)
    long = np.ones(8, dtype=bool)
    monkeypatch.setattr(knots, "_fewer", lambda xy, flags, cell: bow if flags is not None else xy)
    got = knots.valid_polygon([ring], [long], 1.0)
    assert got is not None and np.array_equal(np.asarray(got.exterior.coords), ring)
    # neither valid: none
    assert knots.valid_polygon([bow], [long], 1.0) is None
