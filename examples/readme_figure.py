"""Make docs/demo.png, the README's picture: a full-resolution crop of the demo scene around tile seams,
with the tiled result (green), the squashed baseline (magenta), the tile cores (white, dashed) and a legend.

    sam3tiles demo --out sam3tiles-demo && python examples/readme_figure.py sam3tiles-demo docs/demo.png

The scene is reduced to a palette of its own colours first and the drawing added in palette entries of
its own, so the lines keep their exact colours (a palette made after drawing turned the thin white core
lines maroon) and the file stays small.
"""

from __future__ import annotations

import sys
from pathlib import Path

import geopandas as gpd
import numpy as np
import rasterio
from PIL import Image, ImageDraw
from rasterio.windows import Window

from sam3tiles.cli.demo import GREEN, LEGEND, MAGENTA
from sam3tiles.testing.demo import draw_legend
from sam3tiles.tiling.grid import TileGrid

WHITE, INK = (255, 255, 255), (20, 20, 20)
SCENE_COLOURS = 44  # palette entries for the scene; the drawing's follow


def _dashed_rectangle(draw, box, fill, dash: int = 8) -> None:
    x0, y0, x1, y1 = box
    for a, b, horizontal, at in ((x0, x1, True, y0), (x0, x1, True, y1), (y0, y1, False, x0), (y0, y1, False, x1)):
        for s in range(int(a), int(b), 2 * dash):
            e = min(s + dash, b)
            draw.line([(s, at), (e, at)] if horizontal else [(at, s), (at, e)], fill=fill, width=1)


def main(demo_dir: str = "sam3tiles-demo", out: str = "docs/demo.png", x0: int = 560, y0: int = 560,
         size: int = 700) -> None:
    d = Path(demo_dir)
    with rasterio.open(d / "scene.tif") as src:
        win = Window(x0, y0, size, size)
        img = np.moveaxis(src.read([1, 2, 3], window=win), 0, -1)
        inv = ~src.window_transform(win)
        grid = TileGrid(src.width, src.height)
    pic = Image.fromarray(img).quantize(colors=SCENE_COLOURS, dither=Image.Dither.NONE)
    drawing = [GREEN, MAGENTA, WHITE, INK]
    palette = pic.getpalette()[:3 * SCENE_COLOURS] + [v for c in drawing for v in c]
    pic.putpalette(palette)
    ink = {c: SCENE_COLOURS + i for i, c in enumerate(drawing)}  # palette index of each drawing colour
    draw = ImageDraw.Draw(pic)
    for t in grid:
        cx0, cy0, cx1, cy1 = t.core_xyxy
        _dashed_rectangle(draw, (cx0 - x0, cy0 - y0, cx1 - x0, cy1 - y0), ink[WHITE])
    for name, colour in (("squash", MAGENTA), ("tiled", GREEN)):
        gdf = gpd.read_file(d / f"{name}.gpkg")
        for geom in gdf.geometry:
            for poly in getattr(geom, "geoms", [geom]):
                draw.line([tuple(inv @ xy) for xy in poly.exterior.coords], fill=ink[colour], width=2)
    draw_legend(draw, [(label, ink[colour]) for label, colour in LEGEND] + [("tile cores (dashed)", ink[WHITE])],
                fill=ink[INK], ink=ink[WHITE])  # a dark box: the white core swatch shows on it
    pic.save(out, optimize=True)
    print(f"wrote {out}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
