"""A cluster run's unit of work is a batch of tiles (`tasks.tile_batch_task`), not three tasks a tile.

* the objects are the same whatever the tiles per task (1, a few, the default), and the same as the
  in-process run: same polygons, same order, same columns;
* the number of tasks follows the batches (the scheduler and the driver see batches, not tiles);
* a batch whose worker dies on every try is retried tile by tile: only the tile that kills it fails;
* a tile's frame is made with `Affine @`'s arithmetic (the driver frames every tile it merges).
"""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest
import rasterio
import shapely
from affine import Affine

from sam3tiles.run.pipeline import segment_job
from sam3tiles.testing.demo import write_scene
from sam3tiles.tiling.frame import TileFrames
from sam3tiles.tiling.grid import TileGrid

distributed = pytest.importorskip("distributed")

PROMPTS = ["red", "blue", "yellow"]
COMPARED = ["prompt", "score", "n_tiles", "area_m2", "area_px"]
POISON = (7, 201, 99)  # a patch of this colour in one tile's own area: the backend's process dies on it


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    path = tmp_path_factory.mktemp("batches") / "scene.tif"
    write_scene(path, 2200, 1800, seed=3)  # 3 x 3 tiles; objects across seams, a field larger than a tile
    return path


@pytest.fixture(scope="module")
def local(scene):
    gdf, report = segment_job(str(scene), PROMPTS, backend="reference", checkpoint=False)
    assert report.tiles == 9 and report.failed == 0
    return gdf


def _same(a, b) -> None:
    assert len(a) == len(b) > 0
    assert bool(shapely.equals_exact(np.asarray(a.geometry.values), np.asarray(b.geometry.values), 0).all())
    for col in COMPARED:
        assert a[col].tolist() == b[col].tolist(), col


def test_frames_are_the_affine_arithmetic():
    t = Affine(0.3, 0.05, 500000.0, 0.04, -0.3, 4100000.0)  # rotated and sheared: every coefficient counts
    grid = TileGrid(3100, 2500, scale=1.3, transform=t)
    frames = TileFrames(grid)
    for i in range(len(grid)):
        tile, f = frames.tiles[i], frames[i]
        vw, vh = tile.valid_wh
        want = [tile.transform @ p for p in ((0, 0), (vw, 0), (vw, vh), (0, vh))]
        assert list(f.window.exterior.coords)[:4] == want
        assert f.pixel == abs(tile.transform.a * tile.transform.e - tile.transform.b * tile.transform.d) ** 0.5


def _tasks(client, fn) -> tuple[object, int]:
    from distributed import get_task_stream
    from distributed.utils import key_split

    with get_task_stream(client) as ts:
        out = fn()
    return out, sum(key_split(r["key"]) == "tile_batch_task" for r in ts.data)


@pytest.fixture(scope="module")
def cluster():
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, resources={"GPU": 1},
                      dashboard_address=":0", silence_logs=logging.ERROR) as cl, Client(cl) as client:
        yield client


@pytest.mark.parametrize("per_task, tasks", [(1, 9), (4, 3), (None, None)])
def test_cluster_batches_give_the_in_process_objects(scene, local, cluster, per_task, tasks):
    (gdf, report), n = _tasks(cluster, lambda: segment_job(str(scene), PROMPTS, backend="reference",
                                                          checkpoint=False, client=cluster,
                                                          tiles_per_task=per_task))
    _same(local, gdf)
    assert report.done == 9 and report.failed == 0
    if tasks is not None:
        assert n == tasks
    else:  # the default: fewer tasks than tiles as soon as there are tiles enough, never more
        assert 1 <= n <= 9


def _poisoned_runtime():
    """The reference backend, whose process dies (as on a segfault) when it encodes a tile holding POISON."""
    from sam3tiles.model.reference import ReferenceRuntime

    class Poisoned(ReferenceRuntime):
        def encode(self, image):
            if (image.rgb.reshape(3, -1).T == np.array(POISON, np.uint8)).all(axis=1).any():
                os._exit(17)
            return super().encode(image)

    return Poisoned()


def test_a_batch_whose_worker_dies_is_retried_tile_by_tile(scene, local, tmp_path):
    import dask
    from distributed import Client, Nanny, Scheduler, SpecCluster

    src = tmp_path / "poisoned.tif"
    with rasterio.open(scene) as ds:
        profile, data = ds.profile, ds.read()
    data[:, 100:140, 100:140] = np.array(POISON, np.uint8)[:, None, None]  # tile 0's own area only
    with rasterio.open(src, "w", **profile) as dst:
        dst.write(data)
    opts = {"nthreads": 1, "silence_logs": logging.ERROR, "resources": {"GPU": 1}}  # one task at a time
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}), \
            SpecCluster(scheduler={"cls": Scheduler, "options": {"dashboard_address": ":0"}},
                        workers={"gpu": {"cls": Nanny, "options": opts}}, silence_logs=logging.ERROR) as cl, \
            Client(cl) as client:
        client.wait_for_workers(1, timeout=60)
        gdf, report = segment_job(str(src), PROMPTS, backend=_poisoned_runtime, checkpoint=False, client=client,
                                  tiles_per_task=9, retries=0)
    assert report.failed == 1 and report.done == 8
    assert [f["tile"] for f in report.failed_tiles] == [0]
    # every object of the other tiles' cores is there (those of tile 0's core are not)
    assert 0 < len(gdf) < len(local)
