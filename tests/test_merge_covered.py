"""Rule 5's coverage test (`links.covered`: does a cut part's own-core area lie mostly within a cell of the
kept part) buffered every kept part whole: on a tessellation of parcels under a real model's noisy outlines
(`wobble`) those buffers were most of the merge (0.11 of its 0.25 s, eight times the reference backend's
merge). It now decides without a buffer where the area under the kept part itself is enough, or where not even
all a buffer can add would be, and buffers a kept part near the cut part only. The same answer as the buffer of
the whole kept part, on random noisy parts, one kept part for all or one each, and on empty ones."""

from __future__ import annotations

import numpy as np
import pytest
import shapely

from sam3tiles.merge.links import covered, near_box


def _blob(rng, cx, cy, r, n=120):
    t = np.linspace(0, 2 * np.pi, n, endpoint=False)
    rr = r * (1 + 0.25 * np.convolve(rng.normal(0, 1, n + 16), np.ones(16) / 16, "same")[8:8 + n])
    g = shapely.make_valid(shapely.Polygon(np.round(np.column_stack([cx + rr * np.cos(t), cy + rr * np.sin(t)]))))
    return max(shapely.get_parts(g), key=lambda p: p.area)


def _whole(geoms, kept, tol, need):
    near = shapely.buffer(np.broadcast_to(np.asarray(kept, dtype=object), np.shape(geoms)), tol, quad_segs=2)
    return shapely.area(shapely.intersection(geoms, near)) >= need


@pytest.mark.parametrize("seed", range(3))
def test_the_same_answer_as_the_whole_kept_part_buffered(seed):
    rng = np.random.default_rng(seed)
    n = 60
    kept = np.asarray([_blob(rng, *rng.uniform(0, 200, 2), rng.uniform(20, 60)) for _ in range(n)], dtype=object)
    cuts = np.asarray([_blob(rng, *shapely.get_coordinates(shapely.centroid(k))[0] + rng.uniform(-40, 40, 2),
                             rng.uniform(5, 30)) for k in kept], dtype=object)
    cuts = shapely.intersection(cuts, shapely.box(0, 0, 150, 150))  # (own-core areas: some empty)
    tol = rng.uniform(2, 12, n)
    seen = []
    for frac in (0.2, 0.5, 0.8, 0.95):
        need = frac * shapely.area(cuts)
        want = _whole(cuts, kept, tol, need)
        got = covered(cuts, kept, tol, need)
        seen.append(want)
        assert np.array_equal(got, want)
        one = covered(cuts, kept[0], tol, need)  # one kept part for all
        assert np.array_equal(one, _whole(cuts, kept[0], tol, need))
    assert np.concatenate(seen).any() and not np.concatenate(seen).all()


def test_the_near_box_holds_what_lies_within_reach():
    g = np.asarray([shapely.box(0, 0, 10, 5), shapely.Polygon()], dtype=object)
    box = near_box(g, np.asarray([2.0, 2.0]))
    assert np.all(box[0] <= [-2, -2, 12, 7] * np.array([1, 1, 1, 1]) + [0, 0, 1e-3, 1e-3])
    assert box[0][0] < -2 and box[0][2] > 12 and np.isinf(box[1]).all()
