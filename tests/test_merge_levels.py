"""The merge above the blocks, by levels (`sam3tiles.merge.levels`, issue 48): what blocks leave undecided is
merged by groups of blocks as they come in, then groups of groups; the result is the single merge's, and the
final pass after the last tile holds only what lies near the top level's seams."""

from __future__ import annotations

import numpy as np
import pytest
import shapely

from sam3tiles.merge import blocks as blocks_mod
from sam3tiles.merge import levels
from sam3tiles.merge import merge_pieces
from sam3tiles.merge.blocks import BlockMerger, GridBlocks, Packed
from sam3tiles.merge.parts import Merged
from sam3tiles.testing import grid_pieces
from sam3tiles.tiling.frame import TileFrames
from sam3tiles.tiling.piecekey import tile_of


def _counts(stats) -> dict:
    return {k: v for k, v in stats.as_dict().items() if k not in ("merged_groups", "coverage")}


def _by_tile(pieces) -> dict[int, Packed]:
    packed = Packed.of(pieces)
    tiles = tile_of(np.asarray(packed.columns["tile_key"], dtype=np.int64))
    return {int(t): packed.take(np.flatnonzero(tiles == t)) for t in np.unique(tiles)}


def _run(grid, per_tile, block: int, arrival, monkeypatch, fan: int | None, alone=None):
    """A grid BlockMerger as a run makes it (merges submitted, objects handed over as they come), its
    merges run here; what every pass was given is recorded."""
    if fan is not None:
        monkeypatch.setattr(levels, "FAN", fan)
    jobs, objects = [], []
    final = []

    def submit(fn, job):
        jobs.append((fn.__name__, job))
        return fn(*job)

    real_final = blocks_mod.final_pass

    def final_pass(*job):
        final.append(len(job[2]))
        return real_final(*job)

    monkeypatch.setattr(blocks_mod, "final_pass", final_pass)
    merger = BlockMerger(TileFrames(grid), GridBlocks(grid.shape, block, alone), submit=submit,
                         on_block=lambda objs, first: objects.append((objs.unpack(Merged), first)))
    for i, t in enumerate(arrival):
        merger.add(t, per_tile.get(t))
        if i % 7 == 0:
            merger.drain(lambda futs: futs)
    _, stats = merger.finish(gather=lambda futs: futs)
    first = np.concatenate([f for _, f in objects])
    geoms = [g for o, _ in objects for g in o.geometry]
    scores = [s for o, _ in objects for s in o.score]
    rank = np.argsort(first, kind="stable")
    return [geoms[i] for i in rank], [scores[i] for i in rank], stats, jobs, final[0] if final else 0


@pytest.mark.parametrize("fan, block, alone", [(2, 1, False), (4, 1, False), (2, 2, False), (2, 3, True)])
def test_levels_give_the_single_merge_in_any_arrival_order(monkeypatch, fan, block, alone):
    # large squares over many tiles: long chains of links across blocks and groups of blocks
    pieces, frames, grid, _ = grid_pieces(2500, per_tile=25, seed=5, size=(8.0, 400.0))
    assert grid.shape[0] >= 9  # several levels of groups
    single, s1 = merge_pieces(pieces, frames)
    per_tile = _by_tile(pieces)
    arrival = list(range(grid.shape[0] * grid.shape[1]))
    rng = np.random.default_rng(fan + block)
    rng.shuffle(arrival)
    # `alone`: some tiles in a block of their own (an area of interest's), inside their place's group
    mask = rng.random(len(arrival)) < 0.15 if alone else None
    geoms, scores, s2, jobs, last = _run(grid, per_tile, block, arrival, monkeypatch, fan, mask)
    # every count the single merge's; `merged_groups` aside: a group crossing a block edge is counted in each
    # pass it touches, as with blocks alone (known, tests/test_distributed.py)
    assert _counts(s1) == _counts(s2) and s1.merged_groups > 0 and s1.disagreements > 0
    for k, c in s1.coverage.items():
        assert c == pytest.approx(s2.coverage[k], rel=1e-9)
    assert len(geoms) == len(single.geometry)
    assert bool(shapely.equals_exact(np.asarray(single.geometry, dtype=object), np.asarray(geoms, dtype=object),
                                     0).all())
    assert scores == single.score
    passes = [job for name, job in jobs if name == "level_pass"]
    assert passes  # groups of blocks were merged as they came in
    handed = sum(len(job[0].order) for job in passes)
    assert last < handed  # the final pass holds less than the levels below it were handed


def test_without_levels_the_final_pass_takes_every_piece_near_a_block_edge(monkeypatch):
    # the same layout, one group over all blocks (FAN above the grid): one final pass, as before levels
    pieces, frames, grid, _ = grid_pieces(2500, per_tile=25, seed=5, size=(8.0, 400.0))
    per_tile = _by_tile(pieces)
    arrival = list(range(grid.shape[0] * grid.shape[1]))
    _, _, s_one, jobs_one, last_one = _run(grid, per_tile, 1, arrival, monkeypatch, 64)
    assert not [j for name, j in jobs_one if name == "level_pass"]
    _, _, s_lev, _, last_lev = _run(grid, per_tile, 1, arrival, monkeypatch, 2)
    assert _counts(s_one) == _counts(s_lev)
    assert last_lev < last_one / 2  # the final pass after the last tile: a fraction of what it was


def test_a_block_whose_tiles_never_came_does_not_hold_its_group_back_for_ever(monkeypatch):
    # tiles that never arrive (failed ones): their blocks are closed at the end, and every group above them
    # is merged then, level by level; nothing is lost and the output is the single merge's of what came
    pieces, frames, grid, _ = grid_pieces(2500, per_tile=25, seed=5, size=(8.0, 400.0))
    per_tile = _by_tile(pieces)
    rows, cols = grid.shape
    missing = {r * cols + c for r in range(2) for c in range(2)}  # a corner block of 2 x 2 tiles
    kept = {t: p for t, p in per_tile.items() if t not in missing}
    came = Packed.concat([kept[t] for t in sorted(kept)]).unpack(type(pieces))
    single, s1 = merge_pieces(came, frames)
    arrival = [t for t in range(rows * cols) if t not in missing]
    geoms, _, s2, _, _ = _run(grid, kept, 2, arrival, monkeypatch, 2)
    assert s1.objects == s2.objects == len(geoms) == len(single.geometry)
    assert bool(shapely.equals_exact(np.asarray(single.geometry, dtype=object), np.asarray(geoms, dtype=object),
                                     0).all())


@pytest.mark.parametrize("on_cluster", [False, True])
def test_a_run_merging_by_levels_writes_the_single_merges_objects(tmp_path, monkeypatch, on_cluster):
    # a run of 5 x 6 tiles, each a block, groups of 2 x 2: three levels of groups, their passes tasks (sealed
    # on a cluster); the objects are those of one merge over all tiles
    from sam3tiles.run.pipeline import segment_job
    from sam3tiles.testing.demo import write_scene

    src = tmp_path / "scene.tif"
    write_scene(src, 2200, 1800, seed=1)
    kw = dict(backend="reference", checkpoint=False, tile_size=512, overlap=100)
    single, _ = segment_job(str(src), ["blue", "red"], merge_block=0, **kw)
    monkeypatch.setattr(levels, "FAN", 2)
    started = []
    real = levels.Levels._start
    monkeypatch.setattr(levels.Levels, "_start", lambda self, key: started.append(key) or real(self, key))
    if on_cluster:
        from distributed import Client, LocalCluster

        with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, resources={"GPU": 1},
                          dashboard_address=":0") as cluster, Client(cluster) as client:
            got, report = segment_job(str(src), ["blue", "red"], merge_block=1, client=client, **kw)
    else:
        got, report = segment_job(str(src), ["blue", "red"], merge_block=1, **kw)
    assert report.tiles == 30 and {k[0] for k in started} == {1, 2}
    assert len(got) == len(single) > 20
    assert bool(shapely.equals_exact(np.asarray(single.geometry.values), np.asarray(got.geometry.values), 0).all())
    for col in ("id", "prompt", "score", "n_tiles"):
        assert got[col].tolist() == single[col].tolist(), col


def test_block_merges_run_while_the_tiles_run_never_queued_behind_them(tmp_path):
    # found at 10^5 tiles (1,434 merges alive at the end): merge tasks without a restriction are "root-ish" to
    # the scheduler once more wait than twice its threads, and it queues those while workers are busy; tile
    # tasks (GPU-restricted, never queued) kept the worker busy to the last tile, so every merge waited for the
    # end of the run. A scheduler plugin records every task that entered the queue.
    from distributed import Client, LocalCluster
    from distributed.diagnostics.plugin import SchedulerPlugin
    from distributed.utils import key_split

    from sam3tiles.run.pipeline import segment_job
    from sam3tiles.testing.demo import write_scene

    class Queued(SchedulerPlugin):
        def __init__(self):
            self.queued, self.merges = [], 0

        def transition(self, key, start, finish, *args, **kwargs):
            name = key_split(key)
            if finish == "queued":
                self.queued.append(name)
            if name == "merge_block" and finish == "memory":
                self.merges += 1

    src = tmp_path / "scene.tif"
    write_scene(src, 2600, 2200, seed=2)
    plugin = Queued()
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, resources={"GPU": 1},
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        cluster.scheduler.add_plugin(plugin)  # this object itself: the scheduler runs in this process
        _, report = segment_job(str(src), ["blue", "red"], backend="reference", checkpoint=False, tile_size=512,
                                overlap=100, merge_block=1, client=client)
    assert report.tiles >= 30 and plugin.merges >= 30
    assert "merge_block" not in plugin.queued and "level_pass" not in plugin.queued, plugin.queued[:5]
