"""The end checks of a run take a local file's stamp again from its status alone where nothing can have
changed it unseen (`identity.settled_stamp`, issue 48: two rounds of content samples of 1,024 small files,
1.1 s each, at the end of a mosaic's run): its device, inode, size, modification and change times as they
were when it was stamped, its change time settled before that. Any write, rename over it or reset of its
times since gives it another change time: such a file is hashed again, and a same-size, same-time
replacement is still seen."""

from __future__ import annotations

import os
import shutil
import time

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
SETTLE = 0.3  # s the test files rest before they are stamped (the rule's margin set to a third of it)


@pytest.fixture
def settled(monkeypatch):
    """`identity.SETTLED_NS` short enough for a test (the rule is the same: a change time that old when the
    stamp is taken); what earlier tests remembered is not reused."""
    monkeypatch.setattr(identity, "SETTLED_NS", int(SETTLE / 3 * 1e9))
    monkeypatch.setattr(identity, "_SETTLED", {})
    return identity


def _tif(path, value, r=0, c=0):
    t = Affine(0.5, 0, 400000 + 0.5 * SIDE * c, 0, -0.5, 5000000 - 0.5 * SIDE * r)
    with rasterio.open(path, "w", driver="GTiff", width=SIDE, height=SIDE, count=3, dtype="uint8",
                       crs="EPSG:32633", transform=t) as ds:
        ds.write(np.full((3, SIDE, SIDE), value, np.uint8))


def _same_size_and_time(path, value, tmp_path, rename: bool):
    """`path` replaced by other pixels of the same size, its modification time put back (`cp -p`, a sync
    tool): written in place, or written beside it and renamed over it."""
    st = os.stat(path)
    other = tmp_path / "other.tif"
    _tif(other, value)
    assert os.path.getsize(other) == st.st_size
    if rename:
        os.replace(other, path)
    else:
        shutil.copyfile(other, path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (os.stat(path).st_size, os.stat(path).st_mtime_ns) == (st.st_size, st.st_mtime_ns)


def test_a_settled_unchanged_file_is_stamped_again_from_its_status(settled, tmp_path):
    f = tmp_path / "a.tif"
    _tif(f, 7)
    time.sleep(SETTLE)
    stamp = settled.file_stamp(str(f))
    assert settled.settled_stamp(str(f)) == stamp
    assert settled.changed_files([str(f)], [stamp]) == []


@pytest.mark.parametrize("rename", [False, True], ids=["in-place", "renamed-over"])
def test_a_same_size_same_time_replacement_of_a_settled_file_is_seen(settled, tmp_path, rename):
    f = tmp_path / "a.tif"
    _tif(f, 7)
    time.sleep(SETTLE)
    stamp = settled.file_stamp(str(f))
    _same_size_and_time(f, 99, tmp_path, rename)
    assert settled.settled_stamp(str(f)) is None
    assert settled.changed_files([str(f)], [stamp]) == [str(f)]


def test_a_file_changed_just_before_its_stamp_is_hashed_again(settled, tmp_path):
    """Its change time is not settled when stamped (a file system keeping whole seconds could give a change
    right after the stamp the same change time): its stamps are always content samples."""
    f = tmp_path / "a.tif"
    _tif(f, 7)
    stamp = settled.file_stamp(str(f))
    assert settled.settled_stamp(str(f)) is None
    _same_size_and_time(f, 99, tmp_path, rename=False)
    assert settled.changed_files([str(f)], [stamp]) == [str(f)]


def test_only_local_linux_file_systems_that_keep_change_times_are_trusted(tmp_path):
    assert identity._ctime_kept(os.stat(tmp_path).st_dev) == (
        any(f" - {t} " in line for line in open("/proc/self/mountinfo") for t in identity.CTIME_KEPT
            if line.split()[2] == f"{os.major(os.stat(tmp_path).st_dev)}:{os.minor(os.stat(tmp_path).st_dev)}"))
    assert identity._ctime_kept(os.makedev(4095, 1048575)) is False  # no such mount: hashed as before
    assert identity.settled_stamp("https://example.com/a.tif") is None
    assert identity.settled_stamp("/vsizip/" + str(tmp_path / "a.zip") + "/a.tif") is None


def test_a_mosaic_file_replaced_after_planning_fails_its_end_check(settled, tmp_path):
    """End to end: the plan stamps the settled files as their headers are read, the end check takes them again
    from their status, and the one replaced (same size and time) is named."""
    d = tmp_path / "files"
    d.mkdir()
    for r in range(2):
        for c in range(2):
            _tif(d / f"r{r}c{c}.tif", 10 * r + c + 1, r, c)
    time.sleep(SETTLE)
    plan = plan_run(str(d / "*.tif"), ["red"], options=Options(backend="reference"),
                    targets=Targets(out=str(tmp_path / "o.gpkg"), checkpoint=False))
    (inp,) = plan.inputs
    assert all(settled.settled_stamp(f) == s for f, s in zip(inp.files, inp.stamps))
    check_unchanged(inp)
    _same_size_and_time(d / "r1c0.tif", 44, tmp_path, rename=False)
    with pytest.raises(InputDataError, match=r"r1c0\.tif.*changed while the run read it"):
        check_unchanged(inp)
