"""The area of interest (`--aoi`): a vector file or a box, as one polygonal geometry in the raster's frame.

`read_area(spec, crs)` reads `PATH[:LAYER]` (any vector format GDAL reads, any CRS: reprojected to the
raster's; every polygon of the layer) or `MINX,MINY,MAXX,MAXY` (in the raster's CRS; pixels for a raster
without one) and returns their union. A raster without a CRS (a slide) takes the file's coordinates as
level-0 pixels: a QuPath GeoJSON export (a FeatureCollection, or QuPath's bare list of features), or a
GeoJSON / GeoPackage without CRS. What cannot be an area is refused before any tile, with the fix named:
a missing, unreadable or empty file, points or lines (exit 3), a file without CRS on a georeferenced
raster, a file with one on a slide (exit 3), a box that is no box (exit 2). Whether the area meets the
raster is the plan's check (`run.planning.area`: exit 2 naming both extents).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

import numpy as np
import shapely
from shapely.geometry.base import BaseGeometry

from ..errors import CRSError, InputDataError, UsageError
from ..wording import opt

_NUMBER = r"\s*[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?\s*"
_BOX = re.compile(rf"^{_NUMBER},{_NUMBER},{_NUMBER},{_NUMBER}$")
_POLYGONAL = (3, 6)  # shapely type ids: Polygon, MultiPolygon


@dataclass(frozen=True, eq=False)
class Area:
    """The area of interest in the raster's CRS (pixels without one): `geometry`, polygonal; `text`: as given."""

    geometry: BaseGeometry
    text: str

    @property
    def bounds(self) -> tuple[float, float, float, float]:
        return tuple(self.geometry.bounds)  # type: ignore[return-value]


def is_box(spec: str) -> bool:
    """`MINX,MINY,MAXX,MAXY` (four numbers), not a path."""
    return bool(_BOX.match(spec)) and not os.path.exists(spec)


def split_layer(spec: str) -> tuple[str, str | None]:
    """`PATH[:LAYER]` -> (path, layer or None). A path that exists as given has no layer (a Windows drive's
    colon, a name with a colon)."""
    if os.path.exists(spec) or ":" not in spec or "://" in spec:
        return spec, None
    path, layer = spec.rsplit(":", 1)
    if not path or not layer or "/" in layer or "\\" in layer:
        return spec, None
    return path, layer


def read_area(spec: str, crs) -> Area:
    """The area `spec` names (see the module) in the CRS `crs` (rasterio CRS; None: pixel space)."""
    spec = str(spec).strip()
    if is_box(spec):
        x0, y0, x1, y1 = (float(v) for v in spec.split(","))
        if not (x1 > x0 and y1 > y0):
            raise UsageError(f"{opt('aoi', spec)}: a box is MINX,MINY,MAXX,MAXY with MINX < MAXX and MINY < MAXY: "
                             "swap the corners")
        return Area(shapely.box(x0, y0, x1, y1), spec)
    path, layer = split_layer(spec)
    gdf = _read(spec, path, layer)
    geoms = np.asarray(gdf.geometry.values, dtype=object)
    geoms = geoms[~(shapely.is_missing(geoms) | shapely.is_empty(geoms))] if len(geoms) else geoms
    if not len(geoms):
        raise InputDataError(f"{opt('aoi', spec)} holds no geometry: draw the area (one or more polygons) and "
                             "save it again")
    geoms = shapely.force_2d(_polygons(spec, geoms))  # a drawn Z (3D polygons) would pass into clipped outputs
    geoms = _placed(spec, path, gdf.crs, geoms, crs)
    area = shapely.union_all(shapely.make_valid(geoms))
    area = _polygonal(area)
    if area.is_empty or area.area <= 0:
        raise InputDataError(f"{opt('aoi', spec)}: its polygons have no area: draw the area again")
    return Area(area, spec)


def _read(spec: str, path: str, layer: str | None):
    """The layer as a GeoDataFrame (QuPath's bare list of features too); unreadable: exit 3 naming why."""
    import geopandas as gpd
    import pyogrio

    if "://" not in path and not path.startswith("/vsi") and not os.path.exists(path):
        raise InputDataError(f"{opt('aoi', spec)}: no such file: check the path (a box is MINX,MINY,MAXX,MAXY)")
    if os.path.isdir(path) and not path.rstrip("/").endswith(".gdb"):
        raise InputDataError(f"{opt('aoi', spec)} is a folder: give a vector file (GeoPackage, GeoJSON, ...)")
    try:
        layers = [str(n) for n, _ in pyogrio.list_layers(path)]
    except Exception as e:  # noqa: BLE001 - GDAL's many ways to say "not a vector file"
        bare = _qupath_list(path)
        if bare is not None:
            return bare
        raise InputDataError(f"{opt('aoi', spec)} is not a vector file GDAL can read ({_first_line(e)}): give a "
                             "GeoPackage, GeoJSON (a QuPath export), Shapefile or similar") from None
    if layer is not None and layer not in layers:
        raise UsageError(f"{opt('aoi', spec)}: {path} has no layer {layer!r}: its layers are {', '.join(layers)}")
    if layer is None and len(layers) > 1:
        raise UsageError(f"{opt('aoi', spec)}: {path} holds {len(layers)} layers ({', '.join(layers[:5])}"
                         f"{', ...' if len(layers) > 5 else ''}): name one, e.g. {opt('aoi', f'{path}:{layers[0]}')}")
    try:
        return gpd.read_file(path, layer=layer)
    except Exception as e:  # noqa: BLE001
        raise InputDataError(f"{opt('aoi', spec)}: cannot read it ({_first_line(e)}): check the file") from None


def _qupath_list(path: str):
    """QuPath's export without 'FeatureCollection' (a JSON list of features), as a GeoDataFrame; None when the
    file is not one."""
    import geopandas as gpd
    from shapely.geometry import shape

    try:
        if os.path.getsize(path) > 2**30:
            return None
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        if not isinstance(data, list) or not data or not all(isinstance(d, dict) for d in data):
            return None
        geoms = [shape(d["geometry"]) if d.get("geometry") else None for d in data]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return gpd.GeoDataFrame(geometry=geoms, crs=None).assign(_qupath=True)


def _polygons(spec: str, geoms: np.ndarray) -> np.ndarray:
    """The polygonal geometries; points or lines anywhere: exit 3 with the fix."""
    parts = shapely.get_parts(geoms)
    kinds = shapely.get_type_id(parts)
    bad = ~np.isin(kinds, _POLYGONAL)
    if bad.any():
        kind = shapely.get_type_id(parts[bad][0])
        what = "points" if kind in (0, 4) else "lines" if kind in (1, 2, 5) else "geometries that are no polygons"
        raise InputDataError(f"{opt('aoi', spec)} holds {what} ({int(bad.sum())} of {len(parts)} part(s)): an area "
                             "is polygons: buffer them first (a corridor 200 m either side of a road: "
                             "ogr2ogr -dialect sqlite -sql \"SELECT ST_Buffer(geometry, 200) FROM roads\" area.gpkg "
                             "roads.gpkg, in a metre CRS), or draw polygons")
    return parts


def _placed(spec: str, path: str, file_crs, geoms: np.ndarray, crs) -> np.ndarray:
    """The geometries in the raster's CRS: reprojected, or taken as pixels for a raster without one."""
    geojson = path.lower().endswith((".geojson", ".json"))
    if crs is None:
        default = file_crs is None or (geojson and _is_wgs84(file_crs))  # GeoJSON without a `crs` member
        if not default and not _is_pixels(file_crs):
            raise CRSError(f"{opt('aoi', spec)} is in {file_crs.to_string()}, but the image has no CRS (pixel "
                           "coordinates): give the area in level-0 pixels without a CRS (a QuPath GeoJSON export, "
                           "or a GeoPackage without CRS)")
        return geoms
    if file_crs is None:
        raise CRSError(f"{opt('aoi', spec)} has no CRS but the raster has one ({crs.to_string()}): set the file's CRS "
                       "(ogr2ogr -a_srs EPSG:...) so the area can be placed")
    import geopandas as gpd

    out = gpd.GeoSeries(geoms, crs=file_crs).to_crs(crs.to_wkt())
    xy = shapely.get_coordinates(np.asarray(out.values, dtype=object))
    if not len(xy) or not np.isfinite(xy).all():
        raise CRSError(f"{opt('aoi', spec)}: its polygons cannot be placed in the raster's CRS ({crs.to_string()}): "
                       f"check the file's CRS ({file_crs.to_string()})")
    return np.asarray(out.values, dtype=object)


def _is_wgs84(crs) -> bool:
    try:
        return crs.to_epsg() in (4326, 4979) or "CRS84" in crs.to_string()  # 4979: GDAL's for a GeoJSON with Z
    except Exception:  # noqa: BLE001
        return False


def _is_pixels(crs) -> bool:
    """Our own pixel CRS (the QuPath writer's engineering CRS) or another engineering (local) one."""
    try:
        return crs.is_engineering or "pixel" in crs.to_wkt().lower()
    except Exception:  # noqa: BLE001
        return False


def _polygonal(geom: BaseGeometry) -> BaseGeometry:
    """The polygonal part of a geometry (make_valid may leave lines beside the polygons)."""
    parts = shapely.get_parts(np.asarray([geom], dtype=object))
    parts = parts[np.isin(shapely.get_type_id(parts), _POLYGONAL)]
    return shapely.union_all(parts) if len(parts) else shapely.Polygon()


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
