"""A grid's frames are made once while a merge asks for them part by part, and no more of them are kept
than `KEPT_FRAMES` (a 10^5-tile grid's frames would be ~200 MB)."""

import pickle

import shapely
from affine import Affine

from sam3tiles.tiling import frame as frame_mod
from sam3tiles.tiling.frame import KEPT_FRAMES, TileFrames
from sam3tiles.tiling.grid import TileGrid


def _grid(side: int = 40) -> TileGrid:
    return TileGrid(side * 896 + 112, side * 896 + 112, transform=Affine(0.5, 0, 400000, 0, -0.5, 5000000))


def test_a_frame_asked_again_is_not_made_again():
    frames = TileFrames(_grid(4))
    first = frames[5]
    assert frames[5] is first
    fresh = TileFrames(_grid(4))[5]
    assert first.window.equals(fresh.window) and first.core.equals(fresh.core)
    assert first.exclusive.equals(fresh.exclusive) and first.edges.equals(fresh.edges)


def test_no_more_frames_kept_than_the_bound():
    grid = _grid(60)  # 3,600 tiles
    frames = TileFrames(grid)
    for i in range(3 * KEPT_FRAMES):
        frames[i]
    assert len(frames._made) <= KEPT_FRAMES
    assert frames[0].window.equals(TileFrames(grid)[0].window)  # made again after it was dropped


def test_a_frame_set_replaces_the_one_made():
    frames = TileFrames(_grid(4))
    frames[3]
    mine = frame_mod.TileFrame(window=shapely.box(0, 0, 1, 1), core=shapely.box(0, 0, 1, 1),
                               exclusive=shapely.box(0, 0, 1, 1))
    frames[3] = mine
    assert frames[3] is mine


def test_frames_made_are_not_pickled():
    grid = _grid(30)
    TileFrames(grid)[0]  # the grid keeps what it computed once (not a frame)
    frames = TileFrames(grid)
    before = len(pickle.dumps(frames))
    for i in range(KEPT_FRAMES):
        frames[i]
    assert len(pickle.dumps(frames)) == before
    assert pickle.loads(pickle.dumps(frames))[7].window.equals(frames[7].window)
