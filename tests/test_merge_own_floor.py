"""Never below the best view: the merge keeps what the tile owning an object drew apart apart, also where a
real model's boundary noise (independent per tile) makes the owner's two views touch along stretches."""

from __future__ import annotations

from affine import Affine
from shapely.geometry import box
from shapely.ops import unary_union

from sam3tiles.merge import merge_pieces
from sam3tiles.testing import frames_and_pieces
from sam3tiles.tiling.grid import TileGrid

ROW = TileGrid(3264, 1008, transform=Affine(1, 0, 0, 0, 1, 0))  # 4 tiles, core lines 880, 1632, 2384
# two strips 8 px (two mask cells) apart, their centre (x 1300) in tile 1's core
A, B = box(300, 300, 2300, 340), box(300, 348, 2300, 388)


def _best_iou(geoms, t):
    return max(g.intersection(t).area / g.union(t).area for g in geoms)


def _fused(geoms, a, b):
    return any(g.intersection(a).area > 0.5 * a.area and g.intersection(b).area > 0.5 * b.area for g in geoms)


def _strips(owner_a, owner_b):
    placed = [((0, 0), box(300, 300, 1008, 388), False),  # tile 0 drew both strips as one region
              ((0, 1), owner_a, False), ((0, 1), owner_b, False),  # the owner's two views
              *(((0, 2), g.intersection(box(1504, 0, 2512, 1008)), False) for g in (A, B))]
    frames, pieces = frames_and_pieces(ROW, placed, complete_edge_dist=50.0)
    return merge_pieces(pieces, frames)


def test_strips_the_owner_drew_touching_along_stretches_stay_two():
    # boundary noise: the owner's view of A bulges into B's in five stretches of 30 px (150 px in all, far
    # over the 4 cells two halves of one split object meet along), each a pixel deep; the views are
    # still two masks side by side along 1000 px, two strips the owner kept apart; tile 0's fused region
    # goes to the two, each taking the stretch nearer its own outline (what only tile 0 saw, x < 752)
    bulges = [box(x, 340, x + 30, 349) for x in (800, 1000, 1200, 1400, 1600)]
    merged, stats = _strips(unary_union([box(752, 300, 1760, 340), *bulges]), box(752, 348, 1760, 388))
    geoms = list(merged.geometry)
    assert not _fused(geoms, A, B)
    # the truth is two strips: two objects, each with its side of what only tile 0 saw (x < 752); tile 0
    # drew the 8 px between them filled, and in its core (x < 880) each takes half of that (IoU ~0.95)
    assert len(geoms) == 2
    assert _best_iou(geoms, A) > 0.94 and _best_iou(geoms, B) > 0.94
    assert all(max(g.intersection(t).area for g in geoms) > 0.99 * t.area for t in (A, B))
    assert stats.rule_violations == 0


def test_an_object_its_owner_split_across_toward_the_neighbour_stays_one():
    # one object wider (y) than deep (x) in its owner's window: the owner's split runs toward the
    # neighbour's edge, both halves reach it and meet along the whole cut (348 px, overlapping by 2 px);
    # the neighbour saw it whole: one object, not two halves
    whole = box(700, 200, 1100, 800)
    placed = [((0, 0), whole.intersection(box(0, 0, 1008, 1008)), False),
              ((0, 1), box(752, 200, 1100, 502), False), ((0, 1), box(752, 500, 1100, 800), False)]
    frames, pieces = frames_and_pieces(ROW, placed, complete_edge_dist=50.0)
    merged, _ = merge_pieces(pieces, frames)
    assert len(merged.geometry) == 1
    assert merged.geometry[0].symmetric_difference(whole).area < 0.01 * whole.area


def _lines(l1_owner, l2_owner_cut, fused):
    placed = [((0, 0), fused, False), ((0, 1), l1_owner, True), ((0, 1), l2_owner_cut, False)]
    frames, pieces = frames_and_pieces(ROW, placed, complete_edge_dist=50.0)
    return merge_pieces(pieces, frames)


def test_a_line_its_owner_saw_whole_is_not_stitched_to_the_next_line_a_neighbour_fused():
    # text lines 20 px tall, 6 px apart: L1 whole in tile 1 (its owner, centre x 1100), L2 below it owned
    # by tile 0 (centre x 800). Tile 0 drew both as one box reaching its edge (x 1008); tile 1 drew L1
    # whole and L2 cut at its own edge (x 752). The fused box covers a stretch of tile 1's window where
    # tile 1 drew nothing (above L2, left of L1): not a stretch of L1 tile 1 missed, but the next line
    l1, l2 = box(900, 300, 1300, 320), box(600, 326, 1000, 346)
    merged, stats = _lines(l1, l2.intersection(box(752, 0, 1760, 1008)), box(600, 300, 1008, 346))
    geoms = list(merged.geometry)
    assert not _fused(geoms, l1, l2)
    assert _best_iou(geoms, l1) > 0.95  # the owner's whole view
    assert stats.rule_violations == 0
