"""Writing results: GeoPackage, GeoParquet, FlatGeobuf, GeoJSON or COCO by extension, atomically.

Every write goes to a temporary name beside the target and is renamed into place, so a reader never
sees half a file. A lock file stops two runs from writing one output at once.

* Layer names are the output's stem (`buildings.gpkg` -> `buildings`) unless `layer` is given.
* GeoPackage: a layer is written into an existing GeoPackage by copy, write, rename: the file is copied
  to the temporary name, the layer is written (or replaced) in the copy, and the copy is renamed over
  the original. Every other layer stays as it was, a reader never sees a half-written layer, and a run
  killed while writing leaves the original untouched. A SQLite transaction would avoid the copy, but the
  layer is written in chunks by GDAL (several transactions) and a replaced layer is dropped and created
  again, so only the copy keeps the file all-or-nothing; the price is one copy of the existing file.
* GeoJSON with a CRS is RFC 7946 (WGS84 lon/lat, no `crs` member) unless `geojson_crs="native"`;
  coordinates keep a tenth of a source pixel. Without a CRS (pixel space) it is QuPath's GeoJSON and
  must be named `*.qupath.geojson`: GIS tools read a plain GeoJSON as lon/lat, so a plain `.geojson` of
  pixel coordinates is refused (`check_geojson_frame`); the QuPath file also names its pixel grid in a
  `crs` member, which GDAL/QGIS read as an engineering CRS, not lon/lat (`writers.qupath`).
* Objects may come as chunks (an iterator of GeoDataFrames, from `writers.stream.ObjectSpool`): GeoPackage
  and GeoParquet are written a chunk at a time (GeoParquet: one part per chunk, then joined into one file
  row group by row group); FlatGeobuf, GeoJSON and COCO join the chunks in memory.
* A partitioned GeoParquet dataset (`dataset=True`, `name.parquet/`) is a folder of parts
  `part-00000.parquet`, ... (GeoParquet 1.1, each with a covering `bbox` column), written under a temporary
  name and renamed into place whole.
* FlatGeobuf carries the run metadata in its header (title, description, metadata); GeoPackage in the
  layer's metadata; GeoParquet in its schema (pandas attrs, `sam3tiles` key); GeoJSON as a foreign
  member `sam3tiles` of the FeatureCollection.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Iterable

import geopandas as gpd
import numpy as np
import pandas as pd

from ..errors import OutputError, OutputExistsError, UsageError
from ..units import Frame, area_column, area_unit, coordinate_precision, lonlat_resolution, native_resolution
from .atomic import DRIVERS, atomic_path
from .held import settle
from .qupath import write_qupath_geojson
from ..wording import enable, opt

#: Rows written at a time where the format can append (GeoPackage).
CHUNK_ROWS = 100_000
#: The GeoPackage version of new files: 1.2, what GDAL 3.6 (Debian 12, QGIS 3.22 LTS) writes itself. GDAL
#: >= 3.7 writes 1.4 by default, on which GDAL 3.6 warns at every open ("user_version ... may only be
#: partially supported") and its validate_gpkg.py fails (1.4's R-tree update6/update7 triggers, where
#: 1.2 has update1/update3). A layer added to an existing file keeps that file's version (and GDAL writes
#: the triggers of that version). Measured: docs/outputs.md.
GPKG_VERSION = "1.2"
#: Written into files without a CRS so that no reader mistakes pixel coordinates for degrees.
NO_CRS_NOTE = "no CRS: coordinates are source-image pixels (x right, y down), not a map projection"
GEOJSON_CRS = ("wgs84", "native")
#: Who opens a GeoParquet output (docs/outputs.md): said in the run report, since LTS GIS stacks do not.
PARQUET_READERS = ("{path}: GeoParquet 1.1 opens in geopandas, pyarrow, DuckDB, GDAL >= 3.5 built with its "
                   "Parquet driver (ogrinfo --formats | grep Parquet) and the QGIS builds on such a GDAL "
                   "(conda-forge, OSGeo4W); not in Debian/Ubuntu's GDAL or QGIS packages (no Parquet driver): "
                   "write a .gpkg for those")


def readers_note(path: str | os.PathLike) -> str | None:
    """A line for the run report naming the tools that open `path`'s format, where common ones cannot."""
    if Path(str(path).rstrip("/")).suffix.lower() in (".parquet", ".geoparquet"):
        return PARQUET_READERS.format(path=path)
    return None


#: Table names SQLite and the GeoPackage standard keep for themselves (compared ignoring case).
RESERVED_PREFIXES = ("sqlite_", "gpkg_", "rtree_")


def is_coco(path: str | os.PathLike) -> bool:
    return str(path).lower().endswith(".coco.json")


QUPATH_SUFFIX = ".qupath.geojson"


def is_qupath(path: str | os.PathLike) -> bool:
    """QuPath's flavour of GeoJSON (pixel coordinates) by name: `*.qupath.geojson`."""
    return str(path).lower().endswith(QUPATH_SUFFIX)


def check_geojson_frame(path: str | os.PathLike, crs) -> None:
    """A GeoJSON output must say its frame by its name: pixel space (no CRS) only as `.qupath.geojson`
    (a GIS tool reads a plain GeoJSON as WGS84 lon/lat: a silently wrong place on the map), a CRS only as
    plain `.geojson` (QuPath's flavour is in slide pixels)."""
    p = Path(path)
    if DRIVERS.get(p.suffix.lower()) != "GeoJSON" or is_coco(p):
        return
    base = p.name[: -len(QUPATH_SUFFIX)] if is_qupath(p) else p.stem
    if crs is None and not is_qupath(p):
        raise UsageError(f"{opt('out', p)}: the input has no CRS (pixel coordinates), and GIS tools read a plain GeoJSON "
                         f"as WGS84 lon/lat, so the objects would be drawn at wrong places without a warning: name "
                         f"it {base}{QUPATH_SUFFIX} for QuPath's GeoJSON in pixels, or write {base}.gpkg or "
                         f"{base}.parquet (they say 'no CRS')")
    if crs is not None and is_qupath(p):
        raise UsageError(f"{opt('out', p)}: QuPath's GeoJSON is in slide pixels, but the input has a CRS: name it "
                         f"{base}.geojson for RFC 7946 lon/lat (or {opt('geojson_crs', 'native')}), or write {base}.gpkg")


def layer_name(path: str | os.PathLike, layer: str | None = None) -> str:
    """The layer an output gets: `layer` when given, else the file's stem (`x.qupath.geojson`: x)."""
    if layer:
        return layer
    return Path(path).name[: -len(QUPATH_SUFFIX)] if is_qupath(path) else Path(path).stem


def gpkg_layers(path: str | os.PathLike) -> list[str] | None:
    """The layer names of a GeoPackage, or None when `path` is not one GDAL can open."""
    import pyogrio

    try:
        return [str(n) for n in pyogrio.list_layers(str(path))[:, 0]]
    except Exception:  # noqa: BLE001 - any failure means "not a GeoPackage we can write into"
        return None


def check_layer(path: str | os.PathLike, layer: str | None, overwrite: bool) -> None:
    """Before any work: `--layer` needs a .gpkg output; an existing layer of that name is replaced only
    with `overwrite`. Call after `check_output(path, overwrite or layer is not None)`."""
    p = Path(path)
    gpkg = p.suffix.lower() == ".gpkg"
    if layer is not None:
        if not gpkg:
            raise UsageError(f"{opt('layer', layer)}: only a GeoPackage holds several layers: give an {opt('out')} ending in "
                             f".gpkg, or drop {opt('layer')}")
        if not layer.strip() or layer.lower().startswith(RESERVED_PREFIXES):
            raise UsageError(f"{opt('layer', repr(layer))} is not a usable layer name (names starting with "
                             f"{', '.join(RESERVED_PREFIXES)} belong to SQLite and the GeoPackage itself): give a "
                             "name such as buildings")
    if not gpkg or not p.exists():
        return
    layers = gpkg_layers(p)
    if layers is None:
        if layer is not None:
            raise OutputError(f"{opt('out', p)} exists but is not a GeoPackage GDAL can open, so {opt('layer')} cannot write "
                              f"into it: choose another {opt('out')}")
        return  # not a GeoPackage: replaced whole (check_output has required --overwrite)
    name = layer_name(p, layer)
    same = [n for n in layers if n.lower() == name.lower()]  # SQLite table names ignore case
    if same and not overwrite:
        also = "" if same[0] == name else f" (SQLite names ignore case, so {name!r} is that layer)"
        raise OutputExistsError(f"{opt('out', p)} already holds a layer {same[0]!r}{also}: {enable('overwrite')} to replace "
                                f"that layer (the other layers are kept), or choose another {opt('layer')}")


def write_vector(gdf: "gpd.GeoDataFrame | Iterable[gpd.GeoDataFrame]", path: str | os.PathLike,
                 layer: str | None = None, metadata: dict | None = None, frames: dict[str, Frame] | None = None,
                 geojson_crs: str = "wgs84", prompts: list[str] | None = None, dataset: bool = False,
                 qupath_type: str = "detection") -> Path:
    """Write `gdf` by extension, atomically. A GeoDataFrame without a CRS is written as 'no CRS'.

    `gdf` is one GeoDataFrame or its chunks in order (the first, possibly empty, gives the columns).
    `frames` (source file name -> `units.Frame`) say each input's pixel grid: they set the GeoJSON
    coordinate precision, the area unit in the metadata and, for COCO, the images and pixel coordinates.
    `prompts` are the COCO categories, in order. A .gpkg that exists and holds other layers keeps them.
    `dataset`: `path` is a partitioned GeoParquet dataset folder (see the module doc).
    `qupath_type`: "detection" or "annotation", the objectType of QuPath GeoJSON (pixel space).
    """
    p = Path(path)
    chunks = iter([gdf] if isinstance(gdf, gpd.GeoDataFrame) else gdf)
    first = next(chunks)
    frames = frames or {}
    metadata = _json_safe(metadata or {})
    if dataset:
        with atomic_path(p, folder=True) as tmp:
            for k, chunk in enumerate(itertools.chain([first], chunks)):
                if k == 0 or len(chunk):
                    _write_parquet(chunk, tmp / f"part-{k:05d}.parquet", metadata)
        return p
    driver = DRIVERS[p.suffix.lower()]
    name = layer_name(p, layer)
    description = _description(first, frames)
    if driver not in ("GPKG", "Parquet"):  # formats without appends: the chunks joined in memory
        first = _joined(itertools.chain([first], chunks))
        if is_coco(p) or (driver == "GeoJSON" and (first.crs is None or is_qupath(p))):
            first = objects_only(first)
    with atomic_path(p) as tmp:
        if is_coco(p):
            from .coco import write_coco

            write_coco(first, tmp, frames, prompts, metadata)
        elif driver == "Parquet":
            _write_parquet_chunks(itertools.chain([first], chunks), tmp, metadata)
        elif driver == "GPKG":
            if p.exists() and gpkg_layers(p) is not None:
                settle(p)  # another program's WAL: checkpointed first, or refused while it holds the file
                shutil.copy2(p, tmp)  # copy, write the layer into the copy, rename: see the module docstring
            _write_gpkg(itertools.chain([first], chunks), tmp, name, metadata, description)
        elif driver == "GeoJSON" and (first.crs is None or is_qupath(p)):
            check_geojson_frame(p, first.crs)
            write_qupath_geojson(first, tmp, metadata, name=name, object_type=qupath_type)  # pixel space: QuPath
        elif driver == "GeoJSON":
            _write_geojson(first, tmp, name, metadata, description, frames, geojson_crs)
        else:
            # GDAL builds no FlatGeobuf spatial index over a row without a geometry (a point where nothing
            # was found): such a file is written without one
            index = {"SPATIAL_INDEX": "NO"} if driver == "FlatGeobuf" and first.geometry.isna().any() else {}
            _write_ogr(first, tmp, driver, name, {"TITLE": name, "DESCRIPTION": description, **index},
                       {"sam3tiles": json.dumps(metadata)} if metadata else None)
    return p


def objects_only(gdf: gpd.GeoDataFrame) -> gpd.GeoDataFrame:
    """The rows that are objects: formats that hold objects only (COCO annotations, QuPath objects) leave out
    the rows of points where nothing was found (no geometry; the run report counts them)."""
    missing = gdf.geometry.isna()
    return gdf[~missing] if missing.any() else gdf


def _joined(chunks: Iterable[gpd.GeoDataFrame]) -> gpd.GeoDataFrame:
    chunks = list(chunks)
    if len(chunks) == 1:
        return chunks[0]
    return gpd.GeoDataFrame(pd.concat(chunks, ignore_index=True), geometry="geometry", crs=chunks[0].crs)


def _write_parquet(gdf: gpd.GeoDataFrame, path: Path, metadata: dict) -> Path:
    """One GeoParquet 1.1 file with a covering `bbox` column (readers skip row groups by extent); no CRS is
    written as `"crs": null` (pixel space; an omitted crs would mean WGS84)."""
    out = gdf.copy(deep=False)
    out.attrs = {"sam3tiles": metadata} if metadata else {}
    out.to_parquet(path, index=False, schema_version="1.1.0", write_covering_bbox=True)
    return path


def _write_parquet_chunks(chunks: Iterable[gpd.GeoDataFrame], dest: Path, metadata: dict) -> None:
    """Chunks -> one GeoParquet file: a part per chunk in a temporary folder, then the parts joined one row
    group at a time; the `geo` metadata's bbox and geometry types cover every part."""
    import pyarrow.parquet as pq

    chunks = iter(chunks)
    first = next(chunks)
    second = next(chunks, None)
    if second is None:  # one chunk: written as it is
        _write_parquet(first, dest, metadata)
        return
    with tempfile.TemporaryDirectory(prefix=f".{dest.stem}.parts.", dir=dest.parent) as d:
        parts = [_write_parquet(c, Path(d) / f"part-{k:05d}.parquet", metadata)
                 for k, c in enumerate(itertools.chain([first, second], chunks)) if k == 0 or len(c)]
        metas = [json.loads(pq.read_schema(q).metadata[b"geo"]) for q in parts]
        geo = metas[0]
        for name, col in geo["columns"].items():
            boxes = [m["columns"][name].get("bbox") for m in metas if m["columns"][name].get("bbox")]
            if boxes:
                b = np.asarray(boxes, dtype=float)
                col["bbox"] = [b[:, 0].min(), b[:, 1].min(), b[:, 2].max(), b[:, 3].max()]
            col["geometry_types"] = sorted({t for m in metas for t in m["columns"][name].get("geometry_types", [])})
        schema = pq.read_schema(parts[0])
        meta = dict(schema.metadata)
        meta[b"geo"] = json.dumps(geo).encode()
        with pq.ParquetWriter(dest, schema.with_metadata(meta)) as w:
            for q in parts:
                w.write_table(pq.read_table(q).replace_schema_metadata(meta))


def _json_safe(metadata: dict) -> dict:
    return json.loads(json.dumps(metadata, default=str))


def _description(gdf: gpd.GeoDataFrame, frames: dict[str, Frame]) -> str:
    text = NO_CRS_NOTE if gdf.crs is None else "sam3tiles objects"
    if frames:
        frame = next(iter(frames.values()))
        if frame.crs is not None:
            text += f"; {area_column(frame)}: {area_unit(frame)}"
        text += "; area_px: source pixels"
        if any(f.pixel_size_um for f in frames.values()):
            text += "; area_um2: square micrometres"
    return text


def _write_ogr(gdf, path: Path, driver: str, layer: str, layer_options: dict, layer_metadata: dict | None,
               **kw) -> None:
    import pyogrio

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*crs.*was not provided", category=UserWarning)
        warnings.filterwarnings("ignore", message=".*'crs' was not provided", category=RuntimeWarning)
        pyogrio.write_dataframe(gdf, path, driver=driver, layer=layer, layer_options=layer_options,
                                layer_metadata=layer_metadata, **kw)


def _write_gpkg(chunks: Iterable[gpd.GeoDataFrame], path: Path, layer: str, metadata: dict,
                description: str) -> None:
    """In chunks: the WKB of one chunk at a time, not of every object at once. The first chunk replaces
    a layer of that name (GDAL drops only that table); the others are appended to it."""
    meta = {"sam3tiles": json.dumps(metadata)} if metadata else None
    k = 0
    for gdf in chunks:
        for i in range(0, max(len(gdf), 1), CHUNK_ROWS):
            part = gdf.iloc[i:i + CHUNK_ROWS]
            if k == 0:  # OVERWRITE: a layer whose name differs only in case is replaced too (SQLite ignores case)
                new = {} if path.exists() else {"dataset_options": {"VERSION": GPKG_VERSION}}
                _write_ogr(part, path, "GPKG", layer, {"DESCRIPTION": description, "OVERWRITE": "YES"}, meta, **new)
            elif len(part):
                _write_ogr(part, path, "GPKG", layer, {}, None, append=True)
            k += 1


def _write_geojson(gdf, path: Path, layer: str, metadata: dict, description: str, frames: dict[str, Frame],
                   geojson_crs: str) -> None:
    if geojson_crs not in GEOJSON_CRS:
        raise UsageError(f"{opt('geojson_crs', repr(geojson_crs))}: choose wgs84 (RFC 7946) or native")
    options = {"DESCRIPTION": description, "WRITE_NAME": "YES"}
    if metadata:
        options["FOREIGN_MEMBERS_COLLECTION"] = json.dumps({"sam3tiles": metadata})
    if geojson_crs == "wgs84":
        options["RFC7946"] = "YES"  # GDAL reprojects to WGS84 lon/lat and writes no crs member
        res = min((lonlat_resolution(f) for f in frames.values()), default=0.0)
    else:
        res = min((native_resolution(f) for f in frames.values()), default=0.0)
    if res > 0:
        options["COORDINATE_PRECISION"] = str(coordinate_precision(res))
    _write_ogr(gdf, path, "GeoJSON", layer, options, None)
