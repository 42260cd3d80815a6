"""Rule 5's boundary in an overlap band: the views of the tiles that saw it, averaged by their distance to
their edges (`sam3tiles.merge.blend`), not a step at the core line from one tile's view to the other's."""

from __future__ import annotations

import numpy as np
import pytest
import shapely
from affine import Affine
from shapely.geometry import LineString, Polygon, box

from sam3tiles.merge import merge_pieces
from sam3tiles.merge.blend import BLEND_CELLS
from sam3tiles.testing import frames_and_pieces
from sam3tiles.tiling.grid import TileGrid
from sam3tiles.vectorize.pieces import MASK_CELL

GRID = TileGrid(1760, 1008, transform=Affine(1, 0, 0, 0, 1, 0))  # band x 752..1008, core line 880
SQUARE = TileGrid(1760, 1760, transform=Affine(1, 0, 0, 0, 1, 0))  # 2 x 2 tiles, core lines x, y 880
STEP = MASK_CELL / 2  # the blend's raster step: what it may move a boundary by
W0, W1 = box(0, 0, 1008, 1008), box(752, 0, 1760, 1008)


def _merge(grid, placed):
    frames, pieces = frames_and_pieces(grid, placed, complete_edge_dist=50.0)
    merged, stats = merge_pieces(pieces, frames)
    return merged, stats


def _top(geom, x: float) -> float:
    """The object's top edge (least y) at `x`."""
    return shapely.bounds(geom.intersection(LineString([(x, -1), (x, 2000)])))[1]


def test_a_river_two_tiles_drew_two_cells_apart_has_their_average_in_the_band_without_a_step():
    # a river y 400..460 across both tiles; tile 0 draws its top edge 7 px (two mask cells) higher. Tile 0's
    # weight falls to 0 at its edge x 1008, tile 1's at x 752: the edge goes from 393 to 400 across the band
    # (at the core line 396.5), not in one step at x 880 (main: 393 up to 880, 400 after)
    merged, stats = _merge(GRID, [((0, 0), box(0, 393, 1008, 460), False), ((0, 1), box(752, 400, 1760, 460), False)])
    assert len(merged.geometry) == 1 and stats.rule_violations == 0
    g = merged.geometry[0]
    assert _top(g, 700) == 393 and _top(g, 1100) == 400  # where one tile alone saw it: its view
    for x in (770, 880, 990):
        w0, w1 = 1008 - x, x - 752
        assert abs(_top(g, x) - (w0 * 393 + w1 * 400) / (w0 + w1)) <= 1.5, x
    tops = [_top(g, x) for x in range(740, 1021, 4)]
    assert all(-STEP <= b - a <= STEP for a, b in zip(tops, tops[1:])), tops  # no step, no dent
    # the bottom edge, where both agree, is as drawn: nothing is redrawn where the views agree
    assert shapely.bounds(g)[3] == 460 and g.geom_type == "Polygon" and not g.interiors


def test_the_blend_stays_between_what_the_tiles_drew():
    # two views far apart at the top (30 px: one tile drew a bank the other did not) and 4 px at the bottom:
    # nowhere does the object grow past the union of the views or shrink inside their intersection
    a, b = box(0, 370, 1008, 464), box(752, 400, 1760, 460)
    merged, _ = _merge(GRID, [((0, 0), a, False), ((0, 1), b, False)])
    g = merged.geometry[0]
    band = box(752, 0, 1008, 1008)
    assert g.intersection(band).difference(a.union(b).buffer(STEP)).area < 1e-6
    assert a.intersection(b).buffer(-STEP).difference(g).area < 1e-6
    # 30 px is a decision, not noise: near each tile's core line the boundary is within the blend's reach
    # of the owner's view
    reach = BLEND_CELLS * MASK_CELL
    assert abs(_top(g, 800) - 370) <= reach and abs(_top(g, 960) - 400) <= reach


def test_four_tiles_at_a_corner_give_one_polygon_without_a_crack():
    # a field around the corner of four tiles (x, y 752..1008 shared), each tile's view moved by a few px
    field = box(600, 600, 1200, 1200)
    shifts = {(0, 0): (-4, -3), (0, 1): (3, -4), (1, 0): (-3, 4), (1, 1): (4, 3)}
    placed = []
    for (r, c), (dx, dy) in shifts.items():
        window = box(752 * c, 752 * r, 752 * c + 1008, 752 * r + 1008)
        placed.append(((r, c), shapely.affinity.translate(field, dx, dy).intersection(window), False))
    merged, stats = _merge(SQUARE, placed)
    assert len(merged.geometry) == 1 and stats.rule_violations == 0
    g = merged.geometry[0]
    views = [p[1] for p in placed]
    assert g.geom_type == "Polygon" and not g.interiors and g.is_valid
    assert shapely.union_all(views).area + 1 >= g.area >= shapely.intersection_all(views).area - 1


def test_views_that_agree_are_kept_exactly():
    # cut in both tiles, the same edges: the owners' stitch as it was, to the vertex
    merged, _ = _merge(GRID, [((0, 0), box(300, 400, 1008, 460), False), ((0, 1), box(752, 400, 1500, 460), False)])
    assert merged.geometry[0].equals(box(300, 400, 1500, 460))


def test_touching_neighbours_blended_stay_two_and_apart():
    # two parcels sharing the edge y 500 across the core line; tile 0 grows both by 3 px. Each object is
    # blended from its own views only: they stay two, overlapping no more than the owners' stitch did
    a, b = box(600, 200, 1100, 500), box(600, 500, 1100, 800)
    grown = [g.buffer(3, join_style="mitre").intersection(W0) for g in (a, b)]
    merged, stats = _merge(GRID, [((0, 0), grown[0], False), ((0, 0), grown[1], False),
                                  ((0, 1), a.intersection(W1), False), ((0, 1), b.intersection(W1), False)])
    assert len(merged.geometry) == 2 and stats.rule_violations == 0
    ga, gb = sorted(merged.geometry, key=lambda g: g.bounds[1])
    assert ga.intersection(gb).area <= 6 * (881 - 597) + 1  # the owners': 6 px deep over tile 0's core


def test_the_owned_area_the_blend_gives_up_is_counted():
    # tile 1 draws the river's top edge 7 px lower than tile 0: in tile 0's core (x 752..880 of the band)
    # the blend moves tile 0's edge down, giving up some of what tile 0 owns: counted, as drops are
    a, b = box(0, 393, 1008, 460), box(752, 400, 1760, 460)
    merged, stats = _merge(GRID, [((0, 0), a, False), ((0, 1), b, False)])
    owners = box(0, 393, 881, 460).union(box(879, 400, 1760, 460))
    given_up = owners.difference(merged.geometry[0]).area
    assert given_up > 100  # about half of 7 px x 128 px
    assert stats.coverage[0]["blended"] == pytest.approx(given_up, rel=1e-6)


def _wobbly(y_top: float, y_bottom: float, x0: float, x1: float, rng, amp: float):
    """A band y_top..y_bottom over x0..x1 whose two edges move smoothly in and out by up to `amp` px."""
    xs = np.linspace(x0, x1, int((x1 - x0) // 8) + 1)
    knots = np.linspace(x0, x1, int((x1 - x0) // 40) + 1)
    top = y_top + np.interp(xs, knots, rng.uniform(-amp, amp, len(knots)))
    bottom = y_bottom + np.interp(xs, knots, rng.uniform(-amp, amp, len(knots)))
    return Polygon([*zip(xs, top), *zip(xs[::-1], bottom[::-1])])


@pytest.mark.parametrize("seed", range(40))
def test_a_river_under_independent_boundary_noise_stays_one_clean_object(seed):
    # each tile draws the river's edges moved in and out by up to two mask cells, independently: one object,
    # valid, no hole and no crumb (a blend's stray raster cells once came out as an object of zero area)
    rng = np.random.default_rng(seed)
    views = [_wobbly(400, 440 + 10 * (seed % 3), 0, 1760, rng, 2 * MASK_CELL) for _ in range(2)]
    merged, stats = _merge(GRID, [((0, 0), views[0].intersection(W0), False),
                                  ((0, 1), views[1].intersection(W1), False)])
    assert len(merged.geometry) == 1 and stats.rule_violations == 0
    g = merged.geometry[0]
    assert g.is_valid and all(p.area >= MASK_CELL ** 2 for p in shapely.get_parts(g))
    assert not any(p.interiors for p in shapely.get_parts(g))
    band = box(752, 0, 1008, 1008)
    union = views[0].intersection(W0).union(views[1].intersection(W1))
    assert g.intersection(band).difference(union.buffer(STEP)).area < 1e-6


def test_a_north_up_windows_weights_by_rows_and_columns_are_the_polygons():
    # the fast path (rows and columns) against the general one (the window's polygon rasterized, the distance
    # to each interior edge segment), on every tile of a georeferenced grid, over a stretch at a corner
    from sam3tiles.merge.blend import _edge_distance, _Field
    from sam3tiles.tiling.frame import TileFrames

    grid = TileGrid(3000, 2500, transform=Affine(0.3, 0, 500000, 0, -0.3, 4100000))
    frames = TileFrames(grid)
    step = STEP * 0.3
    for i in range(len(grid)):
        f = frames[i]
        x0, y0, _, _ = f.window.bounds
        extent = (x0 - 20, y0 - 30, x0 + 120, y0 + 90)
        w, h = int(np.ceil(140 / step)), int(np.ceil(120 / step))
        field = _Field((h, w), Affine(step, 0, extent[0], 0, step, extent[1]), extent, 3.15)
        inside, weight = field._weight(f)
        general = field.raster(f.window)
        assert (inside != general).mean() < 0.01  # cells whose centre lies on the window's edge
        both = inside & general
        assert np.allclose(weight[both], np.where(general, _edge_distance(field.px, field.py, f.edges), 0)[both])


def test_a_rotated_grid_blends_too():
    # a raster whose transform turns it by 30 degrees: its windows are not north-up (the general path)
    turn = Affine.rotation(30)
    grid = TileGrid(1760, 1008, transform=turn)

    def turned(g):
        return shapely.affinity.affine_transform(g, [turn.a, turn.b, turn.d, turn.e, turn.c, turn.f])

    a, b = turned(box(0, 393, 1008, 460)), turned(box(752, 400, 1760, 460))
    merged, stats = _merge(grid, [((0, 0), a, False), ((0, 1), b, False)])
    assert len(merged.geometry) == 1 and stats.rule_violations == 0
    assert stats.coverage[0]["blended"] > 50  # tile 0's edge moved toward tile 1's in tile 0's core
    g = merged.geometry[0]
    assert g.difference(a.union(b).buffer(STEP)).area < 1e-6 and a.intersection(b).buffer(-STEP).within(g)
