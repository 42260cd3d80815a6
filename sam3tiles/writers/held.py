"""A GeoPackage another program holds open: its write-ahead log (WAL) before the copy, write, rename.

A GeoPackage is an SQLite file. A program that opened it in WAL mode (QGIS, a sqlite client) keeps its
committed changes in `NAME-wal` until a checkpoint moves them into the file: a byte copy of the file
alone misses them (the copy is then "malformed"). And while that program holds the file open, its WAL is
shared by *name*: after a rename put a new file in place, that program's next write (or a reader's view
of the stale log) would mix two databases' pages.

`settle(path)` is called before an existing GeoPackage is copied: a WAL with changes is checkpointed through
SQLite (so everything committed is in the file and the copy includes it); when another connection still
holds the file open afterwards (its `-wal` survives our close) or the checkpoint cannot complete (a busy
writer), the run refuses (exit 2) naming the program's log: the user closes the file there and reruns.
Nothing of the user's is changed either way (a checkpoint moves committed pages, which SQLite does on
its own at any time).
"""

from __future__ import annotations

import os
import sqlite3
import urllib.parse
from pathlib import Path

from ..errors import OutputError
from ..wording import opt

#: How long a checkpoint waits for another program's write transaction (seconds).
BUSY_TIMEOUT_S = 2.0


def _wal(p: Path) -> Path:
    return p.with_name(p.name + "-wal")


def _held(p: Path, why: str) -> OutputError:
    return OutputError(f"{opt('out', p)} is open in another program ({why}: {_wal(p).name} is in use): close it there "
                       "(QGIS: remove the layers of that file, or close the project), then rerun; the run wrote "
                       "nothing into it")


def settle(path: str | os.PathLike) -> None:
    """Make the GeoPackage `path` safe to copy (see the module doc); raises OutputError when another
    program holds it open in WAL mode."""
    p = Path(path)
    if not _wal(p).exists():
        return
    uri = "file:" + urllib.parse.quote(os.path.abspath(p)) + "?mode=rw"
    try:
        con = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    except sqlite3.Error as e:
        raise OutputError(f"{opt('out', p)}: cannot open it to checkpoint its {_wal(p).name} ({e}): close the program "
                          "that holds it, then rerun") from None
    try:
        busy, log, done = con.execute("PRAGMA wal_checkpoint(FULL)").fetchone()
        if busy or (log >= 0 and done < log):
            raise _held(p, "a transaction of its own is open, so its log cannot be checkpointed now")
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # best effort: an empty log is what a last close leaves
    except sqlite3.Error as e:
        raise OutputError(f"{opt('out', p)}: its {_wal(p).name} cannot be checkpointed ({e}): close the program that "
                          "holds it, then rerun") from None
    finally:
        con.close()  # the last connection to close removes the -wal (and -shm)
    if _wal(p).exists():
        raise _held(p, "its changes are now in the file, but it keeps the file open in WAL mode")
