"""The tags of a TIFF's first image directory, read with `struct` (issue 48: tifffile's parse of a 300 px
GeoTIFF's header took 0.2 ms CPU of a planned file's 1.1 ms, most of it the Python objects of every tag).

`first_ifd` reads classic and BigTIFF files of either byte order and gives the values of the tags asked
for: numbers as tuples, ASCII and undefined bytes as bytes. Anything it does not read plainly (an offset
past the end, an unknown type, a directory of more than `MAX_TAGS` entries) gives None: the caller then
parses the file with tifffile, as before.
"""

from __future__ import annotations

import struct

#: Entries a first directory may hold to be read here (a plain GeoTIFF has some 20).
MAX_TAGS = 512
#: Bytes read at once from the start of the file (a GDAL-written GeoTIFF's directory and tag values).
HEAD = 1 << 13
#: TIFF type -> (struct code, bytes an item); RATIONAL and SRATIONAL are two integers an item.
_TYPES = {1: ("B", 1), 2: ("s", 1), 3: ("H", 2), 4: ("I", 4), 5: ("II", 8), 6: ("b", 1), 7: ("s", 1),
          8: ("h", 2), 9: ("i", 4), 10: ("ii", 8), 11: ("f", 4), 12: ("d", 8), 13: ("I", 4), 16: ("Q", 8),
          17: ("q", 8), 18: ("Q", 8)}


def first_ifd(fh, size: int, wanted: frozenset) -> dict | None:
    """{tag: value} of the `wanted` tags of the first image directory of the open TIFF `fh` (`size` bytes),
    or None where it is not read plainly (see the module doc)."""
    fh.seek(0)
    buf = fh.read(HEAD)
    if len(buf) < 16 or buf[:2] not in (b"II", b"MM"):
        return None
    bo = "<" if buf[:2] == b"II" else ">"
    magic = struct.unpack_from(bo + "H", buf, 2)[0]
    if magic == 42:
        ifd, count_fmt, entry, inline = struct.unpack_from(bo + "I", buf, 4)[0], "H", 12, 4
    elif magic == 43 and struct.unpack_from(bo + "HH", buf, 4) == (8, 0):
        ifd, count_fmt, entry, inline = struct.unpack_from(bo + "Q", buf, 8)[0], "Q", 20, 8
    else:
        return None
    head = _read(fh, buf, ifd, struct.calcsize(count_fmt), size)
    if head is None:
        return None
    n = struct.unpack(bo + count_fmt, head)[0]
    if not 0 < n <= MAX_TAGS:
        return None
    entries = _read(fh, buf, ifd + len(head), n * entry, size)
    if entries is None:
        return None
    out = {}
    word = "I" if inline == 4 else "Q"
    for k in range(n):
        at = k * entry
        code, kind = struct.unpack_from(bo + "HH", entries, at)
        if code not in wanted:
            continue
        count = struct.unpack_from(bo + word, entries, at + 4)[0]
        if kind not in _TYPES:
            return None
        fmt, item = _TYPES[kind]
        nbytes = count * item
        raw = entries[at + 4 + inline: at + 4 + inline + nbytes] if nbytes <= inline else \
            _read(fh, buf, struct.unpack_from(bo + word, entries, at + 4 + inline)[0], nbytes, size)
        if raw is None or len(raw) != nbytes:
            return None
        out[code] = raw if fmt == "s" else struct.unpack(f"{bo}{count * len(fmt)}{fmt[0]}", raw)
    return out


def _read(fh, buf: bytes, at: int, n: int, size: int) -> bytes | None:
    """`n` bytes at offset `at`: from `buf` (the file's first bytes) where they lie in it, else read; None
    past the end of the file."""
    if at < 8 or at + n > size:
        return None
    if at + n <= len(buf):
        return buf[at:at + n]
    fh.seek(at)
    data = fh.read(n)
    return data if len(data) == n else None
