"""The pipeline's own costs: merge shortcuts that keep the areas, the reference backend's cheap colour
test, several tiles a task in process, the garbage collector during a run."""


import numpy as np

from sam3tiles.testing.demo import write_scene


def test_merge_link_shortcuts_keep_the_areas():
    """Rule 2's clipped areas: a part within its (rectangular) band is not overlaid with it, and the pair's
    overlay runs at small coordinates; the areas are those of the plain overlays at map coordinates."""
    import shapely

    from sam3tiles.merge.links import _clip, _local

    rng = np.random.default_rng(5)
    x0, y0 = 500000.0, 4100000.0
    band = shapely.box(x0 + 300, y0 - 900, x0 + 380, y0)  # a vertical overlap band, 80 m wide
    ga, gb = [], []
    for _ in range(200):
        cx, cy = x0 + rng.uniform(280, 400), y0 - rng.uniform(20, 880)
        w, h = rng.uniform(3, 30, 2)
        a = shapely.box(cx, cy, cx + w, cy + h)
        ga.append(a)
        gb.append(shapely.affinity.translate(a, *rng.choice([-0.3, 0.0, 0.3], 2)))  # a one-pixel shift
    ga, gb = np.asarray(ga, dtype=object), np.asarray(gb, dtype=object)
    bands = np.asarray([band] * len(ga), dtype=object)
    box = np.tile(np.asarray(band.bounds), (len(ga), 1))
    ca, cb = _clip(ga, bands, box), _clip(gb, bands, box)
    within = shapely.within(ga, band)
    assert within.any() and (~within).any()
    assert all(ca[i] is ga[i] for i in np.flatnonzero(within))  # the same object: no overlay ran
    want_a, want_b = shapely.intersection(ga, bands), shapely.intersection(gb, bands)
    assert np.allclose(shapely.area(ca), shapely.area(want_a), rtol=1e-12, atol=0)
    want = shapely.area(shapely.intersection(want_a, want_b))
    got = shapely.area(shapely.intersection(*_local(ca, cb)))
    assert np.allclose(got, want, rtol=1e-9, atol=1e-9)


def test_reference_colour_match_is_the_float_distance():
    """The reference backend's colour test with its uint8 pre-filter: the same pixels as the float32
    distance for named colours, colours near the ends of the range and non-integer (median) colours."""
    from sam3tiles.model.reference import MATCH_DISTANCE, colour_match

    rng = np.random.default_rng(11)

    def by_float(rgb, colour):
        f = rgb.astype(np.float32)
        return sum((f[c] - colour[c]) ** 2 for c in range(3)) <= MATCH_DISTANCE**2

    for i in range(200):
        colour = tuple(int(v) for v in rng.integers(0, 256, 3))
        if i % 5 == 0:
            colour = (0, 255, int(colour[2]))
        rgb = rng.integers(0, 256, (3, 40, 50), dtype=np.uint8)
        near = np.asarray(colour)[:, None, None] + rng.integers(-62, 63, (3, 20, 50))
        rgb[:, :20] = np.clip(near, 0, 255).astype(np.uint8)  # many pixels at the threshold
        want = by_float(rgb, colour)
        assert want.any() and np.array_equal(colour_match(rgb, colour), want)
        half = (colour[0] + 0.5, colour[1], colour[2])
        assert np.array_equal(colour_match(rgb, half), by_float(rgb, half))


def test_a_batch_of_tiles_gives_each_tile_its_own_outcome(tmp_path):
    """The in-process engine runs several tiles a task (`tasks.tile_batch_task`): a damaged block fails
    only the tiles that read it, after its retries; the others' results come back, in order."""
    import tifffile

    from sam3tiles.errors import RasterReadError
    from sam3tiles.model.registry import RuntimeSpec
    from sam3tiles.run.recording.checkpoint import TileResult
    from sam3tiles.run.executing.tasks import SourceSpec, TilePrompt, tile_batch_task

    from sam3tiles.readers import open_source
    from sam3tiles.tiling.grid import TileGrid

    p = write_scene(tmp_path / "g.tif", 3000, 1000, seed=2).path
    with tifffile.TiffFile(p) as tf:  # a deflate block in row 0 at x 2560-2816: only the last tile reads it
        off, cnt = tf.pages[0].dataoffsets[10], tf.pages[0].databytecounts[10]
    with open(p, "r+b") as fh:
        fh.seek(off + 2)
        fh.write(b"\xff" * (cnt - 4))
    with open_source(str(p)) as src:
        spec_src = SourceSpec(src.path, src.bands, src.stretch)
        tiles = list(TileGrid(src.width, src.height, transform=src.transform))
    assert len(tiles) == 4
    items = [(t, [TilePrompt(0, "red")], None, 0) for t in tiles]
    outs = tile_batch_task(spec_src, RuntimeSpec(backend="reference"), items, retries=1)
    assert [type(o) for o in outs[:2]] == [TileResult, TileResult]
    assert [o.tile_index for o in outs[:2]] == [tiles[0].index, tiles[1].index]
    assert isinstance(outs[3], RasterReadError) and "damaged" in str(outs[3])


def test_objects_alive_before_a_run_are_out_of_the_collectors_sight_while_it_runs(tmp_path):
    """A full collection walked every object of the process (0.09-0.12 s a run); the run freezes those
    alive at its start (`gc.freeze`) and unfreezes them at its end, unless the caller froze some itself."""
    import gc

    import sam3tiles
    from sam3tiles.model.reference import ReferenceRuntime

    seen = []

    class Recording(ReferenceRuntime):
        def encode(self, image):
            seen.append(gc.get_freeze_count())
            return super().encode(image)

    scene = write_scene(tmp_path / "s.tif", 1200, 900, seed=5)
    assert gc.get_freeze_count() == 0
    sam3tiles.segment(str(scene.path), "red", backend=Recording(), out=str(tmp_path / "o.gpkg"))
    assert seen and min(seen) > 1000  # the modules and the test's objects, at least
    assert gc.get_freeze_count() == 0  # back in sight after the run
    gc.freeze()
    try:
        mine = gc.get_freeze_count()
        seen.clear()
        sam3tiles.segment(str(scene.path), "red", backend=Recording(), out=str(tmp_path / "p.gpkg"))
        # the caller's freeze left alone (frozen objects freed meanwhile leave the count)
        assert seen and max(seen) <= mine and gc.get_freeze_count() > mine // 2
    finally:
        gc.unfreeze()


def test_worker_threads_take_datasets_the_planning_thread_opened(tmp_path, monkeypatch):
    """A thread's first open of a georeferenced file costs 10-15 ms of CPU (PROJ's per-thread context and
    CRS lookup), three worker threads at once held the first tile 50-60 ms: the run opens one dataset per
    worker thread beforehand in its own thread (1-3 ms each), each thread takes one for its own, and the
    ones no thread took are closed when the input's tiles are done."""
    import threading

    import sam3tiles
    from sam3tiles.run.executing import tasks

    scene = write_scene(tmp_path / "s.tif", 2600, 1800, seed=4)
    spec = tasks.SourceSpec(str(scene.path), (1, 2, 3), None, "x")
    tasks.open_spares(spec, 2)
    spares = list(tasks._spare[spec])
    got = []

    def first_open():
        got.append(tasks._open_source(spec))

    for _ in range(3):
        t = threading.Thread(target=first_open)
        t.start()
        t.join()
    assert got[0] in spares and got[1] in spares and got[0] is not got[1]
    assert got[2] not in spares  # none left: the third thread opens its own
    assert tasks.close_spares(spec) == 0
    tasks.open_spares(spec, 1)
    (left,) = tasks._spare[spec]
    assert tasks.close_spares(spec) == 1 and left._ds is None and spec not in tasks._spare

    opened_in = []
    real = tasks.open_source

    def recording(*a, **k):
        opened_in.append(threading.get_ident())
        return real(*a, **k)

    monkeypatch.setattr(tasks, "open_source", recording)
    gdf = sam3tiles.segment(str(scene.path), "red", backend="reference", workers=2, out=str(tmp_path / "o.gpkg"))
    assert len(gdf) > 0 and opened_in and set(opened_in) == {threading.get_ident()}
    assert not any(k.path == str(scene.path) for k in tasks._spare)
