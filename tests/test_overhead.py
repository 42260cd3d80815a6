"""The pipeline's own fixed costs moved off its critical path: the quicklook's overview is read in the
background while the tiles run (`quicklook.prefetch`), and what it gives is what a read at the end gives."""

import threading

import numpy as np

from sam3tiles import quicklook as Q
from sam3tiles.demo import write_scene


def test_prefetched_overview_equals_a_read_at_the_end(tmp_path, monkeypatch):
    scene = write_scene(tmp_path / "s.tif", 1500, 900, seed=3)
    threads = []
    real = Q._read_overview

    def spy(*a):
        threads.append(threading.current_thread().name)
        return real(*a)

    monkeypatch.setattr(Q, "_read_overview", spy)
    wh = Q.panel_wh(1500, 900, Q.panel_side(1))
    Q.prefetch([(str(scene.path), 1500, 900)], None)
    got = Q.overview(str(scene.path), None, wh)
    assert threads and threads[0].startswith("sam3tiles-overview")  # read in the background thread
    assert not Q._PREFETCHED  # taken once, not held
    want = Q.overview(str(scene.path), None, wh)  # nothing prefetched: read here
    assert threads[-1] == threading.current_thread().name
    assert got.shape == (wh[1], wh[0], 3) and np.array_equal(got, want)


def test_forgotten_prefetch_holds_nothing(tmp_path):
    scene = write_scene(tmp_path / "s.tif", 800, 600, seed=4)
    Q.prefetch([(str(scene.path), 800, 600)], None)
    Q.forget_prefetched()
    assert not Q._PREFETCHED
