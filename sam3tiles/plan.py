"""The tile plan of a raster: tiles, skipped (nodata) tiles, and the grid as polygons."""

from __future__ import annotations

import geopandas as gpd

from .merge import tile_frame
from .pipeline import Options, tiles_of
from .readers import open_source


def plan(path: str, opts: Options | None = None, check_nodata: bool = True) -> gpd.GeoDataFrame:
    """One row per tile: index, row, col, offsets, valid size, has_data; geometry = the tile's window in
    the CRS (column `core` holds the part the tile owns, as WKT)."""
    opts = opts or Options()
    with open_source(path, bands=opts.bands) as src:
        tiles, overlap = tiles_of(src, opts)
        rows = []
        for t in tiles:
            f = tile_frame(t, overlap)
            rows.append({"tile": t.index, "row": t.row, "col": t.col, "x0": t.x0, "y0": t.y0,
                         "valid_w": t.valid_wh[0], "valid_h": t.valid_wh[1],
                         "has_data": src.tile_has_data(t) if check_nodata else True,
                         "core": f.core.buffer(0).wkt, "geometry": f.window})
        crs = src.crs.to_wkt() if src.crs else None
    return gpd.GeoDataFrame(rows, geometry="geometry", crs=crs)
