"""Rule 5 where the tiles' views of an object differ steadily (issue 49): a model's instance grown, shrunk or
shifted by a mask cell in one tile and not in the next (`misbehaving`'s `grow`: a 2 x 2 dilation or erosion,
half a cell out and half a cell across). Such a difference holds over the whole tile, so the merge moves each
owner's part to the views' consensus; on thin objects (10-18 px, 3-5 mask cells) a cell is a third of the
width, and the owners' stitch alone keeps every view's whole error."""

from __future__ import annotations

import numpy as np
import shapely
from affine import Affine
from shapely import affinity
from shapely.geometry import box

from sam3tiles.merge import merge_pieces
from sam3tiles.testing import frames_and_pieces
from sam3tiles.tiling.grid import TileGrid
from sam3tiles.vectorize.pieces import MASK_CELL

GRID = TileGrid(1760, 1008, transform=Affine(1, 0, 0, 0, 1, 0))  # band x 752..1008, core line 880
W0, W1 = box(0, 0, 1008, 1008), box(752, 0, 1760, 1008)
C0, C1 = box(0, 0, 881, 1008), box(879, 0, 1760, 1008)  # the cores, grown by a pixel


def _view(truth, grow: int, rng):
    """`truth` as one tile's model drew it: as it is, or a 2 x 2 dilation (`grow` 1) or erosion (-1) of its
    mask (half a cell out, half a cell across, toward a corner the tile's cells chose)."""
    if grow == 0:
        return truth
    dx, dy = rng.choice([-0.5, 0.5], 2) * MASK_CELL
    return affinity.translate(shapely.buffer(truth, grow * MASK_CELL / 2, join_style="mitre"), dx, dy)


def _iou(a, b) -> float:
    return a.intersection(b).area / a.union(b).area


def test_thin_objects_grown_in_one_tile_come_closer_to_the_truth():
    rng = np.random.default_rng(49)
    merged_iou, stitch_iou, worse_view, moved = [], [], [], 0
    for k in range(24):
        width, angle = rng.uniform(10, 18), rng.uniform(-50, 50)
        truth = affinity.rotate(box(880 - 500, 500 - width / 2, 880 + 500, 500 + width / 2), angle, origin=(880, 500))
        # each tile: half the time as drawn, else grown or shrunk; at least the two views differ
        grows = [0, 0]
        while grows[0] == grows[1]:
            grows = rng.choice([0, 0, 1, -1], 2).tolist()
        views = [_view(truth, g, rng) for g in grows]
        placed = [((0, 0), views[0].intersection(W0), False), ((0, 1), views[1].intersection(W1), False)]
        frames, pieces = frames_and_pieces(GRID, placed, complete_edge_dist=50.0)
        out, stats = merge_pieces(pieces, frames)
        assert len(out.geometry) == 1 and stats.rule_violations == 0
        stitch = shapely.union_all([views[0].intersection(W0).intersection(C0),
                                    views[1].intersection(W1).intersection(C1)])
        moved += out.geometry[0].symmetric_difference(stitch).area > MASK_CELL ** 2
        merged_iou.append(_iou(out.geometry[0], truth))
        stitch_iou.append(_iou(stitch, truth))
        worse_view.append(min(_iou(v, truth) for v in views))
    # the owners' stitch keeps each view's error; the consensus halves a lone view's (a grown view beside one
    # as drawn: half a cell each) and takes a grown view beside a shrunk one back to the truth
    assert moved >= 20, moved
    assert np.mean(merged_iou) > np.mean(stitch_iou) + 0.01, (np.mean(merged_iou), np.mean(stitch_iou))
    # the consensus lies between the views: never worse than the worse of them
    assert (np.subtract(merged_iou, worse_view) > -0.002).all(), np.subtract(merged_iou, worse_view)


def test_views_that_agree_stay_to_the_vertex():
    # both tiles drew the same grown object: nothing to take a consensus from, the outline is the owners'
    truth = affinity.rotate(box(380, 493, 1380, 507), 20, origin=(880, 500))
    view = shapely.buffer(truth, MASK_CELL / 2, join_style="mitre")
    placed = [((0, 0), view.intersection(W0), False), ((0, 1), view.intersection(W1), False)]
    frames, pieces = frames_and_pieces(GRID, placed, complete_edge_dist=50.0)
    out, _ = merge_pieces(pieces, frames)
    stitch = shapely.union_all([view.intersection(W0).intersection(C0), view.intersection(W1).intersection(C1)])
    assert out.geometry[0].symmetric_difference(stitch).area < 1e-6
