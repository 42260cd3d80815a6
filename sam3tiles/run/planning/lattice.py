"""The lattice of a map (issue 52): one CRS, pixel size and origin that every file of the map is read on.

`run.planning.maps` groups the files; this module says where their footprints lie in one CRS (`with_frame`: so files
of two CRSs can be neighbours), which lattice a map takes (`choose_lattice`, the rule docs/many-files.md
states and the report repeats), and where each file lies on it (`place`: whole-pixel offsets for a file on
the lattice, a box on it and a `readers.warp.Warp` for one off it).
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from typing import Sequence

from affine import Affine

from ...readers.remote import source_name
from ...readers.warp import RESAMPLING, Warp, box_on, pixel_on
from ...wording import opt, spoken

#: Pixel sizes that differ by at most this share are one (a file on the lattice).
PIXEL_TOLERANCE = 1e-6
#: Grid origins within this many pixels of a whole-pixel offset lie on one pixel lattice.
LATTICE_TOLERANCE = 1e-3
#: Pixel sizes (in the map's CRS) within this share of each other count as one when the lattice is chosen.
SAME_PIXEL = 0.01
#: A map takes its finest file's pixel size where it is more than this ratio finer than the most area's.
FINER_RATIO = 1.2


@dataclass(frozen=True)
class Lattice:
    """A map's lattice: its CRS (rasterio), pixel size (x, y; positive), the corner of one of its pixels
    (x, y) and, in words, how it was chosen."""

    crs: object
    pixel: tuple[float, float]
    origin: tuple[float, float]
    rule: str

    @property
    def affine(self) -> Affine:
        return Affine(self.pixel[0], 0.0, self.origin[0], 0.0, -self.pixel[1], self.origin[1])


def crs_name(crs) -> str:
    return crs.to_string() if crs is not None else "no CRS"


def user_crs(text: str):
    """`--crs` as a rasterio CRS."""
    from rasterio.crs import CRS

    return CRS.from_user_input(text)


def ground_m2(h) -> float:
    """A file's footprint area on the ground, square metres (its bounds in lon/lat; about)."""
    from rasterio.warp import transform_bounds

    x0, y0, x1, y1 = transform_bounds(h.crs, "EPSG:4326", *h.bounds, densify_pts=5)
    lat = math.radians((y0 + y1) / 2)
    return abs(x1 - x0) * 111320.0 * math.cos(lat) * abs(y1 - y0) * 110574.0


def most_ground(headers: Sequence) -> tuple[object, float]:
    """(the CRS whose files cover most ground, its share); ties: the first file's."""
    areas: dict = {}
    for h in headers:
        key = h.crs.to_wkt()
        areas.setdefault(key, [h.crs, 0.0])[1] += ground_m2(h)
    total = sum(a for _, a in areas.values()) or 1.0
    crs, area = max(areas.values(), key=lambda v: v[1])  # max keeps the first of equals
    return crs, area / total


def frame_crs(headers: Sequence, crs_text: str | None):
    """The CRS the run compares footprints in: `--crs`, else the one CRS of the georeferenced files, else the
    CRS covering most ground; None when no file has a CRS."""
    geo = [h for h in headers if h.crs is not None and h.kind == "raster"]
    if crs_text:
        return user_crs(crs_text)
    if not geo:
        return None
    return geo[0].crs if len(distinct_wkts(h.crs for h in geo)) == 1 else most_ground(geo)[0]


def distinct_wkts(crss) -> set:
    """The WKT of each distinct CRS among `crss` (None kept as None), each CRS object written once: the
    files of one georeference share theirs (`readers.georef`), and a WKT costs ~30 us (1,024 files)."""
    seen = {id(c): c for c in crss}
    return {None if c is None else c.to_wkt() for c in seen.values()}


def with_frame(headers: Sequence, crs_text: str | None) -> list:
    """The headers with their footprints in the frame CRS (`Header.box`), for the georeferenced rasters."""
    from rasterio.warp import transform_bounds

    frame = frame_crs(headers, crs_text)
    out = []
    for h in headers:
        if frame is None or h.crs is None or h.kind != "raster":
            out.append(h)
            continue
        box = h.bounds if h.crs is frame or h.crs == frame else \
            transform_bounds(h.crs, frame, *h.bounds, densify_pts=21)
        out.append(dataclasses.replace(h, box=tuple(box)))
    return out


def choose_lattice(headers: Sequence, crs_text: str | None = None) -> Lattice:
    """The lattice of a map of `headers` (in the map's order): the rule of the module doc."""
    if crs_text:
        crs, why = user_crs(crs_text), spoken(f"the CRS asked for ({opt('crs', crs_text)})")
    elif len(distinct_wkts(h.crs for h in headers)) == 1:
        crs, why = headers[0].crs, "the files' CRS"
    else:
        crs, share = most_ground(headers)
        why = f"the CRS covering most of the area ({share:.0%})"
    pixels = [pixel_on(h.crs, h.transform, h.width, h.height, crs) for h in headers]
    areas = [p[0] * p[1] * h.width * h.height for p, h in zip(pixels, headers)]
    native = [h.crs == crs for h in headers]
    size = [math.sqrt(p[0] * p[1]) for p in pixels]
    buckets: list[list[int]] = []  # files of about one pixel size, first-come
    for i in range(len(headers)):
        b = next((b for b in buckets if abs(size[i] / size[b[0]] - 1) <= SAME_PIXEL), None)
        b.append(i) if b is not None else buckets.append([i])
    most = max(buckets, key=lambda b: sum(areas[i] for i in b))
    finest = min(range(len(headers)), key=lambda i: (size[i], not native[i], i))
    if size[most[0]] / size[finest] > FINER_RATIO:
        pick = finest
        pix_why = f"the finest (more than {FINER_RATIO:g}x finer than the pixel size covering most of the area)"
    else:
        pick = next((i for i in most if native[i]), most[0])
        pix_why = "the pixel size covering most of the area"
    pixel = pixels[pick]
    anchor = next((i for i in range(len(headers)) if native[i] and _same_pixel(headers[i].pixel, pixel)), None)
    if anchor is not None:
        t = headers[anchor].transform
        origin, where = (t.c, t.f), f"origin on {os.path.basename(source_name(headers[anchor].path))}"
    else:
        origin, where = (0.0, 0.0), "origin on multiples of the pixel size"
    rule = f"CRS {crs_name(crs)}: {why}; pixel {pixel[0]:.4g} x {pixel[1]:.4g}: {pix_why}; {where}"
    return Lattice(crs, pixel, origin, rule)


def _same_pixel(a, b) -> bool:
    return all(abs(x - y) <= PIXEL_TOLERANCE * abs(y) for x, y in zip(a, b))


def on_lattice(h, lat: Lattice) -> bool:
    """Whether file `h` lies on `lat` as it is (its CRS, pixel size and a whole-pixel offset)."""
    if h.crs != lat.crs or not _same_pixel(h.pixel, lat.pixel):
        return False
    t = h.transform
    dx, dy = (t.c - lat.origin[0]) / lat.pixel[0], (lat.origin[1] - t.f) / lat.pixel[1]
    return abs(dx - round(dx)) <= LATTICE_TOLERANCE and abs(dy - round(dy)) <= LATTICE_TOLERANCE


def place(h, lat: Lattice) -> tuple[tuple[int, int, int, int], Warp | None]:
    """File `h` on lattice `lat`: (its box (col0, row0, col1, row1) in `lat`'s pixels, its warp or None)."""
    if on_lattice(h, lat):
        t = h.transform
        c = round((t.c - lat.origin[0]) / lat.pixel[0])
        r = round((lat.origin[1] - t.f) / lat.pixel[1])
        return (c, r, c + h.width, r + h.height), None
    box = box_on(h.crs, h.bounds, lat.crs, lat.affine)
    return box, Warp(crs_name(h.crs), h.crs.to_wkt(), h.pixel, h.width, h.height, RESAMPLING)
