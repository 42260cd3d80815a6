"""Writing results: GeoPackage, GeoParquet, FlatGeobuf or GeoJSON by extension, atomically.

Every write goes to a temporary name beside the target and is renamed into place, so a reader never
sees half a file. A lock file stops two runs from writing one output at once.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import geopandas as gpd

from .atomic import DRIVERS, atomic_path
from .qupath import write_qupath_geojson

#: Written into files without a CRS so that no reader mistakes pixel coordinates for degrees.
#: Rows written at a time where the format can append (GeoPackage).
CHUNK_ROWS = 100_000
NO_CRS_NOTE = "no CRS: coordinates are source-image pixels (x right, y down), not a map projection"


def write_vector(gdf: gpd.GeoDataFrame, path: str | os.PathLike, layer: str = "objects",
                 metadata: dict | None = None) -> Path:
    """Write `gdf` by extension, atomically. A GeoDataFrame without a CRS is written as 'no CRS'."""
    p = Path(path)
    driver = DRIVERS[p.suffix.lower()]
    with atomic_path(p) as tmp:
        if driver == "Parquet":
            meta = {"sam3tiles": json.dumps(metadata or {})}
            gdf.to_parquet(tmp, index=False, schema_version="1.1.0", write_covering_bbox=False)
            if gdf.crs is None or metadata:
                _patch_parquet(tmp, meta, no_crs=gdf.crs is None)
        elif driver == "GPKG":
            kw = {}
            if metadata:
                kw["metadata"] = {"sam3tiles": json.dumps(metadata)}
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*crs.*was not provided", category=UserWarning)
                # in chunks: the WKB of one chunk at a time, not of every object at once
                for i in range(0, max(len(gdf), 1), CHUNK_ROWS):
                    part = gdf.iloc[i:i + CHUNK_ROWS]
                    if i == 0:
                        part.to_file(tmp, driver=driver, layer=layer, engine="pyogrio", layer_options={
                            "DESCRIPTION": NO_CRS_NOTE if gdf.crs is None else "sam3tiles objects"}, **kw)
                    else:
                        part.to_file(tmp, driver=driver, layer=layer, engine="pyogrio", mode="a")
        elif driver == "GeoJSON" and gdf.crs is None:
            write_qupath_geojson(gdf, tmp, metadata)  # pixel space: detections QuPath imports as they are
        else:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*crs.*was not provided", category=UserWarning)
                gdf.to_file(tmp, driver=driver, engine="pyogrio")
    return p


def _patch_parquet(path: Path, extra: dict, no_crs: bool) -> None:
    """GeoParquet: `"crs": null` says 'unknown CRS' (an omitted crs would mean WGS84)."""
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    meta = dict(table.schema.metadata or {})
    geo = json.loads(meta[b"geo"])
    if no_crs:
        for col in geo["columns"].values():
            col["crs"] = None
    meta[b"geo"] = json.dumps(geo).encode()
    for k, v in extra.items():
        meta[k.encode()] = v.encode()
    pq.write_table(table.replace_schema_metadata(meta), path)
