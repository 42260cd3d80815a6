"""The member files of a mosaic (`readers.mosaic`) as a worker thread keeps them open.

A window reads only the members it touches, through its thread's `MemberCache`: members stay open across
windows, tasks and readers (a file opened per window cost more than its pixels: the open, and the decoded
blocks GDAL drops with the dataset), at most `open_members()` per thread, the least recently used closed
first; GDAL handles are never shared between threads. A member opens as `_Member`: without the probes and
the georeferencing the plan already checked and placed.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from contextlib import contextmanager

from affine import Affine

from ..errors import RasterReadError
from .raster import RasterSource

#: Member datasets one thread keeps open at most, over every mosaic it reads (`open_members`): enough for a
#: tile row's members and the next row's on a map some hundred files across (a row of 1008 px tiles over
#: 32 x 32 files of 300 px touches 160 of them).
OPEN_MEMBERS = 256


class _Member(RasterSource):
    """A mosaic's member as a worker opens it: its file was checked when the map was planned (truncation,
    its first and last block), so it is opened without those probes (a tile may open dozens of members).

    A GeoTIFF member is opened without its georeferencing (GDAL's GEOREF_SOURCES=NONE): the plan placed it
    in the map, and reading its geokeys took 2.6 of an open's 3.1 ms (the CRS is looked up in PROJ's
    database on every open). rasterio then warns that it has no geotransform: not said (`_quiet_open`)."""

    _probe_file = False

    def _open_dataset(self):
        import rasterio

        if not self.path.lower().endswith((".tif", ".tiff")):
            return super()._open_dataset()  # other drivers may not know the option (GDAL would warn)
        with _quiet_open():
            return rasterio.open(self.path, GEOREF_SOURCES="NONE")


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
    src = _Member(m.path, bands=bands, stretch=stretch)
    if (src.width, src.height) != (m.width, m.height):
        src.close()
        raise RasterReadError(_changed(m.path, (src.width, src.height), (m.width, m.height)))
    return src


def open_members() -> int:
    """Members one thread keeps open at most: `OPEN_MEMBERS`, or fewer where the process may open few files
    (a sixteenth of its limit: other threads, the output, GDAL's own)."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        return OPEN_MEMBERS
    return OPEN_MEMBERS if soft == resource.RLIM_INFINITY else max(8, min(OPEN_MEMBERS, soft // 16))


class MemberCache:
    """The member datasets one thread has open, least recently used first, at most `limit`: a window reads
    its members through it, so a member read by the next window (the overlap, the next tile of a row) or the
    next task is not opened again. One per thread (`member_cache`): a GDAL handle is used by the thread that
    opened it only. Keyed by (path, bands, stretch, token): the token of the reader that opened it (the map's
    identity as planned: every member's size, time and content samples), so a reader of a changed map opens
    its files anew, never reading one through a handle opened before it changed (those age out of the LRU).
    `opened`: files opened so far."""

    def __init__(self, limit: int | None = None):
        self.limit = limit if limit is not None else open_members()
        self.entries: OrderedDict[tuple, RasterSource] = OrderedDict()
        self.opened = 0

    def get(self, key: tuple, opener) -> RasterSource:
        """The open reader of `key`, opened by `opener()` when there is none."""
        src = self.entries.pop(key, None)
        if src is None:
            while len(self.entries) >= max(1, self.limit):
                self.entries.popitem(last=False)[1].close()
            src = opener()
            self.opened += 1
        self.entries[key] = src
        return src

    def drop(self, token: str) -> None:
        """Close the entries opened under `token`."""
        for key in [k for k in self.entries if k[-1] == token]:
            self.entries.pop(key).close()

    def close(self) -> None:
        while self.entries:
            self.entries.popitem()[1].close()

    def __len__(self) -> int:
        return len(self.entries)


_threads = threading.local()


def member_cache() -> MemberCache:
    """This thread's `MemberCache` (made on its first use; its datasets close when the thread ends)."""
    cache = getattr(_threads, "members", None)
    if cache is None:
        cache = _threads.members = MemberCache()
    return cache
