"""The seam merge: one copy of small objects, stitched large ones, touching neighbours kept apart."""

from __future__ import annotations

import numpy as np
import pytest
import shapely
from affine import Affine
from shapely.geometry import box

from sam3tiles.merge import merge_pieces
from sam3tiles.run.pipeline import segment_job
from sam3tiles.testing import frames_and_pieces
from sam3tiles.tiling.frame import TileFrames
from sam3tiles.tiling.grid import TileGrid
from sam3tiles.vectorize.pieces import Pieces

from sam3tiles.testing import write_raster

BG = (92, 112, 84)


def _image(w, h, rects, colour=(20, 20, 235)):
    img = np.empty((3, h, w), np.uint8)
    img[:] = np.asarray(BG, np.uint8)[:, None, None]
    for x0, y0, x1, y1 in rects:
        img[:, y0:y1, x0:x1] = np.asarray(colour, np.uint8)[:, None, None]
    return img


def _segment(tmp_path, img, **kw):
    path = write_raster(tmp_path / "img.tif", img, transform=Affine(1, 0, 0, 0, -1, img.shape[1]))
    gdf, rep = segment_job(str(path), ["blue"], backend="reference", checkpoint=False, **kw)
    return gdf, rep


def _px(geom, h):
    x0, y0, x1, y1 = geom.bounds
    return (round(x0), round(h - y1), round(x1), round(h - y0))


def test_touching_neighbours_across_a_seam_stay_apart(tmp_path):
    # seam between tiles 0 and 1 at x = 752 + 128 = 880; the overlap band is 752..1008
    rects = [(700, 300, 876, 420), (884, 300, 1100, 420),  # 8 px apart, both larger than the overlap? no
             (600, 600, 950, 700), (958, 600, 1300, 700)]  # larger than the overlap, 8 px apart, cut
    img = _image(1700, 1000, rects)
    gdf, rep = _segment(tmp_path, img)
    assert len(gdf) == 4, rep.merge
    got = sorted(_px(g, 1000) for g in gdf.geometry)
    for (x0, y0, x1, y1), (gx0, gy0, gx1, gy1) in zip(sorted(rects), got):
        assert abs(gx0 - x0) <= 4 and abs(gx1 - x1) <= 4 and abs(gy0 - y0) <= 4 and abs(gy1 - y1) <= 4


def test_object_spanning_many_tiles_is_one_polygon(tmp_path):
    img = _image(3200, 2600, [(100, 150, 3000, 2450)])
    gdf, rep = _segment(tmp_path, img)
    assert len(gdf) == 1
    geom = gdf.geometry.iloc[0]
    assert geom.geom_type == "Polygon" and geom.is_valid
    truth = box(100, 2600 - 2450, 3000, 2600 - 150)
    assert geom.intersection(truth).area / geom.union(truth).area > 0.99
    assert len(TileGrid(3200, 2600)) == 16
    assert gdf["n_tiles"].iloc[0] == 16
    assert rep.merge["stitched"] == 1 and rep.merge["largest_group"] == 16


def test_object_with_a_hole_across_seams_keeps_its_hole(tmp_path):
    img = _image(2000, 1200, [(500, 200, 1500, 1000)])
    img[:, 450:750, 800:1200] = np.asarray(BG, np.uint8)[:, None, None]  # a courtyard across the seam
    gdf, _ = _segment(tmp_path, img)
    (geom,) = gdf.geometry
    assert geom.geom_type == "Polygon" and len(geom.interiors) == 1


def test_small_object_in_the_overlap_is_kept_once(tmp_path):
    rects = [(760 + 30 * i, 100 + 60 * i, 780 + 30 * i, 140 + 60 * i) for i in range(8)]  # all in the band
    gdf, rep = _segment(tmp_path, _image(1700, 1000, rects))
    assert len(gdf) == 8
    assert rep.merge["duplicates_dropped"] == 8


def _frames_and_pieces(grid, placed):
    return frames_and_pieces(grid, placed, complete_edge_dist=10.0)


def test_two_objects_of_one_tile_are_never_fused_by_a_neighbour_that_fuses_them():
    grid = TileGrid(1760, 1008, transform=Affine(1, 0, 0, 0, 1, 0))
    # tile 0 sees two objects A and B side by side in the band; tile 1 sees one blob over both
    a, b = box(800, 100, 850, 300), box(860, 100, 1008, 300)
    blob = box(800, 100, 1100, 300)
    frames, pieces = _frames_and_pieces(grid, [((0, 0), a, True), ((0, 0), b, False), ((0, 1), blob, False)])
    merged, stats = merge_pieces(pieces, frames)
    # the disagreement is settled by ownership (tile 0 owns A and B's left end, tile 1 the rest of B):
    # no rule violation, A never fused with B, and B reaches as far as tile 1 saw it
    assert stats.disagreements == 1 and stats.rule_violations == 0
    for g in merged.geometry:
        assert not (g.intersects(a.buffer(-1)) and g.intersects(b.buffer(-1)))
    assert sorted(tuple(round(v) for v in g.bounds) for g in merged.geometry) == [(800, 100, 850, 300),
                                                                                   (860, 100, 1100, 300)]


def test_merge_is_independent_of_piece_order():
    grid = TileGrid(3000, 2500, transform=Affine(1, 0, 0, 0, 1, 0))
    rng = np.random.default_rng(0)
    placed = []
    for t in grid:
        x0, y0 = t.x0, t.y0
        for _ in range(30):
            x, y = rng.uniform(x0, x0 + 980), rng.uniform(y0, y0 + 980)
            g = box(x, y, x + 20, y + 20).intersection(box(x0, y0, x0 + t.valid_wh[0], y0 + t.valid_wh[1]))
            if not g.is_empty:
                placed.append(((t.row, t.col), g, True))
    frames, pieces = _frames_and_pieces(grid, placed)
    m1, _ = merge_pieces(pieces, frames)
    order = rng.permutation(len(placed))
    frames, shuffled = _frames_and_pieces(grid, [placed[i] for i in order])
    m2, _ = merge_pieces(shuffled, frames)
    k1 = sorted(shapely.to_wkb(g, hex=True) for g in m1.geometry)
    k2 = sorted(shapely.to_wkb(g, hex=True) for g in m2.geometry)
    assert k1 == k2


@pytest.mark.parametrize("n_tiles", [1, 4])
def test_empty_input(n_tiles):
    grid = TileGrid(1008 * n_tiles // 2 + 10, 1008)
    frames = dict(TileFrames(grid))
    merged, stats = merge_pieces(Pieces(), frames)
    assert merged.geometry == [] and stats.objects == 0


def test_linked_slivers_beside_an_owned_object_are_dropped():
    grid = TileGrid(1760, 1760, transform=Affine(1, 0, 0, 0, 1, 0))
    x = box(1010, 860, 1060, 900)  # whole in tile (0, 1), which owns it
    s1 = box(900, 860, 1008, 900)  # the edge of a neighbour's view, cut at tile (0, 0)'s right edge ...
    s2 = box(900, 862, 1008, 898)  # ... and at tile (1, 0)'s: both outside their cores (x >= 880)
    frames, pieces = _frames_and_pieces(grid, [((0, 1), x, True), ((0, 0), s1, False), ((1, 0), s2, False)])
    merged, stats = merge_pieces(pieces, frames)
    assert [g.bounds for g in merged.geometry] == [x.bounds]
    assert stats.slivers_dropped == 2 and stats.stitched == 0


@pytest.mark.parametrize("transform", [Affine(0.5, 0, 500000.25, 0, -0.5, 4100000.75),
                                       Affine(0.4, 0.3, 500000.123, 0.3, -0.4, 4100000.7),
                                       Affine(1e-5, 0, 13.4, 0, -1e-5, 52.5)])
@pytest.mark.parametrize("scale", [1.0, 0.37, 2.5])
def test_tile_windows_at_once_are_the_frames_windows(transform, scale):
    """`tile_windows` (what the block merge builds up front) gives each tile's frame window to the bit,
    north-up or rotated, at any zoom; frames set on `TileFrames` (sub-tiles) are taken as they are."""
    from sam3tiles.tiling.frame import tile_windows

    g = TileGrid(5300, 4100, transform=transform, scale=scale)
    tiles = list(g)
    windows, pixels = tile_windows(tiles)
    frames = [TileFrames(g).frame(t) for t in tiles]
    assert shapely.to_wkb(windows).tolist() == [shapely.to_wkb(f.window) for f in frames]
    assert pixels.tolist() == [f.pixel for f in frames]
    lazy = TileFrames(g, {t.index: t for t in tiles})
    from dataclasses import replace

    lazy[tiles[1].index] = odd = replace(frames[1], window=box(0, 0, 1, 1), pixel=7.0)
    w, p = lazy.windows([t.index for t in tiles])
    assert w[1] is odd.window and p[1] == 7.0
    assert shapely.to_wkb(np.delete(w, 1)).tolist() == shapely.to_wkb(np.delete(windows, 1)).tolist()
