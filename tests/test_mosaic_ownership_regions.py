"""A mosaic's owned regions (`readers.mosaic.Ownership.regions`, issue 48): worked out for all pairs of
footprints at once, they are exactly the per-pair rule's (nearest centre; equal centres: the earlier file),
on layouts that abut, overlap, repeat a file's place, leave holes and mix sizes; and the work does not grow
with a pair that only shares an edge."""

from __future__ import annotations

import numpy as np
import pytest
import shapely

from sam3tiles.readers import mosaic as mosaic_mod
from sam3tiles.readers.mosaic import Layout, Member, Ownership


def _layout(boxes) -> Layout:
    members = tuple(Member(f"/data/f{i}.tif", c, r, w, h) for i, (c, r, w, h) in enumerate(boxes))
    return Layout(members, 4000, 4000, (0.5, 0.0, 500000.0, 0.0, -0.5, 4100000.0), "EPSG:32633", (1, 2, 3), 3,
                  "uint8")


def _plain_regions(own: Ownership) -> list:
    """The rule one pair at a time, as written before (the reference)."""
    centres = own.layout.map_centres
    out = []
    for k, fp in enumerate(own.footprints):
        cut = []
        for j in [j for j in own.tree.query(fp, predicate="intersects") if j != k]:
            inter = shapely.intersection(fp, own.footprints[j])
            if shapely.area(inter) <= 0:
                continue
            if np.allclose(centres[j], centres[k]):
                if j < k:
                    cut.append(inter)
                continue
            ring = mosaic_mod._closer_part(shapely.bounds(inter), centres[j], centres[k])
            if len(ring) >= 3:
                cut.append(shapely.intersection(inter, shapely.Polygon(ring)))
        out.append(shapely.difference(fp, shapely.union_all(cut)) if cut else fp)
    return out


def _lattice(n: int, side: int, step: int) -> list[tuple[int, int, int, int]]:
    return [(c * step, r * step, side, side) for r in range(n) for c in range(n)]


LAYOUTS = {
    "abutting": _lattice(6, 300, 300),
    "overlapping": _lattice(5, 320, 300),
    "same place twice": [(0, 0, 300, 300), (0, 0, 300, 300), (300, 0, 300, 300), (150, 150, 300, 300)],
    "holes and sizes": [(0, 0, 300, 300), (700, 0, 200, 250), (250, 280, 500, 120), (0, 900, 300, 300),
                        (280, 880, 40, 40), (1000, 1000, 10, 10)],
    "random": [tuple(int(v) for v in row) for row in
               np.column_stack([np.random.default_rng(5).integers(0, 2000, (40, 2)),
                                np.random.default_rng(6).integers(50, 600, (40, 2))])],
}


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_regions_equal_the_rule_pair_by_pair(name):
    own = Ownership(_layout(LAYOUTS[name]))
    got, want = own.regions, _plain_regions(own)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert shapely.to_wkb(g) == shapely.to_wkb(w), (name, k)


def test_files_that_only_share_edges_are_their_own_footprints_without_an_overlay(monkeypatch):
    """A lattice of abutting files: every region is the file's footprint, found without intersecting
    any pair one at a time."""
    own = Ownership(_layout(_lattice(8, 300, 300)))
    calls = {"n": 0}
    real = shapely.intersection

    def counted(*a, **kw):
        calls["n"] += 1
        return real(*a, **kw)

    monkeypatch.setattr(shapely, "intersection", counted)
    regions = own.regions
    assert all(r is fp for r, fp in zip(regions, own.footprints))
    assert calls["n"] <= 1  # one call for all pairs at most, not one per pair (64 files: 420 pairs)


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_a_layout_overlaps_where_two_footprints_share_an_area(name):
    """`Layout.overlapping` (a read applies the overlap rule only then) says what the footprints say."""
    lay = _layout(LAYOUTS[name])
    fps = shapely.box(*lay.boxes.T)
    want = any(shapely.area(shapely.intersection(a, b)) > 0 for i, a in enumerate(fps) for b in fps[i + 1:])
    assert lay.overlapping == want
    assert want == (name != "abutting")  # the others have overlaps (sanity of the layouts themselves)
