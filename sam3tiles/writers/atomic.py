"""Safe writing: output checks, atomic writes (temporary name beside the target, then rename) and
output locks, so a reader never sees half a file and two runs never write one output."""

from __future__ import annotations

import glob
import json
import os
import socket
import uuid
from contextlib import contextmanager
from pathlib import Path

from ..errors import OutputError, OutputExistsError, UsageError

DRIVERS = {".gpkg": "GPKG", ".parquet": "Parquet", ".geoparquet": "Parquet", ".fgb": "FlatGeobuf",
           ".geojson": "GeoJSON", ".json": "GeoJSON"}


def check_output(path: str | os.PathLike, overwrite: bool) -> Path:
    """Validate an output path before any work: known extension, writable folder, no clash."""
    p = Path(path)
    if p.suffix.lower() not in DRIVERS:
        raise UsageError(f"--out {p}: unknown format {p.suffix or '(no extension)'}: end the name with "
                         f"{', '.join(sorted(set(DRIVERS)))}")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise OutputError(f"--out {p}: the folder {parent} does not exist: create it first")
    if p.is_dir():
        raise OutputError(f"--out {p} is a folder, not a file: name a file (e.g. {p / 'objects.gpkg'}), or drop "
                          f"the extension to write one output per input into a folder")
    if not os.access(parent, os.W_OK) or not _can_create_in(parent):
        raise OutputError(f"--out {p}: the folder {parent} is not writable: choose another --out")
    if p.exists() and not overwrite:
        raise OutputExistsError(f"--out {p} exists: pass --overwrite to replace it, or choose another name")
    return p


def _can_create_in(folder: Path) -> bool:
    """os.access is not enough (root, read-only mounts, ACLs): create and remove a probe file."""
    probe = folder / f".sam3tiles-probe-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        fd = os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except OSError:
        return False
    os.close(fd)
    probe.unlink(missing_ok=True)
    return True


def remove_stale_temps(path: str | os.PathLike) -> list[Path]:
    """Temporary files a killed run left beside `path` (call only while holding its lock)."""
    p = Path(path)
    gone = []
    for q in p.parent.glob(f".{glob.escape(p.stem)}.????????.tmp{glob.escape(p.suffix)}*"):
        try:
            q.unlink()
            gone.append(q)
        except OSError:
            pass
    return gone


def _tmp_name(p: Path) -> Path:
    return p.with_name(f".{p.stem}.{uuid.uuid4().hex[:8]}.tmp{p.suffix}")


@contextmanager
def atomic_path(path: str | os.PathLike):
    """Yield a temporary path beside `path`; rename it into place when the block succeeds."""
    p = Path(path)
    tmp = _tmp_name(p)
    try:
        yield tmp
        os.replace(tmp, p)
    finally:
        if tmp.exists():
            tmp.unlink()


@contextmanager
def output_lock(path: str | os.PathLike):
    """Hold `<out>.lock` for the run; a live lock from another run is an error naming its owner."""
    p = Path(path)
    lock = p.with_name(p.name + ".lock")
    me = {"pid": os.getpid(), "host": socket.gethostname()}
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            try:
                owner = json.loads(lock.read_text() or "{}")
            except (OSError, ValueError):
                owner = {}
            if owner.get("host") == me["host"] and not _alive(owner.get("pid")):
                lock.unlink(missing_ok=True)  # stale lock of a killed run on this host
                continue
            raise OutputError(f"--out {p} is being written by another run (pid {owner.get('pid')} on "
                              f"{owner.get('host')}): wait for it, or delete {lock} if that run is gone") from None
        except OSError as e:
            raise OutputError(f"--out {p}: cannot create a lock file beside it ({e.strerror}): "
                              "choose a writable folder") from None
        with os.fdopen(fd, "w") as f:
            json.dump(me, f)
        break
    remove_stale_temps(p)  # left by a run killed while writing
    try:
        yield
    finally:
        lock.unlink(missing_ok=True)


def _alive(pid) -> bool:
    if not isinstance(pid, int):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
