"""A scene for point prompts: objects of known extent, a point layer at their centres, and background points.

`write_point_scene` writes a GeoTIFF (0.5 m UTM pixels by default, or pixel space) of flat-coloured objects
on a noisy background, in colours the reference backend tells apart (`PALETTE`: no two within its match
distance), and returns the truth with one point per object (its representative point: inside the object,
as a click would be) and a few points on the background. The objects are of three kinds:

* `small`: rectangles of 24-160 px, anywhere;
* `seam`: rectangles straddling a core boundary of the default grid (seen cut by the tiles on either side);
* `large`: objects larger than a tile: bands longer than a tile side (1.2-1.6x) and L shapes spanning two
  tiles, thin enough to cover under half of any tile's window.

Objects keep `GAP` px from each other, so each is a separate region.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import geopandas as gpd
import numpy as np
import rasterio.features
from affine import Affine
from shapely import affinity
from shapely.geometry import Point, Polygon, box

from . import UTM, write_raster

BACKGROUND = (92, 112, 84)
#: Colours at least 100 apart (RGB distance) from each other and from the background, each within 40 of the
#: PIL colour of its name (so a text prompt of that name finds it with the reference backend).
PALETTE = {"red": (230, 20, 25), "blue": (18, 22, 232), "yellow": (236, 230, 20), "magenta": (235, 25, 235),
           "cyan": (15, 235, 235), "white": (240, 240, 240), "orange": (245, 140, 20), "black": (15, 15, 15)}
GAP = 14
TILE, STRIDE, HALF = 1008, 752, 128  # the default grid: core boundaries at j * 752 + 128


@dataclass
class PointScene:
    path: Path
    truth: gpd.GeoDataFrame  # name, kind, colour, geometry (CRS)
    points: gpd.GeoDataFrame  # name, kind, label (1), height (a column to carry), geometry: one per object,
    #                          then the background points (kind "background")
    transform: Affine


def _seams(extent: int) -> list[float]:
    return [j * STRIDE + HALF for j in range(1, 64) if j * STRIDE + HALF < extent - 200]


def _large(width: int, height: int, rng) -> list[Polygon]:
    out = []
    if width > 1.4 * TILE:
        w = min(width - 120, rng.uniform(1.2, 1.6) * TILE)
        x, y = rng.uniform(60, width - w - 60), rng.uniform(80, height * 0.3)
        out.append(affinity.rotate(box(x, y, x + w, y + rng.uniform(120, 200)), rng.uniform(-8, 8)))
    if height > 1.4 * TILE and width > 700:
        x, y = rng.uniform(60, width * 0.5), rng.uniform(min(height * 0.35, height - 1.2 * TILE - 60),
                                                           height - 1.2 * TILE - 60)
        h, w = min(height - y - 60, 1.15 * TILE), rng.uniform(450, 650)
        out.append(Polygon([(x, y), (x + 160, y), (x + 160, y + h - 160), (x + w, y + h - 160), (x + w, y + h),
                            (x, y + h)]))
    return out


def layout(width: int, height: int, seed: int = 0, n_small: int = 14, n_seam: int = 6) -> list[tuple[str, Polygon]]:
    """Non-overlapping objects in pixel coordinates: [(kind, polygon)]."""
    rng = np.random.default_rng(seed)
    placed: list[tuple[str, Polygon]] = []

    def free(poly: Polygon) -> bool:
        x0, y0, x1, y1 = poly.bounds
        return (x0 >= 20 and y0 >= 20 and x1 <= width - 20 and y1 <= height - 20
                and not any(poly.buffer(GAP).intersects(p) for _, p in placed))

    for poly in _large(width, height, rng):
        if free(poly):
            placed.append(("large", poly))
    seams = [("x", s) for s in _seams(width)] + [("y", s) for s in _seams(height)]
    for k in range(n_seam * 30):
        if sum(kind == "seam" for kind, _ in placed) >= n_seam or not seams:
            break
        axis, s = seams[k % len(seams)]
        w, h = rng.uniform(60, 220), rng.uniform(40, 160)
        across = s - rng.uniform(0.25, 0.75) * (w if axis == "x" else h)
        x = across if axis == "x" else rng.uniform(20, width - w - 20)
        y = across if axis == "y" else rng.uniform(20, height - h - 20)
        poly = box(x, y, x + w, y + h)
        if free(poly):
            placed.append(("seam", poly))
    for _ in range(n_small * 40):
        if sum(kind == "small" for kind, _ in placed) >= n_small:
            break
        w, h = rng.uniform(24, 160), rng.uniform(24, 160)
        x, y = rng.uniform(20, width - w - 20), rng.uniform(20, height - h - 20)
        poly = (affinity.rotate(box(x, y, x + w, y + h), rng.uniform(0, 90)) if rng.random() < 0.3
                else box(x, y, x + w, y + h))
        if free(poly):
            placed.append(("small", poly))
    return placed


def _background_points(objects, width: int, height: int, rng, n: int) -> list[Point]:
    out: list[Point] = []
    for _ in range(n * 200):
        if len(out) >= n:
            break
        p = Point(rng.uniform(60, width - 60), rng.uniform(60, height - 60))
        if all(p.distance(o) > 60 for _, o in objects):
            out.append(p)
    return out


def write_point_scene(path: str | Path, width: int = 2400, height: int = 2200, seed: int = 0, *,
                      crs=UTM, pixel: float = 0.5, n_small: int = 14, n_seam: int = 6,
                      n_background: int = 3) -> PointScene:
    """Write the scene (module doc); `crs=None`: a plain image in pixel space (coordinates are pixels)."""
    rng = np.random.default_rng(seed + 7)
    objects = layout(width, height, seed, n_small, n_seam)
    img = (np.asarray(BACKGROUND, np.float32)[:, None, None] + rng.uniform(-9, 9, (3, height, width)))
    names = list(PALETTE)
    colours = [names[k % len(names)] for k in range(len(objects))]
    for (_, poly), colour in zip(objects, colours):
        m = rasterio.features.rasterize([(poly, 1)], out_shape=(height, width), dtype="uint8").astype(bool)
        img[:, m] = np.asarray(PALETTE[colour], np.float32)[:, None] + rng.uniform(-8, 8, (3, int(m.sum())))
    transform = Affine(pixel, 0, 400000, 0, -pixel, 5000000) if crs is not None else Affine.identity()
    write_raster(path, np.clip(img, 0, 255).astype(np.uint8), transform=transform if crs is not None else None, crs=crs)
    to_crs = transform.to_shapely()
    geoms = [affinity.affine_transform(p, to_crs) for _, p in objects]
    wkt = crs.to_wkt() if crs is not None else None
    truth = gpd.GeoDataFrame({"name": [f"obj{k}" for k in range(len(objects))], "kind": [k for k, _ in objects],
                              "colour": colours}, geometry=geoms, crs=wkt)
    back = _background_points(objects, width, height, rng, n_background)
    pts = [g.representative_point() for g in geoms] + [affinity.affine_transform(p, to_crs) for p in back]
    points = gpd.GeoDataFrame({"name": [*truth["name"], *(f"bg{k}" for k in range(len(back)))],
                               "kind": [*truth["kind"], *(["background"] * len(back))],
                               "label": np.ones(len(pts), np.int64),
                               "height": np.round(rng.uniform(2, 30, len(pts)), 1)}, geometry=pts, crs=wkt)
    return PointScene(Path(path), truth, points, transform)
