"""The tile plan of a raster: tiles, skipped (nodata) tiles, and the grid as polygons; with a previous run's
report, also the sub-tiles its refinement added (where tiles hit SAM 3's 200-object cap)."""

from __future__ import annotations

import os

import geopandas as gpd

from .merge import tile_frame
from .pipeline import Options, build_grid, tiles_of
from .readers import open_source
from .refine import Refiner


def plan(path: str, opts: Options | None = None, check_nodata: bool = True,
         report: dict | None = None) -> gpd.GeoDataFrame:
    """One row per tile: index, row, col, depth, offsets, valid size, has_data; geometry = the tile's window
    in the CRS (column `core` holds the part the tile owns, as WKT). `report`: a run report (dict) of this
    input; its refined tiles' sub-tiles are added as rows of depth >= 1 (column `refined_prompts` on the
    refined tiles)."""
    opts = opts or Options()
    with open_source(path, bands=opts.bands) as src:
        tiles, overlap = tiles_of(src, opts)
        refined = refined_tiles(report, path) if report else []
        if refined and not opts.squash:
            tiles = tiles + sub_tiles(build_grid(src, opts), refined)
        marks = {r["index"]: r["prompts"] for r in refined}
        depth_of = Refiner(build_grid(src, opts), 4).depth_of if refined and not opts.squash else (lambda i: 0)
        rows = []
        for t in tiles:
            f = tile_frame(t, overlap)
            rows.append({"tile": t.index, "row": t.row, "col": t.col, "depth": depth_of(t.index), "x0": t.x0,
                         "y0": t.y0, "valid_w": t.valid_wh[0], "valid_h": t.valid_wh[1],
                         "has_data": src.tile_has_data(t) if check_nodata else True,
                         "refined_prompts": ",".join(map(str, marks.get(t.index, []))),
                         "core": f.core.buffer(0).wkt, "geometry": f.window})
        crs = src.crs.to_wkt() if src.crs else None
    return gpd.GeoDataFrame(rows, geometry="geometry", crs=crs)


def refined_tiles(report: dict, path: str) -> list[dict]:
    """The refined tiles of `path` in a run report: [{"path": [...], "prompts": [...], "index": ...}]."""
    out = []
    for t in (report.get("refine") or {}).get("tiles", []):
        src = t.get("source", "")
        if src and os.path.abspath(src) != os.path.abspath(path) and os.path.basename(src) != os.path.basename(path):
            continue
        out.append({"path": list(t["path"]), "prompts": t.get("prompts", []), "index": t["tile"]})
    return out


def sub_tiles(grid, refined: list[dict]) -> list:
    """The sub-tiles the refined tiles (by their paths from a grid tile) were split into, parents first."""
    ref = Refiner(grid, 4)
    by_index = {}
    out = []
    for r in sorted(refined, key=lambda r: len(r["path"])):
        p = r["path"]
        tile = grid.tile(*divmod(p[0], grid.shape[1])) if len(p) == 1 else by_index.get(r["index"])
        if tile is None:  # a report of another grid (other --scale or --overlap): nothing to show
            continue
        for s in ref.children(tile):
            by_index[s.index] = s
            out.append(s)
    return out
