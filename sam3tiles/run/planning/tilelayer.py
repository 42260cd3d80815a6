"""The tile layer of `sam3tiles plan`: one row per tile of a planned input (and, from a run report, the
sub-tiles its refined tiles were split into), as the run would read them."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import geopandas as gpd
import numpy as np
import pandas as pd
import shapely

from ...readers import gdal_env, open_source
from ...tiling.frame import TileFrames, grid_frames
from ...tiling.grid import Tile, TileGrid
from ...tiling.refine import Refiner
from ...tiling.selection import NODATA
from .plan import InputPlan


@dataclass(frozen=True)
class TileCounts:
    """What the plan says of a grid: its tiles, rows and cols, and the tiles skipped per reason."""

    tiles: int
    rows: int
    cols: int
    skipped: dict = field(default_factory=dict)  # reason -> tiles

    @property
    def run(self) -> int:
        return self.tiles - sum(self.skipped.values())

    @classmethod
    def of_layer(cls, layer: gpd.GeoDataFrame) -> TileCounts:
        """The counts of a tile layer's grid tiles (`tile_plan`: depth 0)."""
        grid = layer[layer["depth"] == 0]
        why = grid.loc[~grid["run"], "skip"].value_counts()
        return cls(len(grid), int(grid["row"].max()) + 1, int(grid["col"].max()) + 1,
                   {k: int(v) for k, v in why.items()})


@gdal_env()
def tile_counts(inp: InputPlan, check_nodata: bool = True) -> TileCounts:
    """`TileCounts.of_layer(tile_plan(inp))` without the layer: the skip rules' codes over the grid at once,
    and (when the file may hold nodata) each tile that runs read, one at a time, as the layer reads them. No
    per-tile object is kept: a grid of 10^6 tiles is counted in seconds, in the memory of a few arrays."""
    codes, reasons = _codes(inp)
    if check_nodata:
        with open_source(inp.path, bands=inp.bands, stretch=inp.stretch) as src:
            codes[~_has_data(inp, src, codes)] = len(reasons) + 1
        reasons = (*reasons, NODATA)
    n = np.bincount(codes, minlength=len(reasons) + 1)
    skipped: dict[str, int] = {}
    for k, reason in enumerate(reasons, 1):
        if n[k]:
            skipped[reason] = skipped.get(reason, 0) + int(n[k])
    rows, cols = inp.grid.shape if inp.grid is not None else (1, 1)
    return TileCounts(len(codes), rows, cols, skipped)


def _codes(inp: InputPlan) -> tuple[np.ndarray, tuple[str, ...]]:
    """The grid's selection codes (0: runs; k: skipped by reason k), a copy, and the reasons."""
    sel = inp.selection()
    if sel is None:
        return np.zeros(inp.n_tiles, np.uint8), ()
    return sel.codes.copy(), tuple(r.reason for r in sel.rules)


def _has_data(inp: InputPlan, src, codes: np.ndarray) -> np.ndarray:
    """Per grid tile: False where a tile that runs (code 0) is all nodata. Tiles are read only when the file
    may hold nodata, each made as it is read and dropped (`Source.tile_has_data`)."""
    out = np.ones(len(codes), bool)
    if not src.may_have_nodata():  # every tile has data: nothing to read
        return out
    if inp.grid is None:
        out[0] = src.tile_has_data(next(inp.tiles()))
        return out
    cols = inp.grid.shape[1]
    for i in np.flatnonzero(codes == 0).tolist():
        out[i] = src.tile_has_data(inp.grid.tile(*divmod(i, cols)))
    return out


@gdal_env()
def tile_plan(inp: InputPlan, check_nodata: bool = True, report: dict | None = None) -> gpd.GeoDataFrame:
    """One row per tile of a planned input: index, row, col, depth, offsets, valid size, has_data, run, skip;
    geometry = the tile's window in the CRS (column `core` holds the part the tile owns, as WKT). `run`:
    whether the run encodes it; `skip`: why not (`tiling.selection`: outside the area, no tissue, all
    nodata; empty when it runs). Tiles skipped before any read are not read (has_data True). `report`: a
    run report (dict) of this input; its refined tiles' sub-tiles are added as rows of depth >= 1 (column
    `refined_prompts` on the refined tiles). The grid's rows are made as arrays over the whole grid (no
    `Tile` per row), the few sub-tiles one by one."""
    refined = refined_tiles(report, inp.path) if report and inp.grid is not None else []
    marks = {r["index"]: ",".join(map(str, r["prompts"])) for r in refined}
    codes, reasons = _codes(inp)
    with open_source(inp.path, bands=inp.bands, stretch=inp.stretch) as src:
        data = _has_data(inp, src, codes) if check_nodata else np.ones(len(codes), bool)
        if inp.grid is None:
            cols = _tile_columns(list(inp.tiles()), TileFrames(None), src, False, lambda i: 0, {})  # read above
        else:
            cols = _grid_columns(inp.grid)
        why = np.asarray(["", *reasons], dtype=object)[codes]
        why[(codes == 0) & ~data] = NODATA
        cols.update(has_data=data, run=why == "", skip=why)
        cols["refined_prompts"] = prompts = np.full(len(codes), "", dtype=object)
        for i, m in marks.items():
            if 0 <= i < len(codes):  # a grid tile (the others are sub-tiles)
                prompts[i] = m
        layer = pd.DataFrame({k: cols[k] for k in COLUMNS})
        if refined:
            depth_of = Refiner(inp.grid, max(len(r["path"]) for r in refined)).depth_of
            subs = _tile_columns(sub_tiles(inp.grid, refined), TileFrames(inp.grid), src, check_nodata, depth_of,
                                 marks)
            layer = pd.concat([layer, pd.DataFrame({k: subs[k] for k in COLUMNS})], ignore_index=True)
    return gpd.GeoDataFrame(layer, geometry="geometry", crs=inp.crs.to_wkt() if inp.crs else None)


#: The tile layer's columns, in order.
COLUMNS = ("tile", "row", "col", "depth", "x0", "y0", "valid_w", "valid_h", "has_data", "run", "skip",
           "refined_prompts", "core", "geometry")


def _grid_columns(grid: TileGrid) -> dict:
    """The geometric columns of every grid tile, as arrays (`frame.grid_frames`)."""
    g = grid_frames(grid)
    return {"tile": np.arange(len(grid), dtype=np.int64), "row": g["row"], "col": g["col"],
            "depth": np.zeros(len(grid), np.int64), "x0": g["x0"], "y0": g["y0"], "valid_w": g["valid_w"],
            "valid_h": g["valid_h"], "core": shapely.to_wkt(shapely.buffer(g["core"], 0), rounding_precision=-1),
            "geometry": g["window"]}


def _tile_columns(tiles: list[Tile], frames: TileFrames, src, check_nodata: bool, depth_of, marks: dict) -> dict:
    """The columns of a few tiles (sub-tiles, a squashed image's one tile), made one tile at a time; a
    sub-tile's has_data is read here, its `run` and `skip` follow; `marks`: refined tiles' prompts."""
    fs = [frames.frame(t) for t in tiles]
    data = [src.tile_has_data(t) if check_nodata else True for t in tiles]
    return {"tile": [t.index for t in tiles], "row": [t.row for t in tiles], "col": [t.col for t in tiles],
            "depth": [depth_of(t.index) for t in tiles], "x0": [t.x0 for t in tiles], "y0": [t.y0 for t in tiles],
            "valid_w": [t.valid_wh[0] for t in tiles], "valid_h": [t.valid_wh[1] for t in tiles],
            "has_data": data, "run": data, "skip": ["" if d else NODATA for d in data],
            "refined_prompts": [marks.get(t.index, "") for t in tiles], "core": [f.core.buffer(0).wkt for f in fs],
            "geometry": [f.window for f in fs]}


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
