"""Scenes of a given size for the benchmarks, generated once and cached (merge pieces and the other
shared generators live in `sam3tiles.testing`).

The cache folder is `$SAM3TILES_BENCH_CACHE`, else benchmarks/.cache; the smoke runs point it at a
temporary folder.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from sam3tiles.testing import grid_objects, grid_pieces  # noqa: F401 - benchmarks import both from here
from sam3tiles.testing.demo import write_scene

CACHE = Path(__file__).resolve().parent / ".cache"


def cache_folder() -> Path:
    return Path(os.environ.get("SAM3TILES_BENCH_CACHE") or CACHE)


def cached_scene(width: int, height: int, cell: int = 500, seed: int = 0, folder: Path | None = None) -> Path:
    """A demo GeoTIFF of `width` x `height` with `grid_objects`, written once into the cache folder."""
    folder = Path(folder or cache_folder())
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"scene_{width}x{height}_c{cell}_s{seed}.tif"
    if not path.exists():
        tmp = path.with_suffix(".partial.tif")
        write_scene(tmp, width, height, seed=seed, objects=grid_objects(width, height, cell, seed))
        tmp.rename(path)
    return path


def hard_objects(width: int, height: int, seed: int = 0, tile: int = 1008, gap: float = 8.0) -> list:
    """The scenes that stress the merge most, as `write_scene(objects=...)` takes them ([(class, polygon)],
    pixels): `yellow` fields 1.6-2.3 tiles across, so each crosses four or more tiles; a `blue`
    tessellation of parcels of 150-600 px `gap` px apart (about two mask cells: fields, roof segments,
    cells in tissue), many across seams; `red` long thin objects (10-18 px wide, 1200-3000 px long, at any
    angle: roads, rivers, text lines) crossing many seams. Other objects keep `demo.GAP` apart."""
    import numpy as np
    import shapely
    from shapely import affinity

    from sam3tiles.testing.demo import GAP

    rng = np.random.default_rng(seed)
    placed: list = []

    def free(poly) -> bool:
        x0, y0, x1, y1 = poly.buffer(GAP).bounds
        return x0 >= 0 and y0 >= 0 and x1 <= width and y1 <= height and not any(
            poly.buffer(GAP).intersects(p) for _, p in placed)

    def parcels(x0, y0, x1, y1, out) -> None:
        out += tessellation(x0, y0, x1, y1, rng, gap)

    for _ in range(2):
        for _ in range(80):
            w, h = rng.uniform(1.6, 2.3) * tile, rng.uniform(1.6, 2.2) * tile
            x, y = rng.uniform(GAP, max(GAP + 1, width - w)), rng.uniform(GAP, max(GAP + 1, height - h))
            f = affinity.rotate(shapely.box(x, y, x + w, y + h), rng.uniform(-15, 15))
            if free(f):
                placed.append(("yellow", f))
                break
    for k in range(400):  # the tessellation's block, smaller after each 100 failed tries
        bw, bh = (min(width * 0.5, 2.4 * tile) * 0.8 ** (k // 100), min(height * 0.5, 2.0 * tile) * 0.8 ** (k // 100))
        bx, by = rng.uniform(GAP, width - bw - GAP), rng.uniform(GAP, height - bh - GAP)
        if free(shapely.box(bx, by, bx + bw, by + bh)):
            cells: list = []
            parcels(bx, by, bx + bw, by + bh, cells)
            placed += [("blue", c) for c in cells]
            break
    for _ in range(max(3, width * height // 2_500_000)):
        for _ in range(200):
            length, w = rng.uniform(1200, 3000), rng.uniform(10, 18)
            cx, cy = rng.uniform(0, width), rng.uniform(0, height)
            line = affinity.rotate(shapely.box(cx - length / 2, cy - w / 2, cx + length / 2, cy + w / 2),
                                   rng.uniform(0, 180))
            if free(line):
                placed.append(("red", line))
                break
    return placed


def tessellation(x0, y0, x1, y1, rng, gap: float = 8.0) -> list:
    """Parcels (shapely boxes) of 150-600 px tiling the rectangle, `gap` px apart: guillotine cuts at
    random places until every parcel is at most 600 px (and, by chance, before)."""
    import shapely

    w, h = x1 - x0, y1 - y0
    if max(w, h) <= 600 and (min(w, h) < 300 or rng.random() < 0.5):
        return [shapely.box(x0 + gap / 2, y0 + gap / 2, x1 - gap / 2, y1 - gap / 2)]
    if w >= h:
        c = x0 + rng.uniform(150, w - 150)
        return tessellation(x0, y0, c, y1, rng, gap) + tessellation(c, y0, x1, y1, rng, gap)
    c = y0 + rng.uniform(150, h - 150)
    return tessellation(x0, y0, x1, c, rng, gap) + tessellation(x0, c, x1, y1, rng, gap)


def long_objects(width: int, height: int, seed: int = 0, tile: int = 1008) -> list:
    """Long "stuff" crossing many tiles, as `write_scene(objects=...)` takes them: `blue` rivers (meandering,
    30-80 px wide, each crossing the scene), `red` roads (straight or bent once, 18-30 px wide) and `yellow`
    field strips (100-250 px wide, 2-4 tiles long, in runs `demo.GAP` apart: touching neighbours). Every
    object is longer than a tile."""
    import numpy as np
    import shapely
    from shapely import affinity
    from shapely.geometry import LineString

    from sam3tiles.testing.demo import GAP

    rng = np.random.default_rng(seed)
    placed: list = []

    def free(poly, gap=GAP) -> bool:
        x0, y0, x1, y1 = poly.bounds
        return x0 >= 0 and y0 >= 0 and x1 <= width and y1 <= height and not any(
            poly.buffer(gap).intersects(p) for _, p in placed)

    def meander(w):
        horizontal = rng.random() < 0.5
        n = 40
        t = np.linspace(0.02, 0.98, n)
        base = rng.uniform(0.15, 0.85)
        wig = np.cumsum(rng.normal(0, 0.015, n))
        wig = wig - wig.mean() + base
        pts = [(x * width, y * height) for x, y in (zip(t, wig) if horizontal else zip(wig, t))]
        return LineString(pts).simplify(2).buffer(w / 2, quad_segs=4)

    # the strips first: a run of them 2-4 tiles long finds no room between rivers crossing the scene
    for _ in range(max(1, width * height // 8_000_000)):
        for _ in range(200):
            n = int(rng.integers(3, 6))
            ws = rng.uniform(100, 250, n)
            ln = min(rng.uniform(2, 4) * tile, 0.8 * width)
            x, y = rng.uniform(0, width - ln), rng.uniform(0, height - ws.sum() - n * GAP)
            strips, yy = [], y
            for w in ws:
                strips.append(shapely.box(x, yy, x + ln, yy + w))
                yy += w + GAP
            ang = rng.uniform(-20, 20)
            centre = shapely.box(x, y, x + ln, yy).centroid
            strips = [affinity.rotate(s, ang, origin=centre) for s in strips]
            if all(free(s, 3 * GAP) for s in strips):
                placed += [("yellow", s) for s in strips]
                break
    for _ in range(max(2, width * height // 4_000_000)):
        for _ in range(100):
            r = meander(rng.uniform(30, 80))
            if r.is_valid and free(r, 3 * GAP):
                placed.append(("blue", r))
                break
    for _ in range(max(2, width * height // 4_000_000)):
        for _ in range(200):
            w = rng.uniform(18, 30)
            a = (rng.uniform(0, width), rng.uniform(0, height))
            ang = rng.uniform(0, np.pi)
            ln = min(rng.uniform(1.5, 3.5) * tile, 0.6 * max(width, height))
            b = (a[0] + ln * np.cos(ang), a[1] + ln * np.sin(ang))
            ang2 = ang + rng.uniform(-0.6, 0.6)
            c = (b[0] + ln / 2 * np.cos(ang2), b[1] + ln / 2 * np.sin(ang2))
            road = LineString([a, b, c]).buffer(w / 2, quad_segs=4)
            if free(road, 3 * GAP):
                placed.append(("red", road))
                break
    return placed


#: Grid pixels between tile origins at the default tile size (1008) and overlap (256).
STRIDE = 752


def copies_vrt(scene: Path, side: int, tiles: int, name: str) -> tuple[Path, float]:
    """A GDAL VRT beside `scene` (a `side` x `side` px RGB uint8 GeoTIFF) that lays copies of it side by side
    (no big file is written), and the `scale` at which its grid has about `tiles` tiles (up to 8x
    upsampling: the scene's objects stay small)."""
    per_side = max(2, round(math.sqrt(tiles)))
    copies = max(1, math.ceil(per_side * STRIDE / (side * 8)))
    full = copies * side
    scale = (per_side * STRIDE + (1008 - STRIDE)) / full
    bands = []
    for b in (1, 2, 3):
        srcs = "".join(
            f'<SimpleSource><SourceFilename relativeToVRT="1">{scene.name}</SourceFilename>'
            f'<SourceBand>{b}</SourceBand><SrcRect xOff="0" yOff="0" xSize="{side}" ySize="{side}"/>'
            f'<DstRect xOff="{i * side}" yOff="{j * side}" xSize="{side}" ySize="{side}"/></SimpleSource>'
            for j in range(copies) for i in range(copies))
        bands.append(f'<VRTRasterBand dataType="Byte" band="{b}">{srcs}</VRTRasterBand>')
    vrt = scene.parent / name
    vrt.write_text(f'<VRTDataset rasterXSize="{full}" rasterYSize="{full}">{"".join(bands)}</VRTDataset>')
    return vrt, scale
