"""Merged objects -> the output GeoDataFrame: columns, CRS, areas, the id column, the file metadata.

Columns: id, prompt, score, area (CRS units squared), area_px (source pixels), n_tiles, source, backend,
model, geometry in the source CRS (no CRS for plain images: pixel coordinates, y down).
"""

from __future__ import annotations

import os

import geopandas as gpd
import numpy as np
import pandas as pd

from .errors import UsageError
from .merge import Merged
from .report import RunReport
from .writers import NO_CRS_NOTE

COLUMNS = ["id", "prompt", "score", "area", "area_px", "n_tiles", "source", "backend", "model"]


def objects_frame(merged: Merged, labels: list[str], *, crs, pixel_area: float, source: str, backend: str,
                  model: str, simplify: float = 0.0, min_area: float = 0.0) -> gpd.GeoDataFrame:
    """One input's merged objects as rows (no id yet: ids are given when outputs are written).

    `labels`: the output's `prompt` value per prompt index; `pixel_area`: CRS units squared per source
    pixel; `simplify` and `min_area` in CRS units."""
    geoms = merged.geometry
    if simplify > 0 and geoms:
        geoms = list(gpd.GeoSeries(geoms).simplify(simplify, preserve_topology=True))
    wkt = crs.to_wkt() if crs else None
    gdf = gpd.GeoDataFrame({
        "prompt": [labels[i] for i in merged.prompt],
        "score": np.asarray(merged.score, dtype=np.float32),
        "n_tiles": np.asarray(merged.n_tiles, dtype=np.int32),
    }, geometry=gpd.GeoSeries(geoms, crs=wkt), crs=wkt)
    if crs is not None:
        gdf = gdf.set_crs(wkt, allow_override=True)
    gdf["area"] = gdf.geometry.area
    gdf["area_px"] = gdf["area"] / pixel_area
    if min_area > 0:
        gdf = gdf[gdf["area"] >= min_area]
    gdf["source"] = os.path.basename(source)
    gdf["backend"] = backend
    gdf["model"] = model
    return gdf.reset_index(drop=True)


def finish(gdf: gpd.GeoDataFrame) -> gpd.GeoDataFrame:
    """The id column (1..n) and the column order of the outputs."""
    gdf = gdf.copy()
    gdf.insert(0, "id", np.arange(1, len(gdf) + 1, dtype=np.int64))
    cols = [c for c in COLUMNS if c in gdf.columns] + [c for c in gdf.columns if c not in COLUMNS]
    return gdf[cols]


def combine(frames: list[gpd.GeoDataFrame]) -> gpd.GeoDataFrame:
    """Every input's objects in one frame (one CRS), ids over all of them."""
    if not frames:
        return gpd.GeoDataFrame(columns=COLUMNS + ["geometry"], geometry="geometry")
    crs = frames[0].crs
    if any(f.crs != crs for f in frames[1:]):
        raise UsageError("the inputs are in different CRSs, so they cannot share one output: give --out a "
                         "folder (one output per input)")
    gdf = gpd.GeoDataFrame(pd.concat(frames, ignore_index=True), geometry="geometry", crs=crs)
    return finish(gdf)


def file_metadata(report: RunReport, gdf: gpd.GeoDataFrame) -> dict:
    """What an output file records about the run that wrote it."""
    meta = {"version": report.version, "backend": report.backend, "model": report.model,
            "parameters": report.parameters}
    if gdf.crs is None:
        meta["crs"] = NO_CRS_NOTE
    return meta
