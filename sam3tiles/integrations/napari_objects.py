"""How the napari reader shows a vector output's objects: polygons (a shapes layer) when there are few, their
centroids (a points layer) when there are many.

napari's shapes layer builds a triangulated mesh and a bounding box per polygon in Python when the layer is
made: about 5 ms a polygon (2,403 nuclei: 12 s, 9,344: 48 s; 240,000 had not loaded after 10 minutes), and
every pan or selection walks them again. A points layer holds one row per object in numpy arrays: 10^6
points open in about a second and draw at any zoom. So up to `MAX_SHAPES` objects in a file (environment
variable SAM3TILES_NAPARI_MAX_SHAPES) the reader gives shapes (outlines to select and edit), above it a
points layer per prompt at the objects' centroids, with the rows' columns (`id`, `score`, areas ...) as its
features; the outlines are then the label image's (a lazy pyramid napari reads as it zooms; a labels layer's
`contour` draws them as lines). The choice and its reason are printed once per file.

The centroids are read a batch of rows at a time (GDAL's Arrow stream, Parquet row groups): the polygons
are never all in memory, so 10^6 objects need about their points' and features' size (~100 MB).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

#: Most objects a file may hold to open as a shapes layer (about 10 s in napari at 5 ms a polygon).
MAX_SHAPES = 2000
ENV = "SAM3TILES_NAPARI_MAX_SHAPES"
#: Rows read at a time for the centroids.
BATCH = 65536


def max_shapes() -> int:
    """`MAX_SHAPES`, or the environment's SAM3TILES_NAPARI_MAX_SHAPES when it is a whole number."""
    value = os.environ.get(ENV, "").strip().replace("_", "").replace(",", "")
    return int(value) if value.isdigit() else MAX_SHAPES


def count(p: str, driver: str | None, layer: str | None, upto: int | None = None) -> int:
    """The rows of one layer of a vector file (GeoParquet: its row count; a dataset folder: of every part). A
    GeoJSON is counted in its bytes, and only `upto` rows when given (the choice needs no more)."""
    if driver == "Parquet":
        import pyarrow.parquet as pq

        parts = sorted(Path(p).glob("*.parquet")) if os.path.isdir(p) else [Path(p)]
        return sum(pq.ParquetFile(q).metadata.num_rows for q in parts)
    if driver == "GeoJSON":  # GDAL parses the whole file to count: a few bytes are counted instead
        return _count_features(p, upto=upto)
    import pyogrio

    return int(pyogrio.read_info(p, layer=layer, force_feature_count=True)["features"])


FEATURE = b'"type": "Feature"'


def _count_features(p: str, block: int = 1 << 24, upto: int | None = None) -> int:
    """The features of a GeoJSON FeatureCollection: its `"type": "Feature"` members (as GDAL, and our
    writers, space them), counted in the bytes; reading stops once `upto` are counted."""
    n, tail = 0, b""
    with open(p, "rb") as f:
        while chunk := f.read(block):
            data = tail + chunk
            n += data.count(FEATURE)
            cut = max(0, len(data) - len(FEATURE) + 1)  # a member split between two reads is counted once
            n -= data[cut:].count(FEATURE)
            tail = data[cut:]
            if upto is not None and n >= upto:
                return n
    return n + tail.count(FEATURE)


def choice_note(p: str, n: int, limit: int) -> str:
    """The line printed once per file: which layer type, and why."""
    name = Path(p).name
    if n <= limit:
        return (f"sam3tiles: {name}: {n:,} objects, shown as polygons (a shapes layer per prompt; up to {limit:,} "
                f"objects, napari's shapes layer takes about 5 ms a polygon)")
    return (f"sam3tiles: {name}: {n:,} objects, over {limit:,}: shown as their centroids (a points layer per prompt, "
            f"the columns as features): napari's shapes layer takes about 5 ms a polygon ({_duration(n * 0.005)} "
            f"here). The outlines: open the run's label image beside it. {ENV}={n} forces polygons")


def _duration(seconds: float) -> str:
    return f"~{seconds:.0f} s" if seconds < 120 else f"~{seconds / 60:.0f} min"


def say(note: str) -> None:
    print(note, file=sys.stderr, flush=True)


def centroid_table(p: str, driver: str | None, layer: str | None, columns: tuple[str, ...]):
    """(GeoDataFrame of the objects' centroids with `columns` that the file has, the file's CRS), read a batch
    at a time. Rows without a geometry are left out."""
    import geopandas as gpd
    import pandas as pd
    import shapely

    parts, crs = [], None
    for table, xy, crs in _batches(p, driver, layer, columns):
        keep = np.isfinite(xy).all(axis=1)
        part = table[keep].reset_index(drop=True)
        part["geometry"] = shapely.points(xy[keep])
        parts.append(part)
    frame = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame({"geometry": []})
    return gpd.GeoDataFrame(frame, geometry="geometry", crs=crs), crs


def _batches(p: str, driver: str | None, layer: str | None, columns: tuple[str, ...]):
    """(pandas table of `columns`, the centroids (n, 2; NaN: no geometry), CRS) a batch of rows at a time."""
    if driver == "Parquet":
        yield from _parquet_batches(p, columns)
        return
    if driver == "GeoJSON" and _one_feature_a_line(p):
        yield from _geojson_batches(p, columns)
        return
    import pyogrio
    import shapely
    from pyogrio.raw import open_arrow

    fields = set(pyogrio.read_info(p, layer=layer)["fields"])
    wanted = [c for c in columns if c in fields]
    with open_arrow(p, layer=layer, columns=wanted, batch_size=BATCH, use_pyarrow=True) as (meta, reader):
        geom = meta["geometry_name"] or "wkb_geometry"
        for batch in reader:
            names = [c for c in wanted if c in batch.schema.names]
            polys = shapely.from_wkb(batch.column(geom).to_numpy(zero_copy_only=False))
            yield batch.select(names).to_pandas(), _centroids(polys), meta["crs"]


def _one_feature_a_line(p: str) -> bool:
    """A GeoJSON as `writers.qupath` writes it: the head on the first line, then one feature a line."""
    with open(p, "rb") as f:
        head, first = f.readline(), f.readline()
    return head.rstrip().endswith(b'"features": [') and first.startswith(b'{"type": "Feature", "id": "')


def _geojson_batches(p: str, columns: tuple[str, ...]):
    """Our QuPath GeoJSON a batch of lines at a time: the properties of each line cut out and parsed by Arrow
    (what a run wrote: the centroid among them), the outlines only where the centroid is not (an older file).
    GDAL's GeoJSON reader takes minutes for 10^5 objects (it parses the whole file to learn its fields)."""
    from ..writers.qupath import CENTROID, PIXEL_CRS_WKT

    with open(p, encoding="utf-8") as f:
        f.readline()
        while lines := [line for _, line in zip(range(BATCH), f)]:
            kept, props = [], []
            for line in lines:  # no copy of a line: 10^5 lines of kB each
                q = line.rfind(', "properties": ')
                if q < 0:
                    continue  # the closing line
                kept.append(line)
                props.append(line[q + 16:line.rfind("}")])  # the feature's own brace closes the line
            table = _properties(props, (*columns, *CENTROID))
            if all(c in table.columns for c in CENTROID) and table[list(CENTROID)].notna().all(axis=None):
                xy = table[list(CENTROID)].to_numpy(float)  # written with the file (`writers.qupath`)
            else:
                xy = _geojson_centroids([line[line.find('"geometry": ') + 12:line.rfind(', "properties": ')]
                                         for line in kept])
            yield table[[c for c in columns if c in table.columns]], xy, PIXEL_CRS_WKT


def _properties(texts: list[str], columns: tuple[str, ...]):
    """The `columns` of JSON objects (one a text) that the first has, as a pandas table: parsed by Arrow with
    the first object's types (twice as fast as `json` here), else by `json` when a later row differs."""
    import io

    import pandas as pd
    import pyarrow as pa
    import pyarrow.json as pj

    if not texts:
        return pd.DataFrame()
    first = json.loads(texts[0])
    names = [c for c in columns if c in first and isinstance(first[c], (str, int, float)) and first[c] is not None]
    kinds = [pa.string() if isinstance(first[c], str) else pa.int64() if c == "id" else pa.float64() for c in names]
    try:
        schema = pa.schema(list(zip(names, kinds)))
        options = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
        return pj.read_json(io.BytesIO("\n".join(texts).encode()), parse_options=options).to_pandas()
    except (pa.ArrowInvalid, ValueError):
        return pd.DataFrame.from_records([json.loads(t) for t in texts], columns=names)


def _centroids(polys) -> np.ndarray:
    import shapely

    xy = shapely.get_coordinates(shapely.centroid(polys), include_z=False)
    out = np.full((len(polys), 2), np.nan)
    out[~(shapely.is_missing(polys) | shapely.is_empty(polys))] = xy
    return out


def _geojson_centroids(geoms: list[str]) -> np.ndarray:
    """The centroids of GeoJSON geometry texts: a polygon without holes (a nucleus) by numpy from its text
    (GEOS's GeoJSON parser takes 0.2 ms a polygon), any other geometry through shapely."""
    import shapely

    simple = np.asarray([g.startswith(('{"type":"Polygon"', '{"type": "Polygon"')) and "]],[[" not in g
                         and "]], [[" not in g for g in geoms], bool)
    out = np.full((len(geoms), 2), np.nan)
    if (~simple).any():
        out[~simple] = _centroids(shapely.from_geojson([g for g, k in zip(geoms, simple) if not k]))
    rings = [g[g.index("[[[") + 3:g.rindex("]]]")].replace("], [", "],[") for g, k in zip(geoms, simple) if k]
    if rings:  # shapely writes "[[[x,y],[x,y]]]", json.dumps "[[[x, y], [x, y]]]"
        out[simple] = ring_centroids(np.fromiter((r.count("],[") + 1 for r in rings), np.int64, len(rings)),
                                     np.fromstring(",".join(rings).replace("],[", ","), sep=",").reshape(-1, 2))
    return out


def ring_centroids(counts: np.ndarray, xy: np.ndarray) -> np.ndarray:
    """The centroids of closed rings (first vertex repeated last), `counts` vertices each, stacked in `xy`:
    the shoelace formula, each ring moved to its first vertex first (no cancellation at 10^5 px)."""
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    local = xy - np.repeat(xy[starts], counts, axis=0)
    x0, y0, x1, y1 = local[:-1, 0], local[:-1, 1], local[1:, 0], local[1:, 1]
    cross = np.append(x0 * y1 - x1 * y0, 0.0)
    cross[starts[1:] - 1] = 0.0  # the step from one ring's last vertex to the next ring's first
    cx = np.append((x0 + x1) * cross[:-1], 0.0)
    cy = np.append((y0 + y1) * cross[:-1], 0.0)
    area = np.add.reduceat(cross, starts)
    with np.errstate(invalid="ignore", divide="ignore"):
        c = np.column_stack([np.add.reduceat(cx, starts), np.add.reduceat(cy, starts)]) / (3 * area[:, None])
    flat = ~np.isfinite(c).all(axis=1) | (area == 0)  # a ring of no area: the mean of its vertices
    if flat.any():
        c[flat] = (np.add.reduceat(local, starts)[flat] / counts[flat, None])
    return c + xy[starts]


def _parquet_batches(p: str, columns: tuple[str, ...]):
    import pyarrow.parquet as pq
    import shapely

    parts = sorted(Path(p).glob("*.parquet")) if os.path.isdir(p) else [Path(p)]
    for part in parts:
        f = pq.ParquetFile(part)
        geo = json.loads(f.schema_arrow.metadata[b"geo"])
        name = geo["primary_column"]
        crs = geo["columns"][name].get("crs", "OGC:CRS84")  # GeoParquet: an omitted crs means lon/lat
        crs = json.dumps(crs) if isinstance(crs, dict) else crs
        wanted = [c for c in columns if c in f.schema_arrow.names]
        for batch in f.iter_batches(batch_size=BATCH, columns=[*wanted, name]):
            polys = shapely.from_wkb(batch.column(name).to_numpy(zero_copy_only=False))
            yield batch.select(wanted).to_pandas(), _centroids(polys), crs


def point_kwargs(name: str, colour: list[int], features, areas: np.ndarray | None) -> dict:
    """A points layer's keywords: the prompt's colour, a marker about a third of a typical object's width
    (napari keeps it at least 2 screen pixels when zoomed out)."""
    r, g, b = (c / 255 for c in colour)
    width = float(np.sqrt(np.nanmedian(areas))) if areas is not None and len(areas) else 8.0
    return {"name": name, "face_color": [r, g, b, 1.0], "border_width": 0, "size": max(2.0, width / 3),
            "features": features}
