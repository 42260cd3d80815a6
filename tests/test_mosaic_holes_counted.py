"""A mosaic whose only nodata is its holes (gaps between files, the anchor's margin) says which tiles hold data
from its layout, without reading a pixel (issue 48: `sam3tiles plan` of 1,024 files read all 169 windows, 5 of
its 7 s, to count tiles of holes). The answer is the one a read gives, tile by tile; a member that may hold
nodata itself (a mask, a nodata value) still has its tiles read."""

from __future__ import annotations

import numpy as np
import pytest

from sam3tiles.options import Options
from sam3tiles.readers import open_source
from sam3tiles.readers.members import member_cache
from sam3tiles.readers.mosaic import layout_of
from sam3tiles.run.planning.plan import plan_run
from sam3tiles.run.planning.targets import Targets
from sam3tiles.run.planning.tilelayer import tile_counts, tile_plan
from sam3tiles.testing.demo import write_scene
from sam3tiles.testing.mosaic import split_raster

SIDE = 4400  # 4 x 4 files of 1,100 px; the middle 2 x 2 missing: a 2,200 px hole holds whole tiles
MISSING = ((1, 1), (1, 2), (2, 1), (2, 2))


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    return write_scene(tmp_path_factory.mktemp("holes") / "scene.tif", SIDE, SIDE, seed=3)


def _plan(folder, tmp_path, **opts):
    (inp,) = plan_run(str(folder / "*.tif"), ["red"], targets=Targets(out=str(tmp_path / "o.gpkg"), checkpoint=False),
                      options=Options(backend="reference", **opts)).inputs
    return inp


def _read_answer(inp) -> np.ndarray:
    """Per tile of the grid: whether its read window holds a valid pixel (what a read says)."""
    with open_source(inp.path, bands=inp.bands, stretch=inp.stretch) as src:
        return np.array([bool(src.read_window(t.src_window, t.valid_wh)[1].any()) for t in inp.grid])


@pytest.mark.parametrize("scale", [1.0, 2.0])
def test_tiles_of_holes_are_told_from_the_layout_as_a_read_tells_them(scene, tmp_path, scale):
    split_raster(scene.path, tmp_path / "files", cols=4, rows=4, missing=MISSING)
    inp = _plan(tmp_path / "files", tmp_path, scale=scale)
    lay = layout_of(inp.path)
    assert lay.nodata  # holes (the members hold no nodata of their own)
    truth = _read_answer(inp)
    assert not truth.all() and truth.any()  # tiles of holes only, and tiles with data: the case at hand
    before = member_cache().opened
    with open_source(inp.path, bands=inp.bands, stretch=inp.stretch) as src:
        said = np.array([src.tile_has_data(t) for t in inp.grid])
    assert member_cache().opened == before  # no member opened to say it
    assert (said == truth).all()
    counts = tile_counts(inp)
    assert counts.skipped == {"all nodata": int((~truth).sum())}
    layer = tile_plan(inp)
    assert (layer["has_data"].to_numpy(bool) == truth).all()
    assert member_cache().opened == before


def test_a_member_that_may_hold_nodata_has_its_tiles_read(scene, tmp_path):
    split_raster(scene.path, tmp_path / "files", cols=4, rows=4, missing=MISSING, nodata=0)
    inp = _plan(tmp_path / "files", tmp_path)
    lay = layout_of(inp.path)
    assert lay.nodata
    truth = _read_answer(inp)
    before = member_cache().opened
    with open_source(inp.path, bands=inp.bands, stretch=inp.stretch) as src:
        said = np.array([src.tile_has_data(t) for t in inp.grid])
    assert (said == truth).all()
    assert member_cache().opened > before  # read, as before
