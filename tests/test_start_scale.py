"""A segment's start at country scale holds nothing per tile: the grid's tiles, their merge blocks and the
merge's windows come from index arithmetic when asked (`tiling.frame.GridTiles`, `grid_near`,
`merge.GridBlocks`), and give what the per-tile dicts and the STRtree of every window gave: the same
neighbours, the same blocks, the same merge."""

from __future__ import annotations

import numpy as np
import pytest
import shapely
from affine import Affine

from benchmarks.bench_plan import make_source
from sam3tiles.merge import BlockMerger, GridBlocks, tile_blocks
from sam3tiles.testing.demo import write_scene
from sam3tiles.tiling.frame import TileFrames, grid_near, grid_windows, tile_windows
from sam3tiles.tiling.grid import TileGrid

TRANSFORMS = [Affine(0.5, 0, 500000.25, 0, -0.5, 4100000.75), Affine(0.4, 0.3, 500000.123, 0.3, -0.4, 4100000.7),
              Affine(0.5, 0.35, 10.0, 0.0, -0.2, 5.0),  # sheared: a pixel's sides unequal and not square
              Affine(1e-5, 0, 13.4, 0, -1e-5, 52.5), Affine.identity()]


@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize("scale", [1.0, 0.37, 2.5])
def test_grid_windows_and_their_neighbours_are_what_every_window_in_a_tree_gives(transform, scale):
    g = TileGrid(9300, 7100, transform=transform, scale=scale, overlap=200)
    tiles = list(g)
    windows, pixels = tile_windows(tiles)
    got, gpix = grid_windows(g, np.arange(len(g)))
    assert shapely.to_wkb(got).tolist() == shapely.to_wkb(windows).tolist()
    assert gpix.tolist() == pixels.tolist()
    tree = shapely.STRtree(windows)
    rng = np.random.default_rng(len(g))
    for reach in (8 * float(pixels[0]), 16 * float(pixels[0]), 600 * float(pixels[0])):
        for ids in [[0], [len(g) - 1], [len(g) // 2], sorted(rng.choice(len(g), 5, replace=False).tolist())]:
            want = np.unique(tree.query(windows[ids], predicate="dwithin", distance=reach)[1])
            assert grid_near(g, ids, reach).tolist() == want.tolist(), (ids, reach)


@pytest.mark.parametrize("block", [0, 1, 3, 8])
@pytest.mark.parametrize("alone", [None, "some", "all"])
def test_grid_blocks_are_tile_blocks_with_the_area_s_tiles_alone(block, alone):
    g = TileGrid(9300, 7100, overlap=200)
    tiles = list(g)
    want = tile_blocks(tiles, block) if block else {t.index: 0 for t in tiles}
    mask = None
    if alone is not None:
        mask = np.ones(len(g), bool) if alone == "all" else np.random.default_rng(block).random(len(g)) < 0.3
        want = {**want, **{int(i): -1 - int(i) for i in np.flatnonzero(mask)}}
    got = GridBlocks(g.shape, block, mask)
    assert len(got) == len(want) and list(got) == list(want)
    assert [got[i] for i in want] == list(want.values())
    assert got.of(np.arange(len(g))).tolist() == list(want.values())
    members: dict = {}
    for t, b in want.items():
        members.setdefault(b, []).append(t)
    assert all(got.grid_members(b).tolist() == m and got.has(b) for b, m in members.items())
    assert not got.has(max(want.values()) + 1) and not got.has(-1 - len(g))
    assert got.single() == (len(members) <= 1)
    got[len(g) + 5] = want[3]  # a sub-tile joins its parent's block
    assert got[len(g) + 5] == want[3] and len(got) == len(g) + 1
    with pytest.raises(ValueError):
        got[3] = want[3] + 1  # a grid tile's block is the grid's


@pytest.fixture(scope="module")
def pieces(tmp_path_factory):
    from benchmarks.bench_merge_quality import tile_pieces

    scene = write_scene(tmp_path_factory.mktemp("start") / "s.tif", 2300, 1900, seed=5)
    per_tile, frames, tiles, transform, (h, w) = tile_pieces(scene.path, "all")
    grid = TileGrid(w, h, transform=transform)
    assert [t.index for t in tiles] == list(range(len(grid))) == sorted(frames)
    return {t.index: p for t, p in zip(tiles, per_tile)}, frames, grid


def _fed(per_tile, frames, blocks, arrival, early, remote_final=False):
    """A BlockMerger fed tile by tile; its tasks run here, their jobs kept (with `remote_final`, the final
    pass is one of them, its frames a view of its pieces' tiles only)."""
    import pickle

    jobs = []

    def submit(fn, job):
        jobs.append(job)
        return fn(*pickle.loads(pickle.dumps(job)))  # as a cluster's task gets it

    merger = BlockMerger(frames, blocks, submit=submit, early=early, remote_final=remote_final)
    for t in arrival:
        merger.add(t, per_tile.get(t))
    merged, stats = merger.finish(gather=list)
    return merged, stats, jobs


@pytest.mark.parametrize("block, early, alone", [(0, True, True), (1, False, False), (1, True, True),
                                                  (2, True, False), (2, False, True)])
def test_a_merge_by_grid_arithmetic_is_the_merge_by_dicts_and_a_tree(pieces, block, early, alone):
    """`BlockMerger` on a run's grid (`GridBlocks`, lazy `TileFrames`) and on dicts of every tile's block and
    frame: the same blocks merged in the same order with the same foreign windows, the same objects."""
    per_tile, frames, grid = pieces
    tiles = list(grid)
    mask = (np.arange(len(grid)) % 3 == 1) if alone else None
    blocks = tile_blocks(tiles, block) if block else {t.index: 0 for t in tiles}
    if mask is not None:
        blocks = {**blocks, **{int(i): -1 - int(i) for i in np.flatnonzero(mask)}}
    arrival = list(per_tile)
    np.random.default_rng(block).shuffle(arrival)
    want, s0, jobs0 = _fed(per_tile, frames, blocks, arrival, early)
    got, s1, jobs1 = _fed(per_tile, TileFrames(grid), GridBlocks(grid.shape, block, mask), arrival, early,
                          remote_final=True)
    assert len(jobs1) == len(jobs0) + 1 and len(jobs1[-1][0]) > 0  # the final pass a task of its own
    jobs1 = jobs1[:-1]
    assert len(want.geometry) == len(got.geometry) > 50
    assert bool(shapely.equals_exact(np.asarray(want.geometry, dtype=object),
                                     np.asarray(got.geometry, dtype=object), 0).all())
    assert want.score == got.score and want.prompt == got.prompt and want.n_tiles == got.n_tiles
    assert s0 == s1
    assert len(jobs0) == len(jobs1)
    for a, b in zip(jobs0, jobs1):
        assert sorted(a[2]) == sorted(b[2])  # the block's tiles
        assert sorted(shapely.to_wkb(a[3]).tolist()) == sorted(shapely.to_wkb(b[3]).tolist())  # foreign windows
        assert a[4] == b[4] and a[-1] == b[-1]  # reach, early verdicts


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    return make_source(tmp_path_factory.mktemp("start_scale"), 10**5)


class _First(Exception):
    """Raised by the first tile delivered: the run stops there."""


def test_a_segments_start_on_a_huge_grid_makes_only_the_tiles_it_submits(big, monkeypatch, tmp_path):
    """`segment` on 10^5 tiles up to its first finished tile: the tiles made are those planned for the first
    tasks, not the grid's (the start made every `Tile`, its merge block in a dict and its window in an
    STRtree: 1.9 GB and 45 s at 10^6 tiles)."""
    from sam3tiles.run.executing import runner
    from sam3tiles.run.pipeline import segment_job

    src, scale = big
    made = []
    tile = TileGrid.tile
    monkeypatch.setattr(TileGrid, "tile", lambda self, r, c: made.append(1) or tile(self, r, c))
    deliver = runner.InputRun._deliver
    seen = {}

    def first(self, t, res, computed):
        deliver(self, t, res, computed)
        seen["tiles"], seen["made"] = self.inp.n_tiles, len(made)
        raise _First

    monkeypatch.setattr(runner.InputRun, "_deliver", first)
    with pytest.raises(_First):
        segment_job(str(src), ["red"], backend="simulated", scale=scale, out=str(tmp_path / "o.parquet/"),
                    return_objects=False)
    assert seen["tiles"] > 90_000
    assert seen["made"] < 1000, seen


def test_the_start_benchmark_runs_at_its_smoke_size():
    """`bench_plan --smoke --start-only` (10^4 tiles): a segment to its first tile, the figures printed."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-m", "benchmarks.bench_plan", "--smoke", "--start-only", "--json"],
                         cwd=root, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["tiles"] == 10_000 and res["first_tile_s"] > 0 and res["peak_rss_mb"] > 0


def test_merge_blocks_objects_go_to_the_spool_together(tmp_path, monkeypatch):
    """Each merge block's decided objects went to the spool as one table (~25 ms of the driver's each): they
    go together now, the rows the same (ids in job order whatever the tables)."""
    from sam3tiles.run.pipeline import segment_job
    from sam3tiles.writers.stream import ObjectSpool

    scene = write_scene(tmp_path / "s.tif", 2300, 1900, seed=3)
    calls = []
    add = ObjectSpool.add
    monkeypatch.setattr(ObjectSpool, "add", lambda self, i, gdf: calls.append(len(gdf)) or add(self, i, gdf))
    one, _ = segment_job(str(scene.path), ["red", "blue"], backend="reference", merge_block=0)
    assert len(calls) == 1
    calls.clear()
    blocked, rep = segment_job(str(scene.path), ["red", "blue"], backend="reference", merge_block=1)
    assert rep.tiles == 9 and len(calls) == 1 and calls[0] == len(blocked) > 20  # 9 blocks: one table
    assert one["id"].tolist() == blocked["id"].tolist() and one["prompt"].tolist() == blocked["prompt"].tolist()
    assert bool(shapely.equals_exact(one.geometry.values, blocked.geometry.values, 0).all())
