"""The smoothing of an outline does not depend on where its rings start or which way they run.

`smooth.smooth_outline` samples each ring along its length from its first vertex; the owners' stitch is a union,
and GEOS starts (and orients) a union's rings where its overlay happens to: another GEOS, or the union's parts
in another order, started the same outline elsewhere. On the long scene under `wobble` (seed 71) the same
outline, started elsewhere, was smoothed up to 5 % of its area apart (a thin road: rivers' IoU moved by 0.01
between two orders of the same parts). Each ring is now read from its least vertex, a shell clockwise
(`smooth._canonical`).

Also: a smoothed object of several parts is one multipolygon of them where no two share more than points (no
union's overlay), the union where they do (`smooth._joined`)."""

from __future__ import annotations

import numpy as np
import pytest
import shapely
from shapely.geometry import Polygon, box

from sam3tiles.merge.smooth import _joined, smooth_outline
from sam3tiles.vectorize.pieces import MASK_CELL


def _wobbly_ring(rng, n: int = 1200) -> np.ndarray:
    """A long loop (a field's or a lake's outline, 3000 x 600 px) drawn with a smooth noise of about a mask cell
    across it."""
    t = np.linspace(0, 2 * np.pi, n, endpoint=False)
    noise = np.convolve(rng.normal(0, 1.0, n + 60), np.ones(30) / np.sqrt(30), mode="same")[30:30 + n]
    a, b = 1500 + 1.2 * MASK_CELL * noise, 300 + 1.2 * MASK_CELL * noise
    return np.column_stack([a * np.cos(t), b * np.sin(t)])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_same_outline_started_elsewhere_or_run_backwards_is_smoothed_the_same(seed):
    rng = np.random.default_rng(seed)
    ring = _wobbly_ring(rng)
    hole = 0.5 * ring[::-1]  # (a hole, clockwise, inside)
    assert Polygon(ring, [hole]).is_valid
    first, _ = smooth_outline(Polygon(ring, [hole]), MASK_CELL)
    assert first.symmetric_difference(Polygon(ring, [hole])).area > 0  # (it moved)
    for k in (1, 137, 450):
        moved = np.roll(ring, -k, axis=0)
        for shell in (moved, moved[::-1]):
            again, _ = smooth_outline(Polygon(shell, [np.roll(hole, 7, axis=0)]), MASK_CELL)
            assert again.symmetric_difference(first).area < 1e-9 * first.area


def test_parts_apart_or_touching_at_a_point_are_one_multipolygon_and_overlapping_ones_one_union():
    apart = _joined([box(0, 0, 1, 1), box(2, 0, 3, 1)])
    corner = _joined([box(0, 0, 1, 1), box(1, 1, 2, 2)])
    assert apart.geom_type == corner.geom_type == "MultiPolygon" and apart.is_valid and corner.is_valid
    for polys in ([box(0, 0, 1, 1), box(1, 0, 2, 1)], [box(0, 0, 1, 1), box(0.5, 0, 1.5, 1)]):
        got = _joined(polys)  # (sharing a side, or overlapping: a multipolygon of them would not be valid)
        assert got.geom_type == "Polygon" and got.is_valid
        assert abs(got.area - shapely.union_all(polys).area) < 1e-12
