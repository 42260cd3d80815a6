"""Make docs/demo.png, the README's picture: a full-resolution crop of the demo scene around tile seams,
with the tiled result (green), the squashed baseline (magenta) and the tile cores (white).

    sam3tiles demo --out sam3tiles-demo && python examples/readme_figure.py sam3tiles-demo docs/demo.png
"""

from __future__ import annotations

import sys
from pathlib import Path

import geopandas as gpd
import numpy as np
import rasterio
from PIL import Image, ImageDraw
from rasterio.windows import Window

from sam3tiles.tiling.grid import TileGrid


def main(demo_dir: str = "sam3tiles-demo", out: str = "docs/demo.png", x0: int = 560, y0: int = 560,
         size: int = 700) -> None:
    d = Path(demo_dir)
    with rasterio.open(d / "scene.tif") as src:
        win = Window(x0, y0, size, size)
        img = np.moveaxis(src.read([1, 2, 3], window=win), 0, -1)
        inv = ~src.window_transform(win)
        grid = TileGrid(src.width, src.height)
    scale = 1
    pic = Image.fromarray(img).resize((size * scale, size * scale), Image.NEAREST)
    draw = ImageDraw.Draw(pic)
    for t in grid:
        cx0, cy0, cx1, cy1 = t.core_xyxy
        draw.rectangle([(cx0 - x0) * scale, (cy0 - y0) * scale, (cx1 - x0) * scale, (cy1 - y0) * scale],
                       outline=(255, 255, 255), width=1)
    for name, colour in (("squash", (255, 0, 255)), ("tiled", (0, 255, 0))):
        gdf = gpd.read_file(d / f"{name}.gpkg")
        for geom in gdf.geometry:
            for poly in getattr(geom, "geoms", [geom]):
                pts = [tuple(v * scale for v in inv @ xy) for xy in poly.exterior.coords]
                draw.line(pts, fill=colour, width=2)
    pic.quantize(colors=48, dither=Image.Dither.NONE).save(out, optimize=True)
    print(f"wrote {out}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
