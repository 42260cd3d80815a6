"""The grid of a growing map (issue 52): a rerun over an archive that grew keeps every tile where it was.

A run records, in its work folder (`workfolder.GRIDS`), where each georeferenced map's grid lies: the CRS,
pixel size, tile side, overlap and scale, the CRS point of its first tile's top-left (its *anchor*) and the
map's bounds. A later run of the same work folder over a map of many files (a mosaic) that meets a recorded
map on that lattice lays its grid from the recorded anchor: the mosaic gets a margin of holes before its
first file (`grid.lattice_offset` pixels, under one stride) so that its tile origins fall a whole number of
strides from the anchor, wherever files were added (west and north included). Its tiles over unchanged files
then hold the same pixels at the same place, and their checkpoints (keyed on place and pixels,
`checkpoint.tile_place`, `checkpoint.pixels_identity`) are reused.

Choices: a map's first run lays its grid from its own top-left, as before (no tile more than the files need;
an anchor fixed in the CRS would cost up to a row and a column of tiles on every map); a single file is never
shifted nor recorded (its grid and checkpoints stay as they were: a mosaic it grows into recomputes its tiles
once); `--fresh` recomputes every tile on the recorded grid (a new work folder lays a new one).
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

from ..options import Options
from ..readers.mosaic import MosaicPath, layout_of
from ..tiling.grid import lattice_offset

#: Pixel sizes of a map and a record that differ by at most this share are one.
PIXEL_TOLERANCE = 1e-6


def grid_record(inp) -> dict | None:
    """The record of a planned map's grid (`plan.InputPlan`), None for a map no later run anchors to: a single
    file (its tiles' keys name the file, not members: a mosaic it grows into recomputes them once), no CRS,
    squashed."""
    t, g = inp.transform, inp.grid
    if layout_of(inp.path) is None or inp.crs is None or g is None or t.b != 0 or t.d != 0:
        return None
    return {"crs": inp.crs.to_wkt(), "pixel": [t.a, t.e], "tile": g.tile_size, "overlap": g.overlap,
            "scale": g.scale, "anchor": [t.c, t.f], "bounds": list(inp.bounds)}


def _numbers(v, n: int) -> bool:
    return isinstance(v, list) and len(v) == n and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                                       for x in v)


def _sound(rec) -> bool:
    """A record as `grid_record` writes it (a damaged or foreign one is ignored)."""
    return (isinstance(rec, dict) and isinstance(rec.get("crs"), str) and _numbers(rec.get("pixel"), 2)
            and _numbers(rec.get("anchor"), 2) and _numbers(rec.get("bounds"), 4)
            and _numbers([rec.get("tile"), rec.get("overlap"), rec.get("scale")], 3))


def same_crs(a: str, b: str) -> bool:
    """Two CRSs (WKT) that are one: the same text, or equal as rasterio reads them."""
    if a == b:
        return True
    from rasterio.crs import CRS
    from rasterio.errors import CRSError

    try:
        return CRS.from_wkt(a) == CRS.from_wkt(b)
    except CRSError:
        return False


def _same_lattice(rec: dict, crs: str, pixel: Sequence[float], opts: Options) -> bool:
    return (_sound(rec) and all(abs(p - q) <= PIXEL_TOLERANCE * abs(q) for p, q in zip(rec["pixel"], pixel))
            and (rec["tile"], rec["overlap"], rec["scale"]) == (opts.tile_size, opts.overlap, opts.scale)
            and same_crs(rec["crs"], crs))


def _meet(a: Sequence[float], b: Sequence[float]) -> float:
    """How much two boxes (minx, miny, maxx, maxy) share: their common area, or a tiny positive number when
    they only touch; -1 when they are apart."""
    w, h = min(a[2], b[2]) - max(a[0], b[0]), min(a[3], b[3]) - max(a[1], b[1])
    return -1.0 if w < 0 or h < 0 else max(w * h, 1e-300)


def anchor_map(path, records: Sequence[dict], opts: Options):
    """`path` laid on the recorded grid it grew from: a mosaic whose bounds meet a record of its lattice (the one
    it shares most area with) gets the margin that puts its tiles on that grid; any other path as given."""
    lay = layout_of(path)
    if lay is None or not records or opts.squash or opts.gsd:
        return path
    a, _, c, _, e, f = lay.transform[:6]
    bounds = (c, f + e * lay.height, c + a * lay.width, f)
    fits = [(_meet(r["bounds"], bounds), r) for r in records if _same_lattice(r, lay.crs, (a, e), opts)]
    fits = [(m, r) for m, r in fits if m > 0]
    if not fits:
        return path
    rec = max(fits, key=lambda mr: mr[0])[1]
    stride = opts.tile_size - opts.overlap
    dc = lattice_offset(c, rec["anchor"][0], a, stride, rec["scale"])
    dr = lattice_offset(f, rec["anchor"][1], e, stride, rec["scale"])
    if dc is None or dr is None:
        return path
    if (dc, dr) == (0, 0):
        return MosaicPath(str(path), lay)
    members = tuple(dataclasses.replace(m, col=m.col + dc, row=m.row + dr) for m in lay.members)
    t = (a, 0.0, c - dc * a, 0.0, e, f - dr * e)
    grown = dataclasses.replace(lay, members=members, width=lay.width + dc, height=lay.height + dr, transform=t,
                                nodata=True)
    return MosaicPath(str(path), grown)


def kept_records(old: Sequence[dict], planned: Sequence) -> list[dict]:
    """The records a run leaves: each planned map's, and the earlier ones no planned map of their CRS meets (maps
    this run did not touch; a map that grew replaces its record)."""
    new = [r for r in (grid_record(i) for i in planned) if r is not None]
    keep = [r for r in old if _sound(r) and not any(
        _meet(r["bounds"], n["bounds"]) > 0 and same_crs(r["crs"], n["crs"]) for n in new)]
    return new + keep
