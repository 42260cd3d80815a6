"""Planning a huge grid costs the grid's arrays, not an object per tile: `sam3tiles plan` and a run's own
planning (`plan_run`) on 10^5 tiles make no `Tile` and stay within a few MB of traced memory; the arrays
that replace the per-tile frames are those frames to the bit."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import shapely
from affine import Affine
from click.testing import CliRunner

from benchmarks.bench_plan import make_source
from sam3tiles.cli.main import cli
from sam3tiles.tiling.frame import TileFrames, grid_frames
from sam3tiles.tiling.grid import TileGrid


@pytest.mark.parametrize("transform", [Affine(0.5, 0, 500000.25, 0, -0.5, 4100000.75),
                                       Affine(0.4, 0.3, 500000.123, 0.3, -0.4, 4100000.7),
                                       Affine(1e-5, 0, 13.4, 0, -1e-5, 52.5), Affine.identity()])
@pytest.mark.parametrize("scale", [1.0, 0.37, 2.5])
def test_the_grid_frames_at_once_are_each_tiles_frame(transform, scale):
    """`grid_frames` (the plan's tile layer: no `Tile` made) gives each tile's offsets, valid size, window and
    core to the bit, north-up or rotated, at any zoom, edge tiles included."""
    g = TileGrid(5300, 4100, transform=transform, scale=scale, overlap=200)
    got = grid_frames(g)
    tiles = list(g)
    frames = TileFrames(g)
    for k in ("row", "col", "x0", "y0"):
        assert got[k].tolist() == [getattr(t, k) for t in tiles], k
    assert got["valid_w"].tolist() == [t.valid_wh[0] for t in tiles]
    assert got["valid_h"].tolist() == [t.valid_wh[1] for t in tiles]
    assert shapely.to_wkb(got["window"]).tolist() == [shapely.to_wkb(frames.frame(t).window) for t in tiles]
    assert shapely.to_wkb(got["core"]).tolist() == [shapely.to_wkb(frames.frame(t).core) for t in tiles]


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    return make_source(tmp_path_factory.mktemp("plan_scale"), 10**5)


def _count_tiles(monkeypatch) -> list:
    """Count the `Tile`s made from here on (every grid tile is made by `TileGrid.tile`)."""
    made = []
    tile = TileGrid.tile
    monkeypatch.setattr(TileGrid, "tile", lambda self, r, c: made.append(1) or tile(self, r, c))
    return made


def test_plan_of_a_huge_grid_makes_no_tile_and_holds_no_memory_per_tile(big, monkeypatch):
    """`sam3tiles plan` on 10^5 tiles: the counts come from the selection's codes, no tile is made, and the
    traced peak stays a few MB (a row, frame and polygons per tile took 0.5 GB here and 90 s)."""
    src, scale = big
    runner = CliRunner()
    assert runner.invoke(cli, ["plan", str(src), "--scale", "0.5"]).exit_code == 0  # imports, caches: warm
    made = _count_tiles(monkeypatch)
    tracemalloc.start()
    try:
        r = runner.invoke(cli, ["plan", str(src), "--scale", repr(scale)])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert r.exit_code == 0, r.output
    assert "tiles: 99856 (316 rows x 316 cols), 0 skipped, 99856 to run" in r.output
    assert "planned in " in r.output and " s, peak memory " in r.output
    assert not made
    assert peak < 16 * 2**20, f"{peak / 2**20:.0f} MB traced"


def test_a_runs_own_planning_of_a_huge_grid_makes_no_tile(big, monkeypatch, tmp_path):
    """`plan_run` (what `segment` does before any tile) on 10^5 tiles: no tile made, a few MB traced."""
    from sam3tiles.options import Options
    from sam3tiles.run.planning.plan import plan_run
    from sam3tiles.run.planning.targets import Targets

    src, scale = big
    opts = Options(backend="simulated", scale=scale)
    plan_run(str(src), ["red"], options=Options(backend="simulated", scale=0.5))  # warm
    made = _count_tiles(monkeypatch)
    tracemalloc.start()
    try:
        plan = plan_run(str(src), ["red"], options=opts, targets=Targets(out=str(tmp_path / "o.parquet/")))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert plan.inputs[0].n_tiles == 99856 and not made
    assert peak < 16 * 2**20, f"{peak / 2**20:.0f} MB traced"


def test_the_tile_layer_of_a_large_grid_is_made_without_tiles(big, monkeypatch, tmp_path):
    """`plan --out`: the grid's rows are arrays (`grid_frames`): no `Tile` made, one row per tile."""
    import geopandas as gpd

    src, _ = big
    made = _count_tiles(monkeypatch)
    out = tmp_path / "grid.parquet"
    r = CliRunner().invoke(cli, ["plan", str(src), "--scale", "1", "--out", str(out)])
    assert r.exit_code == 0, r.output
    layer = gpd.read_parquet(out)
    n = int(r.output.split("tiles: ")[1].split()[0])
    assert len(layer) == n > 1000 and not made
    assert np.array_equal(layer["tile"], np.arange(n)) and layer["run"].all()
