"""One parse of a local TIFF's header, for what opening it asks (issue 48: 1,000 small files planned as one
map paid for two parses and two pixel probes a file):

* is it a whole-slide image (`slide.is_slide`: an OME-TIFF, or a TIFF whose main image has pyramid levels;
  a GeoTIFF only when it is a pyramidal OME-TIFF);
* does its first image's pixel data end past the end of the file (truncated: `raster.RasterSource` refuses it);
* do its byte ranges prove it whole (`TiffHead.whole`): every chunk (tile or strip) of the first image that
  its size needs is there, non-empty, inside the file, in a compression every GDAL build decodes. Such a file
  needs no probe read of its first and last block on open; any other GeoTIFF is probed as before.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass

_TIFF_MAGIC = (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+")

#: TIFF compressions every GDAL build decodes without an optional library: none, LZW, deflate (both codes),
#: PackBits. A file in another (JPEG, ZSTD, WebP, JPEG XL, ...) is probed on open: its codec may be missing.
PLAIN_CODECS = frozenset({1, 5, 8, 32946, 32773})


@dataclass(frozen=True)
class TiffHead:
    """What one parse of a TIFF's header tells (see the module doc). `end`: where its first image's pixel data
    ends; `size`: the file's bytes; `shape`: (width, height) of its first image; `whole`: its byte ranges
    prove its first image whole (no probe needed)."""

    slide: bool
    end: int
    size: int
    shape: tuple[int, int]
    whole: bool
    geo: object = None  # its first image's GeoTIFF georeference (`geotags.GeoTags`), where read one way

    @property
    def truncated(self) -> bool:
        return self.end > self.size


def is_local_tiff(path: str) -> bool:
    """A local file that starts with a TIFF's magic bytes (anything remote, or unreadable: False)."""
    if "://" in path or path.startswith("/vsi"):
        return False
    try:
        with open(path, "rb") as f:
            return f.read(4) in _TIFF_MAGIC
    except OSError:
        return False


_QUIET = threading.Lock()
_quiet_users = [0, logging.NOTSET]


def tiff_head(path: str) -> TiffHead | None:
    """The header facts of a local TIFF, from one parse; None for anything that is not a local TIFF file, or a
    header tifffile cannot parse (GDAL's open then decides)."""
    p = str(path)
    if not os.path.isfile(p) or not is_local_tiff(p):
        return None
    size = os.path.getsize(p)
    return _plain_geotiff(p, size) or _tifffile_head(p, size)


def _tifffile_head(p: str, size: int) -> TiffHead | None:
    """`tiff_head` by tifffile's parse."""
    try:
        import tifffile

        _quiet(True)  # a damaged header is reported by the reader that opens it, not logged by tifffile
        try:
            with tifffile.TiffFile(p) as tf:
                slide = _slide(tf)
                offsets, counts, shape, whole = _chunks(tf, size)
                geo = _geo(tf)
        finally:
            _quiet(False)
    except Exception:  # noqa: BLE001 - a header tifffile cannot read: GDAL's open decides
        return None
    end = max((o + c for o, c in zip(offsets, counts) if c), default=0)
    return TiffHead(slide, end, size, shape, whole and end <= size, geo)


#: The first directory's tags `_plain_geotiff` reads.
_WANTED = frozenset({256, 257, 259, 270, 273, 277, 278, 279, 284, 322, 323, 324, 325, 513, 514, 32997,
                     33550, 33922, 34264, 34735, 34736, 34737})


def _plain_geotiff(p: str, size: int) -> TiffHead | None:
    """The `TiffHead` of a GeoTIFF that is no OME-TIFF (so no slide) whose first image lists exactly the
    chunks its size needs, none empty, from its first directory's tags alone (`tiffifd.first_ifd`: the
    facts tifffile gives, without its parse); None for any other file (tifffile parses it)."""
    from .tiffifd import first_ifd

    try:
        with open(p, "rb") as fh:
            tags = first_ifd(fh, size, _WANTED)
        return _plain_head(tags, size)
    except Exception:  # noqa: BLE001 - anything odd: tifffile parses it
        return None


def _plain_head(tags: dict | None, size: int) -> TiffHead | None:
    """`_plain_geotiff`'s facts from the first directory's `tags`."""
    from .geotags import geo_tags

    if not tags or 34735 not in tags or 513 in tags or b"OME" in tags.get(270, b""):
        return None
    one = {k: v[0] for k, v in tags.items() if not isinstance(v, bytes) and len(v) == 1}
    width, height = one.get(256, 0), one.get(257, 0)
    codec, depth, rows = one.get(259, 1), one.get(32997, 1), one.get(278, 2**32 - 1) or height
    planes = one.get(277, 1) if one.get(284, 1) == 2 else 1
    tiled = 324 in tags
    if tiled:
        tw, th = one.get(322, 0), one.get(323, 0)
        need = -(-width // tw) * -(-height // th) * planes if tw >= 1 and th >= 1 else -1
    else:
        need = -(-height // min(max(rows, 1), max(height, 1))) * planes
    offsets, counts = tags.get(324 if tiled else 273), tags.get(325 if tiled else 279)
    if (width < 1 or height < 1 or depth != 1 or codec in (2, 3, 4) or tiled != (322 in tags) or not offsets
            or counts is None or not len(offsets) == len(counts) == need or min(counts) < 1 or min(offsets) < 1):
        return None
    end = max(o + c for o, c in zip(offsets, counts))
    return TiffHead(False, end, size, (width, height), codec in PLAIN_CODECS and end <= size, geo_tags(tags.get))


def _quiet(enter: bool) -> None:
    """tifffile's logger held at CRITICAL while any thread parses a header (the first in saves its level, the
    last out restores it: threads never leave it raised)."""
    log = logging.getLogger("tifffile")
    with _QUIET:
        if enter:
            if _quiet_users[0] == 0:
                _quiet_users[1] = log.level
                log.setLevel(logging.CRITICAL)
            _quiet_users[0] += 1
        else:
            _quiet_users[0] -= 1
            if _quiet_users[0] == 0:
                log.setLevel(_quiet_users[1])


def _slide(tf) -> bool:
    """`slide.is_slide`'s rule on a parsed TIFF (a GeoTIFF that is no OME-TIFF is no slide: its series are
    not parsed)."""
    try:
        if tf.is_geotiff and not tf.is_ome:
            return False
        if not tf.series:
            return False
        levels = len(tf.series[0].levels)
        if tf.is_geotiff:
            return bool(tf.is_ome and levels > 1)
        return bool(tf.is_ome or levels > 1)
    except Exception:  # noqa: BLE001 - a TIFF tifffile cannot parse is left to rasterio (and its error)
        return False


def _chunks(tf, size: int) -> tuple[tuple, tuple, tuple[int, int], bool]:
    """(offsets, byte counts, (width, height), whole) of the first image; none known where tifffile cannot
    tell them (the image is then not proven whole, and not found truncated)."""
    try:
        page = tf.pages.first if hasattr(tf.pages, "first") else tf.pages[0]
        offsets, counts = tuple(page.dataoffsets), tuple(page.databytecounts)
        shape = (int(page.imagewidth), int(page.imagelength))
        return offsets, counts, shape, _whole(page, offsets, counts, size)
    except Exception:  # noqa: BLE001 - tifffile raises many kinds
        return (), (), (0, 0), False


def _geo(tf):
    """The first image's `geotags.GeoTags` (None: none, or not in a form read one way)."""
    from .geotags import geo_tags, page_value

    try:
        return geo_tags(page_value(tf.pages.first if hasattr(tf.pages, "first") else tf.pages[0]))
    except Exception:  # noqa: BLE001 - tags tifffile cannot read: GDAL's open decides
        return None


def _whole(page, offsets: tuple, counts: tuple, size: int) -> bool:
    """Every chunk the first image's size needs is listed, non-empty and inside the file, in a plain codec."""
    if int(page.compression) not in PLAIN_CODECS or int(getattr(page, "imagedepth", 1) or 1) != 1:
        return False
    width, height = int(page.imagewidth), int(page.imagelength)
    planes = int(page.samplesperpixel) if int(page.planarconfig) == 2 else 1
    if page.is_tiled:
        tw, th = int(page.tilewidth), int(page.tilelength)
        if tw < 1 or th < 1:
            return False
        need = -(-width // tw) * -(-height // th) * planes
    else:
        rows = int(page.rowsperstrip) or height
        need = -(-height // min(max(rows, 1), max(height, 1))) * planes
    return (width >= 1 and height >= 1 and len(offsets) == need == len(counts)
            and all(c > 0 for c in counts) and all(o > 0 for o in offsets)
            and max(o + c for o, c in zip(offsets, counts)) <= size)
