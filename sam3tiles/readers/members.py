"""The member files of a mosaic (`readers.mosaic`) as a worker process keeps them open.

A window reads only the members it touches, through the process's `MemberCache`: members stay open across
windows, tasks, readers and threads (a file opened per window cost more than its pixels: the open, and the
decoded blocks GDAL drops with the dataset; a cache per thread opened a member once in each thread), at most
`open_members()` idle, the least recently used closed first; a GDAL handle is used by one thread at a time.
A member opens as `_Member`: without the probes and the georeferencing the plan already checked and placed.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from contextlib import contextmanager

from affine import Affine

from ..errors import RasterReadError
from .env import open_local
from .identity import local_path_of
from .raster import RasterSource

#: Idle member datasets a process keeps open at most, over every mosaic its threads read (`open_members`):
#: enough for three tile rows' members on a map some hundred files across (a row of 1008 px tiles over
#: 32 x 32 files of 300 px touches 160 of them), as threads read neighbouring rows.
OPEN_MEMBERS = 512


class _Member(RasterSource):
    """A mosaic's member as a worker opens it: its file was checked when the map was planned (truncation,
    its first and last block), so it is opened without those probes (a tile may open dozens of members).

    A GeoTIFF member is opened without its georeferencing from the file (GDAL's GEOREF_SOURCES=PAM): the
    plan placed it in the map, and reading its geokeys took 2.6 of an open's 3.1 ms (the CRS is looked up in
    PROJ's database on every open). Its PAM .aux.xml is read, as GDAL reads it by default: with
    GEOREF_SOURCES=NONE GDAL skipped it, and a nodata value named there was read as valid pixels. A remote
    member whose header showed no nodata, mask or alpha still opens so (`_RemoteMember`: GDAL would ask the
    server for an .aux.xml on each open). rasterio warns that a file without a PAM georeference has no
    geotransform: not said (`_quiet_open`). A run's read task opens and reads members with their folder not
    listed (`env.MANY_FILES`), or not looked in where the plan saw nothing beside them (`env.NO_SIBLINGS`)."""

    _probe_file = False
    _sources = "PAM"

    def _open_dataset(self):
        if not self.path.lower().endswith((".tif", ".tiff")):
            return super()._open_dataset()  # other drivers may not know the option (GDAL would warn)
        with _quiet_open():
            return open_local(self.path, GEOREF_SOURCES=self._sources)


class _RemoteMember(_Member):
    """A remote member whose header (read the normal way when its map was planned) showed every pixel valid:
    nothing a PAM .aux.xml could add is there to lose, and no request for one is made."""

    _sources = "NONE"


_QUIET = {"lock": threading.Lock(), "users": 0, "entry": None}


@contextmanager
def _quiet_open():
    """rasterio's "no geotransform" warning filtered while a member opens without its georeferencing.
    `warnings.catch_warnings` is not thread-safe (`run.executing.quiet`): the first thread in adds one filter entry,
    the last one out removes exactly that entry."""
    import re
    import warnings

    from rasterio.errors import NotGeoreferencedWarning

    with _QUIET["lock"]:
        if _QUIET["users"] == 0:
            _QUIET["entry"] = ("ignore", re.compile("Dataset has no geotransform"), NotGeoreferencedWarning, None, 0)
            warnings.filters.insert(0, _QUIET["entry"])
            warnings._filters_mutated()  # noqa: SLF001 - what warnings.filterwarnings itself calls
        _QUIET["users"] += 1
    try:
        yield
    finally:
        with _QUIET["lock"]:
            _QUIET["users"] -= 1
            if _QUIET["users"] == 0:
                try:
                    warnings.filters.remove(_QUIET["entry"])
                except ValueError:
                    pass  # the user reset the filters meanwhile
                warnings._filters_mutated()  # noqa: SLF001


class _WarpedMember(RasterSource):
    """A member on another lattice (`Member.warp`), read through a warped VRT onto the map's
    (`readers.warp`): its file opened with its georeferencing, the VRT's grid its box in the map's pixels."""

    _probe_file = False

    def __init__(self, member, layout, bands, stretch):
        self._spec = (member, layout)
        self._raw = None
        super().__init__(member.path, bands=bands, stretch=stretch)

    def _open_dataset(self):
        from .warp import open_warped

        m, lay = self._spec
        self._raw = raw = super()._open_dataset()
        if (raw.width, raw.height) != (m.warp.width, m.warp.height):
            raw.close()
            raise RasterReadError(_changed(m.path, (raw.width, raw.height), (m.warp.width, m.warp.height)))
        at = lay.affine @ Affine.translation(m.col, m.row)
        return open_warped(raw, lay.crs, at, m.width, m.height, m.warp.resampling)

    def close(self) -> None:
        super().close()
        if self._raw is not None:
            self._raw.close()
            self._raw = None


def _changed(path: str, now: tuple, then: tuple) -> str:
    return (f"{path} is {now[0]}x{now[1]} px, not the {then[0]}x{then[1]} px it was when the run planned its map: "
            "it changed; rerun once it stays put")


def open_member(m, bands, stretch, layout=None) -> RasterSource:
    """A mosaic member `m` (`mosaic.Member`: its path and planned size) opened for reading, warped onto
    `layout`'s lattice when it is on another (`m.warp`); a file whose size changed since the plan is
    refused."""
    if m.warp is not None:
        return _WarpedMember(m, layout, bands, stretch)
    plain_remote = not m.nodata and local_path_of(m.path) is None
    src = (_RemoteMember if plain_remote else _Member)(m.path, bands=bands, stretch=stretch)
    if (src.width, src.height) != (m.width, m.height):
        src.close()
        raise RasterReadError(_changed(m.path, (src.width, src.height), (m.width, m.height)))
    return src


def open_members() -> int:
    """Members a process keeps open at most: `OPEN_MEMBERS`, or fewer where the process may open few files
    (a quarter of its limit: the output, GDAL's own, other readers)."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        return OPEN_MEMBERS
    return OPEN_MEMBERS if soft == resource.RLIM_INFINITY else max(8, min(OPEN_MEMBERS, soft // 4))


class MemberCache:
    """The member datasets a process keeps open, shared by its threads, each used by one thread at a time: a
    window takes (`get`) each member it reads and gives it back (`put`) when read, so a member read by the
    next window (the overlap, the next tile of a row), the next task or another thread is not opened again
    and its decoded blocks (GDAL's cache of that dataset) serve them all. A member two threads read at once
    is open twice. At most `limit` idle datasets, the least recently used closed first. Keyed by (path,
    bands, stretch, token): the token of the reader that opened it (the map's identity as planned: every
    member's size, time and content samples), so a reader of a changed map opens its files anew, never
    reading one through a handle opened before it changed (those age out of the LRU). `opened`: files
    opened so far."""

    def __init__(self, limit: int | None = None):
        self.limit = limit if limit is not None else open_members()
        self.entries: OrderedDict[tuple, list[RasterSource]] = OrderedDict()  # idle datasets by key, LRU first
        self.opened = 0
        self._idle = 0
        self._lock = threading.Lock()

    def get(self, key: tuple, opener) -> RasterSource:
        """An open reader of `key`, this thread's until `put` back: an idle one, else `opener()`'s."""
        with self._lock:
            idle = self.entries.get(key)
            if idle:
                src = idle.pop()
                self._idle -= 1
                if not idle:
                    del self.entries[key]
                return src
            self.opened += 1
        return opener()

    def put(self, key: tuple, src: RasterSource) -> None:
        """Give back a reader `get` gave (idle again, the most recently used); the least recently used idle
        ones beyond `limit` are closed."""
        with self._lock:
            self.entries.setdefault(key, []).append(src)
            self.entries.move_to_end(key)
            self._idle += 1
            spare = []
            while self._idle > max(1, self.limit):
                old_key, old = next(iter(self.entries.items()))
                spare.append(old.pop(0))
                self._idle -= 1
                if not old:
                    del self.entries[old_key]
        for old_src in spare:
            old_src.close()

    def drop(self, token: str) -> None:
        """Close the idle entries opened under `token`."""
        with self._lock:
            gone = [src for key in [k for k in self.entries if k[-1] == token] for src in self.entries.pop(key)]
            self._idle -= len(gone)
        for src in gone:
            src.close()

    def close(self) -> None:
        with self._lock:
            gone = [src for idle in self.entries.values() for src in idle]
            self.entries.clear()
            self._idle = 0
        for src in gone:
            src.close()

    def __len__(self) -> int:
        return self._idle


_shared: dict = {"cache": None}
_shared_lock = threading.Lock()


def member_cache() -> MemberCache:
    """The process's `MemberCache` (made on its first use)."""
    cache = _shared["cache"]
    if cache is None:
        with _shared_lock:
            cache = _shared["cache"] = _shared["cache"] or MemberCache()
    return cache
