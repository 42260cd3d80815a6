"""A cluster run's tasks reach the scheduler sealed (`submit.submit_sealed`): pickled once by the driver
into bytes that the worker unpickles into the call. The scheduler unpickles every task it is given, and
before this it imported sam3tiles (and pandas, geopandas: about a second of its CPU, the run's first task
waiting on it) and unpickled, then pickled again, each batch's tiles and each merge block's pieces.

* a run against a `dask scheduler` process leaves sam3tiles unimported there, with the same objects as
  the in-process run; the tasks keep their names (`key_split`: tile_batch_task, merge_block, ...);
* a sealed call runs on the worker with its arguments, and its error is the call's own;
* a driver that reaches every worker fetches results from them (`engine.reaches_workers`).
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import shapely

from sam3tiles.run.pipeline import segment_job
from sam3tiles.testing.demo import write_scene
from waiting import wait_for

distributed = pytest.importorskip("distributed")

PROMPTS = ["red", "blue"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A `dask scheduler` and a `dask worker` (GPU=1), processes of their own; a client of them."""
    from distributed import Client

    f = tmp_path_factory.mktemp("sched") / "scheduler.json"
    quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                               "--port", "0", "--dashboard-address", ":0", "--scheduler-file", str(f)], **quiet)]
    try:
        wait_for(lambda: f.exists() and f.stat().st_size > 0, 60, "the scheduler")
        address = json.loads(f.read_text())["address"]
        procs.append(subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", address, "--no-nanny",
                                       "--nthreads", "2", "--resources", "GPU=1", "--no-dashboard"], **quiet))
        with Client(address, timeout="60s") as client:
            client.wait_for_workers(1, timeout=60)
            yield client
    finally:
        for p in reversed(procs):
            p.kill()
            p.wait()


def _imported_on_scheduler(client) -> list:
    return client.run_on_scheduler(lambda: sorted(m for m in __import__("sys").modules
                                                  if m.split(".")[0] in ("sam3tiles", "geopandas")))


def test_the_scheduler_never_imports_sam3tiles_and_the_objects_are_the_same(cluster, tmp_path):
    from distributed import get_task_stream
    from distributed.utils import key_split

    scene = tmp_path / "scene.tif"
    write_scene(scene, 2200, 1800, seed=3)  # 3 x 3 tiles, objects across seams
    local, _ = segment_job(str(scene), PROMPTS, backend="reference", checkpoint=False)
    with get_task_stream(cluster) as ts:
        gdf, report = segment_job(str(scene), PROMPTS, backend="reference", checkpoint=False, client=cluster,
                                  merge_block=2, tiles_per_task=2)
    assert report.tiles == 9 and report.failed == 0
    assert _imported_on_scheduler(cluster) == []
    assert len(gdf) == len(local) > 0
    assert bool(shapely.equals_exact(np.asarray(gdf.geometry.values), np.asarray(local.geometry.values), 0).all())
    for col in ("prompt", "score", "n_tiles", "area_px"):
        assert gdf[col].tolist() == local[col].tolist(), col
    kinds = {key_split(r["key"]) for r in ts.data}
    assert {"tile_batch_task", "merge_block", "final_pass"} <= kinds, kinds


def test_a_sealed_call_runs_with_its_arguments_and_raises_its_own_error(cluster):
    from sam3tiles.run.executing.engine import reaches_workers
    from sam3tiles.run.executing.submit import submit_sealed

    assert reaches_workers(cluster)  # this machine's workers: results come straight from them

    fut = submit_sealed(cluster, divmod, (17, 5))
    assert fut.result() == (3, 2) and fut.key.startswith("divmod-")
    bad = submit_sealed(cluster, divmod, (1, 0))
    with pytest.raises(ZeroDivisionError):
        bad.result()
