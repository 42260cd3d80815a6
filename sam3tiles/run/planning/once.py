"""Each input file once: the inputs as expanded (`inputs.expand_inputs`: globs, .txt lists, STAC items) may name
one file twice, and a glob may catch a file that is no raster of its own. Both are settled here, before any
header is read, with a note for the plan and the report.

* **The same file, named twice** is one input: the same local file (the same real path: `a/./x.tif`, a
  symlink beside its target; or the same inode: a hard link), a byte-identical copy under another name
  (files of one size whose first and last `EDGE` bytes, then whole contents, are equal: a GeoTIFF's
  header holds its georeferencing, so the pieces of one delivery differ there and are never read whole),
  or the same URL (scheme and host in lower case, no default port, no fragment, `.`/`..` resolved;
  `/vsicurl/URL` is URL, `s3://b/k` is `/vsis3/b/k`; the query string counts). Kept apart, it would be
  segmented as a second map of the same ground and every object on it written twice. The first name given
  is kept.
* **A sidecar** (GDAL reads it with its raster: an external overview `.ovr`, a mask `.msk`, an `.aux.xml`,
  a world file, a `.prj`) is no input of its own. Beside its raster among the inputs (a glob caught both) it
  is skipped; named without its raster, it is refused (exit 3), naming the raster to give instead.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import stat
import urllib.parse
from dataclasses import dataclass, field
from typing import Sequence

from ...errors import InputDataError
from ...readers.identity import CLOUD_SCHEMES
from ...readers.remote import is_remote
from ..recording.workfolder import real_path

#: Endings GDAL appends to a raster's whole name for the files it reads with it.
APPENDED = {".ovr": "the external overview", ".msk": "the external mask", ".aux.xml": "the auxiliary metadata"}
#: Endings GDAL puts in place of a raster's extension for the files it reads with it.
REPLACED = {".ovr": "the external overview", ".aux": "the auxiliary metadata", ".rrd": "the external overview",
            ".tfw": "the world file", ".tifw": "the world file", ".wld": "the world file", ".jgw": "the world file",
            ".pgw": "the world file", ".j2w": "the world file", ".prj": "the projection file"}
#: Extensions of the rasters whose replaced-ending sidecars are looked for beside them.
RASTERS = (".tif", ".tiff", ".TIF", ".TIFF", ".jpg", ".jpeg", ".png", ".jp2", ".img")
#: Bytes read at each end of files of one size to tell them apart before any whole-content digest.
EDGE = 1 << 14
#: Bytes read at a time for a whole-content digest (only files whose size and ends agree).
CHUNK = 1 << 22


@dataclass
class Distinct:
    """The inputs, each file once and no sidecar, and what was left out, as lines for the plan and report."""

    paths: list[str]
    notes: list[str] = field(default_factory=list)


def distinct_inputs(paths: Sequence[str]) -> Distinct:
    """`paths` without sidecars and each file once (see the module doc), in the given order."""
    kept, notes = without_sidecars(list(paths))
    once, more = each_once(kept)
    return Distinct(once, notes + more)


# -- sidecars -----------------------------------------------------------------------------------------------

def sidecar_of(path: str, inputs: set[str]) -> tuple[str, str] | None:
    """(the raster `path` belongs to, what it is to it) when `path` is a sidecar GDAL reads with a raster:
    an appended ending (`x.tif.ovr`) of an existing file, or an ending in place of the extension
    (`x.tfw`) of a raster among `inputs`, else of one beside it; None otherwise (remote paths: None)."""
    if is_remote(path):
        return None
    low = path.lower()
    for end, what in APPENDED.items():
        if low.endswith(end) and len(path) > len(end):
            main = path[: -len(end)]
            if os.path.isfile(main):
                up = sidecar_of(main, inputs)  # x.tif.ovr.aux.xml: of x.tif
                return (up[0], f"{what} of {up[1]}") if up else (main, what)
    stem, ext = os.path.splitext(path)
    what = REPLACED.get(ext.lower())
    if what is None:
        return None
    main = next((p for p in inputs if p != path and os.path.splitext(p)[0] == stem
                 and os.path.splitext(p)[1].lower() not in REPLACED), None)
    main = main or next((stem + e for e in RASTERS if os.path.isfile(stem + e)), None)
    return (main, what) if main is not None else None


def without_sidecars(paths: list[str]) -> tuple[list[str], list[str]]:
    """(`paths` without the sidecars of rasters among them, a note on each one skipped); a sidecar whose
    raster is not among them is refused."""
    given = set(paths)
    dirs: dict = {}  # folders resolved once
    real = {str(real_path(p, dirs)) for p in paths if not is_remote(p)}
    kept, notes = [], []
    for p in paths:
        side = sidecar_of(p, given)
        if side is None:
            kept.append(p)
            continue
        main, what = side
        if os.path.realpath(main) not in real:
            raise InputDataError(f"{p} is {what} of {main} (GDAL reads it with that raster), not a raster of its "
                                 f"own: give {main} instead, or leave {os.path.basename(p)} out")
        notes.append(f"{p} skipped: {what} of {main}, which GDAL reads with it (no raster of its own)")
    return kept, notes


# -- each file once -----------------------------------------------------------------------------------------

def url_key(path: str) -> str:
    """A URL or remote /vsi path as one spelling: `/vsicurl/` dropped, cloud schemes as GDAL's prefixes,
    scheme and host in lower case, no default port, no fragment, the path's `.`/`..` resolved."""
    s = str(path)
    for pre in ("/vsicurl/", "/vsicurl_streaming/"):
        if s.startswith(pre + "http"):
            s = s[len(pre):]
    scheme, sep, rest = s.partition("://")
    if sep and scheme.lower() in CLOUD_SCHEMES:
        return posixpath.normpath(CLOUD_SCHEMES[scheme.lower()] + rest.split("#", 1)[0])
    if not sep:
        return posixpath.normpath(s)
    u = urllib.parse.urlsplit(s)
    host = (u.hostname or "").lower()
    port = u.port if u.port not in (None, {"http": 80, "https": 443}.get(u.scheme.lower())) else None
    netloc = (f"{u.username}@" if u.username else "") + host + (f":{port}" if port else "")
    path_ = posixpath.normpath(u.path) if u.path not in ("", "/") else u.path
    if u.path.endswith("/") and not path_.endswith("/"):
        path_ += "/"
    return urllib.parse.urlunsplit((u.scheme.lower(), netloc, path_, u.query, ""))


def _ends(path: str, size: int) -> bytes | None:
    """The first and last `EDGE` bytes of a file of `size` bytes; None when it cannot be read."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(EDGE)
            fh.seek(max(0, size - EDGE))
            return head + fh.read(EDGE)
    except OSError:
        return None


def _digest(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def _local_keys(path: str, dirs: dict) -> tuple[str, tuple | None, int | None]:
    """(real path, (device, inode), size) of a local file; inode and size None when it cannot be stat'ed.
    `dirs`: folders resolved so far (`real_path`)."""
    real = str(real_path(path, dirs))
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return real, None, None
    if not stat.S_ISREG(st.st_mode):
        return real, None, None
    return real, (st.st_dev, st.st_ino), st.st_size


def each_once(paths: list[str]) -> tuple[list[str], list[str]]:
    """(`paths`, each file once: the first name given of it; a note on each name left out)."""
    first: dict = {}  # key -> the name kept
    kept, notes, by_size, dirs = [], [], {}, {}
    for p in paths:
        size = None
        if is_remote(p):
            keys, why = [("url", url_key(p))], "the same URL"
        else:
            real, inode, size = _local_keys(p, dirs)
            keys, why = [("real", real)] + ([("inode", inode)] if inode else []), "the same file"
        same = next((first[k] for k in keys if k in first), None)
        if same is not None:
            notes.append(f"{same} named twice" + (f" ({p}: {why})" if p != same else "") + ", segmented once")
            continue
        kept.append(p)
        if size is not None:
            by_size.setdefault(size, []).append(p)
        for k in keys:
            first[k] = p
    copies = _copies([group for group in by_size.values() if len(group) > 1])
    for p, same in copies.items():
        notes.append(f"{same} named twice ({p}: a byte-identical copy), segmented once")
    return [p for p in kept if p not in copies], notes


def _copies(groups: list[list[str]]) -> dict[str, str]:
    """{copy: the first name of its content} among distinct files of one size each (`groups`): their ends
    first (cheap), whole digests only where the ends agree."""
    out: dict[str, str] = {}
    for names in groups:
        size = os.path.getsize(names[0])
        by_ends: dict[bytes | None, list[str]] = {}
        for p in names:
            by_ends.setdefault(_ends(p, size), []).append(p)
        for ends, same in by_ends.items():
            if len(same) < 2 or ends is None:
                continue
            seen: dict[str, str] = {}
            for p in same:
                try:
                    d = _digest(p)
                except OSError:  # unreadable now: the reader says so, as for any input
                    continue
                if d in seen:
                    out[p] = seen[d]
                else:
                    seen[d] = p
    return out
