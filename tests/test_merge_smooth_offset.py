"""Rule 5's boundary model tells a steady offset between the tiles' views (a grown view beside a shrunk one: a
decision of the model, the same all along) from a noise (a boundary drawn in and out along the outline): the
first leaves the owners' outline, the second is smoothed."""

from __future__ import annotations

import numpy as np
import shapely
from affine import Affine
from shapely.geometry import Polygon, box

from sam3tiles.merge.smooth import smooth_views, view_offsets
from sam3tiles.tiling.frame import TileFrames
from sam3tiles.tiling.grid import TileGrid
from sam3tiles.vectorize.pieces import MASK_CELL

GRID = TileGrid(1760, 1008, transform=Affine(1, 0, 0, 0, 1, 0))  # band x 752..1008, core line 880
W0, W1 = box(0, 0, 1008, 1008), box(752, 0, 1760, 1008)
C0, C1 = box(0, 0, 881, 1008), box(879, 0, 1760, 1008)


def _river(shift: float, rng=None, amp: float = 0.0) -> Polygon:
    """A meandering river 60 px wide, its edges moved out by `shift` (in by a negative one) and, with `rng`, in
    and out by up to `amp` px, smoothly over 40 px (independently per call: a tile's own noise)."""
    xs = np.linspace(0, 1760, 441)
    mid = 450 + 80 * np.sin(xs / 160)
    edges = []
    for side in (-1, 1):
        noise = 0.0 if rng is None else np.interp(xs, np.arange(0, 1800, 40), rng.uniform(-amp, amp, 45))
        edges.append(mid + side * (30 + shift) + noise)
    return Polygon([*zip(xs, edges[0]), *zip(xs[::-1], edges[1][::-1])])


def _smooth(views):
    frames = dict(TileFrames(GRID))
    stitch = shapely.union_all([views[0].intersection(W0).intersection(C0), views[1].intersection(W1).intersection(C1)])
    return stitch, smooth_views(stitch, {0: views[0].intersection(W0), 1: views[1].intersection(W1)}, frames)


def test_a_steady_offset_between_two_views_is_taken_back_not_smoothed():
    # one tile drew the river a cell wider, the other a cell narrower, all along: the views lie two cells apart
    # (well past the agreement's bar), but steadily: no smoothing along the outline (it would only round the
    # bends); each owner's part is moved to the views' consensus (issue 49: the river as it is)
    views = [_river(MASK_CELL), _river(-MASK_CELL)]
    apart, offset, spread = view_offsets({0: views[0].intersection(W0), 1: views[1].intersection(W1)},
                                         dict(TileFrames(GRID)))
    assert apart > 1.5 * MASK_CELL and offset > 1.5 * MASK_CELL and spread < 0.5 * MASK_CELL
    stitch, (out, inward) = _smooth(views)
    truth = _river(0.0)
    assert out.symmetric_difference(truth).area < 0.1 * stitch.symmetric_difference(truth).area
    assert inward > 0  # the wider tile's part moved in


def test_a_noise_between_two_views_is_smoothed():
    # the same river drawn by each tile with its own noise of up to two cells and no offset: smoothed
    moved = 0
    for seed in range(6):
        rng = np.random.default_rng(200 + seed)
        views = [_river(0.0, rng, 2 * MASK_CELL) for _ in range(2)]
        apart, offset, spread = view_offsets({0: views[0].intersection(W0), 1: views[1].intersection(W1)},
                                             dict(TileFrames(GRID)))
        assert apart > 0.5 * MASK_CELL
        stitch, (out, inward) = _smooth(views)
        moved += out.symmetric_difference(stitch).area > MASK_CELL ** 2
    assert moved >= 5, moved
