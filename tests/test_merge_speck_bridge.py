"""A speck (a small false positive) between two neighbouring objects never joins them: the tiles that see
the objects draw them apart, and a part small beside both that links to two parts of one other tile is not
the evidence that they are one object (issue 49: strips fused by two specks of 37 and 101 px^2)."""

from __future__ import annotations

import random
from types import SimpleNamespace

import numpy as np
import pytest

from affine import Affine
from shapely.geometry import box

from sam3tiles.merge import merge_blocked, merge_pieces, tile_blocks
from sam3tiles.merge.links import _bridges, _components
from sam3tiles.merge.parts import IOU_MIN
from sam3tiles.testing import frames_and_pieces
from sam3tiles.tiling.grid import TileGrid

ROW = TileGrid(3264, 1008, transform=Affine(1, 0, 0, 0, 1, 0))  # 4 tiles, core lines 880, 1632, 2384
WINDOWS = [box(0, 0, 1008, 1008), box(752, 0, 1760, 1008), box(1504, 0, 2512, 1008), box(2256, 0, 3264, 1008)]
# two strips 8 px (two mask cells) apart; each tile's boundary moved out by up to a cell (1-3 px)
A, B = box(300, 300, 2300, 340), box(300, 348, 2300, 388)


def _views(tile, grow_a, grow_b):
    w = WINDOWS[tile]
    a = box(300, 300, 2300, 340 + grow_a).intersection(w)
    b = box(300, 348 - grow_b, 2300, 388).intersection(w)
    return [((0, tile), a, False), ((0, tile), b, False)]


def _placed(speck, tile=0):
    placed = [*_views(0, 3, 3), *_views(1, 3, 3), *_views(2, 1, 2), ((0, tile), speck, False)]
    return sorted(placed, key=lambda p: p[0][1])  # in tile order, as a run gathers them


def _fused(geoms):
    return [g for g in geoms if g.intersection(A).area > 0.5 * A.area and g.intersection(B).area > 0.5 * B.area]


def _best_iou(geoms, t):
    return max(g.intersection(t).area / g.union(t).area for g in geoms)


def _merge(placed):
    frames, pieces = frames_and_pieces(ROW, placed, complete_edge_dist=50.0)
    return merge_pieces(pieces, frames)


def test_a_speck_in_the_gap_of_the_overlap_band_does_not_fuse_two_strips():
    # tile 0 drew a speck of 48 px^2 in the gap, in the band it shares with tile 1: it lies within a cell of
    # both of tile 1's strips (rule 2 links it to each), so one component held both strips
    for speck, tile in ((box(850, 341, 858, 347), 0), (box(900, 341, 906, 347), 1), (box(1600, 341, 1612, 347), 2)):
        merged, stats = _merge(_placed(speck, tile))
        geoms = list(merged.geometry)
        assert not _fused(geoms), (speck.bounds, tile)
        assert _best_iou(geoms, A) > 0.9 and _best_iou(geoms, B) > 0.9
        assert stats.rule_violations == 0


def test_the_speck_rule_is_the_same_whatever_the_tile_order():
    placed = _placed(box(850, 341, 858, 347))
    want = sorted(round(g.area, 3) for g in _merge(placed)[0].geometry)
    rng = random.Random(3)
    for _ in range(3):
        order = [0, 1, 2]
        rng.shuffle(order)
        again = sorted(placed, key=lambda p: order.index(p[0][1]))
        assert sorted(round(g.area, 3) for g in _merge(again)[0].geometry) == want


def test_one_object_and_a_small_view_of_it_still_merge():
    # the guard: a small part linked to one part of another tile (a view cut short) still joins it
    whole = box(300, 300, 2300, 388)
    placed = [((0, 0), whole.intersection(WINDOWS[0]), False), ((0, 1), whole.intersection(WINDOWS[1]), False),
              ((0, 2), whole.intersection(WINDOWS[2]), False), ((0, 0), box(850, 330, 858, 350), False)]
    merged, _ = _merge(placed)
    assert len(merged.geometry) == 1
    assert merged.geometry[0].symmetric_difference(whole).area < 100.0


@pytest.mark.parametrize("block", [1, 2])
def test_blocked_merges_keep_the_specks_out_as_the_single_merge_does(block):
    # a component built across blocks (tiles 0-1 and 2-3 with 2, each tile alone with 1): the speck and all it
    # links to are decided in one pass, so the blocked merge is the single one
    for speck, tile in ((box(850, 341, 858, 347), 0), (box(1600, 341, 1612, 347), 2)):
        placed = _placed(speck, tile)
        frames, pieces = frames_and_pieces(ROW, placed, complete_edge_dist=50.0)
        single, _ = merge_pieces(pieces, frames)
        blocked, _ = merge_blocked(pieces, frames, tile_blocks(list(ROW), block))
        assert not _fused(list(blocked.geometry))
        assert sorted(round(g.area, 3) for g in blocked.geometry) == sorted(round(g.area, 3) for g in single.geometry)


def test_a_speck_where_four_tiles_meet_does_not_join_one_tiles_strip_to_anothers():
    # the seed-101 layout: the speck lies within a cell of strip A as one tile drew it and of strip B as
    # another drew it (each tile's boundary moved toward the speck on one side only)
    square = TileGrid(1760, 1760, transform=Affine(1, 0, 0, 0, 1, 0))  # 4 tiles, core lines at 880
    a, b = box(300, 860, 1500, 876), box(300, 884, 1500, 900)
    wins = {(0, 0): box(0, 0, 1008, 1008), (0, 1): box(752, 0, 1760, 1008), (1, 0): box(0, 752, 1008, 1760),
            (1, 1): box(752, 752, 1760, 1760)}
    grow = {(0, 1): (3, 0), (1, 0): (0, 3)}
    placed = []
    for rc, w in wins.items():
        ga, gb = grow.get(rc, (0, 0))
        placed += [(rc, box(300, 860, 1500, 876 + ga).intersection(w), False),
                   (rc, box(300, 884 - gb, 1500, 900).intersection(w), False)]
        if rc == (0, 0):
            placed.append((rc, box(900, 877, 908, 883), False))
    frames, pieces = frames_and_pieces(square, placed, complete_edge_dist=50.0)
    geoms = list(merge_pieces(pieces, frames)[0].geometry)
    assert not [g for g in geoms if g.intersection(a).area > 0.5 * a.area and g.intersection(b).area > 0.5 * b.area]
    assert _best_iou(geoms, a) > 0.9 and _best_iou(geoms, b) > 0.9


def _cols(geoms, tiles, windows=None):
    """Parts by hand for `_bridges`: their geometries and tiles, and the tiles' frames (one window for all
    unless given: the band is the whole window)."""
    c = SimpleNamespace(geoms=np.asarray(geoms, dtype=object), tiles=np.asarray(tiles))
    windows = windows or {t: box(-5000, -5000, 5000, 5000) for t in set(tiles)}
    return c, {t: SimpleNamespace(window=w, pixel=1.0) for t, w in windows.items()}


def test_a_speck_joins_no_object_through_a_small_view_of_the_other():
    # held-out long seed 598, every behaviour at once: a speck of 25 m^2 in the gap between two strips linked
    # to a view of one strip and to a small view of the other (1 530 m^2 where the strip runs into a tile's
    # window edge, beside two views of it of 17 000 m^2). That view is a speck by the rule's measure (dwarfed by
    # two parts), and a speck's links to specks decided nothing: the strips came out as one (0.683 against
    # their owners' 0.955). A small view of one object stands for that object
    geoms = [box(0, 0, 1000, 40), box(500, 0, 1500, 40),  # 0, 1: strip A's views
             box(0, 48, 1000, 88), box(500, 48, 1500, 88),  # 2, 3: strip B's views
             box(900, 48, 1000, 88),  # 4: a small view of B, linked to both
             box(950, 41, 960, 47)]  # 5: the speck in the gap, linked to A's view and B's small view
    la, lb = np.asarray([0, 2, 4, 4, 5, 5]), np.asarray([1, 3, 2, 3, 0, 4])
    c, frames = _cols(geoms, [0, 1, 0, 1, 2, 3])
    ka, kb = _bridges(c, la, lb, frames, IOU_MIN)
    comp = _components(len(geoms), ka, kb)
    assert comp[0] == comp[1] and comp[2] == comp[3] == comp[4]
    assert comp[0] != comp[2]
    assert len(ka) == len(la) - 1  # (the speck keeps its link to one of them)


def test_a_view_along_a_window_edge_joins_the_views_it_agrees_with_across_a_silent_tile():
    # held-out long seed 759, every behaviour at once: a strip in the lower row of tiles, its top inside the upper
    # row's windows; the lower tile owning its middle drew nothing. The upper middle tile's view of the strip (a
    # sliver along its window edge, 28 px of 320) is dwarfed by the lower tiles' views on either side, so it was a
    # speck between two components, and the strip came out as two objects. It agrees with each where both see
    grid = TileGrid(3264, 1760, transform=Affine(1, 0, 0, 0, 1, 0))  # windows: rows y 0-1008 / 752-1760
    strip = box(300, 980, 2200, 1300)
    frames, pieces = frames_and_pieces(grid, [((r, k), strip.intersection(frames_win), False)
                                              for (r, k), frames_win in _windows(grid).items()
                                              if (r, k) != (1, 1) and strip.intersects(frames_win)],
                                       complete_edge_dist=50.0)
    merged, _ = merge_pieces(pieces, frames)
    geoms = list(merged.geometry)
    assert len(geoms) == 1, [g.bounds for g in geoms]
    seen = strip.intersection(box(0, 0, 1008, 1760)).union(strip.intersection(box(1504, 0, 3264, 1760)))
    assert geoms[0].intersection(seen).area > 0.98 * seen.area


def _windows(grid):
    frames, _ = frames_and_pieces(grid, [])
    return {(t.row, t.col): frames[t.index].window for t in grid}


def test_a_speck_agreeing_with_one_object_drops_its_link_to_the_other():
    # the guard: a small view agreeing with strip A's view where both tiles see, linked to strip B's view beside
    # it only by rule 2's tolerance, is a view of A; it does not join B (held-out seed 694, had it kept its links)
    geoms = [box(0, 0, 1000, 40), box(500, 0, 1500, 40),  # 0, 1: strip A's views (tiles 0, 1)
             box(0, 48, 1000, 88), box(500, 48, 1500, 88),  # 2, 3: strip B's views (tiles 0, 1)
             box(900, 2, 1000, 40)]  # 4: tile 2's view of A's end, where its window meets tile 0's
    windows = {0: box(-8, -100, 1000, 200), 1: box(500, -100, 1508, 200), 2: box(900, -100, 1908, 200)}
    la, lb = np.asarray([0, 2, 4, 4]), np.asarray([1, 3, 0, 2])
    c, frames = _cols(geoms, [0, 1, 0, 1, 2], windows)
    ka, kb = _bridges(c, la, lb, frames, IOU_MIN)
    comp = _components(len(geoms), ka, kb)
    assert comp[4] == comp[0] != comp[2]
