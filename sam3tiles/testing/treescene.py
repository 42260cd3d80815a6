"""A scene for many points: a tree inventory (thousands of small crowns) and fields larger than a tile.

`write_tree_scene` writes a GeoTIFF (0.5 m UTM pixels) of round crowns on a jittered grid between a few
rectangular fields each larger than a tile (1.2-1.5 tile sides), all on a noisy background, in colours the
reference backend tells apart (`pointscene.PALETTE`), and returns the truth and a point layer with one point
at each object's representative point (crowns first, then fields), then `n_background` points on bare
ground. Crowns keep `pointscene.GAP` px from each other and from the fields.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import geopandas as gpd
import numpy as np
import rasterio.features
from affine import Affine
from shapely import affinity
from shapely.geometry import Point, box

from . import UTM, write_raster
from .pointscene import BACKGROUND, GAP, PALETTE, TILE

CROWN = "red"
FIELD = "yellow"


@dataclass
class TreeScene:
    path: Path
    truth: gpd.GeoDataFrame  # name, kind (crown / field), colour, geometry (CRS)
    points: gpd.GeoDataFrame  # name, kind, geometry: one per object (crowns, then fields), then background ones


def _fields(width: int, height: int, n: int, rng) -> list:
    out: list = []
    for _ in range(n * 100):
        if len(out) >= n:
            break
        w, h = rng.uniform(1.2, 1.5) * TILE, rng.uniform(1.2, 1.5) * TILE
        x, y = rng.uniform(0, max(1.0, width - w)), rng.uniform(0, max(1.0, height - h))
        f = box(x, y, min(x + w, width), min(y + h, height))
        if all(f.distance(g) > 4 * GAP for g in out):
            out.append(f)
    return out


def _crowns(width: int, height: int, n: int, fields: list, rng) -> list:
    """`n` crowns (radius 5-9 px) on a jittered grid over the ground outside the fields (fewer where it is full)."""
    free = width * height - sum(f.area for f in fields)
    step = max(2 * 9 + GAP + 4, (free / max(n, 1)) ** 0.5 * 0.97)
    xs, ys = np.meshgrid(np.arange(step / 2, width - 12, step), np.arange(step / 2, height - 12, step))
    jitter = (step - 2 * 9 - GAP) / 2
    xs = xs.ravel() + rng.uniform(-jitter, jitter, xs.size)
    ys = ys.ravel() + rng.uniform(-jitter, jitter, ys.size)
    out = []
    for x, y in zip(xs, ys):
        c = Point(x, y).buffer(rng.uniform(5, 9), 16)
        if all(c.distance(f) > GAP for f in fields) and c.bounds[0] > 1 and c.bounds[1] > 1 \
                and c.bounds[2] < width - 1 and c.bounds[3] < height - 1:
            out.append(c)
        if len(out) == n:
            break
    return out


def write_tree_scene(path: str | Path, width: int = 6000, height: int = 4500, seed: int = 0, *, n_trees: int = 10_000,
                     n_fields: int = 3, n_background: int = 0) -> TreeScene:
    """Write the scene (module doc)."""
    rng = np.random.default_rng(seed + 11)
    fields = _fields(width, height, n_fields, rng)
    crowns = _crowns(width, height, n_trees, fields, rng)
    img = np.asarray(BACKGROUND, np.float32)[:, None, None] + rng.uniform(-9, 9, (3, height, width)).astype(np.float32)
    for shapes, colour in ((crowns, CROWN), (fields, FIELD)):
        if shapes:
            m = rasterio.features.rasterize([(s, 1) for s in shapes], out_shape=(height, width), dtype="uint8") > 0
            img[:, m] = np.asarray(PALETTE[colour], np.float32)[:, None] + rng.uniform(-8, 8, (3, int(m.sum())))
    transform = Affine(0.5, 0, 400000, 0, -0.5, 5000000)
    write_raster(path, np.clip(img, 0, 255).astype(np.uint8), transform=transform, crs=UTM, tiled=True,
                 blockxsize=256, blockysize=256)
    to_crs = transform.to_shapely()
    shapes = [*crowns, *fields]
    kinds = ["crown"] * len(crowns) + ["field"] * len(fields)
    geoms = [affinity.affine_transform(s, to_crs) for s in shapes]
    wkt = UTM.to_wkt() if hasattr(UTM, "to_wkt") else UTM
    truth = gpd.GeoDataFrame({"name": [f"obj{k}" for k in range(len(shapes))], "kind": kinds,
                              "colour": [CROWN if k == "crown" else FIELD for k in kinds]}, geometry=geoms, crs=wkt)
    back = []
    for _ in range(n_background * 500):
        if len(back) >= n_background:
            break
        p = Point(rng.uniform(60, width - 60), rng.uniform(60, height - 60))
        near = [c for c in crowns if abs(c.centroid.x - p.x) < 40 and abs(c.centroid.y - p.y) < 40]
        if all(p.distance(f) > 300 for f in fields) and all(p.distance(c) > 12 for c in near):
            back.append(affinity.affine_transform(p, to_crs))
    pts = [g.representative_point() for g in geoms] + back
    points = gpd.GeoDataFrame({"name": [*truth["name"], *(f"bg{k}" for k in range(len(back)))],
                               "kind": [*kinds, *(["background"] * len(back))]}, geometry=pts, crs=wkt)
    return TreeScene(Path(path), truth, points)
