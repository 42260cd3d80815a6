"""Rule 5's smoothing where the smoothed outline ties a knot (`merge/knots.py _untangled`, issue 49): at a notch
or a spur a cell or two across in a pixel staircase, the two sides move by different averages and cross, closing
a loop of next to no area. The loop is collapsed to the crossing point and the rest of the smoothed outline
stands; before, the whole object kept the owners' noisy outline (long seed 71, wobble: one field strip 0.964
where its smoothing gives 0.979). A crossing that closes a loop of a mask cell or more is still refused."""

from __future__ import annotations

import numpy as np
import shapely

from sam3tiles.merge import knots, smooth

from test_merge_wobble_cheap import _drawn


def _knotted(seed: int):
    """Drawn outlines (a cell is 1.0) whose smoothed ring crosses itself, with the ring."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(10):
        for g in _drawn(rng):
            g = shapely.Polygon(g.exterior)
            xy = smooth._canonical(np.asarray(g.exterior.coords), False)  # (as `smooth_outline` reads it)
            new = smooth.smooth_ring(xy, 1.0)
            poly = shapely.Polygon(new)
            if not poly.is_valid and knots._crossing(poly, new, 1.0):
                out.append((g, new))
    return out


def test_a_knot_of_next_to_no_area_is_collapsed_and_the_smoothing_stands(monkeypatch):
    monkeypatch.setattr(knots, "FEW_CELLS", 1e-9)  # (every vertex kept: the thinning is `test_merge_thinned`'s)
    cases = _knotted(7)
    assert len(cases) >= 3
    kept = 0
    for g, new in cases:
        knotted = shapely.Polygon(new)
        loops = sorted((p.area for p in shapely.get_parts(shapely.make_valid(knotted))), reverse=True)[1:]
        got, inward = smooth.smooth_outline(g, 1.0)
        if sum(loops) >= 1.0:  # a fold: refused, the owners' outline stays
            assert got.equals(g)
            continue
        kept += 1
        assert got.is_valid and isinstance(got, shapely.Polygon) and len(got.interiors) == 0
        assert not got.equals(g)  # smoothed
        # the smoothed ring, but for the knot: within a hundredth of a cell's area of make_valid's main part
        main = max(shapely.get_parts(shapely.make_valid(knotted)), key=lambda p: p.area)
        assert got.symmetric_difference(main).area < 0.01 + sum(loops)
        assert inward >= 0
    assert kept >= 3
