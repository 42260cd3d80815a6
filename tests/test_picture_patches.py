"""A cluster's batch cuts each grid tile's patch of the quicklook picture where the tile is read
(`thumbs.Sampling.patch`, sent with the batch): the driver only pastes it (`Picture.paste`), and the
picture is the one the driver made before from the tiles' decimated copies (`take` + `Picture.add`), byte
for byte, on grids at several scales, with a tile that covers no picture pixel left out as before."""

from __future__ import annotations

import numpy as np
import pytest

from sam3tiles.model.registry import RuntimeSpec
from sam3tiles.readers import open_source
from sam3tiles.run.executing.tasks import SourceSpec, TilePrompt, tile_batch_task
from sam3tiles.testing.demo import write_scene
from sam3tiles.tiling.grid import TileGrid
from sam3tiles.writers.thumbs import MAX_SIDE, Patch, Picture, panel_wh, take


@pytest.mark.parametrize("w,h,scale,side", [(2600, 1900, 1.0, MAX_SIDE), (2500, 1700, 1.5, MAX_SIDE),
                                            (5200, 3100, 0.4, 300), (1300, 900, 1.0, 64)])
def test_patches_cut_with_the_tiles_paste_the_drivers_picture(tmp_path, w, h, scale, side):
    path = write_scene(tmp_path / "s.tif", w, h, seed=5).path
    with open_source(str(path)) as src:
        spec_src = SourceSpec(src.path, src.bands, src.stretch)
        tiles = list(TileGrid(w, h, transform=src.transform, scale=scale))
        before, copies = Picture(w, h, panel_wh(w, h, side)), 0
        for t in tiles:
            step = before.step(t)
            thumb = take(src.read_tile(t).rgb, t.valid_wh, step)
            before.add(t, thumb, step)
            copies += thumb.nbytes
    after = Picture(w, h, panel_wh(w, h, side))
    items = [(t, [TilePrompt(0, "red")], None, after.sampling) for t in tiles]
    outs = tile_batch_task(spec_src, RuntimeSpec(backend="simulated", encode_seconds=0.0, decode_seconds=0.0),
                           items)
    assert len(outs) == len(tiles) > 1
    for out in outs:
        assert isinstance(out.thumb, Patch)
        after.paste(out.thumb)
    assert before.image() is not None
    assert np.array_equal(after.rgb, before.rgb) and np.array_equal(after.covered, before.covered)
    # a patch holds the picture's pixels only: less than the tile's decimated copy that travelled before
    assert sum(o.thumb.pixels.nbytes for o in outs) < copies
