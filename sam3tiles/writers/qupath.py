"""GeoJSON that QuPath imports as it is: one detection (or annotation) object per segmented object.

QuPath (v0.4 and later) reads a GeoJSON FeatureCollection feature by feature (File > Import objects, or
drag and drop). Per feature it reads:

* `id`: a UUID string (other ids are ignored), so we write a UUID derived from the source and the id;
* `geometry`: Polygon or MultiPolygon in full-resolution pixel coordinates, origin top-left, y down;
* `properties.objectType`: "detection" (default: light, fixed objects, for many cells) or "annotation"
  (`--qupath-type annotation`: objects one edits by hand; written with `isLocked: false`, as QuPath
  exports annotations);
* `properties.classification`: `{"name": ..., "color": [r, g, b]}`, here the prompt;
* `properties.name`, `properties.color`;
* `properties.measurements`: an object of name -> number (QuPath >= 0.4; older versions wrote a list of
  {name, value}); here score, area_px, n_tiles, the label id and, when the slide states its pixel size,
  "Area µm^2" (QuPath's own name for a calibrated area);
* `properties.metadata`: an object of name -> string.

Other properties are kept beside these (QuPath ignores them; other readers see the usual columns), and
`centroid_x_px`, `centroid_y_px`: the centroid, which a viewer of 10^5-10^6 objects reads instead of the outline.
The FeatureCollection names its frame in a `crs` member (GeoJSON 2008 style): an engineering CRS of the
slide's pixels (`PIXEL_CRS_WKT`), so GDAL and QGIS do not read the pixel coordinates as WGS84 lon/lat, as
they do for a GeoJSON without one. QuPath ignores the member, as it ignores `name` and `sam3tiles`.
The file is streamed feature by feature, so a million nuclei do not need a second copy in memory.
"""

from __future__ import annotations

import colorsys
import hashlib
import json
import math
import os
import uuid
from pathlib import Path

import geopandas as gpd
import numpy as np
import shapely
from PIL import ImageColor


#: Numeric columns written as QuPath measurements (when present).
MEASUREMENTS = ("score", "area_px", "n_tiles")
#: Columns written under the name QuPath gives the measurement (its calibrated shape feature).
QUPATH_NAMES = {"area_um2": "Area µm^2"}
#: Properties holding each object's centroid (x, y in pixels), beside the measurements: the napari reader
#: shows 10^5-10^6 objects as points from them without parsing the outlines (`integrations.napari_objects`).
CENTROID = ("centroid_x_px", "centroid_y_px")
#: Columns written as QuPath metadata (strings).
METADATA = ("source", "backend", "model")
_NAMESPACE = uuid.UUID("5d1c1f6e-6a8f-4b8e-9a55-3a2b7f0c9e11")
#: The name of the pixel grid the files' `crs` member states (an engineering CRS: GDAL and QGIS read it as
#: such, not as the lon/lat they assume for a GeoJSON without one). QuPath ignores the member.
PIXEL_CRS_NAME = "sam3tiles source image pixels (x right, y down)"
PIXEL_CRS_WKT = (f'ENGCRS["{PIXEL_CRS_NAME}",EDATUM["source image, full resolution"],CS[Cartesian,2],'
                 'AXIS["x (right)",east,ORDER[1],LENGTHUNIT["pixel",1]],'
                 'AXIS["y (down)",south,ORDER[2],LENGTHUNIT["pixel",1]]]')


def is_pixel_crs(crs) -> bool:
    """Whether `crs` (pyproj CRS, WKT or None) is the pixel grid our QuPath GeoJSON names."""
    if crs is None:
        return False
    name = getattr(crs, "name", None) or str(crs)
    return PIXEL_CRS_NAME in str(name)


def class_colour(name: str) -> list[int]:
    """The classification colour: the prompt's own colour when it names one (e.g. 'red'), else a stable
    bright colour from a hash of the name."""
    try:
        return [int(v) for v in ImageColor.getrgb(str(name).strip().lower())[:3]]
    except (ValueError, AttributeError):
        pass
    h = int(hashlib.sha256(str(name).encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return [int(round(255 * v)) for v in colorsys.hsv_to_rgb(h, 0.75, 0.95)]


def _number(v):
    """A JSON-safe number, or None for NaN/inf/missing."""
    if v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(f):
        return None
    return int(f) if isinstance(v, (int, np.integer)) else f


def _plain(v):
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating, float)):
        return float(v) if math.isfinite(float(v)) else None
    if isinstance(v, (np.bool_,)):
        return bool(v)
    if v is None or isinstance(v, (str, int, bool)):
        return v
    return str(v)


def _polygonal(geom):
    """Polygon/MultiPolygon only (QuPath ROIs): drop points and lines a make_valid may have left."""
    if geom is None or geom.is_empty:
        return None
    if geom.geom_type in ("Polygon", "MultiPolygon"):
        return geom
    polys = [g for g in getattr(geom, "geoms", []) if g.geom_type in ("Polygon", "MultiPolygon")]
    if not polys:
        return None
    return shapely.union_all(polys)


OBJECT_TYPES = ("detection", "annotation")


def feature_collection_lines(gdf: gpd.GeoDataFrame, metadata: dict | None = None, chunk: int = 5000,
                             name: str | None = None, object_type: str = "detection"):
    """The file's text in pieces: header, one feature per piece, footer (rows converted `chunk` at a time).
    `object_type`: QuPath's objectType, "detection" or "annotation"."""
    if object_type not in OBJECT_TYPES:
        raise ValueError(f"object_type must be one of {OBJECT_TYPES}, got {object_type!r}")
    cols = [c for c in gdf.columns if c != gdf.geometry.name]
    ids = gdf["id"].to_numpy() if "id" in gdf.columns else np.arange(1, len(gdf) + 1)
    colours: dict[str, list[int]] = {}
    # the pixel grid, named: GDAL and QGIS would otherwise take the coordinates for lon/lat (QuPath ignores it)
    head = {"type": "FeatureCollection", "crs": {"type": "name", "properties": {"name": PIXEL_CRS_WKT}}}
    if name:
        head["name"] = name  # the layer name GDAL reads (QuPath ignores it)
    if metadata:
        head["sam3tiles"] = metadata
    yield json.dumps(head, default=str)[:-1] + ', "features": [\n'
    first = True
    for start in range(0, len(gdf), chunk):
        part = gdf.iloc[start:start + chunk]
        geoms = [_polygonal(g) for g in part.geometry.values]
        shapes = np.asarray([g if g is not None else shapely.Polygon() for g in geoms], dtype=object)
        texts = shapely.to_geojson(shapes)
        centres = shapely.centroid(shapes)
        cx, cy = shapely.get_x(centres), shapely.get_y(centres)
        records = part[cols].to_dict("records") if cols else [{}] * len(part)
        for i, rec in enumerate(records):
            if geoms[i] is None:
                continue
            oid = int(ids[start + i])
            props: dict = {"objectType": object_type}
            if object_type == "annotation":
                props["isLocked"] = False
            if "prompt" in rec:
                name = str(rec["prompt"])
                colour = colours.setdefault(name, class_colour(name))
                props["name"] = f"{name} {oid}"
                props["classification"] = {"name": name, "color": colour}
            meas = {"id": oid}
            for k in (*MEASUREMENTS, *QUPATH_NAMES):
                if k in rec:
                    v = _number(rec[k])
                    if v is not None:
                        meas[QUPATH_NAMES.get(k, k)] = v
            props["measurements"] = meas
            # a viewer places 10^6 objects from these without parsing their outlines
            props[CENTROID[0]], props[CENTROID[1]] = round(float(cx[i]), 3), round(float(cy[i]), 3)
            meta = {k: str(rec[k]) for k in METADATA if k in rec and rec[k] is not None}
            if meta:
                props["metadata"] = meta
            for k, v in rec.items():
                if k not in props:
                    props[k] = _plain(v)
            fid = str(uuid.uuid5(_NAMESPACE, f"{rec.get('source', '')}|{oid}"))
            text = ('{"type": "Feature", "id": "' + fid + '", "geometry": ' + texts[i] + ', "properties": '
                    + json.dumps(props, allow_nan=False) + "}")
            yield ("" if first else ",\n") + text
            first = False
    yield "\n]}\n"


def write_qupath_geojson(gdf: gpd.GeoDataFrame, path: str | os.PathLike, metadata: dict | None = None,
                         name: str | None = None, object_type: str = "detection") -> Path:
    """Write `gdf` (pixel coordinates, no CRS) to `path` as QuPath detections or annotations. Not atomic by
    itself: `writers.vector.write_vector` calls it on a temporary name and renames the file into place."""
    p = Path(path)
    with open(p, "w", encoding="utf-8") as f:
        for piece in feature_collection_lines(gdf, metadata, name=name, object_type=object_type):
            f.write(piece)
    return p
