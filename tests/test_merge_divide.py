"""Rule 5's division of a fused region (`merge.shares.divide`): the shares keep everything the fusing tile said.

The layouts below are ones the coverage property of tests/test_merge_misbehaving.py (and a longer random run
of its layouts) found losing area while the division was built: snap-rounding moved the region's own outline
(1.2 px² of the owning tile's core gone), GEOS's Voronoi cells overlapped on the pixel lattice (19 px² gone),
and a group dropped as slivers took its shares with it (2 px² gone)."""

from __future__ import annotations

import numpy as np
import pytest
import shapely
from affine import Affine
from hypothesis import given, settings
from hypothesis import strategies as st
from shapely import wkt
from shapely.geometry import box

from sam3tiles.merge import merge_pieces, shares as division
from sam3tiles.tiling.frame import TileFrames
from sam3tiles.tiling.grid import TileGrid
from sam3tiles.tiling.piecekey import tile_of
from sam3tiles.vectorize.pieces import EDGE_MARGIN, Pieces, tile_key

SMALL = TileGrid(260, 200, tile_size=100, overlap=30, transform=Affine.identity())  # test_merge_misbehaving's


def _merge(rows):
    """Merge views [(tile index, WKT)] of one prompt; (objects, stats, frames, pieces)."""
    tiles = {t.index: t for t in SMALL}
    frames = dict(TileFrames(SMALL))
    p = Pieces()
    for i, text in sorted(rows, key=lambda r: r[0]):
        v, f = wkt.loads(text), frames[i]
        d = shapely.distance(v, f.edges) if f.edges is not None else np.inf
        p.geometry.append(v)
        p.score.append(0.9)
        p.prompt.append(0)
        p.tile_key.append(tile_key(tiles[i]))
        p.complete.append(bool(d >= EDGE_MARGIN))
        p.edge_dist.append(float(d))
    merged, stats = merge_pieces(p, frames)
    return merged, stats, frames, p


def _lost(merged, stats, frames, pieces) -> float:
    """What the owning tiles said (each view inside its tile's core, 1 px in) that no object covers, beyond
    the area the merge declares dropped (duplicates, slivers, moved inward by the smoothing)."""
    owned = shapely.union_all([g.intersection(frames[tile_of(k)].core.buffer(-1, join_style="mitre"))
                               for g, k in zip(pieces.geometry, pieces.tile_key)])
    cov = stats.coverage[0]
    declared = cov.get("duplicates", 0.0) + cov.get("slivers", 0.0) + cov.get("blended", 0.0)
    return owned.difference(shapely.union_all(list(merged.geometry))).area - declared


# tile 0 drew a block and a strip beside it (3 px wide, touching it); tile 4, below, drew both as one region
SEED6 = [(0, "POLYGON ((92 88, 92 0, 0 0, 0 88, 92 88))"), (0, "POLYGON ((3 97, 3 7, 0 7, 0 97, 3 97))"),
         (4, "POLYGON ((92 72, 0 72, 0 90, 92 90, 92 72))")]
# views on the pixel lattice: the Voronoi cells of their outlines' points overlapped (four on one circle)
LATTICE = [(10, "POLYGON ((191 193, 233 193, 233 177, 191 177, 191 193))"),
           (11, "POLYGON ((259 198, 259 175, 210 175, 210 198, 259 198))"),
           (7, "POLYGON ((211 146, 211 168, 233 168, 233 146, 211 146))"),
           (10, "POLYGON ((170 148, 170 189, 232 189, 232 148, 170 148))"),
           (11, "POLYGON ((232 148, 217 148, 217 189, 232 189, 232 148))")]
# a group of the division that is stitched to nothing (its views slivers): its shares go to the object beside
SLIVER_GROUP = [(6, "POLYGON ((226 147, 231 147, 231 94, 226 94, 226 147))"),
                (6, "POLYGON ((236 147, 236 94, 231 94, 231 147, 236 147))"),
                (2, "POLYGON ((191 33, 191 100, 240 100, 240 33, 191 33))"),
                (3, "POLYGON ((260 100, 260 33, 235 33, 235 100, 260 100))"),
                (6, "POLYGON ((233 122, 233 77, 191 77, 191 122, 233 122))"),
                (7, "POLYGON ((260 122, 260 70, 210 70, 210 122, 260 122))")]


@pytest.mark.parametrize("rows, objects", [(SEED6, 2), (LATTICE, 2), (SLIVER_GROUP, 1)],
                         ids=["seed-6", "lattice", "sliver-group"])
def test_a_divided_fusing_region_loses_nothing_its_tile_said(rows, objects):
    merged, stats, frames, pieces = _merge(rows)
    assert _lost(merged, stats, frames, pieces) <= 1e-6 * sum(g.area for g in pieces.geometry)
    # the fusing region was divided among the objects it fused, not left standing alone over them
    assert len(merged.geometry) == objects
    assert stats.rule_violations == 0


def test_the_block_and_the_strip_each_take_their_side_of_the_fused_region():
    merged, *_ = _merge(SEED6)
    strip, block = sorted(merged.geometry, key=lambda g: g.area)
    # tile 4's region x 0..92, y 72..90 inside its core (y >= 85, x < 85): the strip keeps its own column
    # (x 0..3, the midline between the outlines within a couple of px), the block the rest
    below = box(0, 88, 85, 90)
    assert strip.intersection(below).area < 3.5 * 2 * 2
    assert block.intersection(below).area > below.area - 3.5 * 2 * 2


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 60), st.integers(0, 60), st.integers(2, 60), st.integers(2, 60)),
                min_size=3, max_size=5),
       st.sampled_from([(0.0, 0.0, 1.0), (500_000.0, 4_000_000.0, 0.3), (12.5, -7.25, 0.5)]))
def test_shares_cover_the_region_exactly_and_do_not_overlap(rects, frame):
    # pixel-lattice rectangles (the first the region, the rest the groups' views) in map units: the shares
    # of any layout, in any CRS's coordinates, add up to the region and never overlap
    x0, y0, px = frame
    geoms = [box(x0 + a * px, y0 + b * px, x0 + (a + w) * px, y0 + (b + h) * px) for a, b, w, h in rects]
    region, views = geoms[0], geoms[1:]
    shares = division.divide(region, views, 3.5 * px)
    assert len(shares) == len(views)
    total = shapely.union_all(shares)
    # within the float resolution of the map's coordinates (a few units in the last place along the outline)
    ulp = region.length * 4 * np.spacing(max(abs(x0), abs(y0)) + 100)
    assert region.symmetric_difference(total).area <= 1e-12 * region.area + ulp
    assert abs(sum(g.area for g in shares) - region.area) <= 1e-12 * region.area + ulp


def test_a_fusing_part_with_nothing_inside_its_own_core_gives_nothing():
    # its part in its core is empty (its tile's view lies in the band only): no share, no GEOS error
    shares = division.divide(shapely.Polygon(), [box(0, 0, 10, 10), box(12, 0, 20, 10)], 3.5)
    assert len(shares) == 2 and all(g.is_empty for g in shares)
