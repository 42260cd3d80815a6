"""Safe writing: output checks, atomic writes (temporary name beside the target, then rename), output
locks and full disks, so a reader never sees half a file and two runs never write one output."""

from __future__ import annotations

import contextvars
import errno
import glob
import json
import logging
import os
import shutil
import socket
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

from ..errors import OutputError, OutputExistsError, UsageError
from ..wording import enable, opt
from .formats import format_for, unknown

log = logging.getLogger(__name__)


def check_output(path: str | os.PathLike, overwrite: bool, layer: str | None = None) -> Path:
    """Validate an output path before any work: a format's ending (`formats.format_for`), a name the file
    system and the side files' names allow (`check_name`), writable folder, no clash."""
    p = Path(path)
    check_name(p, "out", layer)
    if format_for(p) is None:
        raise unknown(p)
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise OutputError(f"{opt('out', p)}: the folder {parent} does not exist: create it first")
    if p.is_dir():
        raise OutputError(f"{opt('out', p)} is a folder, not a file: name a file (e.g. {p / 'objects.gpkg'}), or drop "
                          f"the extension to write one output per input into a folder")
    if not os.access(parent, os.W_OK) or not _can_create_in(parent):
        raise OutputError(f"{opt('out', p)}: the folder {parent} is not writable: choose another {opt('out')}")
    if p.exists() and not overwrite:
        raise OutputExistsError(f"{opt('out', p)} exists: {enable('overwrite')} to replace it, or choose another name")
    return p


#: The longest names sam3tiles writes beside an output NAME (temporary report and preview, with a --layer):
#: `.NAME.LAYER.report.XXXXXXXX.tmp.json`, `.NAME.LAYER.preview.XXXXXXXX.tmp.png`, `NAME.sam3tiles-work`.
_SIDECARS = (".{name}.{layer}report.XXXXXXXX.tmp.json", ".{name}.{layer}preview.XXXXXXXX.tmp.png",
             "{name}.sam3tiles-work", ".{name}.lock.XXXXXXXX.stale")


def check_name(p: Path, option: str = "out", layer: str | None = None) -> None:
    """A file name with control characters (a newline from a script), or one whose side files' names the
    file system cannot hold (NAME_MAX, usually 255 bytes), is exit 2 before any work: a rename or a side
    file would fail at the end of the run. `option`: the option that names it (`wording.opt`)."""
    text = str(p)
    bad = next((ch for ch in text if ord(ch) < 32 or ord(ch) == 127), None)
    if bad is not None:
        raise UsageError(f"{opt(option, repr(text))}: the name holds a control character "
                         f"({bad!r}, e.g. a newline from a script): give a name without it")
    folder = p.parent if str(p.parent) else Path(".")
    try:
        limit = os.pathconf(folder if folder.is_dir() else ".", "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = 255
    lay = f"{layer}." if layer else ""
    longest = max((q.format(name=p.name, layer=lay) for q in _SIDECARS), key=lambda q: len(q.encode()))
    if len(longest.encode()) > limit:
        over = len(longest.encode()) - limit
        what = f"{opt('layer')} and the output name are" if layer else "the name is"
        shown = opt(option, p.name[:40] + "...") + (f" {opt('layer', layer[:20] + '...')}" if layer else "")
        raise UsageError(f"{shown}: {what} too "
                         f"long for this file system ({limit} bytes a name, and sam3tiles adds up to "
                         f"{len(longest.encode()) - len(p.name.encode()) - len(lay.encode())} for its side files "
                         f"such as {longest[:12]}...): shorten it by {over} or more")


def real_target(path: str | os.PathLike) -> Path:
    """A symlinked output is written through to the file it points to (a link stays a link): the path
    the link resolves to; any other path as it is."""
    p = Path(path)
    return Path(os.path.realpath(p)) if p.is_symlink() else p


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
    patterns = (f".{glob.escape(p.stem)}.????????.tmp{glob.escape(p.suffix)}*",
                f".{glob.escape(p.name)}.lock.????????.tmp", f".{glob.escape(p.name)}.lock.????????.stale")
    patterns += (f".{glob.escape(p.name)}.????????.old",)  # a replaced dataset folder not yet removed
    for q in (q for pat in patterns for q in p.parent.glob(pat)):
        try:
            shutil.rmtree(q) if q.is_dir() and not q.is_symlink() else q.unlink()
            gone.append(q)
        except OSError:
            pass
    return gone


def _tmp_name(p: Path) -> Path:
    return p.with_name(f".{p.stem}.{uuid.uuid4().hex[:8]}.tmp{p.suffix}")


def _remove_temp(tmp: Path) -> None:
    """A temporary file and the side files a writer may have made beside it (SQLite journals); a
    temporary folder (a partitioned dataset) with its parts."""
    if tmp.is_dir() and not tmp.is_symlink():
        shutil.rmtree(tmp, ignore_errors=True)
        return
    for q in (tmp, *(tmp.with_name(tmp.name + x) for x in ("-journal", "-wal", "-shm"))):
        try:
            q.unlink()
        except OSError:
            pass


_PENDING: contextvars.ContextVar = contextvars.ContextVar("sam3tiles_pending_renames", default=None)


def _replace(tmp: Path, p: Path) -> None:
    """Rename `tmp` to `p`; a folder (a partitioned dataset) over an existing one: the old folder is moved
    aside first and removed once the new one is in place (a rename cannot replace a non-empty folder)."""
    if tmp.is_dir() and p.is_dir():
        old = p.with_name(f".{p.name}.{uuid.uuid4().hex[:8]}.old")
        os.replace(p, old)
        os.replace(tmp, p)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, p)


@contextmanager
def atomic_path(path: str | os.PathLike, folder: bool = False, check: Callable[[], None] | None = None):
    """Yield a temporary path beside `path`; rename it into place when the block succeeds (inside
    `deferred_renames`: when that commits). `folder`: the temporary path is a new empty folder (a
    partitioned dataset), which replaces a folder `path` whole. A symlink `path` is written through: the
    temporary file lies beside its target and replaces the target (`real_target`). `check`: raises when
    `path` may no longer be replaced; called when the block ends and again just before the rename."""
    p = real_target(path)
    tmp = _tmp_name(p)
    pending = _PENDING.get()
    if folder:
        tmp.mkdir()
    try:
        yield tmp
        if check is not None:
            check()
        if pending is not None:
            pending.files.append((tmp, p))
            if check is not None:
                pending.checks[tmp] = check
            tmp = None
        else:
            _replace(tmp, p)
    finally:
        if tmp is not None:
            _remove_temp(tmp)


class Deferred:
    """Finished files waiting under their temporary names (see `deferred_renames`)."""

    def __init__(self):
        self.files: list[tuple[Path, Path]] = []
        self.checks: dict[Path, Callable[[], None]] = {}  # by temporary name: see `atomic_path`

    def commit(self) -> None:
        """Rename every waiting file into place, in the order they were written; first every file's check
        (none renamed when one may no longer replace its target)."""
        for tmp, _ in self.files:
            if tmp in self.checks:
                self.checks[tmp]()
        while self.files:
            tmp, p = self.files[0]
            _replace(tmp, p)
            self.files.pop(0)

    def discard(self) -> None:
        for tmp, _ in self.files:
            _remove_temp(tmp)
        self.files.clear()
        self.checks.clear()


@contextmanager
def deferred_renames(pending: Deferred):
    """Inside the block, files written through `atomic_path` stay under their temporary names until
    `pending.commit()`; so a run can write its report before its outputs appear (a run killed between
    the two leaves no output without its report). The caller discards what it did not commit."""
    token = _PENDING.set(pending)
    try:
        yield pending
    finally:
        _PENDING.reset(token)


@contextmanager
def output_lock(path: str | os.PathLike, named: str | None = None, quiet: bool = False):
    """Hold `<path>.lock` while the block runs: sam3tiles' one lock, of an output (two runs never write one)
    and of the object spool (`writers.stream`: another run's cleanup never removes a living run's spool).

    The lock is written whole under a temporary name and linked into place, so it is never empty or
    half-written. It names its owner (pid, host, time) and says whether the owner holds an flock on it
    (`"flock": true`; the kernel releases that when the owner ends, killed or not). A lock whose owner is
    gone is taken over with a warning (`quiet`: logged at debug level): on this host, one whose flock is
    free (a pid given to another process since cannot keep it), else one whose pid no longer runs; so is
    an unreadable lock file, a link to nothing or an empty folder in its place. A live owner (or one on
    another host) is an OutputError naming it and the fix. `named`: how messages name `path` (default: the
    output, `wording.opt("out", path)`)."""
    p = real_target(path)  # two names of one file (a link) share its lock
    lock = p.with_name(p.name + ".lock")
    who = named or opt("out", p)
    me = {"pid": os.getpid(), "host": socket.gethostname(), "time": time.time()}
    held = None
    for _ in range(3):
        tmp = lock.with_name(f".{lock.name}.{uuid.uuid4().hex[:8]}.tmp")
        try:
            held = _place(tmp, lock, me)
        except FileExistsError:
            _take_over(lock, p, who, me, logging.DEBUG if quiet else logging.WARNING)
            continue
        except OSError as e:
            raise OutputError(f"{who}: cannot create a lock file in {lock.parent or '.'} ({e.strerror}): "
                              + ("free disk space there" if e.errno in DISK_ERRNOS
                                 else "choose a writable folder")) from None
        finally:
            tmp.unlink(missing_ok=True)
        break
    else:
        raise OutputError(f"{who}: another run keeps taking its lock {lock}: wait for it to finish")
    try:
        remove_stale_temps(p)  # left by a run killed while writing
        yield
    finally:
        lock.unlink(missing_ok=True)
        if held is not None:
            os.close(held)  # its flock goes with it


def _place(tmp: Path, lock: Path, me: dict) -> int | None:
    """Put a lock naming `me` in place as `lock`, failing with FileExistsError when a lock exists; returns
    the descriptor that holds its flock (None where the file system offers none)."""
    fd, flocked = _lock_file(tmp, me)
    try:
        os.link(tmp, lock)  # the lock is that file: its flock is the one `fd` holds
    except OSError as e:
        os.close(fd)
        if isinstance(e, FileExistsError) or e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP,
                                                              errno.EXDEV, errno.EMLINK):
            raise
        fd, flocked = _lock_file(lock, me)  # no hard links here: made in place (its flock taken, then filled)
    if not flocked:
        os.close(fd)
        return None
    return fd


def _lock_file(path: Path, me: dict) -> tuple[int, bool]:
    """Create `path` (FileExistsError when it exists), take its flock, then write `me` into it; returns
    its descriptor and whether the flock was taken (before the content: a lock that says so has it)."""
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    try:
        flocked = _flock(fd)
        data = json.dumps({**me, "flock": flocked}).encode()
        while data:
            data = data[os.write(fd, data):]
    except BaseException:
        os.close(fd)
        raise
    return fd, flocked


def _flock(fd: int) -> bool:
    """Take an exclusive flock on `fd` without waiting; False where the system or file system has none."""
    try:
        import fcntl
    except ImportError:  # Windows
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def _read_lock(lock: Path) -> tuple[bytes, float, bool | None, tuple[int, int]] | None:
    """The lock file's content, its age (seconds), whether no process holds its flock (None: cannot be
    told: no flock on this system or file system) and its identity (device, inode), all of one open file;
    None when it is gone. OSError when it cannot be opened."""
    try:
        fd = os.open(lock, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        free = None
        try:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released when `fd` closes, below
            free = True
        except BlockingIOError:
            free = False
        except (ImportError, OSError):
            pass
        st = os.fstat(fd)
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks), time.time() - st.st_mtime, free, (st.st_dev, st.st_ino)


def _take_over(lock: Path, p: Path, who: str, me: dict, level: int = logging.WARNING) -> None:
    """Remove a lock whose owner is gone (logged at `level`), or raise naming the live owner."""
    if lock.is_dir():
        try:
            lock.rmdir()
        except OSError:
            raise OutputError(f"{who}: {lock} is a folder with files in it, not a sam3tiles lock: move it away "
                              f"or choose another {opt('out')}") from None
        log.log(level, "%s was an empty folder in place of the lock: removed it", lock)
        return
    if lock.is_symlink() and not lock.exists():
        lock.unlink(missing_ok=True)  # no run makes a link: left by a tool, or its target removed
        log.log(level, "took over the lock %s (a link to nothing, not a sam3tiles lock: removed it)", lock)
        return
    try:
        seen = _read_lock(lock)
    except OSError as e:
        raise OutputError(f"{who}: its lock {lock} cannot be read ({e.strerror}): delete it if no run writes "
                          f"{p}") from None
    if seen is None:
        return  # released meanwhile
    raw, age, free, ident = seen
    why = _gone(raw, age, free, who, lock, me)
    # move it aside first: of two runs taking over one stale lock, only one gets it
    aside = lock.with_name(f".{lock.name}.{uuid.uuid4().hex[:8]}.stale")
    try:
        os.rename(lock, aside)
    except FileNotFoundError:
        return
    st = os.stat(aside)
    if (st.st_dev, st.st_ino) != ident or aside.read_bytes() != raw:  # a new lock arrived meanwhile: give it back
        try:
            os.link(aside, lock)
        finally:
            aside.unlink(missing_ok=True)
        raise OutputError(f"{who} is being written by another run: wait for it")
    aside.unlink(missing_ok=True)
    log.log(level, "took over the lock %s (%s)", lock, why)


def _gone(raw: bytes, age: float, free: bool | None, who: str, lock: Path, me: dict) -> str:
    """Why the lock `raw` (its age in seconds; `free`: whether its flock is free, `_read_lock`) has no owner
    any more, or OutputError naming the live owner."""
    try:
        owner = json.loads(raw)
        owner = owner if isinstance(owner, dict) and _pid_like(owner.get("pid")) else None
    except ValueError:
        owner = None
    if owner is None:
        if free is False or age < 5:  # an older version writes its lock in two steps: give it a moment
            raise OutputError(f"{who} is being locked by another run just now: wait for it, or retry")
        return "empty" if not raw.strip() else "unreadable"
    pid, here = owner["pid"], owner.get("host") == me["host"]
    released = here and owner.get("flock") is True and free is True  # the kernel dropped it: its owner ended
    if not here or free is False or (not released and _alive(pid)):
        raise OutputError(f"{who} is being written by another run (pid {pid} on {owner.get('host')}): "
                          f"wait for it, or delete {lock} if that run is gone")
    if _alive(pid):
        return f"left by pid {pid}, which no longer holds it (the pid names another process now)"
    return f"left by pid {pid}, which is no longer running"


def _pid_like(pid) -> bool:
    """A number a process id can be (Linux's pid_max is at most 2**22; 2**31 for any system)."""
    return isinstance(pid, int) and not isinstance(pid, bool) and 0 < pid < 2 ** 31


def _alive(pid) -> bool:
    if not _pid_like(pid):
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:
        return True
    return True


# -- full disks ---------------------------------------------------------------------------------------------

DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def is_disk_full(e: BaseException, folder: str | os.PathLike | None = None) -> bool:
    """An OSError (or GDAL/SQLite error text) that says the disk or quota is full, or any write error in
    a folder whose file system has (almost) no space left: GDAL's GeoPackage driver, for one, then fails
    with an unrelated SQLite message ("no such table")."""
    if isinstance(e, OSError) and e.errno in DISK_ERRNOS:
        return True
    text = str(e).lower()
    if any(w in text for w in ("no space left", "disk is full", "database or disk is full", "quota exceeded",
                               "file too large")):
        return True
    if folder is None:
        return False
    try:
        st = os.statvfs(folder)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < 1 << 20  # under 1 MiB left


@contextmanager
def disk_errors(folder: str | os.PathLike, what: str = "the output"):
    """Turn a full disk while writing into an exit-2 error naming the folder (the writers leave nothing)."""
    try:
        yield
    except Exception as e:
        if not isinstance(e, (OutputError, KeyboardInterrupt)) and is_disk_full(e, folder):
            raise OutputError(f"no space left writing {what} in {folder} (the disk or quota is full): free space "
                              "there or choose another folder, then rerun (finished tiles are checkpointed)") from None
        raise
