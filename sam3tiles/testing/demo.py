"""A synthetic georeferenced scene with objects of known extent, for the demo, tests and benchmarks.

The scene is a projected GeoTIFF (UTM 33N, sub-metre pixels) written strip by strip, never whole in
memory, so it can be made as large as a benchmark needs. Its objects are drawn in colours the reference
backend finds by name:

* `red`: small objects (vehicles) of about 10x20 px, at any angle;
* `blue`: buildings of 40-160 px, rectangles and L shapes, many crossing tile seams;
* `yellow`: fields larger than a tile.

Objects never overlap and keep a gap of a few pixels, so each one is a separate instance.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from pathlib import Path

import geopandas as gpd
import numpy as np
import rasterio
import rasterio.features
import shapely
from affine import Affine
from PIL import Image, ImageDraw
from rasterio.crs import CRS
from rasterio.errors import NotGeoreferencedWarning
from shapely import affinity
from shapely.geometry import Polygon, box

CRS_DEMO = CRS.from_epsg(32633)
ORIGIN = (500000.0, 4100000.0)
PIXEL = 0.3  # metres
COLOURS = {"red": (238, 18, 18), "blue": (18, 22, 232), "yellow": (236, 230, 20)}
BACKGROUND = (92, 112, 84)
GAP = 8  # pixels kept free around each object (two cells of SAM 3's 288 mask grid)


@dataclass
class Scene:
    path: Path
    truth: gpd.GeoDataFrame  # class, geometry (CRS)
    width: int
    height: int


def _l_shape(x, y, w, h, rng) -> Polygon:
    cw, ch = w * rng.uniform(0.35, 0.6), h * rng.uniform(0.35, 0.6)
    return Polygon([(x, y), (x + w, y), (x + w, y + ch), (x + cw, y + ch), (x + cw, y + h), (x, y + h)])


def layout(width: int, height: int, seed: int = 0, n_cars: int | None = None, n_buildings: int | None = None,
           n_fields: int | None = None, tile: int = 1008) -> list[tuple[str, Polygon]]:
    """Non-overlapping objects in pixel coordinates: [(class, polygon)]."""
    rng = np.random.default_rng(seed)
    area = width * height
    n_fields = (n_fields if n_fields is not None
                else max(1, area // (5000 * 5000)) if min(width, height) > 1.4 * tile else 0)
    n_buildings = n_buildings if n_buildings is not None else area // 90_000
    n_cars = n_cars if n_cars is not None else area // 40_000
    placed: list[tuple[str, Polygon]] = []
    tree_boxes: list[Polygon] = []

    def free(poly: Polygon) -> bool:
        b = poly.buffer(GAP, join_style="mitre")
        minx, miny, maxx, maxy = b.bounds
        if minx < 0 or miny < 0 or maxx > width or maxy > height:
            return False
        return not any(b.intersects(o) for o in tree_boxes if o.bounds[0] < maxx and o.bounds[2] > minx
                       and o.bounds[1] < maxy and o.bounds[3] > miny)

    def place(cls: str, make, n: int, tries: int = 60) -> None:
        for _ in range(n):
            for _ in range(tries):
                poly = make()
                if free(poly):
                    placed.append((cls, poly))
                    tree_boxes.append(poly)
                    break

    def field() -> Polygon:
        w, h = rng.uniform(1.15, 1.6) * tile, rng.uniform(1.1, 1.5) * tile
        x, y = rng.uniform(GAP, max(GAP + 1, width - w - GAP)), rng.uniform(GAP, max(GAP + 1, height - h - GAP))
        return affinity.rotate(box(x, y, x + w, y + h), rng.uniform(-12, 12))

    def building() -> Polygon:
        w, h = rng.uniform(40, 160), rng.uniform(40, 160)
        x, y = rng.uniform(0, width - w), rng.uniform(0, height - h)
        return _l_shape(x, y, w, h, rng) if rng.random() < 0.3 else box(x, y, x + w, y + h)

    def car() -> Polygon:
        w, h = rng.uniform(9, 11), rng.uniform(18, 22)
        x, y = rng.uniform(0, width - 30), rng.uniform(0, height - 30)
        return affinity.rotate(box(x, y, x + w, y + h), rng.uniform(0, 180))

    place("yellow", field, n_fields)
    place("blue", building, n_buildings)
    place("red", car, n_cars)
    return placed


def write_scene(path: str | Path, width: int = 4000, height: int = 3000, seed: int = 0, *,
                dtype: str = "uint8", crs: CRS | None = CRS_DEMO, pixel: float = PIXEL, objects=None,
                strip: int = 512, nodata_border: int = 0, compress: str = "deflate",
                **layout_kwargs) -> Scene:
    """Write the scene as a tiled GeoTIFF strip by strip; returns it with its truth (in the CRS)."""
    path = Path(path)
    objects = objects if objects is not None else layout(width, height, seed, **layout_kwargs)
    transform = Affine(pixel, 0, ORIGIN[0], 0, -pixel, ORIGIN[1]) if crs is not None else Affine.identity()
    rng = np.random.default_rng(seed + 1000)
    profile = dict(driver="GTiff", width=width, height=height, count=3, dtype=dtype, tiled=True, blockxsize=256,
                   blockysize=256, compress=compress, BIGTIFF="IF_SAFER")
    if crs is not None:
        profile.update(crs=crs, transform=transform)
    if nodata_border:
        profile["nodata"] = 0
    scale = {"uint8": 1.0, "uint16": 40.0, "int16": 20.0, "float32": 1 / 255}[dtype]
    offset = {"uint8": 0.0, "uint16": 1000.0, "int16": -2000.0, "float32": -0.2}[dtype]
    classes = list(COLOURS)
    shapes_by_class = {c: [p for k, p in objects if k == c] for c in classes}
    trees = {c: (shapely.STRtree(v) if v else None) for c, v in shapes_by_class.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotGeoreferencedWarning)
        with rasterio.open(path, "w", **profile) as dst:
            for y0 in range(0, height, strip):
                h = min(strip, height - y0)
                base = np.asarray(BACKGROUND, np.float32)[:, None, None] + rng.uniform(-9, 9, (3, h, width))
                win_box = box(0, y0, width, y0 + h)
                for ci, cls in enumerate(classes):
                    tree = trees[cls]
                    if tree is None:
                        continue
                    idx = tree.query(win_box, predicate="intersects")
                    if len(idx) == 0:
                        continue
                    shapes = [(shapes_by_class[cls][i], 1) for i in idx]
                    m = rasterio.features.rasterize(shapes, out_shape=(h, width),
                                                    transform=Affine.translation(0, y0), fill=0,
                                                    dtype="uint8").astype(bool)
                    colour = np.asarray(COLOURS[cls], np.float32)[:, None]
                    base[:, m] = colour + rng.uniform(-8, 8, (3, int(m.sum())))
                base = np.clip(base, 1, 255)
                if nodata_border:
                    rows = np.arange(y0, y0 + h)
                    edge = (rows < nodata_border) | (rows >= height - nodata_border)
                    base[:, edge, :] = 0
                    base[:, :, :nodata_border] = 0
                    base[:, :, width - nodata_border:] = 0
                data = base * scale + offset
                if dtype != "float32":
                    data = np.round(data)
                dst.write(data.astype(dtype), window=rasterio.windows.Window(0, y0, width, h))
    geoms = [affinity.affine_transform(p, transform.to_shapely()) for _, p in objects]
    truth = gpd.GeoDataFrame({"class": [c for c, _ in objects]}, geometry=geoms,
                             crs=crs.to_wkt() if crs is not None else None)
    return Scene(path, truth, width, height)


def overlay_png(raster: str | Path, layers: list[tuple[gpd.GeoDataFrame, tuple[int, int, int]]],
                out: str | Path, max_side: int = 1600, legend: list[tuple[str, tuple[int, int, int]]] = ()) -> Path:
    """A downsampled picture of the raster with polygon outlines drawn on it, and a `legend` of
    (label, colour) entries in its top-left corner (`draw_legend`)."""
    with rasterio.open(raster) as ds:
        f = max(ds.width, ds.height) / max_side
        w, h = max(1, round(ds.width / max(f, 1))), max(1, round(ds.height / max(f, 1)))
        data = ds.read([1, 2, 3], out_shape=(3, h, w), resampling=rasterio.enums.Resampling.average)
        inv = ~(ds.transform @ Affine.scale(ds.width / w, ds.height / h))
    if data.dtype != np.uint8:
        lo, hi = np.nanpercentile(data, (2, 98))
        data = np.clip((data - lo) * 255.0 / max(hi - lo, 1e-9), 0, 255).astype(np.uint8)
    img = Image.fromarray(np.moveaxis(data, 0, -1))
    draw = ImageDraw.Draw(img)
    for gdf, colour in layers:
        for geom in gdf.geometry:
            for poly in getattr(geom, "geoms", [geom]):
                if poly.is_empty:
                    continue
                pts = [inv @ xy for xy in poly.exterior.coords]
                draw.line(pts, fill=colour, width=2 if math.isfinite(pts[0][0]) else 1)
    if legend:
        draw_legend(draw, legend)
    out = Path(out)
    img.save(out)
    return out


def draw_legend(draw: ImageDraw.ImageDraw, entries, corner: tuple[int, int] = (8, 8), fill=(255, 255, 255),
                ink=(20, 20, 20)) -> None:
    """A legend box at `corner`: per (label, colour) entry a swatch (a thick line in the colour, as the
    picture draws it) and its label, dark text on a white box. `fill`, `ink` and the colours are what
    `draw` takes (RGB, or a palette index for a paletted picture)."""
    from PIL import ImageFont

    try:
        font = ImageFont.load_default(size=14)
    except TypeError:  # Pillow < 10.1: the bitmap font
        font = ImageFont.load_default()
    row, pad, swatch = 20, 8, 28
    width = max(draw.textlength(label, font=font) for label, _ in entries)
    x0, y0 = corner
    draw.rectangle([x0, y0, x0 + 3 * pad + swatch + width, y0 + 2 * pad + row * len(entries) - 4], fill=fill,
                   outline=ink)
    for i, (label, colour) in enumerate(entries):
        y = y0 + pad + row * i + row // 2 - 2
        draw.line([(x0 + pad, y), (x0 + pad + swatch, y)], fill=colour, width=4)
        draw.text((x0 + 2 * pad + swatch, y), label, fill=ink, font=font, anchor="lm")


def add_overviews(path, min_side: int = 256) -> list[int]:
    """Build internal overviews (2, 4, 8, ... until the smallest side is under `min_side`, averaged), as
    a COG has them: viewers and the quicklook read them instead of the full image. Returns the factors."""
    from rasterio.enums import Resampling

    with rasterio.open(path, "r+") as ds:
        factors, f = [], 2
        while min(ds.width, ds.height) / f >= min_side // 2:
            factors.append(f)
            f *= 2
        if factors:
            ds.build_overviews(factors, Resampling.average)
    return factors
