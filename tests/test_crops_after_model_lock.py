"""A tile's masks are cut once the model is free (issue 48: the GPU must stay fed). The crops of every
decoder pass were cut under the model lock, so the model idled while a thread sliced masks (0.4 ms a tile
of 20 objects on the simulated backend; with a real SAM 3 answer of 100 masks, milliseconds). Now the
lock covers the encode and the decodes only; the objects are the same (the other tests of passes, batched
decoders and exemplars hold them). Real contract graphs through real onnxruntime sessions."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from affine import Affine

from sam3tiles import segment_report
from sam3tiles.run.executing import tasks
from sam3tiles.testing import write_raster
from sam3tiles.testing.batched import build_batched_models
from sam3tiles.testing.graphs import build_contract_models

T = Affine(0.5, 0, 500000, 0, -0.5, 4000000)


class OwnedLock:
    """The model lock, telling which thread holds it."""

    def __init__(self):
        self._lock, self.owner = threading.Lock(), None

    def __enter__(self):
        self._lock.acquire()
        self.owner = threading.get_ident()
        return self

    def __exit__(self, *exc):
        self.owner = None
        self._lock.release()


@pytest.fixture()
def watched(monkeypatch):
    """Each crop call: whether its thread held the model lock then."""
    lock, seen = OwnedLock(), []
    real = tasks.crop_detections

    def crop(*a, **kw):
        seen.append(lock.owner == threading.get_ident())
        return real(*a, **kw)

    monkeypatch.setattr(tasks, "MODEL_LOCK", lock)
    monkeypatch.setattr(tasks, "crop_detections", crop)
    return seen


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    img = np.full((3, 1400, 1800), 90, np.uint8)
    for k, (x0, y0) in enumerate([(100, 100), (900, 300), (300, 900), (1500, 1100), (980, 960)]):
        img[:, y0:y0 + 90, x0:x0 + 120] = np.asarray([(250, 5, 5), (5, 5, 250)][k % 2], np.uint8)[:, None, None]
    return write_raster(tmp_path_factory.mktemp("crops") / "scene.tif", img, transform=T)


@pytest.mark.parametrize("layout", ["contract", "batched"])
def test_no_mask_is_cut_while_its_thread_holds_the_model(scene, tmp_path, watched, layout):
    model = (build_contract_models(tmp_path / "m", grid=1) if layout == "contract"
             else build_batched_models(tmp_path / "m"))
    report = segment_report(str(scene), ["red", "blue"], backend="onnx", model=str(model),
                            out=str(tmp_path / "o.gpkg"), checkpoint=False)
    assert report.objects > 0 and report.failed == 0
    assert watched and not any(watched), f"{sum(watched)} of {len(watched)} crops under the model lock"
