"""Many rasters that form one map, read as one image: the mosaic reader (issue 38).

A county's orthophotos come as hundreds of adjacent GeoTIFFs, NAIP quarter-quads overlap their neighbours,
a STAC search returns a dozen items of one area. Files of one CRS, pixel size, lattice and bands that touch
(`run.planning.maps` decides which) are read as ONE image, `MosaicSource`, behind the `Source` interface: the tile
grid spans the union of their footprints, a tile reads the files it touches, and the merge sees one image,
so objects come out once and whole across file edges.

* **Grid.** The mosaic's pixel grid is its lattice (`run.planning.maps` chooses it: one CRS, pixel size and origin),
  its origin the union's top-left; each member lies at a whole-pixel offset (`Member.col`, `Member.row`).
  A member on the lattice is read as it is; one of another CRS or pixel size is read warped onto it
  (`Member.warp`, `readers.warp`: its box on the lattice, no data outside its footprint).
* **The overlap rule.** Where several files cover a pixel, the file whose centre is nearest to the pixel
  wins (the least edge distortion: what mosaicking tools' seamlines approximate); a pixel that is nodata
  in that file is read from the next-nearest file that holds data there. Equal distances: the earlier
  file in the map's order. Pixels no file covers (holes between files) are nodata, and a tile of holes
  only reads nothing and is skipped as every all-nodata tile is.
* **Reading.** Our own windowed reader on rasterio, one `RasterSource` per member (its nodata, mask,
  alpha, palette and bands), composing the window by the rule. Why not a GDAL VRT: a VRT paints its sources
  in order (the last wins), so neither the nearest-centre rule nor the nodata fall-back can be said in one,
  and it needs a file written somewhere. A window reads only the members it touches, never a whole file,
  through the process's `members.MemberCache`: members stay open across windows, tasks, readers and threads (a
  file opened per window cost more than its pixels: the open, and the decoded blocks GDAL drops with the
  dataset), at most `open_members()` idle, the least recently used closed first; a GDAL handle is used by one
  thread at a time. Data that is not uint8 gets one stretch for the whole map (`compute_stretch`:
  decimated reads of a sample of members).
* **Its path.** A mosaic's path is a `MosaicPath`: a string that names the map (logs, the report) and
  carries its `Layout`, so every `open_source(path)` (the plan, the read tasks on any worker, the
  quicklook, example boxes) opens the mosaic; it pickles with its layout (workers reopen it).
* **Provenance.** `Ownership.sources`: the members whose owned region (the part of its footprint where it
  is the nearest-centre file) an object meets, in the map's order, joined by `SEPARATOR`. A file whose
  name holds the separator is not mosaicked (`run.planning.maps`), so the joined value always splits back.
* **Checkpoints.** `window_identity`: a tile's pixels come from the members its window touches, so its
  checkpoint identity covers those members only; a changed or added file recomputes the tiles it touches.
"""

from __future__ import annotations

import hashlib
import logging
import math
import itertools
import pickle
import zlib
from collections import OrderedDict
from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import Sequence

import numpy as np
from affine import Affine

from .base import STATS_SIDE, Source, Stretch
from .members import MemberCache, member_cache, open_member
from .raster import RasterSource
from .warp import Warp

log = logging.getLogger(__name__)

#: Joins the files of an object's `source` (a mosaic's): " | " never appears in a mosaicked file's name.
SEPARATOR = " | "
#: Members whose pixels the whole-map stretch samples (non-uint8 data), evenly spread in map order.
STRETCH_SAMPLE = 16


@dataclass(frozen=True)
class Member:
    """One file of a mosaic: its path, its top-left in the mosaic's pixel grid and its size (pixels; a warped
    member's: its box on the map's lattice), and every file its pixels come from (GDAL's list: the raster,
    its .aux.xml, ... for checkpoint identity)."""

    path: str
    col: int
    row: int
    width: int
    height: int
    files: tuple[str, ...] = ()
    warp: Warp | None = None  # on another CRS or lattice: read warped onto the map's (`readers.warp`)
    # how to open it, as its header was read (not in its repr: a tile's checkpoint key holds the repr, and a
    # file's pixels do not depend on how many files were planned with it)
    alone: bool = field(default=False, repr=False)  # a GeoTIFF with no file beside it GDAL looks for (`georef`)
    nodata: bool = field(default=True, repr=False)  # its header: some pixel may be nodata (value, mask, alpha)

    @property
    def centre(self) -> tuple[float, float]:
        """Its centre in the mosaic's pixels (col, row)."""
        return (self.col + self.width / 2, self.row + self.height / 2)


@dataclass(frozen=True, eq=False)
class Layout:
    """A mosaic's grid and its members, in the map's order (the overlap rule's ties, `source`'s order).
    Compared by identity (a map's layout is made once, by the plan)."""

    members: tuple[Member, ...]
    width: int
    height: int
    transform: tuple[float, ...]  # Affine coefficients (a, b, c, d, e, f): mosaic pixel -> CRS
    crs: str  # WKT
    bands: tuple[int, ...]  # as read (1-based)
    band_count: int
    dtype: str
    nodata: bool = True  # some pixel may be nodata (a hole between files, a member's mask)
    members_valid: bool = False  # every member's pixels are valid (no mask, nodata value, alpha; none warped)

    @cached_property
    def no_siblings(self) -> bool:
        """No member has a file beside it that GDAL looks for, as planned (`Member.alone`; `env.NO_SIBLINGS`)."""
        return bool(self.members) and all(m.alone for m in self.members)
    rule: str = ""  # how its lattice was chosen (`run.planning.lattice`), for the plan and the report

    def __getstate__(self):
        return {f.name: getattr(self, f.name) for f in fields(self)}  # not the cached index

    @cached_property
    def boxes(self) -> np.ndarray:
        """[n, 4] float64: each member's (col0, row0, col1, row1) in the mosaic's pixels."""
        return np.asarray([(m.col, m.row, m.col + m.width, m.row + m.height) for m in self.members],
                          dtype=np.float64).reshape(-1, 4)

    @cached_property
    def overlapping(self) -> bool:
        """Some two members overlap (more than an edge): only then does a read apply the overlap rule."""
        import shapely

        b = self.boxes
        if len(b) < 2:
            return False
        tree = shapely.STRtree(shapely.box(*b.T))
        i, j = tree.query(shapely.box(*b.T), predicate="intersects")
        pair = i < j
        lo = np.maximum(b[i[pair], :2], b[j[pair], :2])
        hi = np.minimum(b[i[pair], 2:], b[j[pair], 2:])
        return bool((hi > lo).all(axis=1).any())

    @cached_property
    def file_spans(self) -> list[tuple[int, int]]:
        """(first, end) of each member's files in the flat list `source_files` gives."""
        out, at = [], 0
        for m in self.members:
            n = len(m.files) or 1
            out.append((at, at + n))
            at += n
        return out

    @property
    def affine(self) -> Affine:
        return Affine(*self.transform[:6])

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(m.path for m in self.members)

    def touching(self, window) -> np.ndarray:
        """Indices of the members a source-pixel window (rasterio Window) overlaps (a shared edge is no
        overlap), in the map's order."""
        x0, y0 = float(window.col_off), float(window.row_off)
        x1, y1 = x0 + float(window.width), y0 + float(window.height)
        b = self.boxes
        return np.flatnonzero((b[:, 0] < x1) & (b[:, 2] > x0) & (b[:, 1] < y1) & (b[:, 3] > y0))

    def footprint(self, k: int):
        """Member `k`'s footprint in the CRS (a shapely box)."""
        import shapely

        return shapely.box(*self.map_boxes[k])

    @cached_property
    def map_boxes(self) -> np.ndarray:
        """[n, 4]: each member's (minx, miny, maxx, maxy) in the CRS."""
        t = self.affine
        b = self.boxes
        xs = np.stack([t.c + t.a * b[:, 0], t.c + t.a * b[:, 2]])
        ys = np.stack([t.f + t.e * b[:, 1], t.f + t.e * b[:, 3]])
        return np.stack([xs.min(0), ys.min(0), xs.max(0), ys.max(0)], axis=1).reshape(-1, 4)

    @cached_property
    def map_centres(self) -> np.ndarray:
        """[n, 2]: each member's centre in the CRS."""
        mb = self.map_boxes
        return np.stack([(mb[:, 0] + mb[:, 2]) / 2, (mb[:, 1] + mb[:, 3]) / 2], axis=1)


class MosaicPath(str):
    """The path of a mosaic: its text names the map (logs, the report); it carries the map's `Layout`, so
    `readers.open_source` opens the mosaic wherever the path goes (a Dask worker unpickles it whole).

    It pickles as its layout compressed (computed once), and a process that unpickled a layout before keeps
    it (`_LAYOUTS`): on a cluster every read task carries the path, 15 KB for 2,000 files instead of 277 KB,
    and a worker turns it back into the layout it has by a look-up instead of an 18 ms unpickling."""

    layout: Layout

    def __new__(cls, name: str, layout: Layout):
        self = super().__new__(cls, name)
        self.layout = layout
        return self

    def __reduce__(self):
        packed = self.__dict__.get("_packed")
        if packed is None:
            blob = zlib.compress(pickle.dumps(self.layout, protocol=pickle.HIGHEST_PROTOCOL))
            packed = self._packed = (hashlib.sha256(blob).hexdigest(), blob)
        return (_unpacked, (str(self), *packed))


#: Layouts this process unpickled, by their digest (the last `KEPT_LAYOUTS`).
_LAYOUTS: OrderedDict[str, Layout] = OrderedDict()
KEPT_LAYOUTS = 8


def _unpacked(name: str, digest: str, blob: bytes) -> MosaicPath:
    lay = _LAYOUTS.get(digest)
    if lay is None:
        lay = pickle.loads(zlib.decompress(blob))
        _LAYOUTS[digest] = lay
        while len(_LAYOUTS) > KEPT_LAYOUTS:
            _LAYOUTS.popitem(last=False)
    return MosaicPath(name, lay)


def layout_of(path) -> Layout | None:
    """The layout of a mosaic's path, None for any other input."""
    return path.layout if isinstance(path, MosaicPath) else None


def mosaic_name(paths: Sequence[str]) -> str:
    """How a mosaic is named in logs and the report: its file count, first and last file."""
    return f"mosaic of {len(paths)} files ({paths[0]} ... {paths[-1]})"


class MosaicSource(Source):
    """A mosaic read as one image (see the module doc). Open with `readers.open_source(mosaic_path)`."""

    def __init__(self, path: MosaicPath, bands: Sequence[int] | None = None, stretch: Stretch | None | str = "auto",
                 identity: str = ""):
        self.path = path  # the MosaicPath itself (the base class would keep its text only)
        self._bands_arg = tuple(bands) if bands else None
        self._stretch_arg = stretch
        self._identity = identity
        self._reset()
        self._open()

    def __getstate__(self):
        return {**super().__getstate__(), "_identity": self._identity}

    def _reset(self) -> None:
        # the members' cache entries are tagged with the map's identity as the run planned it (every member's
        # size, time, content samples): a later reader of the same files takes them over, one of a changed
        # map reopens them. Without one, the entries are this reader's own.
        self._token = self._identity or f"reader-{next(_READERS)}"

    def _open(self) -> None:
        from rasterio.crs import CRS

        lay = self._mosaic = self.path.layout
        self.width, self.height = lay.width, lay.height
        self.crs = CRS.from_wkt(lay.crs) if lay.crs else None
        self.transform = lay.affine
        self.bands = lay.bands
        self.dtype = np.dtype(lay.dtype)
        self.stretch = self._resolve_stretch()

    def close(self) -> None:
        # shared entries stay open for the next reader of the map; this reader's own are closed (those another
        # thread holds now are given back later: the LRU closes them)
        if not self._identity:
            member_cache().drop(self._token)

    @property
    def band_count(self) -> int:
        return self._mosaic.band_count

    @property
    def levels(self) -> list[tuple[int, int]]:
        return [(self.width, self.height)]

    def read_cost(self, out_wh: tuple[int, int]) -> int:
        return self.width * self.height

    @property
    def source_files(self) -> list[str]:
        return [f for m in self._mosaic.members for f in (m.files or (m.path,))]

    def may_have_nodata(self) -> bool:
        return self._mosaic.nodata

    def tile_has_data(self, tile) -> bool:
        """Where the members' pixels are all valid (`Layout.members_valid`), the only nodata is holes: a tile
        holds data when an output pixel's centre lies in a member, as its read would say (`_part`), told from
        the layout without opening a file (a plan's count of 10^4 files' tiles would read them all)."""
        lay = self._mosaic
        if not (lay.nodata and lay.members_valid):
            return super().tile_has_data(tile)
        window, (w, h) = tile.src_window, tile.valid_wh
        sx, sy = float(window.width) / w, float(window.height) / h
        return any(_part(lay.members[int(k)], window, sx, sy, w, h) is not None for k in lay.touching(window))

    def _read_member(self, k: int, cache: MemberCache, sub, out_wh: tuple[int, int]):
        """`read_window(sub, out_wh)` of member `k`, taken from the process's `cache` and given back."""
        m = self._mosaic.members[k]
        bands, stretch = self.bands, self.stretch
        key = (m.path, bands, stretch, self._token)
        src = cache.get(key, lambda: open_member(m, bands, stretch, self._mosaic))
        try:
            return src.read_window(sub, out_wh)
        finally:
            cache.put(key, src)

    def read_window(self, window, out_wh: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
        """The window composed from the members it touches by the overlap rule (module doc). A pixel only
        one member covers is copied as read; the rule's distances are computed only where members overlap."""
        w, h = out_wh
        rgb = np.zeros((3, h, w), np.uint8)
        valid = np.zeros((h, w), bool)
        sx, sy = float(window.width) / w, float(window.height) / h
        parts = [(int(k), *p) for k in self._mosaic.touching(window)
                 if (p := _part(self._mosaic.members[k], window, sx, sy, w, h)) is not None]
        cover = None  # how many members cover each output pixel, where some members overlap
        if self._mosaic.overlapping:
            cover = np.zeros((h, w), np.uint8)
            for _, (j0, j1, i0, i1), _ in parts:
                cover[i0:i1, j0:j1] += 1
        best = None  # squared distance to the centre of the member a shared pixel came from
        cache = member_cache()
        for k, (j0, j1, i0, i1), sub in parts:
            prgb, pvalid = self._read_member(k, cache, sub, (j1 - j0, i1 - i0))
            out, ok = rgb[:, i0:i1, j0:j1], valid[i0:i1, j0:j1]
            n = cover[i0:i1, j0:j1] if cover is not None else None
            if n is None or n.max() == 1:  # nobody else covers these pixels
                out[...], ok[...] = prgb, pvalid
                continue
            shared = n > 1
            alone = pvalid & ~shared
            np.copyto(out, prgb, where=alone[None])
            ok |= alone
            rows, cols = np.flatnonzero(shared.any(axis=1)), np.flatnonzero(shared.any(axis=0))
            a0, a1, b0, b1 = rows[0], rows[-1] + 1, cols[0], cols[-1] + 1
            if best is None:
                best = np.full((h, w), np.inf, np.float32)
            d = self._distances(k, window, sx, sy, (j0 + b0, j0 + b1, i0 + a0, i0 + a1))
            near = best[i0 + a0:i0 + a1, j0 + b0:j0 + b1]
            take = pvalid[a0:a1, b0:b1] & shared[a0:a1, b0:b1] & (d < near)
            np.copyto(near, d, where=take)
            np.copyto(out[:, a0:a1, b0:b1], prgb[:, a0:a1, b0:b1], where=take[None])
            ok[a0:a1, b0:b1] |= take
        return rgb, valid

    def _distances(self, k: int, window, sx: float, sy: float, rect) -> np.ndarray:
        """Squared distances (CRS units) from member `k`'s centre to the centres of the output pixels `rect`
        (j0, j1, i0, i1) of `window` resampled by `sx`, `sy` source pixels per output pixel."""
        j0, j1, i0, i1 = rect
        cx, cy = self._mosaic.members[k].centre
        t = self.transform
        dx = ((float(window.col_off) + (np.arange(j0, j1) + 0.5) * sx - cx) * abs(t.a)).astype(np.float32)
        dy = ((float(window.row_off) + (np.arange(i0, i1) + 0.5) * sy - cy) * abs(t.e)).astype(np.float32)
        return dy[:, None] ** 2 + dx[None, :] ** 2

    def compute_stretch(self, percentiles: tuple[float, float] = (2.0, 98.0)) -> Stretch:
        """One stretch for the whole map: percentiles of the valid pixels of decimated reads of up to
        `STRETCH_SAMPLE` members spread evenly over the map's order (about `STATS_SIDE`^2 samples in all)."""
        from rasterio.enums import Resampling

        members = self._mosaic.members
        picks = sorted({round(i * (len(members) - 1) / max(1, STRETCH_SAMPLE - 1))
                        for i in range(min(STRETCH_SAMPLE, len(members)))})
        side = max(16, int(STATS_SIDE / math.sqrt(len(picks))))
        values = []
        for k in picks:
            src = RasterSource(members[k].path, bands=self.bands, stretch=None)
            try:
                ds = src.dataset
                f = max(ds.width, ds.height) / side
                shape = (len(self.bands), max(1, round(ds.height / max(f, 1))), max(1, round(ds.width / max(f, 1))))
                data = ds.read(list(self.bands), out_shape=shape, resampling=Resampling.nearest, masked=True)
            finally:
                src.close()
            v = data.astype(np.float64).filled(np.nan)
            values.append(v[np.isfinite(v)])
        pooled = np.concatenate(values) if values else np.zeros(0)
        if not pooled.size:
            return Stretch(lo=(0.0,) * len(self.bands), hi=(1.0,) * len(self.bands))
        lo, hi = np.percentile(pooled, percentiles)
        hi = hi if hi > lo else lo + 1.0
        return Stretch(lo=(float(lo),) * len(self.bands), hi=(float(hi),) * len(self.bands))


_READERS = itertools.count()


def _part(m: Member, window, sx: float, sy: float, w: int, h: int):
    """The output pixels of `window` (resampled to w x h) whose centres lie in member `m`, as
    ((j0, j1, i0, i1), the member's own source window for them), or None when there are none."""
    from rasterio.windows import Window

    x0, y0 = float(window.col_off), float(window.row_off)
    j0 = max(0, math.ceil((m.col - x0) / sx - 0.5))
    j1 = min(w, math.ceil((m.col + m.width - x0) / sx - 0.5))
    i0 = max(0, math.ceil((m.row - y0) / sy - 0.5))
    i1 = min(h, math.ceil((m.row + m.height - y0) / sy - 0.5))
    if j0 >= j1 or i0 >= i1:
        return None
    # the member's pixels under those output pixels (clamped to the member: within half an output pixel)
    c0, c1 = max(0.0, x0 + j0 * sx - m.col), min(float(m.width), x0 + j1 * sx - m.col)
    r0, r1 = max(0.0, y0 + i0 * sy - m.row), min(float(m.height), y0 + i1 * sy - m.row)
    return (j0, j1, i0, i1), Window(c0, r0, c1 - c0, r1 - r0)


# -- checkpoint identity -------------------------------------------------------------------------------------

def member_identities(path, stamps: Sequence, verify: bool = False) -> tuple[str, ...]:
    """Each member's checkpoint identity (`readers.identity.input_identity` of its files, from their
    `stamps` in `MosaicSource.source_files`' order; `verify`: hashes of their content), or () for a path
    that is no mosaic."""
    from .identity import input_identity

    lay = layout_of(path)
    if lay is None:
        return ()
    out = []
    for m, (a, b) in zip(lay.members, lay.file_spans):
        files = list(m.files or (m.path,))
        out.append(input_identity(m.path, files, lay.bands, verify=verify, stamps=list(stamps[a:b]), warn=False))
    unknown = [m.path for m, (a, b) in zip(lay.members, lay.file_spans) if not verify and None in stamps[a:b]]
    if unknown:
        from ..wording import opt, spoken

        log.warning(spoken(f"{len(unknown)} file(s) of {path} (e.g. {unknown[0]}): cannot tell whether they changed "
                           "since an earlier run (no size/time/ETag): the tiles they touch will not be resumed; "
                           f"{opt('verify_inputs')} hashes their content instead"))
    return tuple(out)


def mosaic_identity(path, member_ids: Sequence[str]) -> str:
    """The identity of a whole mosaic: its grid and every member's identity and place."""
    lay = layout_of(path)
    h = hashlib.sha256(f"mosaic|{lay.width}x{lay.height}|{lay.transform}|{lay.bands}".encode())
    for m, i in zip(lay.members, member_ids):
        h.update(f"|{m.col},{m.row}:{i}".encode())
    return h.hexdigest()[:16]


def window_identity(path, identity: str, member_ids: Sequence[str], window) -> str:
    """The checkpoint identity of a window's pixels: `identity` for a plain input; for a mosaic, its grid
    and the identities and places of the members the window touches (and nothing of the others)."""
    lay = layout_of(path)
    if lay is None or not member_ids:
        return identity
    h = hashlib.sha256(f"mosaic|{lay.transform}|{lay.bands}".encode())
    for k in lay.touching(window):
        m = lay.members[k]
        h.update(f"|{m.col},{m.row}:{member_ids[k]}".encode())
    return h.hexdigest()[:16]


# -- who owns what: provenance and per-file outputs ------------------------------------------------------------

def _closer_part(bounds, near, far) -> list[tuple[float, float]]:
    """The part of the box `bounds` closer to point `near` than to `far`, as a ring (Sutherland-Hodgman
    clip of the box by their bisector); [] when none of it is."""
    x0, y0, x1, y1 = bounds
    ring = [(x0, y0), (x1, y0), (x1, y1), (x0, y1)]
    nx, ny = near[0] - far[0], near[1] - far[1]
    mx, my = (near[0] + far[0]) / 2, (near[1] + far[1]) / 2

    def side(p):
        return (p[0] - mx) * nx + (p[1] - my) * ny

    out = []
    for a, b in zip(ring, ring[1:] + ring[:1]):
        sa, sb = side(a), side(b)
        if sa >= 0:
            out.append(a)
        if (sa >= 0) != (sb >= 0):
            f = sa / (sa - sb)
            out.append((a[0] + f * (b[0] - a[0]), a[1] + f * (b[1] - a[1])))
    return out


class Ownership:
    """Which member of a mosaic owns each place, by the overlap rule (nearest centre; ties: the earlier
    member), in the CRS: `sources` for provenance, `owners` for per-file outputs. Regions are the rule
    without its nodata fall-back (a file's footprint where it is the nearest-centre file)."""

    def __init__(self, layout: Layout):
        import shapely

        from .remote import source_name

        self.layout = layout
        self.names = [source_name(m.path) for m in layout.members]
        self.footprints = shapely.box(*layout.map_boxes.T) if len(layout.members) else np.zeros(0, object)
        self.tree = shapely.STRtree(self.footprints)

    @cached_property
    def regions(self) -> np.ndarray:
        """Each member's owned region (shapely geometries, in the map's order). The pairs of footprints that
        overlap (more than an edge) are found from their boxes for all pairs at once: a file that only shares
        edges is its footprint (1,024 abutting files: 0.37 s of pairwise overlays before)."""
        import shapely

        centres, fps = self.layout.map_centres, self.footprints
        k_of, j_of = self.tree.query(fps, predicate="intersects") if len(fps) else (np.zeros(0, int),) * 2
        mb = self.layout.map_boxes
        lo, hi = np.maximum(mb[k_of, :2], mb[j_of, :2]), np.minimum(mb[k_of, 2:], mb[j_of, 2:])
        real = (k_of != j_of) & (hi > lo).all(axis=1)  # boxes: a positive area iff both sides are
        inters = shapely.intersection(fps[k_of[real]], fps[j_of[real]]) if real.any() else []
        pairs: dict[int, list] = {}
        for k, j, inter in zip(k_of[real].tolist(), j_of[real].tolist(), inters):
            pairs.setdefault(k, []).append((j, inter))
        out = []
        for k, fp in enumerate(fps):
            cut = []
            for j, inter in pairs.get(k, ()):
                if shapely.area(inter) <= 0:
                    continue
                if np.allclose(centres[j], centres[k]):
                    if j < k:
                        cut.append(inter)
                    continue
                ring = _closer_part(shapely.bounds(inter), centres[j], centres[k])
                if len(ring) >= 3:
                    cut.append(shapely.intersection(inter, shapely.Polygon(ring)))
            out.append(shapely.difference(fp, shapely.union_all(cut)) if cut else fp)
        return np.asarray(out, dtype=object)

    @cached_property
    def region_tree(self):
        import shapely

        return shapely.STRtree(self.regions)

    def sources(self, geoms) -> list[str]:
        """For each geometry, the members whose owned region it meets (more than an edge), in the map's
        order, joined by `SEPARATOR`; the nearest member for one that meets none."""
        import shapely

        geoms = np.asarray(geoms, dtype=object)
        g, r = self.region_tree.query(geoms, predicate="intersects")
        keep = ~shapely.touches(geoms[g], self.regions[r]) if len(g) else np.zeros(0, bool)
        hit: dict[int, list[int]] = {}
        for gi, ri in zip(g[keep].tolist(), r[keep].tolist()):
            hit.setdefault(gi, []).append(ri)
        out = []
        for i, geom in enumerate(geoms):
            ks = sorted(set(hit.get(i, ())))
            if not ks and geom is not None and not shapely.is_empty(geom):
                ks = [int(self.tree.query_nearest(geom)[0])]
            out.append(SEPARATOR.join(self.names[k] for k in ks))
        return out

    def owners(self, points) -> np.ndarray:
        """For each point (shapely), the member that owns it: the nearest-centre member among those whose
        footprint holds it (ties: the earlier), else the member whose footprint is nearest."""
        import shapely

        points = np.asarray(points, dtype=object)
        out = np.full(len(points), -1, dtype=np.int64)
        if not len(points):
            return out
        p, k = self.tree.query(points, predicate="intersects")
        xy = shapely.get_coordinates(points[p]) if len(p) else np.zeros((0, 2))
        d = ((xy - self.layout.map_centres[k]) ** 2).sum(axis=1)
        order = np.lexsort((k, d, p))  # per point: nearest first, then the earlier member
        first = np.r_[True, p[order][1:] != p[order][:-1]] if len(order) else np.zeros(0, bool)
        out[p[order][first]] = k[order][first]
        lost = np.flatnonzero(out < 0)
        for i in lost:
            if points[i] is not None and not shapely.is_empty(points[i]):
                out[i] = int(self.tree.query_nearest(points[i])[0])
        return out
