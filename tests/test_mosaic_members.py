"""A mosaic's members stay open across windows, tasks, threads and runs of one process
(`readers.members.MemberCache`):
opens counted, not timed; the cache is bounded (least recently used closed first); a member rewritten
between two runs of one process is read anew; opening a member without its georeferencing says nothing.

Small GeoTIFFs written by rasterio in tmp dirs, grouped into one map by `run.planning.maps.group_inputs`.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from affine import Affine
from rasterio.windows import Window

from sam3tiles.options import Options
from sam3tiles.readers import members as members_mod
from sam3tiles.readers import open_source
from sam3tiles.readers.members import MemberCache
from sam3tiles.run.planning.maps import group_inputs
from sam3tiles.testing import write_raster

SIDE = 40  # px of each file; 0.5 m pixels


def _file(path, value, col, row):
    data = np.full((3, SIDE, SIDE), value, np.uint8)
    t = Affine(0.5, 0, 400000 + 0.5 * SIDE * col, 0, -0.5, 5000000 - 0.5 * SIDE * row)
    return str(write_raster(path, data, transform=t))


def _grid(folder, n=4, values=None):
    """`n` x `n` adjacent files (file (r, c) holds the value 10 * r + c + 1 in every band); the map's path."""
    folder.mkdir(exist_ok=True)
    paths = [_file(folder / f"r{r}c{c}.tif", (values or {}).get((r, c), 10 * r + c + 1), c, r)
             for r in range(n) for c in range(n)]
    (m,) = group_inputs(paths, Options()).maps
    return m.path


@pytest.fixture
def cache():
    """A fresh member cache for this process (the one before comes back after the test)."""
    before = members_mod._shared["cache"]
    fresh = members_mod._shared["cache"] = MemberCache()
    yield fresh
    fresh.close()
    members_mod._shared["cache"] = before


def test_a_member_stays_open_across_windows_readers_and_tasks_of_one_identity(tmp_path, cache):
    path = _grid(tmp_path / "map")
    src = open_source(path, identity="map-v1")
    # three overlapping windows over the top-left 2 x 2 files: four files opened, once each
    for col in (0, 10, 20):
        rgb, valid = src.read_window(Window(col, 0, 60, 60), (60, 60))
        assert valid.all()
    assert cache.opened == 4
    src.close()  # a reader of a planned identity leaves its members open for the next one
    assert len(cache) == 4
    again = open_source(path, identity="map-v1")  # the next task's (or run's) reader of the same map
    rgb, _ = again.read_window(Window(0, 0, 80, 80), (80, 80))
    assert cache.opened == 4 and rgb[0, 0, 0] == 1 and rgb[0, 79, 79] == 12
    private = open_source(path)  # no identity: its members are its own, and closed with it
    private.read_window(Window(0, 0, 40, 40), (40, 40))
    assert cache.opened == 5
    private.close()
    assert len(cache) == 4


def test_the_cache_is_bounded_and_closes_the_least_recently_used_member(tmp_path):
    path = _grid(tmp_path / "map")
    src = open_source(path, identity="map-v1")
    before = members_mod._shared["cache"]
    cache = members_mod._shared["cache"] = MemberCache(limit=3)
    try:
        for c in range(4):  # the top row's files, one window each
            src.read_window(Window(c * SIDE, 0, SIDE, SIDE), (SIDE, SIDE))
            if c == 0:
                ((first,),) = cache.entries.values()
        assert cache.opened == 4 and len(cache) == 3 and first.dataset is None  # closed when it left
        kept = {key[0].rsplit("/", 1)[-1] for key in cache.entries}
        assert kept == {"r0c1.tif", "r0c2.tif", "r0c3.tif"}  # r0c0, the least recently used, was closed
        src.read_window(Window(SIDE, 0, SIDE, SIDE), (SIDE, SIDE))  # r0c1: a hit, now the most recent
        src.read_window(Window(0, 0, SIDE, SIDE), (SIDE, SIDE))  # r0c0 again: opened, r0c2 closed
        assert cache.opened == 5 and len(cache) == 3
        assert [k[0].rsplit("/", 1)[-1] for k in cache.entries] == ["r0c3.tif", "r0c1.tif", "r0c0.tif"]
    finally:
        cache.close()
        members_mod._shared["cache"] = before
    assert not cache.entries


def test_a_member_rewritten_between_two_runs_of_one_process_is_read_anew(tmp_path, cache):
    from sam3tiles.run.planning.plan import plan_run
    from sam3tiles.run.planning.targets import Targets
    from sam3tiles.run.executing.tasks import SourceSpec, read_task

    def planned_read():
        """Plan a run over the map as a run does and read the tile that holds r0c0 and its neighbours through a
        worker's read task; its pixels from r0c0's top-left on (the map's grid is anchored to its lattice:
        holes may come first, issue 52)."""
        from sam3tiles.readers.mosaic import layout_of

        plan = plan_run(str(tmp_path / "map" / "*.tif"), ["red"], options=Options(backend="reference"),
                        targets=Targets(out=str(tmp_path / "o.gpkg"), checkpoint=False))
        (inp,) = plan.inputs
        m = next(m for m in layout_of(inp.path).members if m.path.endswith("r0c0.tif"))
        tile = next(t for t in inp.tiles() if t.x0 <= m.col and m.col + 2 * SIDE <= t.x0 + t.size
                    and t.y0 <= m.row and m.row + 2 * SIDE <= t.y0 + t.size)
        image, _ = read_task(SourceSpec(inp.path, inp.bands, inp.stretch, inp.identity), tile)
        return inp.identity, image.rgb[:, m.row - tile.y0:, m.col - tile.x0:]

    _grid(tmp_path / "map")
    first_id, first = planned_read()
    assert first[0, 0, 0] == 1 and cache.opened == 16
    _file(tmp_path / "map" / "r0c0.tif", 77, 0, 0)  # rewritten in place: same size and place, new pixels
    second_id, second = planned_read()
    assert second_id != first_id
    assert second[0, 0, 0] == 77 and second[0, SIDE, SIDE] == first[0, SIDE, SIDE]
    assert cache.opened == 32 and sum(k[-1] == second_id for k in cache.entries) == 16


def test_a_member_opens_without_its_georeferencing_and_without_a_warning(tmp_path, cache):
    path = _grid(tmp_path / "map", n=2)
    filters = list(warnings.filters)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with open_source(path, identity="map-v1") as src:
            rgb, valid = src.read_window(Window(20, 20, 40, 40), (40, 40))
    assert valid.all() and rgb[0, 0, 0] == 1 and rgb[0, 39, 39] == 12
    assert not [w for w in seen if "geotransform" in str(w.message)]
    assert warnings.filters == filters
    ((member,),) = [s for key, s in cache.entries.items() if key[0].endswith("r0c0.tif")]
    assert member.dataset.transform == Affine.identity()  # its place is the plan's, not read again


def test_threads_share_the_open_members_and_read_them_one_at_a_time(tmp_path, cache):
    """Four threads reading the windows of one map in turn (each thread its own reader, as a task's): a
    member opened about once, not once per thread; every window's pixels as one thread alone reads them."""
    from concurrent.futures import ThreadPoolExecutor

    path = _grid(tmp_path / "map", n=6)
    windows = [Window(c, r, 70, 70) for r in range(0, 6 * SIDE - 70, 25) for c in range(0, 6 * SIDE - 70, 25)]
    with open_source(path, identity="map-v1") as alone:
        expected = [alone.read_window(w, (70, 70))[0] for w in windows]
    assert cache.opened == 36
    cache.close()
    cache.opened = 0

    def read(part):
        with open_source(path, identity="map-v1") as src:
            return [(i, src.read_window(windows[i], (70, 70))[0]) for i in part]

    with ThreadPoolExecutor(4) as pool:
        got = dict(kv for chunk in pool.map(read, [range(k, len(windows), 4) for k in range(4)]) for kv in chunk)
    assert all(np.array_equal(got[i], expected[i]) for i in range(len(windows)))
    # a member two threads read at the same moment is open twice (45-54 opens seen); a cache per thread: 4 x 36
    assert 36 <= cache.opened < 3 * 36
    assert len(cache) == cache.opened  # every one given back, idle
