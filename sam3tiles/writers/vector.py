"""Writing results: GeoPackage, GeoParquet, FlatGeobuf, GeoJSON or COCO, as the name asks (`writers.formats`),
atomically.

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
  pixel coordinates is refused (`formats.check_space`); the QuPath file also names its pixel grid in a
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
from .atomic import atomic_path
from .formats import FORMATS, Target, check_space, endings, format_for, unknown
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


def readers_note(path: str | os.PathLike) -> str | None:
    """A line for the run report naming the tools that open `path`'s format, where common ones cannot."""
    fmt = format_for(path)
    return fmt.readers.format(path=path) if fmt is not None and fmt.readers else None


#: Table names SQLite and the GeoPackage standard keep for themselves (compared ignoring case).
RESERVED_PREFIXES = ("sqlite_", "gpkg_", "rtree_")


def layer_name(path: str | os.PathLike, layer: str | None = None) -> str:
    """The layer an output gets: `layer` when given, else the file's name without its format's ending
    (`x.qupath.geojson`: x)."""
    if layer:
        return layer
    fmt = format_for(path)
    return fmt.stem(path) if fmt is not None else Path(path).stem


def gpkg_layers(path: str | os.PathLike) -> list[str] | None:
    """The layer names of a GeoPackage, or None when `path` is not one GDAL can open."""
    import pyogrio

    try:
        return [str(n) for n in pyogrio.list_layers(str(path))[:, 0]]
    except Exception:  # noqa: BLE001 - any failure means "not a GeoPackage we can write into"
        return None


def check_layer(path: str | os.PathLike, layer: str | None, overwrite: bool) -> None:
    """Before any work: `layer` needs an output whose format holds layers (GeoPackage); an existing layer of
    that name is replaced only with `overwrite`. Call after `check_output(path, overwrite or layer is not None)`."""
    p = Path(path)
    fmt = format_for(p)
    gpkg = fmt is not None and fmt.layers
    if layer is not None:
        if not gpkg:
            holders = [f for f in FORMATS if f.layers]
            raise UsageError(f"{opt('layer', layer)}: only {' or '.join(f'a {f.name}' for f in holders)} holds several "
                             f"layers: give an {opt('out')} ending in {endings(holders, last=' or ')}, or drop "
                             f"{opt('layer')}")
        if not layer.strip() or layer.lower().startswith(RESERVED_PREFIXES):
            raise UsageError(f"{opt('layer', repr(layer))} is not a usable layer name (names starting with "
                             f"{', '.join(RESERVED_PREFIXES)} belong to SQLite and the GeoPackage itself): give a "
                             "name such as buildings")
    if not gpkg or not p.exists():
        return
    layers = gpkg_layers(p)
    if layers is None:
        if layer is not None:
            raise OutputError(f"{opt('out', p)} exists but is not a GeoPackage GDAL can open, so {opt('layer')} "
                              f"cannot write into it: choose another {opt('out')}")
        return  # not a GeoPackage: replaced whole (check_output has required --overwrite)
    name = layer_name(p, layer)
    same = [n for n in layers if n.lower() == name.lower()]  # SQLite table names ignore case
    if same and not overwrite:
        also = "" if same[0] == name else f" (SQLite names ignore case, so {name!r} is that layer)"
        raise OutputExistsError(f"{opt('out', p)} already holds a layer {same[0]!r}{also}: "
                                f"{enable('overwrite')} to replace that layer (the other layers are kept), or choose "
                                f"another {opt('layer')}")


def write_vector(gdf: "gpd.GeoDataFrame | Iterable[gpd.GeoDataFrame]", path: str | os.PathLike,
                 layer: str | None = None, metadata: dict | None = None, frames: dict[str, Frame] | None = None,
                 geojson_crs: str = "wgs84", prompts: list[str] | None = None, dataset: bool = False,
                 qupath_type: str = "detection") -> Path:
    """Write `gdf` in the format its name asks for (`writers.formats`), atomically. A GeoDataFrame without
    a CRS is written as 'no CRS' (refused where the format cannot hold pixels: `formats.check_space`).

    `gdf` is one GeoDataFrame or its chunks in order (the first, possibly empty, gives the columns).
    `frames` (source file name -> `units.Frame`) say each input's pixel grid: they set the GeoJSON
    coordinate precision, the area unit in the metadata and, for COCO, the images and pixel coordinates.
    `prompts` are the COCO categories, in order. A .gpkg that exists and holds other layers keeps them.
    `dataset`: `path` is a partitioned dataset folder (see the module doc).
    `qupath_type`: "detection" or "annotation", the objectType of QuPath GeoJSON (pixel space).
    """
    p = Path(path)
    fmt = format_for(p)
    if fmt is None:
        raise unknown(p)
    chunks = iter([gdf] if isinstance(gdf, gpd.GeoDataFrame) else gdf)
    first = next(chunks)
    check_space(p, first.crs)
    frames = frames or {}
    target = Target(fmt, p, layer_name(p, layer), _json_safe(metadata or {}), _description(first, frames), frames,
                    geojson_crs, prompts, qupath_type)
    rows = itertools.chain([first], chunks)
    del first  # a chunk is let go once written (`rows` hands it on), before the next is read
    write = fmt.write()
    if dataset:
        if not fmt.dataset:
            raise UsageError(f"{opt('out', p)}: a {fmt.name} is no partitioned dataset: drop the trailing '/'")
        with atomic_path(p, folder=True) as tmp:
            for k, chunk in enumerate(rows):
                if k == 0 or len(chunk):
                    write(iter([chunk]) if fmt.chunked else chunk, tmp / f"part-{k:05d}{fmt.suffix}", target)
                del chunk
        return p
    with atomic_path(p) as tmp:
        write(rows if fmt.chunked else _joined(rows), tmp, target)  # formats without appends: joined in memory
    return p


# -- the writers of `formats.FORMATS`: writer(rows, tmp, target) ------------------------------------------

def write_gpkg(chunks: Iterable[gpd.GeoDataFrame], tmp: Path, t: Target) -> None:
    """A layer into a new GeoPackage, or into a copy of the existing one (see the module docstring)."""
    if t.path.exists() and gpkg_layers(t.path) is not None:
        settle(t.path)  # another program's WAL: checkpointed first, or refused while it holds the file
        shutil.copy2(t.path, tmp)  # copy, write the layer into the copy, rename: see the module docstring
    _write_gpkg(chunks, tmp, t.layer, t.metadata, t.description)


def write_parquet(chunks: Iterable[gpd.GeoDataFrame], tmp: Path, t: Target) -> None:
    _write_parquet_chunks(chunks, tmp, t.metadata)


def write_ogr(gdf: gpd.GeoDataFrame, tmp: Path, t: Target) -> None:
    """Any GDAL format, by `t.format.driver` and its layer creation options; the run metadata as the
    layer's `sam3tiles` metadata item."""
    options = {k: v.format(layer=t.layer, description=t.description) for k, v in t.format.options.items()}
    if t.format.driver == "FlatGeobuf" and gdf.geometry.isna().any():
        options["SPATIAL_INDEX"] = "NO"  # GDAL builds none over a row without a geometry (a point not found)
    _write_ogr(gdf, tmp, t.format.driver, t.layer, options,
               {"sam3tiles": json.dumps(t.metadata)} if t.metadata else None)


def write_geojson(gdf: gpd.GeoDataFrame, tmp: Path, t: Target) -> None:
    _write_geojson(gdf, tmp, t.layer, t.metadata, t.description, t.frames, t.geojson_crs)


def write_qupath(gdf: gpd.GeoDataFrame, tmp: Path, t: Target) -> None:
    write_qupath_geojson(objects_only(gdf), tmp, t.metadata, name=t.layer, object_type=t.qupath_type)


def write_coco(gdf: gpd.GeoDataFrame, tmp: Path, t: Target) -> None:
    from .coco import write_coco as coco

    coco(objects_only(gdf), tmp, t.frames, t.prompts, t.metadata)


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
    rows = itertools.chain([first, second], chunks)
    del first, second  # each chunk let go once written
    with tempfile.TemporaryDirectory(prefix=f".{dest.stem}.parts.", dir=dest.parent) as d:
        parts = []
        for k, c in enumerate(rows):
            if k == 0 or len(c):
                parts.append(_write_parquet(c, Path(d) / f"part-{k:05d}.parquet", metadata))
            del c
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
    a layer of that name (GDAL drops only that table); the others are appended to it. A layer written in more
    than one chunk is MultiPolygon throughout (the type is declared with the first chunk, before the later
    ones are seen: a Polygon layer would take a later MultiPolygon as 'not conformant', and back)."""
    meta = {"sam3tiles": json.dumps(metadata)} if metadata else None
    parts = (gdf.iloc[i:i + CHUNK_ROWS] for gdf in chunks for i in range(0, max(len(gdf), 1), CHUNK_ROWS))
    part = next(parts)
    later = next(parts, None)
    multi = {} if later is None else {"geometry_type": "MultiPolygon", "promote_to_multi": True}
    new = {} if path.exists() else {"dataset_options": {"VERSION": GPKG_VERSION}}
    # OVERWRITE: a layer whose name differs only in case is replaced too (SQLite ignores case)
    _write_ogr(part, path, "GPKG", layer, {"DESCRIPTION": description, "OVERWRITE": "YES"}, meta, **new, **multi)
    rest = itertools.chain([] if later is None else [later], parts)
    del part, later  # each chunk let go once written, before the next is read
    for part in rest:
        if len(part):
            _write_ogr(part, path, "GPKG", layer, {}, None, append=True, **multi)
        del part


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
