"""Merged objects -> the output GeoDataFrame: columns, CRS, areas, the id column, the file metadata.

Columns: id, prompt, score, the area named for its unit (`units.area_column`: area_m2 on a lon/lat or
metre CRS, area_ft2 / area_us_ft2 / ... on other projected CRSs, none without a CRS), area_px (source
pixels), area_um2 (slides of known pixel size), n_tiles, source (the input as given: path as passed, URL
without its query), backend, model, geometry in the source CRS (no CRS for plain images: pixel
coordinates, y down).
"""

from __future__ import annotations

import geopandas as gpd
import numpy as np
import pandas as pd

from ...errors import UsageError
from ...merge import Merged
from ...units import Frame, add_areas, area_column, area_unit, length_to_crs
from ...wording import opt
from ...writers import NO_CRS_NOTE
from ..planning.outputs import COLUMNS
from ..recording.report import RunReport

_HEAD, _TAIL = COLUMNS[:3], COLUMNS[5:]


def ordered(columns) -> list[str]:
    """The outputs' column order: id, prompt, score, the unit-named area column, area_px, area_um2,
    n_tiles, source, backend, model, then any others (geometry) as they come."""
    columns = list(columns)
    unit = [c for c in columns if c.startswith("area_") and c not in ("area_px", "area_um2")]
    areas = unit + [c for c in ("area_px", "area_um2") if c in columns]
    known = [*_HEAD, *areas, *_TAIL]
    return [c for c in _HEAD if c in columns] + areas + [c for c in _TAIL if c in columns] + \
        [c for c in columns if c not in known]


def objects_frame(merged: Merged, labels: list[str], *, frame: Frame, source: str, backend: str, model: str,
                  simplify: float = 0.0, min_area: float = 0.0, max_area: float | None = None,
                  min_score: float = 0.5, order=None, area=None) -> gpd.GeoDataFrame:
    """One input's merged objects as rows (no id yet: ids are given when outputs are written).

    `labels`: the output's `prompt` value per prompt index; `frame`: the input's CRS, pixel grid and
    pixel size (`units.Frame`). `simplify` is in the frame's length unit (metres on a lon/lat CRS), the
    areas in `units.area_unit`; rows below `min_score` or outside [min_area, max_area] are dropped.
    `order`: per object, its order key (`merge.BlockMerger`'s `first`), kept in an `_order` column.
    `area` (`run.planning.area.AreaFilter`): only the objects that intersect the area of interest, clipped to it when
    it says so, before the areas are measured and filtered."""
    wkt = frame.crs.to_wkt() if frame.crs is not None else None
    geoms = merged.geometry
    if area is not None:
        geoms, kept = area.keep(geoms)
        idx = np.flatnonzero(kept)
        merged = Merged(geoms, [merged.score[i] for i in idx], [merged.prompt[i] for i in idx],
                        [merged.n_tiles[i] for i in idx])
        order = np.asarray(order)[idx] if order is not None else None
    tolerance = length_to_crs(frame, simplify)
    if tolerance > 0 and geoms:
        geoms = list(gpd.GeoSeries(geoms).simplify(tolerance, preserve_topology=True))
    gdf = gpd.GeoDataFrame({
        "prompt": [labels[i] for i in merged.prompt],
        "score": np.asarray(merged.score, dtype=np.float32),
        "n_tiles": np.asarray(merged.n_tiles, dtype=np.int32),
    }, geometry=gpd.GeoSeries(geoms, crs=wkt), crs=wkt)
    add_areas(gdf, frame)
    if order is not None:
        gdf["_order"] = np.asarray(order, dtype=np.int64)
    keep = gdf["score"].to_numpy() >= np.float32(min_score)
    area = gdf[area_column(frame)].to_numpy()
    if min_area > 0:
        keep &= area >= min_area
    if max_area is not None:
        keep &= area <= max_area
    gdf = gdf[keep]
    gdf["source"] = source
    gdf["backend"] = backend
    gdf["model"] = model
    return gdf.reset_index(drop=True)


def finish(gdf: gpd.GeoDataFrame) -> gpd.GeoDataFrame:
    """The id column (1..n) and the column order of the outputs."""
    gdf = gdf.copy()
    gdf.insert(0, "id", np.arange(1, len(gdf) + 1, dtype=np.int64))
    return gdf[ordered(gdf.columns)]


def combine(frames: list[gpd.GeoDataFrame]) -> gpd.GeoDataFrame:
    """Every input's objects in one frame (one CRS), ids over all of them."""
    if not frames:
        return gpd.GeoDataFrame(columns=COLUMNS + ["geometry"], geometry="geometry")
    crs = frames[0].crs
    if any(f.crs != crs for f in frames[1:]):
        raise UsageError(f"the inputs are in different CRSs, so they cannot share one output: give {opt('out')} a "
                         "folder (one output per input)")
    gdf = gpd.GeoDataFrame(pd.concat(frames, ignore_index=True), geometry="geometry", crs=crs)
    return finish(gdf)


def file_metadata(report: RunReport, gdf: gpd.GeoDataFrame, frames: dict[str, Frame] | None = None) -> dict:
    """What an output file records about the run that wrote it (with the units of its area columns)."""
    meta = {"version": report.version, "backend": report.backend, "model": report.model,
            "parameters": report.parameters}
    if gdf.crs is None:
        meta["crs"] = NO_CRS_NOTE
    if frames:
        source, frame = next(iter(frames.items()))
        meta["pixel_frame"] = pixel_frame(source, frame)
        meta["units"] = {"area_px": "source pixels"}
        if frame.crs is not None:
            meta["units"] = {area_column(frame): area_unit(frame), **meta["units"]}
        if any(f.pixel_size_um for f in frames.values()):
            meta["units"]["area_um2"] = "square micrometres (OME physical pixel size)"
    return meta


def pixel_frame(source: str, frame: Frame) -> dict:
    """The pixel grid of an output's first input, recorded in the file: the napari plugin draws every object
    in it (`integrations.napari`: data (row, col) = the centre of that source pixel), so the objects lie on
    the source image whichever reader opens it. `transform`: pixel -> CRS, rasterio's (a, b, c, d, e, f)."""
    crs = frame.crs
    wkt = None if crs is None else crs.to_wkt() if hasattr(crs, "to_wkt") else str(crs)
    return {"source": source, "transform": [float(v) for v in tuple(frame.transform)[:6]], "crs": wkt,
            "width": int(frame.width), "height": int(frame.height)}
