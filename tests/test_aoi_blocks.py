"""The merge blocks of an area-of-interest run (issue 48): the tiles the area may grow into.

A grid that is one merge block merges when its last tile is in, at the end of the run, with or without an
area: the tiles the area may grow into stay in that block (a tile never grown into is closed at the end, as a
failed tile is), so the area run merges as the full run does, with no one-tile blocks and no pieces left for
a final pass. A grid of several blocks keeps them in blocks of their own: a block along the area's edge
merges when its planned tiles are in, without waiting for the end of the run.
"""

from __future__ import annotations

import numpy as np
import shapely

from sam3tiles.merge.blocks import BlockMerger, GridBlocks
from sam3tiles.options import Options
from sam3tiles.run.planning.area import InputArea
from sam3tiles.run.planning.plan import plan_input
from sam3tiles.run.recording.report import RunReport
from sam3tiles.testing.demo import write_scene
from sam3tiles.tiling.frame import TileFrames

from test_aoi import GEO_PROMPTS, TILING, quarter, run, same_objects


def _area_blocks(tmp_path, side: int, merge_block: int):
    scene = write_scene(tmp_path / f"s{side}.tif", side, side, seed=3, n_fields=0, n_buildings=10, n_cars=10,
                        tile=512)
    area_file, _ = quarter((side, side), tmp_path, turn=20)
    opts = Options(backend="reference", aoi=str(area_file), merge_block=merge_block, **TILING)
    inp = plan_input(str(scene.path), opts)
    area = InputArea(inp, opts, RunReport(), TileFrames(inp.grid))
    growable = area._growable()
    assert growable.any() and area.selection.to_run < len(inp.grid)  # the area skips tiles it may grow into
    return area.blocks(GridBlocks(inp.grid.shape, merge_block)), growable, inp


def test_a_one_block_grid_keeps_the_tiles_the_area_may_grow_into_in_its_block(tmp_path):
    blocks, growable, inp = _area_blocks(tmp_path, 2400, 8)  # 6 x 6 tiles: one block of 8 x 8
    assert blocks.single() and set(blocks.of(np.arange(len(inp.grid))).tolist()) == {0}
    # a tile never grown into: the block merges when the run closes it, with nothing left for a final pass
    frames = TileFrames(inp.grid)
    merger = BlockMerger(frames, blocks)
    for t in np.flatnonzero(~growable).tolist():
        merger.add(t, None)
    assert not merger.parts  # it waits for the growable tiles, which may still run
    merger.close()
    assert merger._merged == {0}


def test_a_grid_of_several_blocks_keeps_the_tiles_the_area_may_grow_into_alone(tmp_path):
    blocks, growable, inp = _area_blocks(tmp_path, 2400, 2)  # 6 x 6 tiles: nine blocks of 2 x 2
    ids = np.arange(len(inp.grid))
    assert not blocks.single()
    assert (blocks.of(ids)[growable] == -1 - ids[growable]).all() and (blocks.of(ids)[~growable] >= 0).all()


def test_one_block_area_run_writes_the_full_runs_objects_and_several_blocks_the_same(tmp_path):
    scene = write_scene(tmp_path / "fields.tif", 2400, 2400, seed=3, n_fields=5, n_buildings=20, n_cars=40,
                        tile=512)
    area_file, area = quarter((2400, 2400), tmp_path, turn=20)
    full, _ = run(scene.path, GEO_PROMPTS)
    want = full[full.intersects(area)]
    one, r1 = run(scene.path, GEO_PROMPTS, aoi=str(area_file))
    several, r2 = run(scene.path, GEO_PROMPTS, aoi=str(area_file), merge_block=2)
    assert r1.area["tiles_grown"] == r2.area["tiles_grown"] > 0
    same_objects(one, want)
    assert shapely.to_wkb(np.asarray(one.geometry.values)).tolist() == \
        shapely.to_wkb(np.asarray(several.geometry.values)).tolist()
