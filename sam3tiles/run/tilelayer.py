"""The tile layer of `sam3tiles plan`: one row per tile of a planned input (and, from a run report, the
sub-tiles its refined tiles were split into), as the run would read them."""

from __future__ import annotations

import os

import geopandas as gpd

from ..readers import gdal_env, open_source
from ..tiling.frame import TileFrames
from ..tiling.grid import Tile, TileGrid
from ..tiling.refine import Refiner
from ..tiling.selection import NODATA
from .plan import InputPlan


@gdal_env()
def tile_plan(inp: InputPlan, check_nodata: bool = True, report: dict | None = None) -> gpd.GeoDataFrame:
    """One row per tile of a planned input: index, row, col, depth, offsets, valid size, has_data, run, skip;
    geometry = the tile's window in the CRS (column `core` holds the part the tile owns, as WKT). `run`:
    whether the run encodes it; `skip`: why not (`tiling.selection`: outside the area, no tissue, all
    nodata; empty when it runs). Tiles skipped before any read are not read (has_data True). `report`: a
    run report (dict) of this input; its refined tiles' sub-tiles are added as rows of depth >= 1 (column
    `refined_prompts` on the refined tiles)."""
    refined = refined_tiles(report, inp.path) if report and inp.grid is not None else []
    tiles = list(inp.tiles()) + (sub_tiles(inp.grid, refined) if refined else [])
    marks = {r["index"]: r["prompts"] for r in refined}
    depth_of = Refiner(inp.grid, max(len(r["path"]) for r in refined)).depth_of if refined else (lambda i: 0)
    frames = TileFrames(inp.grid)
    sel = inp.selection()
    with open_source(inp.path, bands=inp.bands, stretch=inp.stretch) as src:
        rows = []
        for t in tiles:
            f = frames.frame(t)
            why = sel.reason(t.index) if sel is not None and t.index < len(sel.codes) else None
            data = src.tile_has_data(t) if check_nodata and why is None else True
            why = why or ("" if data else NODATA)
            rows.append({"tile": t.index, "row": t.row, "col": t.col, "depth": depth_of(t.index), "x0": t.x0,
                         "y0": t.y0, "valid_w": t.valid_wh[0], "valid_h": t.valid_wh[1], "has_data": data,
                         "run": not why, "skip": why, "refined_prompts": ",".join(map(str, marks.get(t.index, []))),
                         "core": f.core.buffer(0).wkt, "geometry": f.window})
    return gpd.GeoDataFrame(rows, geometry="geometry", crs=inp.crs.to_wkt() if inp.crs else None)


def refined_tiles(report: dict, path: str) -> list[dict]:
    """The refined tiles of `path` in a run report: [{"path": [...], "prompts": [...], "index": ...}]."""
    out = []
    for t in (report.get("refine") or {}).get("tiles", []):
        src = t.get("source", "")
        if src and os.path.abspath(src) != os.path.abspath(path) and os.path.basename(src) != os.path.basename(path):
            continue
        out.append({"path": list(t["path"]), "prompts": t.get("prompts", []), "index": t["tile"]})
    return out


def sub_tiles(grid: TileGrid, refined: list[dict]) -> list[Tile]:
    """The sub-tiles the refined tiles (by their paths from a grid tile) were split into, parents first."""
    ref = Refiner(grid, max((len(r["path"]) for r in refined), default=1))
    by_index: dict[int, Tile] = {}
    out = []
    for r in sorted(refined, key=lambda r: len(r["path"])):
        p = r["path"]
        if len(p) == 1 and not 0 <= p[0] < len(grid):
            continue  # a report of another grid (other --scale or --overlap): nothing to show
        tile = grid.tile(*divmod(p[0], grid.shape[1])) if len(p) == 1 else by_index.get(r["index"])
        if tile is None:
            continue
        for s in ref.children(tile):
            by_index[s.index] = s
            out.append(s)
    return out
