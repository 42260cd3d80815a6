"""Which inputs form one map (issues 38, 52): headers read in parallel, footprints indexed, files grouped, each
group of several files a mosaic (`readers.mosaic`) on one lattice. The rules, as docs/many-files.md states them:

* **Pieces of one map** (compatible): georeferenced rasters read by GDAL (not slides, not pixel space), no
  rotation, the same bands and data type. CRS and pixel size may differ: files off the map's lattice are
  read warped onto it (`readers.warp`). Footprints are compared in one CRS (`frame_crs`: `--crs`, else the
  CRS covering most of the ground: `lattice.with_frame`).
* **The map's lattice** (`lattice.choose_lattice`): its CRS is `--crs`, else the CRS covering most of the map's
  ground; its pixel size the one covering most of its area (sizes within `SAME_PIXEL` counted as one), or
  the finest where that is more than `FINER_RATIO` finer (no file's detail is thrown away); its origin the
  first file on that CRS and pixel size, else multiples of the pixel size. Files on it (pixel sizes within
  `PIXEL_TOLERANCE`, origins whole pixels apart within `LATTICE_TOLERANCE`) are read as they are.
* **The same ground** (never one map): two compatible files of which one holds at least `SAME_GROUND` of
  the smaller's area (two dates of one area), or two STAC items of different days. They stay separate
  images, each with its own objects and `source`; one date's pixels never hide another's.
* **Grouping.** Files in a stable order: STAC items by their datetime, then the rest as given. Each file
  joins the first map it touches or overlaps (within half a pixel) that holds no file of the same ground
  for it; a file that touches several such maps joins them into one, unless that would put two files of
  the same ground in one map. Otherwise it starts a map. A map of one file is a plain input, as before
  (unless `--crs` names another CRS: then a map of one warped file).
* **Thousands of files.** Headers (no pixels but the two a GeoTIFF's open probes where its byte ranges do not
  prove it whole) are read by `HEADER_THREADS` threads (fewer for local files), footprints go into one
  STRtree, and each file is compared with the files its footprint meets only: planning grows linearly with
  the file count.

`--no-mosaic` (`Options.no_mosaic`) keeps one input at a time, as before issue 38, with a warning when
inputs touch (objects at file edges are cut or doubled then).
"""

from __future__ import annotations

import logging
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
from affine import Affine

from ...options import Options
from ...readers import gdal_env, open_source
from ...readers.georef import Georefs
from ...readers.identity import file_stamp, local_path_of
from ...readers.mosaic import SEPARATOR, Layout, Member, MosaicPath, mosaic_name
from ...readers.remote import source_name
from ...wording import opt, spoken
from ..recording.report import lattice_lines
from .lattice import Lattice, choose_lattice, crs_name, on_lattice, place, with_frame
from .preflight import check_input, check_vrt_cycle

log = logging.getLogger(__name__)

#: Threads that read the inputs' headers at planning: remote files wait on the network. A local file's header
#: is CPU bound, and most of it under the GIL (rasterio's open holds it while GDAL opens the file): at most
#: `LOCAL_HEADER_THREADS_PER_CPU` a core for local files (1,024 files on 2 cores: plan 3.8-4.2 s with 16
#: threads, 3.4-3.8 s with 4, 3.5 s with 2).
HEADER_THREADS = 16
LOCAL_HEADER_THREADS_PER_CPU = 2
#: Files a header thread reads in one GDAL configuration (`read_headers`).
HEADER_RUN = 16
#: Two files of which one holds at least this share of the smaller's area cover the same ground.
SAME_GROUND = 0.5
#: Lines of notes the plan shows about files that touch but are not one map.
MAX_NOTES = 5


@dataclass(frozen=True)
class Header:
    """What grouping reads of one input: its frame, size, bands, kind, files and STAC datetime."""

    path: str
    crs: object  # rasterio CRS or None
    transform: object  # Affine
    width: int
    height: int
    bands: tuple[int, ...]
    band_count: int
    dtype: str
    kind: str
    nodata: bool  # some pixel may be nodata
    files: tuple[str, ...]
    when: str | None = None  # the STAC item's datetime (ISO), for an input that came from one
    box: tuple | None = None  # its bounds in the run's frame CRS (`frame_crs`), where it has a CRS
    stamps: tuple = ()  # its files' `file_stamp`s, taken as its header was read (one of many inputs), else ()
    no_siblings: bool = False  # a GeoTIFF with no file beside it that GDAL looks for (`Georefs.without_siblings`)

    @property
    def day(self) -> str | None:
        return self.when[:10] if self.when else None

    @property
    def bounds(self) -> tuple[float, float, float, float]:
        t = self.transform
        xs = (t.c, t.c + t.a * self.width)
        ys = (t.f, t.f + t.e * self.height)
        return (min(xs), min(ys), max(xs), max(ys))

    @property
    def pixel(self) -> tuple[float, float]:
        return (abs(self.transform.a), abs(self.transform.e))

    def alone(self) -> str | None:
        """Why this file can be no piece of a map (None: it can)."""
        t = self.transform
        if self.kind != "raster" or self.crs is None:
            return "no map CRS"
        if t.b != 0 or t.d != 0 or t.a <= 0 or t.e >= 0:
            return "a rotated or flipped grid"
        if SEPARATOR in source_name(self.path):
            return f"its name holds {SEPARATOR.strip()!r}, which joins a mosaic's file names in `source`"
        return None


@dataclass
class MapGroup:
    """One map: the inputs (indices into the expanded inputs, in the map's order) and what to plan (the
    input's path, or the mosaic's `MosaicPath`)."""

    members: list[int]
    path: str = ""


@dataclass
class Grouping:
    """The maps of a run, and the plan's notes on them (files that touch but are not one map, and why)."""

    maps: list[MapGroup]
    notes: list[str] = field(default_factory=list)
    stamps: dict = field(default_factory=dict)  # file -> its `file_stamp` as its header was read (`Header.stamps`)


def read_header(path: str, opts: Options, when: str | None = None, many: bool = False,
                georefs: Georefs | None = None) -> Header:
    """One input's header (the pre-flight's checks of it: unreadable, bands, placeable); `many`: one of many
    inputs (`env.MANY_FILES`), whose local files are stamped here too, once opened (`Header.stamps`, used where
    they form a mosaic: the hashing of their content samples runs beside the other threads' opens, which hold
    the GIL); `georefs`: the georeferences the other headers' GeoTIFFs had (`readers.georef`)."""
    with gdal_env(many_files=many):  # each header thread enters the run's GDAL configuration
        return _header(path, opts, when, many, georefs)


def _header(path: str, opts: Options, when: str | None, many: bool, georefs: Georefs | None,
            no_siblings: bool = False) -> Header:
    """`read_header` in the run's GDAL configuration, entered by the caller (`no_siblings`: as it says)."""
    stamped = many and not opts.no_mosaic and local_path_of(path) is not None  # a URL's: when its map is planned
    check_vrt_cycle(path)
    with open_source(path, bands=opts.bands, stretch=None, georefs=georefs) as src:
        files = tuple(check_input(path, src, opts))
        return Header(path, src.crs, src.transform, int(src.width), int(src.height), tuple(src.bands),
                      int(src.band_count), str(src.dtype), src.kind, bool(src.may_have_nodata()), files, when,
                      stamps=tuple(file_stamp(f) for f in files) if stamped else (), no_siblings=no_siblings)


def read_headers(paths: Sequence[str], opts: Options, dates: dict | None = None) -> list[Header]:
    """Every input's header, `HEADER_THREADS` at a time (local files: `LOCAL_HEADER_THREADS_PER_CPU` a core),
    each thread taking runs of up to `HEADER_RUN` files in one GDAL configuration (entering it cost 0.05 ms of a
    header's 1.2 ms CPU); the first bad input (in the given order) raises its own error, as planning one
    input at a time would."""
    dates = dates or {}
    if len(paths) == 1:
        return [read_header(paths[0], opts, dates.get(paths[0]))]
    threads = HEADER_THREADS
    if all(local_path_of(p) is not None for p in paths):
        threads = min(threads, LOCAL_HEADER_THREADS_PER_CPU * (os.cpu_count() or 1))
    threads = min(threads, len(paths))
    georefs = Georefs()  # a GeoTIFF georeference's CRS looked up by GDAL for its first files only
    step = max(1, min(HEADER_RUN, len(paths) // (4 * threads)))  # at least 4 runs a thread to share the work

    def run(start: int) -> list[Header]:
        part = paths[start:start + step]
        alone = [georefs.without_siblings([p]) for p in part]
        with gdal_env(many_files=True, no_siblings=all(alone)):
            return [_header(p, opts, dates.get(p), True, georefs, a) for p, a in zip(part, alone)]

    with ThreadPoolExecutor(threads, thread_name_prefix="sam3tiles-header") as pool:
        return [h for part in pool.map(run, range(0, len(paths), step)) for h in part]


def group_inputs(paths: Sequence[str], opts: Options, dates: dict | None = None) -> Grouping:
    """The maps `paths` form (see the module doc). One input, or `no_mosaic`: each input its own map
    (`no_mosaic` warns when inputs touch)."""
    if len(paths) == 1 and not opts.crs:
        return Grouping([MapGroup([0], paths[0])])
    headers = with_frame(read_headers(paths, opts, dates), opts.crs)
    if opts.no_mosaic:
        _warn_touching(headers)
        return Grouping([MapGroup([i], map_path([h], opts.crs)) for i, h in enumerate(headers)])
    groups, notes = group(headers)
    if any(h.box is not None for h in headers):  # files with no CRS beside georeferenced ones: said
        notes += [f"{h.path}: {h.alone()}: no lattice to share with the georeferenced files, segmented as a map "
                  "of its own" for h in headers if h.box is None and h.alone()][:MAX_NOTES]
    stamps = {f: st for h in headers for f, st in zip(h.files, h.stamps)}
    return Grouping([MapGroup(g, map_path([headers[i] for i in g], opts.crs)) for g in groups], notes, stamps)


def map_path(headers: Sequence[Header], crs_text: str | None) -> str:
    """What a map of `headers` is planned as: a lone file's path (on its own lattice, or with no CRS to warp
    from), else a `MosaicPath` on the map's lattice (`run.planning.lattice`)."""
    if len(headers) == 1:
        h = headers[0]
        if not crs_text or h.alone() or on_lattice(h, lat := choose_lattice(headers, crs_text)):
            if crs_text and h.alone():
                log.warning(spoken(f"{h.path}: {h.alone()}, so {opt('crs', crs_text)} cannot warp it: "
                                   "segmented in its own frame"))
            return h.path
        return mosaic_path(headers, lat)
    return mosaic_path(headers, choose_lattice(headers, crs_text))


def _warn_touching(headers: Sequence[Header]) -> None:
    pairs = [(i, j) for i, j in touching_pairs(headers) if compatible(headers[i], headers[j]) is None]
    if pairs:
        i, j = pairs[0]
        log.warning(spoken(f"{len(pairs)} pair(s) of inputs touch or overlap (e.g. {headers[i].path} and "
                           f"{headers[j].path}): with {opt('no_mosaic')} each input is segmented alone, so objects "
                           f"at file edges will be cut or doubled; leave {opt('no_mosaic')} out to segment them as "
                           "one map"))


def _frame(h: Header) -> tuple:
    """The space a file's footprint is compared in: the run's frame CRS, or (none there) its own CRS."""
    return ("frame",) if h.box is not None else ("own", h.crs.to_wkt() if h.crs is not None else None)


def touching_pairs(headers: Sequence[Header]) -> list[tuple[int, int]]:
    """(i, j), i < j: files whose footprints touch or overlap (within half a pixel), from one STRtree; in the
    run's frame CRS where they have one (`Header.box`), else only files of one CRS (footprints in two CRSs are
    not comparable: such files are never neighbours)."""
    import shapely

    bx = np.asarray([h.box or h.bounds for h in headers], dtype=np.float64).reshape(-1, 4)
    tree = shapely.STRtree(shapely.box(*bx.T))
    half = np.asarray([(b[2] - b[0]) / h.width / 2 if h.crs is not None else 0.0 for b, h in zip(bx, headers)])
    grown = shapely.box(bx[:, 0] - half, bx[:, 1] - half, bx[:, 2] + half, bx[:, 3] + half)  # a box grown by half
    a, b = tree.query(grown, predicate="intersects")
    return sorted({(int(i), int(j)) for i, j in zip(a, b) if i < j and _frame(headers[i]) == _frame(headers[j])})


def compatible(a: Header, b: Header) -> str | None:
    """Why `a` and `b` can be no pieces of one map (None: they can)."""
    why = a.alone() or b.alone()
    if why:
        return why
    if (a.box is None or b.box is None) and a.crs != b.crs:
        return f"other CRSs ({each(a, a.crs.to_string(), b, b.crs.to_string())})"
    if (a.bands, a.band_count, a.dtype) != (b.bands, b.band_count, b.dtype):
        kinds = (f"{a.band_count} band(s) {a.dtype}", f"{b.band_count} band(s) {b.dtype}")
        return (f"other bands or data types ({each(a, kinds[0], b, kinds[1])})"
                if (a.band_count, a.dtype) != (b.band_count, b.dtype) else "other bands chosen")
    return None  # another pixel size or lattice: read warped onto the map's (`run.planning.lattice`)


def each(a: Header, va: str, b: Header, vb: str) -> str:
    """Two files' values, each named by its file (a note names both files: the values never trade places)."""
    return f"{os.path.basename(source_name(a.path))} {va}, {os.path.basename(source_name(b.path))} {vb}"


def same_ground(a: Header, b: Header) -> str | None:
    """Why two compatible files that touch are not pieces of one map but the same ground (None: they are
    pieces): most of one lies inside the other, or they are STAC items of different days."""
    if a.day and b.day and a.day != b.day:
        return f"STAC items of different days ({a.day}, {b.day})"
    (ax0, ay0, ax1, ay1), (bx0, by0, bx1, by1) = a.box or a.bounds, b.box or b.bounds
    inter = max(0.0, min(ax1, bx1) - max(ax0, bx0)) * max(0.0, min(ay1, by1) - max(ay0, by0))
    smaller = min((ax1 - ax0) * (ay1 - ay0), (bx1 - bx0) * (by1 - by0))
    if smaller > 0 and inter >= SAME_GROUND * smaller:
        return f"the same ground ({inter / smaller:.0%} of the smaller inside the other: two dates?)"
    return None


def map_order(headers: Sequence[Header]) -> list[int]:
    """The stable order files join maps in: STAC items by datetime, then the rest as given."""
    return sorted(range(len(headers)), key=lambda i: (headers[i].when is None, headers[i].when or "", i))


class _Maps:
    """Maps being grouped: union-find over files, each root's days and the maps it must never join."""

    def __init__(self, n: int):
        self.parent = list(range(n))
        self.days: dict[int, set] = {}
        self.avoid: dict[int, set] = {}

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def start(self, i: int, day: str | None, avoid: set) -> None:
        self.days[i] = {day} - {None}
        self.avoid[i] = set(avoid)
        for g in avoid:
            self.avoid[g].add(i)

    def may_join(self, g: int, day: str | None, avoid: set) -> bool:
        return g not in avoid and (day is None or self.days[g] <= {day})

    def add(self, g: int, i: int, day: str | None, avoid: set) -> None:
        self.parent[i] = g
        self.days[g] |= {day} - {None}
        self.avoid[g] |= avoid
        for a in avoid:
            self.avoid[a].add(g)

    def merge(self, g: int, h: int) -> bool:
        """Map `h` into map `g`, unless they must stay apart."""
        if h in self.avoid[g] or len(self.days[g] | self.days[h]) > 1:
            return False
        self.parent[h] = g
        self.days[g] |= self.days.pop(h)
        for a in self.avoid.pop(h):
            self.avoid[a].discard(h)
            self.avoid[a].add(g)
            self.avoid[g].add(a)
        return True


def group(headers: Sequence[Header]) -> tuple[list[list[int]], list[str]]:
    """The maps (lists of indices into `headers`, each in the map order; maps in the order of their first
    file) and notes on touching files kept apart (see the module doc)."""
    order = map_order(headers)
    rank = {i: r for r, i in enumerate(order)}
    neighbours: dict[int, list[int]] = {i: [] for i in range(len(headers))}
    for i, j in touching_pairs(headers):
        neighbours[i].append(j)
        neighbours[j].append(i)
    maps, notes, done = _Maps(len(headers)), [], set()
    for i in order:
        h = headers[i]
        near = sorted((j for j in neighbours[i] if j in done), key=rank.__getitem__)
        pieces, avoid = [], set()
        for j in near:
            why = compatible(headers[j], h) or same_ground(headers[j], h)  # in the order the note names them
            if why is None:
                pieces.append(j)
            else:
                notes.append(f"{headers[j].path} and {h.path} touch but are not one map: {why}")
                if compatible(headers[j], h) is None:
                    avoid.add(maps.find(j))
        _place(maps, i, h.day, avoid, list(dict.fromkeys(maps.find(j) for j in pieces)))
        done.add(i)
    by_root: dict[int, list[int]] = {}
    for i in order:
        by_root.setdefault(maps.find(i), []).append(i)
    if len(notes) > MAX_NOTES:
        notes = notes[:MAX_NOTES] + [f"... and {len(notes) - MAX_NOTES} more pairs of touching files kept apart"]
    return list(by_root.values()), notes


def _place(maps: _Maps, i: int, day: str | None, avoid: set, candidates: list[int]) -> None:
    """File `i` joins the first candidate map it may, which then takes in the others it may; or starts one."""
    target = next((g for g in candidates if maps.may_join(g, day, avoid)), None)
    if target is None:
        maps.start(i, day, avoid)
        return
    maps.add(target, i, day, avoid)
    for g in candidates:
        g = maps.find(g)
        if g != target:
            maps.merge(target, g)


def mosaic_path(headers: Sequence[Header], lat: Lattice | None = None) -> MosaicPath:
    """The `MosaicPath` of a map of files (in the map's order) on lattice `lat` (default: the rule's,
    `run.planning.lattice.choose_lattice`): its origin at the union's top-left, each file at its whole-pixel offset or
    (off the lattice) warped onto its box."""
    lat = lat or choose_lattice(headers)
    placed = [place(h, lat) for h in headers]
    c0 = min(b[0] for b, _ in placed)
    r0 = min(b[1] for b, _ in placed)
    members = tuple(Member(h.path, b[0] - c0, b[1] - r0, b[2] - b[0], b[3] - b[1], h.files, warp,
                           alone=h.no_siblings and warp is None, nodata=h.nodata)
                    for h, (b, warp) in zip(headers, placed))
    width = max(m.col + m.width for m in members)
    height = max(m.row + m.height for m in members)
    t = lat.affine @ Affine.translation(c0, r0)
    covered = coverage(members, width, height)[0] >= width * height
    valid = not any(h.nodata for h in headers) and not any(m.warp for m in members)
    layout = Layout(members, width, height, tuple(t)[:6], lat.crs.to_wkt(), headers[0].bands,
                    headers[0].band_count, headers[0].dtype, nodata=not (covered and valid), members_valid=valid,
                    rule=lat.rule)
    name = mosaic_name([h.path for h in headers]) if len(headers) > 1 else \
        f"{headers[0].path} warped to {crs_name(lat.crs)}"
    return MosaicPath(name, layout)


def coverage(members: Sequence[Member], width: int, height: int) -> tuple[float, float]:
    """(pixels some file covers, pixels several files cover) of a mosaic's `width` x `height` grid."""
    import shapely

    boxes = shapely.box(*np.asarray([(m.col, m.row, m.col + m.width, m.row + m.height) for m in members],
                                    dtype=np.float64).T)
    union = float(shapely.area(shapely.union_all(boxes)))
    return union, float(shapely.area(boxes).sum()) - union


def paths_of(path) -> tuple[str, ...]:
    """The files of a map: a mosaic's members, or the input itself."""
    from ...readers.mosaic import layout_of

    lay = layout_of(path)
    return lay.paths if lay is not None else (str(path),)



# -- what the plan and the report say ----------------------------------------------------------------------

def one_at_a_time(layout: Layout, grid) -> int:
    """The tiles a mosaic's files would cost segmented one at a time, on the mosaic's tiling (`grid`; None:
    squashed, one a file)."""
    from ...tiling.grid import TileGrid

    if grid is None:
        return len(layout.members)
    return sum(len(TileGrid(m.width, m.height, scale=grid.scale, tile_size=grid.tile_size, overlap=grid.overlap))
               for m in layout.members)


def hole_tiles(layout: Layout, grid) -> int:
    """Grid tiles whose window touches no file of the mosaic (skipped without a read). Each file marks the
    rows and columns of tiles its box meets: members x (rows + cols), not members x tiles."""
    rows, cols = grid.shape
    covered = np.zeros((rows, cols), bool)
    w, h = grid.scaled_wh
    x0 = np.arange(cols) * grid.stride
    y0 = np.arange(rows) * grid.stride
    x1 = np.minimum(x0 + grid.tile_size, np.ceil(w - 1e-9))
    y1 = np.minimum(y0 + grid.tile_size, np.ceil(h - 1e-9))
    for c0, r0, c1, r1 in layout.boxes * grid.scale:
        cs = np.flatnonzero((x0 < c1) & (x1 > c0))
        rs = np.flatnonzero((y0 < r1) & (y1 > r0))
        if len(cs) and len(rs):
            covered[rs[0]:rs[-1] + 1, cs[0]:cs[-1] + 1] = True
    return int((~covered).sum())


def map_facts(inp) -> dict:
    """A planned map (`plan.InputPlan`) for the plan and the report: its files, tiles, and for a mosaic its
    holes and overlaps (shares of its area) and the tiles its files would cost one at a time."""
    from ...readers.mosaic import layout_of

    lay = layout_of(inp.path)
    f = inp.frame  # the files' extent (an anchored grid's margin is no part of the map: `plan.InputPlan.frame`)
    facts = {"map": str(inp.path), "files": len(inp.paths), "crs": inp.crs.to_string() if inp.crs else None,
             "width": f.width, "height": f.height, "tiles": inp.n_tiles}
    if lay is None:
        return facts
    covered, overlap = coverage(lay.members, lay.width, lay.height)
    area = float(f.width * f.height)
    return {**facts, "mosaic": True, "tiles_one_at_a_time": one_at_a_time(lay, inp.grid),
            "hole_tiles": hole_tiles(lay, inp.grid) if inp.grid is not None else 0,
            "holes": round(1 - covered / area, 4), "overlaps": round(overlap / area, 4),
            "lattice": lay.rule, "paths": list(lay.paths), "warped": warped_files(lay, facts["crs"])}


def warped_files(lay: Layout, crs: str | None) -> list[dict]:
    """The files of a map read warped onto its lattice (`readers.warp`), and how."""
    pixel = (abs(lay.transform[0]), abs(lay.transform[4]))
    return [{"file": m.path, "from": m.warp.crs, "to": crs, "pixel_from": list(m.warp.pixel), "pixel_to": list(pixel),
             "resampling": m.warp.resampling, "how": m.warp.describe(str(crs), pixel)}
            for m in lay.members if m.warp is not None]


def mosaic_line(inp) -> str:
    """One line of the plan for a mosaic (`plan.InputPlan.describe`)."""
    f = map_facts(inp)
    stretch = "" if inp.stretch is None else f", stretched {inp.stretch.lo[0]:g}..{inp.stretch.hi[0]:g}"
    holes = f", {f['hole_tiles']} over holes only (skipped unread)" if f["hole_tiles"] else ""
    warped = f"; {len(f['warped'])} of its {f['files']} files warped onto its lattice" if f["warped"] else ""
    return "\n".join([f"{inp.path}: {f['width']} x {f['height']} px, bands "
                      f"{','.join(map(str, inp.bands))} {inp.dtype}{stretch}, {f['crs']}: {inp.n_tiles} tile(s){holes} "
                      f"({f['tiles_one_at_a_time']} one file at a time); holes {f['holes']:.1%}, overlaps "
                      f"{f['overlaps']:.1%} of its area{warped}", *lattice_lines(f, "    ")])


def map_lines(inputs: Sequence, notes: Sequence[str] = ()) -> list[str]:
    """The plan's first lines: the inputs, and when files were grouped, the maps they form (in how many
    CRSs) and the notes on files kept apart."""
    files = sum(len(i.paths) for i in inputs)
    crss = list(dict.fromkeys(i.crs.to_string() if i.crs else "no CRS" for i in inputs))
    if files == len(inputs) and not notes:
        return [f"inputs: {len(inputs)}"]
    mosaics = sum(len(i.paths) > 1 for i in inputs)
    head = f"inputs: {files} files as {len(inputs)} map(s), {mosaics} of them mosaic(s) of several files"
    if len(crss) > 1:
        head += f"; {len(crss)} CRSs ({', '.join(crss[:4])}{', ...' if len(crss) > 4 else ''}): one map or more each"
    return [head, *(f"  kept apart: {n}" for n in notes)]
