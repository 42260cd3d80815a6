"""Input identity: what a checkpoint key says about the pixels' origin, so a changed input is never
resumed from results computed on its old content.

The identity of an input is a hash over every file its pixels come from (GDAL's file list: the raster,
a VRT's sources, world files, .aux.xml, external overviews, masks), each identified by:

* a local file: its absolute path, size, modification time (ns) and a hash of a sample of its bytes
  (header, tail and a few blocks between: `content_sample`), so a same-size, same-time replacement is seen;
* a member of a local archive (`/vsizip/`, `/vsitar/`, `/vsigzip/`): the archive's identity plus, for zip,
  the member's size and CRC-32;
* an http(s) URL or `/vsicurl/` path: the server's ETag, Last-Modified and size (a one-byte ranged GET:
  a presigned URL signed for GET refuses HEAD). A URL's query string (a presigned URL's signature, new
  each time it is signed) is no part of its identity when the server gives an ETag or Last-Modified, so a
  re-signed URL of an unchanged file resumes;
* a cloud path (`s3://`, `gs://`, `az://`, `/vsis3/`, `/vsigs/`, `/vsiaz/`, ...): the same headers,
  asked through GDAL itself (`VSIGetFileMetadata(path, "HEADERS")`: GDAL's own credentials and options);
* anything else, a server that gives none of these, or a GDAL library that cannot be reached: unknown.
  An unknown identity is new on every run (its checkpoints are never reused) and a warning says so.

With `verify=True` (`--verify-inputs`) the content itself is hashed: the bytes of local files, the decoded
pixels and georeferencing of the rest. Slower (the whole input is read once), exact.

A file replaced while a run reads it (a server's new ETag mid-run) would give objects of two versions. A run
brackets every read of an input between two stamps: `opening_stamp` before GDAL first reads it (what GDAL's
network file systems cached of it in this process is dropped first: `forget_cached`), the stamps after the
open that the plan keeps, and `changed_files` when its tiles are done and again before the outputs are
renamed into place. A file that changed between any two of them fails the run (`changed_error`). Those
end checks take a local file's stamp again from its status alone where nothing can have changed it unseen
(`settled_stamp`: the same device, inode, size and times, its change time settled when it was stamped on a
file system that keeps change times), else from its content sample as at first.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import stat
import time
import uuid
import zipfile
from pathlib import Path

from ..errors import InputDataError
from ..wording import opt, spoken

log = logging.getLogger(__name__)

REMOTE_PREFIXES = ("/vsicurl/", "/vsicurl_streaming/")
#: URL schemes rasterio hands to GDAL's cloud file systems, and their GDAL prefixes.
CLOUD_SCHEMES = {"s3": "/vsis3/", "gs": "/vsigs/", "az": "/vsiaz/", "azure": "/vsiaz/", "oss": "/vsioss/"}
CLOUD_PREFIXES = ("/vsis3/", "/vsigs/", "/vsiaz/", "/vsiadls/", "/vsioss/", "/vsiswift/", "/vsis3_streaming/",
                  "/vsigs_streaming/", "/vsiaz_streaming/")


def local_path_of(path: str) -> str | None:
    """The local file behind a path GDAL reads: the path itself, the archive of a /vsizip/ (/vsitar/,
    /vsigzip/) path; None for URLs and remote /vsi paths."""
    s = str(path)
    if "://" in s and not s.startswith("file://"):
        return None
    s = s.removeprefix("file://")
    if not s.startswith("/vsi"):
        return s
    rest = s
    while rest.startswith("/vsi"):
        head, _, rest = rest[1:].partition("/")
        if head in ("vsicurl", "vsis3", "vsigs", "vsiaz", "vsiadls", "vsioss", "vsiswift", "vsiwebhdfs",
                    "vsihdfs", "vsimem", "vsicurl_streaming", "vsis3_streaming", "vsigs_streaming",
                    "vsiaz_streaming"):
            return None
        rest = "/" + rest if not rest.startswith("{") else rest.strip("{}")
    # the longest prefix that is a file is the archive
    parts = Path(rest).parts
    for n in range(len(parts), 0, -1):
        cand = str(Path(*parts[:n]))
        if os.path.isfile(cand):
            return cand
    return rest


#: The content sample of a local file's identity: its first and last SAMPLE_HEAD bytes and SAMPLE_BLOCKS
#: blocks of SAMPLE_BLOCK bytes spread evenly between (a GeoTIFF's header holds every block's offset and
#: size, so a compressed image with other pixels differs there already), each byte hashed once (where ranges
#: overlap: a small file's) by SHA-256 (issue 48: a 190 KB file's sample took 0.33 ms CPU with BLAKE2b over the
#: overlapping ranges, 0.13 ms so; stamps taken before are of another hash: such checkpoints are recomputed
#: once, never trusted).
SAMPLE_HEAD, SAMPLE_BLOCK, SAMPLE_BLOCKS = 1 << 16, 1 << 14, 8


def sample_ranges(size: int) -> list[tuple[int, int]]:
    """The (start, end) byte ranges of a `size`-byte file's content sample, in order, none overlapping."""
    ranges = [(0, SAMPLE_HEAD)]
    if size > 2 * SAMPLE_HEAD:
        step = (size - 2 * SAMPLE_HEAD) // (SAMPLE_BLOCKS + 1)
        ranges += [(SAMPLE_HEAD + k * step, SAMPLE_HEAD + k * step + SAMPLE_BLOCK) for k in range(1, SAMPLE_BLOCKS + 1)]
    if size > SAMPLE_HEAD:
        ranges.append((max(SAMPLE_HEAD, size - SAMPLE_HEAD), size))
    merged: list[list[int]] = []
    for a, b in ranges:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return [(a, b) for a, b in merged]


def content_sample(path: str, size: int) -> str:
    """A hash of a cheap sample of a file's bytes (see SAMPLE_*): a file replaced by another of the same
    size and time (`cp -p`, a sync tool) is seen as changed. 'unread' when the file cannot be read."""
    h = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for a, b in sample_ranges(size):
                fh.seek(a)
                h.update(fh.read(b - a))
    except OSError:
        return "unread"
    return h.hexdigest()[:16]


def _local_stamp(path: str) -> str | None:
    taken = time.time_ns()  # before the stat: a change after it gives a later change time (`settled_stamp`)
    try:
        st = os.stat(path)
    except OSError:
        return None
    sample = content_sample(path, st.st_size) if stat.S_ISREG(st.st_mode) else "special"  # a FIFO would block
    stamp = f"{os.path.abspath(path)}:{st.st_size}:{st.st_mtime_ns}:{sample}"
    if stat.S_ISREG(st.st_mode) and st.st_ctime_ns <= taken - SETTLED_NS and _ctime_kept(st.st_dev):
        if len(_SETTLED) >= MAX_SETTLED:
            _SETTLED.clear()
        _SETTLED[os.path.abspath(path)] = (_stat_key(st), stamp)
    return stamp


#: A local file's stamp is taken again without its content sample (`settled_stamp`) only where its status
#: change time (ctime: set by the kernel on every write, truncate, rename over it or `utime`, never by a user)
#: was at least SETTLED_NS before the stamp was taken (a file system that keeps ctime in whole seconds gives a
#: change after the stamp a later ctime), on a local Linux file system of `CTIME_KEPT` (network file systems
#: cache attributes; FAT's "ctime" is its creation time). At most MAX_SETTLED files are remembered.
SETTLED_NS = 2_000_000_000
CTIME_KEPT = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "f2fs", "zfs", "overlay"})
MAX_SETTLED = 1 << 17
_SETTLED: dict[str, tuple] = {}


def _stat_key(st: os.stat_result) -> tuple:
    return (st.st_dev, st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


@functools.lru_cache(maxsize=None)
def _ctime_kept(dev: int) -> bool:
    """Whether the file system of device `dev` is one of `CTIME_KEPT` (Linux: /proc/self/mountinfo; else no)."""
    want = f"{os.major(dev)}:{os.minor(dev)}"
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as fh:
            types = {f[2]: f[f.index("-") + 1] for f in (line.split() for line in fh) if "-" in f}
    except (OSError, ValueError, IndexError):
        return False
    return types.get(want) in CTIME_KEPT


def settled_stamp(path: str) -> str | None:
    """The `file_stamp` of a plain local file taken before in this process, when the file's status (device,
    inode, size, modification and change times) is still what it was then and its change time was settled
    (see `SETTLED_NS`): nothing wrote to it, renamed over it or reset its times since. None: take it anew."""
    s = str(path)
    if "://" in s or s.startswith("/vsi"):
        return None
    seen = _SETTLED.get(os.path.abspath(s))
    if seen is None:
        return None
    try:
        st = os.stat(s)
    except OSError:
        return None
    return seen[1] if _stat_key(st) == seen[0] else None


def _zip_member(archive: str, member: str) -> str | None:
    try:
        with zipfile.ZipFile(archive) as z:
            info = z.getinfo(member.lstrip("/"))
    except (OSError, KeyError, zipfile.BadZipFile, ValueError):
        return None
    return f"{member}:{info.file_size}:{info.CRC:08x}"


def _http_stamp(url: str) -> str | None:
    """ETag / Last-Modified / size from a one-byte ranged GET (10 s timeout); None when the server gives
    neither an ETag nor a Last-Modified."""
    import urllib.request

    try:
        req = urllib.request.Request(url, headers={"Range": "bytes=0-0"})
        with urllib.request.urlopen(req, timeout=10) as r:  # noqa: S310 - the user's own input URL
            h = r.headers
            size = (h.get("Content-Range") or "").rpartition("/")[2] or h.get("Content-Length")
            parts = [h.get("ETag"), h.get("Last-Modified"), size]
    except Exception:  # noqa: BLE001 - unreachable from here: the identity is unknown
        return None
    if not (parts[0] or parts[1]):
        return None
    return f"{url_without_query(url)}:" + "|".join(p or "" for p in parts)


def url_without_query(url: str) -> str:
    import urllib.parse

    u = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit((u.scheme, u.netloc, u.path, "", ""))


@functools.lru_cache(maxsize=1)
def _libgdal():
    """The GDAL library rasterio runs on (ctypes), or None when it cannot be found."""
    import ctypes
    import glob as _glob

    import rasterio

    here = os.path.dirname(rasterio.__file__)
    for cand in [*sorted(_glob.glob(here + ".libs/libgdal*")), "libgdal.so", "libgdal.dylib", "gdal.dll"]:
        try:
            lib = ctypes.CDLL(cand)
            lib.VSIGetFileMetadata.restype = ctypes.POINTER(ctypes.c_char_p)
            lib.VSIGetFileMetadata.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p]
            lib.CSLDestroy.argtypes = [ctypes.POINTER(ctypes.c_char_p)]
            lib.VSICurlPartialClearCache.argtypes = [ctypes.c_char_p]
            return lib
        except (OSError, AttributeError):
            continue
    return None


def gdal_stamp(path: str) -> str | None:
    """ETag / Last-Modified / size of a file on one of GDAL's network file systems (`/vsis3/...`, or an
    `s3://` / `gs://` / `az://` URL), from GDAL's own request with its credentials; None when unknown."""
    scheme, sep, rest = path.partition("://")
    vsi = CLOUD_SCHEMES[scheme.lower()] + rest if sep and scheme.lower() in CLOUD_SCHEMES else path
    lib = _libgdal()
    if lib is None:
        return None
    try:
        lib.CPLPushErrorHandler(lib.CPLQuietErrorHandler)  # an unreachable file: unknown, said once by the caller
        try:
            lib.VSICurlPartialClearCache(vsi.encode())  # not what this process saw of the file before
            md = lib.VSIGetFileMetadata(vsi.encode(), b"HEADERS", None)
        finally:
            lib.CPLPopErrorHandler()
    except Exception:  # noqa: BLE001 - a GDAL that cannot answer: unknown
        return None
    if not md:
        return None
    headers = {}
    try:
        i = 0
        while md[i] is not None:
            k, _, v = md[i].decode("utf-8", "replace").partition("=")
            headers[k.strip().lower()] = v.strip()
            i += 1
    finally:
        lib.CSLDestroy(md)
    parts = [headers.get("etag"), headers.get("last-modified"), headers.get("content-length")]
    if not (parts[0] or parts[1]):
        return None
    return f"{url_without_query(vsi)}:" + "|".join(p or "" for p in parts)


def network_path(path: str) -> str | None:
    """The GDAL network file system path (`/vsicurl/...`, `/vsis3/...`) of a URL or remote /vsi path,
    without its query string; None for anything else."""
    s = str(path)
    scheme, sep, rest = s.partition("://")
    if sep and scheme.lower() in CLOUD_SCHEMES:
        s = CLOUD_SCHEMES[scheme.lower()] + rest
    elif sep and scheme.lower() in ("http", "https"):
        s = "/vsicurl/" + s
    if not s.startswith(REMOTE_PREFIXES + CLOUD_PREFIXES):
        return None
    return s.split("?", 1)[0]


def forget_cached(path: str) -> None:
    """Drop what GDAL's network file systems cached in this process of a remote `path` and of the files
    beside it that share its name (blocks, size, headers; `.ovr`, `.aux.xml`): the next read asks the
    server. GDAL's cache outlives the datasets that filled it (a second open of a URL in one process makes
    no request at all). Nothing for a local path, or without a GDAL library to call."""
    prefix = network_path(path)
    lib = _libgdal() if prefix is not None else None
    if lib is None:
        return
    try:
        lib.VSICurlPartialClearCache(prefix.encode())
    except Exception:  # noqa: BLE001 - a GDAL that cannot: its cache stays (the stamps still bracket the run)
        pass


def opening_stamp(path: str) -> str | None:
    """`file_stamp` of an input taken before GDAL opens it for the run, GDAL's cache of it dropped first:
    every byte the run reads of it comes from the server after this stamp."""
    forget_cached(path)
    return file_stamp(path)


def changed_while_opened(path: str, before: str | None, stamps) -> bool:
    """Whether input `path`, stamped `before` (`opening_stamp`), changed by the time its files were
    stamped `stamps` (after GDAL opened it: its header may be of the old file, its blocks of the new)."""
    return before is not None and before not in stamps and file_stamp(path) != before


def changed_error(path: str, changed: str, kept: bool) -> InputDataError:
    """The error of an input whose file `changed` while the run read it; `kept`: its finished tiles are
    checkpointed (they are of the old file: the rerun's new identity recomputes them)."""
    where = changed if changed == path else f"{path}: {changed}"
    return InputDataError(f"{where} changed while the run read it (its ETag, size, time or content is not what it "
                          "was when the run started), so its tiles would mix two versions: nothing was written; rerun "
                          "when it no longer changes" + (" (finished tiles stay checkpointed)" if kept else ""))


def file_stamp(path: str) -> str | None:
    """The identity of one file GDAL reads (see the module doc); None when it cannot be told."""
    s = str(path)
    scheme = s.partition("://")[0].lower() if "://" in s else ""
    if scheme in CLOUD_SCHEMES or s.startswith(CLOUD_PREFIXES):
        return gdal_stamp(s)
    if s.startswith(REMOTE_PREFIXES) or s.startswith(("http://", "https://")):
        url = s
        for pre in REMOTE_PREFIXES:
            url = url.removeprefix(pre)
        return _http_stamp(url) if url.startswith(("http://", "https://")) else None
    if not s.startswith("/vsi"):
        return _local_stamp(s.removeprefix("file://"))
    archive = local_path_of(s)
    if archive is None or not os.path.isfile(archive):
        return None
    stamp = _local_stamp(archive)
    inner = s[s.index(archive) + len(archive):] if archive in s else ""
    if inner and s.startswith("/vsizip/") and zipfile.is_zipfile(archive):
        member = _zip_member(archive, inner)
        if member is None:
            return None
        stamp += "!" + member
    elif inner:
        stamp += "!" + inner
    return stamp


def source_files(ds, path: str) -> list[str]:
    """Every file the pixels of an open rasterio dataset come from (GDAL's list; the path when it has none)."""
    try:
        files = list(ds.files) if ds is not None else []
    except Exception:  # noqa: BLE001 - drivers without a file list
        files = []
    return files or [str(path)]


def input_identity(path: str, files: list[str], bands, verify: bool = False, ds=None,
                   stamps: list | None = None, warn: bool = True) -> str:
    """A 16-hex-digit identity of input `path` whose pixels come from `files` (see the module doc);
    `stamps`: their `file_stamp`s, when the caller has them; `warn`: say when a file's is unknown (a
    mosaic says it once for all its files)."""
    h = hashlib.sha256()
    h.update(f"{_name(path)}|{bands}".encode())
    unknown = []
    for k, f in enumerate(files):
        if verify:
            h.update(content_hash(f, ds if f == files[0] else None).encode())
            continue
        stamp = stamps[k] if stamps is not None and k < len(stamps) else file_stamp(f)
        if stamp is None:
            unknown.append(f)
            stamp = f"unknown:{f}:{uuid.uuid4().hex}"  # matches nothing stored before, in any process
        h.update(stamp.encode())
    if unknown and warn:
        log.warning(spoken("%s: cannot tell whether %s changed since an earlier run (no size/time/ETag): its "
                           f"checkpoints will not be reused; {opt('verify_inputs')} hashes its content instead"),
                    path, unknown[0])
    return h.hexdigest()[:16]


def _name(path: str) -> str:
    """What names an input in its identity: an absolute path; a URL without its query string (its stamp
    says which version; see the module doc)."""
    if "://" not in path and not path.startswith("/vsi"):
        return os.path.abspath(path)
    return url_without_query(path) if "://" in path else path


def content_hash(path: str, ds=None) -> str:
    """SHA-256 of a local file's bytes, or of the decoded pixels and georeferencing of anything else."""
    local = path if not path.startswith("/vsi") and "://" not in path else None
    h = hashlib.sha256()
    if local is not None and Path(local).is_file():
        with open(local, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 22), b""):
                h.update(chunk)
        return h.hexdigest()
    import rasterio

    if not hasattr(ds, "block_windows"):  # not a rasterio dataset (a slide reader)
        ds = None
    own = ds is None
    ds = ds or rasterio.open(path)
    try:
        h.update(f"{ds.width}x{ds.height}|{ds.count}|{ds.dtypes}|{tuple(ds.transform)}|{ds.crs}".encode())
        for _, win in ds.block_windows(1):
            h.update(ds.read(window=win).tobytes())
    finally:
        if own:
            ds.close()
    return h.hexdigest()


#: Threads that stamp an input's files when it has many (a mosaic's members; a URL's stamp is a request).
STAMP_THREADS = 16


def file_stamps(files, known: dict | None = None) -> tuple:
    """`file_stamp` of each of `files`, in order; `STAMP_THREADS` at a time when there are many. `known`:
    stamps the caller took already (file -> stamp), not taken again."""
    files, known = list(files), known or {}
    todo = [f for f in files if f not in known]
    if len(todo) < 4:
        new = [file_stamp(f) for f in todo]
    else:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(min(STAMP_THREADS, len(todo)), thread_name_prefix="sam3tiles-stamp") as pool:
            new = list(pool.map(file_stamp, todo))
    taken = dict(zip(todo, new))
    return tuple(known[f] if f in known else taken[f] for f in files)


def changed_files(files, stamps) -> list[str]:
    """Those of `files` whose `file_stamp` is no longer the one in `stamps` (taken when the run planned):
    a file replaced while the run read it (a server's new ETag, a local copy over it)."""
    files, stamps = list(files), list(stamps)
    known = [k for k, old in enumerate(stamps[:len(files)]) if old is not None]
    unchanged = {files[k]: st for k in known if (st := settled_stamp(files[k])) is not None}
    now = file_stamps([files[k] for k in known], known=unchanged)
    return [files[k] for k, new in zip(known, now) if new != stamps[k]]
