"""Synthetic whole-slide images with objects of known extent, for tests, examples and benchmarks.

A slide is a pyramidal OME-TIFF (BigTIFF, tiled, zlib) written tile by tile with tifffile: every tile of
every pyramid level is rendered on demand from the object list, so a 40000x40000 slide never exists in
memory. Objects sit one per cell of a jittered grid (never overlapping, a gap of >= 8 px between them):

* `brightfield`: RGB uint8, an eosin-pink background, nuclei in `indigo` (ellipses) and red blood cells
  in `crimson`, colours the reference backend finds by name;
* `fluorescence`: uint16, one or more channels; channel 1 is a nuclear stain (bright `white` nuclei on
  a dark background), further channels hold dim unrelated signal. One class, so the grid is sparser
  (64 px cells, 60 % filled: about 150 nuclei per 1008 px tile, under SAM 3's 200 objects per prompt).

`tissue=` (a share of the slide, or a `Tissue`) puts the objects on tissue surrounded by empty glass (light
in brightfield, dark in fluorescence), with a lumen (glass inside the tissue) and a speck of dust on the
glass, as a scanned slide has: what `--tissue auto` must tell apart (`sam3tiles.tiling.tissue`).

`shape="rect"` makes axis-aligned rectangles with integer corners instead of ellipses (their edges fall
on pixel edges, so a segmentation can be checked to the half pixel). Truth polygons are in full-resolution
pixel coordinates (origin top-left, y down), without a CRS. A pixel belongs to an object when its centre
lies inside the object's outline, at every level.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import geopandas as gpd
import numpy as np
import shapely
import tifffile

BRIGHTFIELD = {"indigo": (80, 12, 128), "crimson": (214, 30, 64)}
BRIGHTFIELD_BACKGROUND = (236, 196, 214)
FLUORESCENCE = {"white": 20000}
FLUORESCENCE_BACKGROUND = 600
GLASS_BRIGHTFIELD = (243, 243, 241)  # empty glass: light, unstained
GLASS_FLUORESCENCE = 150  # empty glass: the camera's dark level, in every channel
DUST_BRIGHTFIELD = (120, 118, 115)  # a speck of dust on the glass
DUST_FLUORESCENCE = 2500
GAP = 8  # pixels kept free between objects (two cells of SAM 3's 288 mask grid)
PIXEL_UM = 0.25  # physical pixel size written into the OME metadata (40x)


@dataclass
class Objects:
    """Object parameters, one entry per object, in full-resolution pixels.

    kind 0: ellipse (cx, cy, a, b, theta); kind 1: rectangle [x0, x1) x [y0, y1).
    `bbox` (x0, y0, x1, y1) bounds every kind.
    """

    kind: np.ndarray
    cls: np.ndarray  # index into `names`
    cx: np.ndarray
    cy: np.ndarray
    a: np.ndarray
    b: np.ndarray
    theta: np.ndarray
    bbox: np.ndarray  # float [n, 4]
    names: tuple[str, ...]
    cell: int
    grid: np.ndarray  # int [rows, cols]: object index per grid cell, -1 when empty

    def __len__(self) -> int:
        return len(self.kind)


@dataclass(frozen=True)
class Tissue:
    """Where the tissue lies, full-resolution pixels: the union of `ellipses` (cx, cy, rx, ry[, n]: the
    superellipse |x/rx|^n + |y/ry|^n <= 1, n = 2 an ellipse, larger n a rounded rectangle) less the `holes`
    (cx, cy, r: glass inside the tissue); `specks` (cx, cy, r): dust on the glass."""

    ellipses: tuple = ()
    holes: tuple = ()
    specks: tuple = ()

    @classmethod
    def share(cls, width: int, height: int, share: float) -> "Tissue":
        """A rounded section (a superellipse of exponent 4) holding `share` of the slide, at its left, its
        height 92 % of the slide's (as a section lies beside the label end of the glass), with a lumen at its
        centre and a speck of dust on the glass at the right."""
        n = 4.0
        ry = 0.46 * height
        fill = 4 * math.gamma(1 + 1 / n) ** 2 / math.gamma(1 + 2 / n)  # area / (rx * ry)
        rx = min(0.48 * width, share * width * height / (fill * ry))
        cx, cy = 0.03 * width + rx, height / 2
        hole = max(8.0, 0.06 * ry)
        speck = max(2.0, max(width, height) / 1500)
        return cls(((cx, cy, rx, ry, n),), ((cx, cy, hole),), ((0.93 * width, 0.2 * height, speck),))

    def inside(self, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
        """bool [len(ys), len(xs)]: which pixel centres (full-resolution coordinates) lie on tissue."""
        return self.contains(xs[None, :], ys[:, None])

    def contains(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Whether the points (x, y) lie on tissue (arrays that broadcast together)."""
        out = np.zeros(np.broadcast(x, y).shape, bool)
        for cx, cy, rx, ry, *n in self.ellipses:
            e = n[0] if n else 2.0
            out |= np.abs((x - cx) / rx) ** e + np.abs((y - cy) / ry) ** e <= 1.0
        for cx, cy, r in self.holes:
            out &= (x - cx) ** 2 + (y - cy) ** 2 > r * r
        return out

    def dust(self, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
        out = np.zeros((len(ys), len(xs)), bool)
        for cx, cy, r in self.specks:
            out |= (xs[None, :] - cx) ** 2 + (ys[:, None] - cy) ** 2 <= r * r
        return out

    def area(self, width: int, height: int, step: int = 4) -> float:
        """The share of a width x height slide on tissue (sampled every `step` px)."""
        xs, ys = np.arange(0, width, step) + 0.5, np.arange(0, height, step) + 0.5
        return float(self.inside(xs, ys).mean())


def on_tissue(objs: "Objects", tissue: Tissue) -> "Objects":
    """The objects whose box lies wholly on tissue (corners and centre), the grid rebuilt."""
    b = objs.bbox
    xs = np.stack([b[:, 0], b[:, 2], b[:, 0], b[:, 2], (b[:, 0] + b[:, 2]) / 2], axis=1)
    ys = np.stack([b[:, 1], b[:, 1], b[:, 3], b[:, 3], (b[:, 1] + b[:, 3]) / 2], axis=1)
    ok = tissue.contains(xs, ys).all(axis=1)
    keep = np.flatnonzero(ok)
    remap = np.full(len(objs) + 1, -1, np.int64)
    remap[keep] = np.arange(len(keep))
    grid = remap[objs.grid]  # -1 (empty) maps to remap[-1] = -1
    return Objects(objs.kind[keep], objs.cls[keep], objs.cx[keep], objs.cy[keep], objs.a[keep], objs.b[keep],
                   objs.theta[keep], objs.bbox[keep], objs.names, objs.cell, grid)


@dataclass
class Slide:
    path: Path
    truth: gpd.GeoDataFrame  # class, geometry (pixel coordinates, no CRS)
    width: int
    height: int
    levels: list[tuple[int, int]]  # (width, height) per level
    seconds: float = 0.0
    objects: Objects | None = None
    tissue: Tissue | None = None  # None: tissue everywhere


def layout(width: int, height: int, seed: int = 0, *, names: tuple[str, ...] = ("indigo", "crimson"),
           weights: tuple[float, ...] | None = None, shape: str = "ellipse", cell: int = 48, fill: float = 0.7,
           size: tuple[float, float] = (12.0, 36.0)) -> Objects:
    """At most one object per `cell` x `cell` grid cell, inside the slide, with a gap of GAP px."""
    if size[1] + GAP > cell:
        raise ValueError(f"objects up to {size[1]} px need cells of at least {size[1] + GAP} px")
    rng = np.random.default_rng(seed)
    cols, rows = width // cell, height // cell
    n_cells = rows * cols
    present = rng.random(n_cells) < fill
    idx = np.flatnonzero(present)
    n = len(idx)
    r, c = idx // cols, idx % cols
    weights = np.asarray(weights if weights is not None else [1.0] * len(names), float)
    cls = rng.choice(len(names), size=n, p=weights / weights.sum()).astype(np.int16)
    d = rng.uniform(size[0], size[1], n)
    if shape == "rect":
        w = np.floor(d).astype(int)
        h = np.floor(d * rng.uniform(0.6, 1.0, n)).astype(int)
        swap = rng.random(n) < 0.5
        w, h = np.where(swap, h, w), np.where(swap, w, h)
        room_x, room_y = cell - GAP - w, cell - GAP - h
        x0 = c * cell + GAP // 2 + np.floor(rng.random(n) * (room_x + 1)).astype(int)
        y0 = r * cell + GAP // 2 + np.floor(rng.random(n) * (room_y + 1)).astype(int)
        bbox = np.stack([x0, y0, x0 + w, y0 + h], axis=1).astype(float)
        kind = np.ones(n, np.int8)
        cx, cy = (x0 + w / 2).astype(float), (y0 + h / 2).astype(float)
        a, b, theta = w / 2.0, h / 2.0, np.zeros(n)
    elif shape == "ellipse":
        a = d / 2
        b = a * rng.uniform(0.6, 1.0, n)
        theta = rng.uniform(0, math.pi, n)
        ex = np.sqrt((a * np.cos(theta)) ** 2 + (b * np.sin(theta)) ** 2)
        ey = np.sqrt((a * np.sin(theta)) ** 2 + (b * np.cos(theta)) ** 2)
        cx = c * cell + GAP / 2 + ex + rng.random(n) * (cell - GAP - 2 * ex)
        cy = r * cell + GAP / 2 + ey + rng.random(n) * (cell - GAP - 2 * ey)
        bbox = np.stack([cx - ex, cy - ey, cx + ex, cy + ey], axis=1)
        kind = np.zeros(n, np.int8)
    else:
        raise ValueError(f"shape must be 'ellipse' or 'rect', got {shape!r}")
    grid = np.full((rows, cols), -1, np.int64)
    grid[r, c] = np.arange(n)
    return Objects(kind, cls, cx, cy, a, b, theta, bbox, tuple(names), cell, grid)


def truth_frame(objs: Objects, vertices: int = 64) -> gpd.GeoDataFrame:
    """The objects as polygons (ellipses with `vertices` vertices), pixel coordinates, no CRS."""
    n = len(objs)
    t = np.linspace(0, 2 * math.pi, vertices, endpoint=False)
    ct, st = np.cos(objs.theta)[:, None], np.sin(objs.theta)[:, None]
    ex, ey = objs.a[:, None] * np.cos(t)[None], objs.b[:, None] * np.sin(t)[None]
    xs = objs.cx[:, None] + ex * ct - ey * st
    ys = objs.cy[:, None] + ex * st + ey * ct
    rect = objs.kind == 1
    if rect.any():
        x0, y0, x1, y1 = (objs.bbox[rect, i][:, None] for i in range(4))
        k = vertices // 4
        # rectangles as `vertices` points too (corners repeated), so one array holds every shape
        rx = np.concatenate([np.repeat(x0, k, 1), np.repeat(x1, k, 1), np.repeat(x1, k, 1), np.repeat(x0, k, 1)], 1)
        ry = np.concatenate([np.repeat(y0, k, 1), np.repeat(y0, k, 1), np.repeat(y1, k, 1), np.repeat(y1, k, 1)], 1)
        xs[rect], ys[rect] = rx[:, :vertices], ry[:, :vertices]
    coords = np.stack([xs, ys], axis=2)
    coords = np.concatenate([coords, coords[:, :1]], axis=1)
    polys = shapely.polygons(coords) if n else np.asarray([], dtype=object)
    if rect.any():
        polys[rect] = shapely.normalize(shapely.simplify(polys[rect], 0))
    names = np.asarray(objs.names, dtype=object)
    return gpd.GeoDataFrame({"class": names[objs.cls] if n else []}, geometry=list(polys), crs=None)


def _inside(objs: Objects, i: int, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """bool [len(ys), len(xs)]: which of these pixel centres (full-resolution coordinates) lie inside i."""
    if objs.kind[i] == 1:
        x0, y0, x1, y1 = objs.bbox[i]
        return ((ys >= y0) & (ys < y1))[:, None] & ((xs >= x0) & (xs < x1))[None, :]
    dx = xs[None, :] - objs.cx[i]
    dy = ys[:, None] - objs.cy[i]
    ct, st = math.cos(objs.theta[i]), math.sin(objs.theta[i])
    u = (dx * ct + dy * st) / objs.a[i]
    v = (-dx * st + dy * ct) / objs.b[i]
    return u * u + v * v <= 1.0


def render_classes(objs: Objects, x0: int, y0: int, x1: int, y1: int, fx: float = 1.0, fy: float = 1.0) -> np.ndarray:
    """Class map uint8 [y1-y0, x1-x0] (0 background, k+1 class k) of a level window; the level's pixel
    (i, j) has its centre at ((j + 0.5) * fx, (i + 0.5) * fy) in full-resolution pixels."""
    out = np.zeros((y1 - y0, x1 - x0), np.uint8)
    X0, Y0, X1, Y1 = x0 * fx, y0 * fy, x1 * fx, y1 * fy
    rows, cols = objs.grid.shape
    c0, c1 = max(0, int(X0 // objs.cell) - 1), min(cols, int(X1 // objs.cell) + 2)
    r0, r1 = max(0, int(Y0 // objs.cell) - 1), min(rows, int(Y1 // objs.cell) + 2)
    ids = objs.grid[r0:r1, c0:c1].ravel()
    for i in ids[ids >= 0]:
        bx0, by0, bx1, by1 = objs.bbox[i]
        j0, j1 = max(x0, int(math.floor(bx0 / fx - 0.5))), min(x1, int(math.ceil(bx1 / fx + 0.5)))
        i0, i1 = max(y0, int(math.floor(by0 / fy - 0.5))), min(y1, int(math.ceil(by1 / fy + 0.5)))
        if j1 <= j0 or i1 <= i0:
            continue
        xs = (np.arange(j0, j1) + 0.5) * fx
        ys = (np.arange(i0, i1) + 0.5) * fy
        m = _inside(objs, int(i), xs, ys)
        out[i0 - y0:i1 - y0, j0 - x0:j1 - x0][m] = objs.cls[i] + 1
    return out


class _Noise:
    """A bank of noise, cut at pseudo-random offsets: cheap, deterministic, different per tile."""

    def __init__(self, seed: int, tile: int, amplitude: float, channels: int):
        rng = np.random.default_rng(seed + 7919)
        self.side = tile + 64
        self.bank = rng.uniform(-amplitude, amplitude, (4, channels, self.side, self.side)).astype(np.float32)

    def cut(self, key: tuple, h: int, w: int) -> np.ndarray:
        rng = np.random.default_rng(key)
        k, oy, ox = rng.integers(0, 4), rng.integers(0, self.side - h + 1), rng.integers(0, self.side - w + 1)
        return self.bank[k, :, oy:oy + h, ox:ox + w]


def _level_shapes(width: int, height: int, levels: int | None, min_side: int) -> list[tuple[int, int]]:
    out = [(width, height)]
    while (levels is None and max(out[-1]) > min_side) or (levels is not None and len(out) < levels):
        w, h = out[-1]
        if w < 2 or h < 2:
            break
        out.append(((w + 1) // 2, (h + 1) // 2))
    return out


@dataclass
class _Renderer:
    """Renders one slide's tiles, level by level, from the object list (nothing else in memory)."""

    objects: Objects
    shapes: list[tuple[int, int]]  # (width, height) per level
    mode: str
    channels: int
    seed: int
    tile: int
    tissue: Tissue | None = None

    def __post_init__(self) -> None:
        bright = self.mode == "brightfield"
        self.noise = _Noise(self.seed, self.tile, 8.0 if bright else 40.0, 3 if bright else 1)
        background, palette, default = ((BRIGHTFIELD_BACKGROUND, BRIGHTFIELD, (0, 0, 0)) if bright
                                        else (FLUORESCENCE_BACKGROUND, FLUORESCENCE, 10000))
        self.lut = np.asarray([background] + [palette.get(nm, default) for nm in self.objects.names], np.float32)

    def tiles(self, level: int) -> Iterator[np.ndarray]:
        """The level's tiles in TIFF order (channel, row, column), uint8 RGB or uint16 grey."""
        width, height = self.shapes[0]
        lw, lh = self.shapes[level]
        fx, fy, t = width / lw, height / lh, self.tile
        for ch in range(self.channels if self.mode == "fluorescence" else 1):
            for ty, y in enumerate(range(0, lh, t)):
                for tx, x in enumerate(range(0, lw, t)):
                    w, h = min(t, lw - x), min(t, lh - y)
                    classes = render_classes(self.objects, x, y, x + w, y + h, fx, fy)
                    nz = self.noise.cut((self.seed, level, ch, ty, tx), h, w)
                    glass, dust = self._glass(x, y, w, h, fx, fy)
                    if self.mode == "brightfield":
                        rgb = np.moveaxis(self.lut[classes], -1, 0) + nz
                        if glass is not None:
                            rgb[:, glass] = np.asarray(GLASS_BRIGHTFIELD, np.float32)[:, None] + nz[:, glass]
                            rgb[:, dust] = np.asarray(DUST_BRIGHTFIELD, np.float32)[:, None]
                        yield np.moveaxis(np.clip(rgb, 0, 255).round().astype(np.uint8), 0, -1)
                        continue
                    if ch == 0:
                        val = self.lut[classes] + nz[0]
                    else:  # other channels: dim, unrelated to the nuclei
                        val = FLUORESCENCE_BACKGROUND * (1 + ch) + 3 * nz[0]
                    if glass is not None:
                        val[glass] = GLASS_FLUORESCENCE + nz[0][glass]
                        val[dust] = DUST_FLUORESCENCE
                    yield np.clip(val, 0, 65535).round().astype(np.uint16)

    def _glass(self, x: int, y: int, w: int, h: int, fx: float, fy: float):
        """(glass, dust) masks of a level window (None, None without tissue): pixel centres in full resolution."""
        if self.tissue is None:
            return None, None
        xs, ys = (np.arange(x, x + w) + 0.5) * fx, (np.arange(y, y + h) + 0.5) * fy
        glass = ~self.tissue.inside(xs, ys)
        return glass, glass & self.tissue.dust(xs, ys)

    def level_shape(self, level: int) -> tuple[int, ...]:
        lw, lh = self.shapes[level]
        if self.mode == "brightfield":
            return (lh, lw, 3)
        return (self.channels, lh, lw) if self.channels > 1 else (lh, lw)


@dataclass(frozen=True)
class Pyramid:
    """How a slide file is laid out: `levels` counts the full resolution too (None: halve until the longer
    side is <= `min_side`); `tile`: the TIFF tile side; compression, its zlib level, and tifffile's
    `maxworkers` (compression threads; None: tifffile's default)."""

    levels: int | None = None
    min_side: int = 1024
    tile: int = 512
    compression: str = "zlib"
    compression_level: int = 1
    maxworkers: int | None = None


def write_slide(path: str | Path, width: int = 3000, height: int = 2500, seed: int = 0, *,
                mode: str = "brightfield", channels: int = 1, shape: str = "ellipse", objects: Objects | None = None,
                truth: bool = True, pyramid: Pyramid = Pyramid(), tissue: Tissue | float | None = None,
                **layout_kwargs) -> Slide:
    """Write a pyramidal OME-TIFF slide tile by tile (laid out as `pyramid` says); returns it with its truth
    polygons. `layout_kwargs` go to `layout` (cell, size, fill, names) when `objects` is not given.
    `tissue`: glass around the tissue (`Tissue`, or the share of the slide on tissue: `Tissue.share`); the
    objects are those of the layout that lie wholly on it."""
    t_start = time.perf_counter()
    levels, min_side, tile = pyramid.levels, pyramid.min_side, pyramid.tile
    compression, compression_level, maxworkers = pyramid.compression, pyramid.compression_level, pyramid.maxworkers
    path = Path(path)
    if mode not in ("brightfield", "fluorescence"):
        raise ValueError(f"mode must be 'brightfield' or 'fluorescence', got {mode!r}")
    bright = mode == "brightfield"
    if objects is None:
        layout_kwargs.setdefault("names", tuple(BRIGHTFIELD if bright else FLUORESCENCE))
        if not bright:  # one class: keep a 1008 px tile under SAM 3's 200 objects per prompt
            layout_kwargs.setdefault("cell", 64)
            layout_kwargs.setdefault("fill", 0.6)
        objects = layout(width, height, seed, shape=shape, **layout_kwargs)
    if isinstance(tissue, (int, float)):
        tissue = Tissue.share(width, height, float(tissue))
    if tissue is not None:
        objects = on_tissue(objects, tissue)
    shapes = _level_shapes(width, height, levels, min_side)
    nch = 1 if bright else channels
    render = _Renderer(objects, shapes, mode, nch, seed, tile, tissue)
    opts = dict(dtype=np.uint8 if bright else np.uint16, tile=(tile, tile),
                photometric="rgb" if bright else "minisblack", compression=compression, maxworkers=maxworkers)
    if compression == "zlib":
        opts["compressionargs"] = {"level": compression_level}
    meta = {"axes": "YXS" if bright else ("CYX" if nch > 1 else "YX"), "PhysicalSizeX": PIXEL_UM,
            "PhysicalSizeXUnit": "µm", "PhysicalSizeY": PIXEL_UM, "PhysicalSizeYUnit": "µm"}
    if not bright:
        meta["Channel"] = {"Name": ["DAPI"] + [f"marker {i}" for i in range(1, nch)]}
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with tifffile.TiffWriter(tmp, bigtiff=True, ome=True) as tw:
            tw.write(render.tiles(0), shape=render.level_shape(0), subifds=len(shapes) - 1, metadata=meta, **opts)
            for level in range(1, len(shapes)):
                tw.write(render.tiles(level), shape=render.level_shape(level), subfiletype=1, metadata=None,
                         **opts)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    gdf = truth_frame(objects) if truth else gpd.GeoDataFrame({"class": []}, geometry=[], crs=None)
    return Slide(path, gdf, width, height, shapes, time.perf_counter() - t_start, objects, tissue)
