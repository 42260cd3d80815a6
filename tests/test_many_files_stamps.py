"""A mosaic's files are stamped as their headers are read (`maps.read_header`, issue 48), once: the plan's
stamps are the files' own (content samples included), and a file replaced after planning by one of the same
size and time is still seen as changed when its map is done."""

from __future__ import annotations

import os

import numpy as np
import pytest
import rasterio
from affine import Affine

from sam3tiles.errors import InputDataError
from sam3tiles.options import Options
from sam3tiles.readers import identity
from sam3tiles.run.pipeline import check_unchanged
from sam3tiles.run.planning.plan import plan_run
from sam3tiles.run.planning.targets import Targets

SIDE = 40


def _files(d, n=3):
    d.mkdir()
    for r in range(n):
        for c in range(n):
            t = Affine(0.5, 0, 400000 + 0.5 * SIDE * c, 0, -0.5, 5000000 - 0.5 * SIDE * r)
            with rasterio.open(d / f"r{r}c{c}.tif", "w", driver="GTiff", width=SIDE, height=SIDE, count=3,
                               dtype="uint8", crs="EPSG:32633", transform=t) as ds:
                ds.write(np.full((3, SIDE, SIDE), 10 * r + c + 1, np.uint8))
    return str(d / "*.tif")


def _plan(pattern, tmp_path):
    plan = plan_run(pattern, ["red"], options=Options(backend="reference"),
                    targets=Targets(out=str(tmp_path / "o.gpkg"), checkpoint=False))
    (inp,) = plan.inputs
    return inp


def test_a_mosaics_stamps_are_taken_once_and_are_the_files_own(tmp_path, monkeypatch):
    taken = []
    stamp = identity.file_stamp

    def counted(f):
        taken.append(f)
        return stamp(f)

    monkeypatch.setattr("sam3tiles.run.planning.maps.file_stamp", counted)
    monkeypatch.setattr(identity, "file_stamp", counted)
    inp = _plan(_files(tmp_path / "map"), tmp_path)
    assert len(inp.files) == 9 and sorted(taken) == sorted(inp.files)  # each file once, as its header was read
    monkeypatch.setattr(identity, "file_stamp", stamp)
    assert inp.stamps == identity.file_stamps(inp.files)  # the same stamps as taken afresh
    assert all(s is not None and s.count(":") >= 3 for s in inp.stamps)
    check_unchanged(inp)


def test_a_member_replaced_with_the_same_size_and_time_is_seen(tmp_path):
    inp = _plan(_files(tmp_path / "map"), tmp_path)
    victim = next(f for f in inp.files if f.endswith("r1c1.tif"))
    st = os.stat(victim)
    with rasterio.open(victim, "r+") as ds:  # new pixels, same size
        ds.write(np.full((3, SIDE, SIDE), 99, np.uint8))
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))  # and the same time (cp -p, a sync tool)
    assert os.path.getsize(victim) == st.st_size
    with pytest.raises(InputDataError, match=r"r1c1\.tif changed while the run read it"):
        check_unchanged(inp)
