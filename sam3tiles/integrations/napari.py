"""The napari reader (npe2 plugin, `napari.yaml` beside it): our vector outputs as shapes layers, our label
images as labels layers, and the rasters sam3tiles segments (GeoTIFFs, slides) as image layers, all in one
frame. Install with `pip install "sam3tiles[napari]"`; docs/microscopy.md (napari) is the user's guide.

Nothing here imports napari: each reader returns napari's LayerData tuples `(data, kwargs, layer_type)`,
so it runs (and is tested) through npe2 alone.

**One frame: the source raster's pixels.** Data coordinate (row, col) is the centre of the source's
full-resolution pixel (row, col): the frame napari's own reader, and any image viewer, gives the source
image, so `napari scene.tif objects.gpkg labels.tif` shows each object on its pixels whichever reader
opens the scene. Our polygons have their corners on pixel edges (pixel (r, c) is [c, c + 1] x [r, r + 1]
in source pixels), so a vertex at source pixel coordinates (x, y) becomes (row, col) = (y - 0.5, x - 0.5).

* Pixel space (slides; rasters without a CRS): the coordinates are source pixels already.
* A map CRS: the run records the first input's pixel grid in the file's metadata (`pixel_frame`:
  transform and CRS, `run.executing.frames.file_metadata`); vertices are reprojected to that CRS when the file is in
  another (RFC 7946 GeoJSON is WGS84) and mapped through the inverse transform. The label GeoTIFF has
  the source's own grid. Every layer's metadata says how to go back (`sam3tiles`: `crs`, `transform`,
  `data_to_crs`, the 3x3 matrix taking (row, col, 1) to (x, y, 1) in the CRS). Not the CRS itself as
  the frame: napari could not place the source image there without our reader, and map coordinates
  (millions of metres) lose sub-pixel detail in the viewer's float32 rendering.

**What each file opens as.**

* Vector outputs (the formats `writers.formats` marks `napari`: .gpkg, .parquet, .fgb, .geojson and
  .qupath.geojson): one shapes layer per prompt of each GeoPackage layer we wrote, named after the prompt
  (`layer prompt` when the file holds several of our layers), in the prompt's colour (the QuPath
  classification colour, `writers.qupath.class_colour`). Holes are not drawn (napari's shapes have none);
  a MultiPolygon gives one shape per part. `id`, `score`, `prompt` (and the area columns) are features.
  Over `napari_objects.MAX_SHAPES` objects in the file: a points layer per prompt at the centroids instead
  (napari's shapes layer takes ~5 ms a polygon); the choice and its reason are printed once per file.
* Label images (.tif / .ome.tif written by `--labels`, .ome.zarr): a labels layer, the pyramid as a
  multiscale list of lazy arrays (zarr, read as napari asks).
* Rasters sam3tiles segments, asked by napari (a GeoTIFF, an OME-TIFF or pyramidal slide
  `readers.slide.is_slide` takes): an image layer, its overviews or pyramid as a multiscale list; an RGB
  image is an RGB layer whether its bands are interleaved or stored one after another.

**Which files are ours.** A label image or vector output is ours by the mark every writer puts into the
file's metadata: the `sam3tiles` run metadata (a GeoPackage or FlatGeobuf layer's metadata item,
GeoParquet's pandas attrs, the GeoJSON FeatureCollection's foreign member; `writers.vector`,
`frames.file_metadata`), the label TIFF's tag or OME name (`writers.labels.TAG`, `writers.ome.LABELS_NAME`),
the OME-Zarr root's `sam3tiles` attribute. Anything else, or a file that cannot be read (a TIFF cut short,
an OME-Zarr missing a label group it lists), gets None from `get_reader`, so napari asks its other readers.
Of a GeoPackage only the marked layers are read.

**How napari chooses a reader** (napari 0.5+, npe2): by the file's name alone, before any reader looks
inside. `napari FILES`, drag and drop, File > Open and `viewer.open(path, plugin=None)` take the reader the
preferences associate with the name (`settings.plugins.extension2reader`), else the only reader whose
`filename_patterns` match (a folder: the readers that accept folders), else ask (the reader dialog;
`viewer.open` raises `MultipleReaderError`); a `plugin=` choice must match by name too. So the manifest
names no plain `*.tif` and no folders: a TIFF or a Zarr store another tool wrote opens at once with
napari's own reader, never a dialog because sam3tiles is installed. Our vector formats match no other
reader and open at once. `*.ome.tif` (our slide label pyramids, the slides) matches napari's reader too: napari
asks until a preference names sam3tiles (`PREFERENCES`); napari's reader reads an OME-TIFF whole at full
resolution (40,000 px labels: 104 s, 20.6 GB), ours its pyramid lazily. The COG label `.tif` of a
georeferenced run and `.ome.zarr` stores, which napari now routes to its own reader, open through this
reader with `add_to(viewer, path)`.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from pathlib import Path

import numpy as np

from ..writers.formats import format_for
from . import napari_objects as objects

RASTER = (".tif", ".tiff")
FEATURES = ("id", "score", "prompt", "area", "area_px", "area_um2", "n_tiles")
#: napari's reader preferences (`settings.plugins.extension2reader`) that give sam3tiles the OME-TIFFs
#: napari's own reader also matches, so napari opens them without asking. Set once in napari's Preferences
#: > Plugins, by ticking "remember" in its reader dialog, or in code:
#: `s = napari.settings.get_settings().plugins; s.extension2reader = {**s.extension2reader, **PREFERENCES}`.
#: An OME-TIFF that is neither ours nor a slide sam3tiles reads is then refused, and napari offers its reader.
PREFERENCES = {"*.ome.tif": "sam3tiles", "*.ome.tiff": "sam3tiles"}


def add_to(viewer, *paths) -> list:
    """Open our outputs and the rasters sam3tiles segments in a napari `viewer` through this reader, whatever
    napari would pick by the name (a georeferenced run's COG labels `.tif`, an `.ome.zarr` label store).
    Returns the layers added; a file that is not ours raises ValueError."""
    from napari.layers import Layer

    added = []
    for path in paths:
        reader = get_reader(str(path))
        layers = reader(str(path)) if reader is not None else None
        if not layers:
            raise ValueError(f"{path}: not a file sam3tiles wrote or segments")
        added += [viewer.add_layer(Layer.create(data, kwargs, kind)) for data, kwargs, kind in layers]
    return added


def get_reader(path):
    """npe2 `get_reader`: the reader function for one of our outputs or a raster sam3tiles segments, else
    None (napari then asks its other readers). Ours: the sam3tiles mark in the file's metadata (module
    docstring); a file that cannot be read is not claimed either."""
    if isinstance(path, (list, tuple)):
        if len(path) != 1:
            return None
        path = path[0]
    p = str(path).rstrip("/" + os.sep)
    low = p.lower()
    if low.endswith(".ome.zarr") and os.path.isdir(p):  # `writers.ome.open_ome_zarr`; its label groups there
        return read_labels if "sam3tiles" in _attrs(Path(p)) and _zarr_groups(Path(p)) else None
    if low.endswith(RASTER) and os.path.isfile(p):
        kind = _tiff_kind(p)
        return read_labels if kind == "labels" else read_raster if kind == "raster" else None
    fmt = format_for(p)  # the formats napari opens: `writers.formats` (`Format.napari`)
    if fmt is not None and fmt.napari and (os.path.isfile(p) or (fmt.dataset and os.path.isdir(p))):
        return read_vector if _marks(p) else None
    return None


def _marks(p: str) -> dict:
    """The run metadata of each layer of a vector file that carries sam3tiles' mark (`writers.vector`: a
    GeoPackage or FlatGeobuf layer's `sam3tiles` metadata item, GeoParquet's pandas attrs, GeoJSON's
    foreign member), by layer name (None for a one-layer format); empty when the file is not ours or
    cannot be read."""
    driver = _driver(p)  # where the writer put the mark: by the format's GDAL driver
    try:
        with warnings.catch_warnings():  # GDAL's complaints about a file that is not ours are not news
            warnings.simplefilter("ignore")
            if driver == "Parquet":
                return {None: meta} if (meta := _parquet_mark(p)) is not None else {}
            if driver == "GeoJSON":
                return {None: meta} if (meta := _geojson_mark(p)) is not None else {}
            import pyogrio

            marks = {}
            for name, _ in pyogrio.list_layers(p):
                item = (pyogrio.read_info(p, layer=str(name)).get("layer_metadata") or {}).get("sam3tiles")
                if item is not None:
                    marks[str(name)] = _json_dict(item)
            return marks
    except Exception:  # noqa: BLE001 - whatever GDAL, Arrow or the JSON parser refuses is not ours to claim
        return {}


def _json_dict(item) -> dict:
    try:
        value = json.loads(item) if isinstance(item, str) else item
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _driver(p: str) -> str | None:
    """The GDAL driver of the format `p`'s name asks for (`writers.formats`), or None."""
    fmt = format_for(p)
    return fmt.driver if fmt is not None else None


def _parquet_mark(p: str) -> dict | None:
    """GeoParquet (a `geo` schema item) whose pandas attrs hold `sam3tiles`; a dataset: its first part."""
    import pyarrow.parquet as pq

    part = min(Path(p).glob("*.parquet")) if os.path.isdir(p) else p
    meta = pq.read_schema(part).metadata or {}
    attrs = json.loads(meta.get(b"PANDAS_ATTRS", b"{}"))
    return _json_dict(attrs["sam3tiles"]) if b"geo" in meta and "sam3tiles" in attrs else None


#: How much of a GeoJSON is read for its head (the members before `features`).
GEOJSON_HEAD = 1 << 20
_SPACE = re.compile(r"\s*")


def _geojson_mark(p: str) -> dict | None:
    """The `sam3tiles` member of a FeatureCollection, when it is an object. GDAL and `writers.qupath` write
    it before `features`, so the head is read member by member up to `features`, never the features."""
    with open(p, encoding="utf-8-sig") as f:
        head = f.read(GEOJSON_HEAD)
    decode = json.JSONDecoder().raw_decode
    i = _SPACE.match(head).end()
    if not head.startswith("{", i):
        return None
    members, i = {}, i + 1
    while True:
        key, i = decode(head, _SPACE.match(head, i).end())
        i = _SPACE.match(head, i).end()
        if not isinstance(key, str) or not head.startswith(":", i) or key == "features":
            break
        members[key], i = decode(head, _SPACE.match(head, i + 1).end())
        i = _SPACE.match(head, i).end()
        if not head.startswith(",", i):
            break
        i += 1
    ours = members.get("sam3tiles")
    return ours if members.get("type") == "FeatureCollection" and isinstance(ours, dict) else None


def _one(path) -> str:
    return str(path[0] if isinstance(path, (list, tuple)) else path).rstrip("/" + os.sep)


# -- the frame ---------------------------------------------------------------------------------------------
def frame_metadata(transform, crs) -> dict:
    """A layer's `sam3tiles` metadata: the source's pixel -> CRS transform (rasterio's a, b, c, d, e, f, of
    pixel corners), its CRS (WKT; None: pixel space) and `data_to_crs`, the 3x3 matrix taking a data
    coordinate (row, col, 1) to (x, y, 1): a pixel's centre is data (row, col), CRS transform(col + 0.5,
    row + 0.5)."""
    a, b, c, d, e, f = (float(v) for v in tuple(transform)[:6])
    return {"frame": "source pixels: data (row, col) is the centre of the source's full-resolution pixel "
                     "(row, col)", "crs": crs, "transform": [a, b, c, d, e, f],
            "data_to_crs": [[b, a, c + 0.5 * (a + b)], [e, d, f + 0.5 * (d + e)], [0.0, 0.0, 1.0]]}


def _vector_frame(gdf, meta: dict):
    """(gdf in the frame's CRS, the pixel -> CRS transform, the CRS as WKT) for `read_vector`; None for a
    map CRS without a recorded pixel grid (a file of an earlier version: drawn north up, row = -y)."""
    from affine import Affine

    if not _has_crs(gdf):
        return gdf, Affine.identity(), None
    grid = meta.get("pixel_frame")
    if not isinstance(grid, dict) or not grid.get("crs") or len(grid.get("transform") or ()) != 6:
        return None
    from pyproj import CRS

    crs = CRS.from_user_input(grid["crs"])
    if CRS.from_user_input(gdf.crs) != crs:
        gdf = gdf.to_crs(crs)  # an RFC 7946 GeoJSON's lon/lat back to the source's CRS
    return gdf, Affine(*grid["transform"]), crs.to_wkt()


# -- vectors -----------------------------------------------------------------------------------------------
def read_vector(path, stack: bool = False) -> list[tuple]:
    """Shapes layers (one per prompt) of a sam3tiles vector output: of each layer with our mark (a file
    without it: its first layer). Several layers of one GeoPackage: `layer prompt` names the shapes layers."""
    p = _one(path)
    ours = _marks(p) or {None: {}}
    limit = objects.max_shapes()  # counted up to the limit only: the rest is counted as it is read
    n = sum(objects.count(p, _driver(p), layer, upto=limit + 1) for layer in ours)
    if n > limit:
        points = [lay for layer, meta in ours.items() for lay in _point_layers(p, layer, meta, len(ours) > 1)]
        objects.say(objects.choice_note(p, sum(len(data) for data, _, _ in points), limit))
        return points
    objects.say(objects.choice_note(p, n, limit))
    layers = []
    for layer, meta in ours.items():
        gdf = _read_frame(p, layer)
        framed = _vector_frame(gdf, meta)
        prompts = gdf["prompt"].astype(str) if "prompt" in gdf.columns else np.full(len(gdf), layer or Path(p).stem)
        placed = framed[0] if framed is not None else gdf
        for name in dict.fromkeys(prompts):
            part = placed[np.asarray(prompts == name)]
            shapes, rows = _shapes(part.geometry.values, None if framed is None else framed[1])
            feats = {c: _column(part[c].to_numpy()[rows]) for c in FEATURES if c in part.columns}
            kwargs = _shape_kwargs(name, feats, len(shapes))
            kwargs["metadata"] = {"path": p, "sam3tiles": frame_metadata(framed[1], framed[2]) if framed else
                                  {"frame": "map: data (row, col) is (-y, x) in the CRS (no pixel grid recorded)"}}
            if len(ours) > 1:
                kwargs["name"] = f"{layer} {name}"
            layers.append((shapes, kwargs, "shapes"))
    return layers


def _point_layers(p: str, layer: str | None, meta: dict, several: bool) -> list[tuple]:
    """A points layer per prompt of one layer: the objects' centroids in the frame (`napari_objects`)."""
    from ..writers.qupath import class_colour

    gdf, _ = objects.centroid_table(p, _driver(p), layer, (*FEATURES, "objectType"))
    framed = _vector_frame(gdf, meta)
    placed = framed[0] if framed is not None else gdf
    if framed is None:
        rows, cols = -placed.geometry.y.to_numpy(), placed.geometry.x.to_numpy()
    else:
        inv = ~framed[1]
        x, y = placed.geometry.x.to_numpy(), placed.geometry.y.to_numpy()
        rows, cols = inv.d * x + inv.e * y + inv.f - 0.5, inv.a * x + inv.b * y + inv.c - 0.5
    frame = (frame_metadata(framed[1], framed[2]) if framed else
             {"frame": "map: data (row, col) is (-y, x) in the CRS (no pixel grid recorded)"})
    prompts = gdf["prompt"].astype(str) if "prompt" in gdf.columns else np.full(len(gdf), layer or Path(p).stem)
    area = "area_px" if "area_px" in gdf.columns else None
    out = []
    for name in dict.fromkeys(prompts):
        mine = np.asarray(prompts == name)
        feats = gdf.loc[mine, [c for c in FEATURES if c in gdf.columns]].reset_index(drop=True)
        kwargs = objects.point_kwargs(f"{layer} {name}" if several else name, class_colour(name), feats,
                                      gdf.loc[mine, area].to_numpy(float) if area else None)
        kwargs["metadata"] = {"path": p, "sam3tiles": {**frame, "shown_as": "centroids"}}
        out.append((np.column_stack([rows[mine], cols[mine]]), kwargs, "points"))
    return out


def _read_frame(p: str, layer: str | None = None):
    import geopandas as gpd

    if _driver(p) == "Parquet":
        return gpd.read_parquet(p)
    return gpd.read_file(p, layer=layer) if layer is not None else gpd.read_file(p)


def _has_crs(gdf) -> bool:
    """A map CRS. Pixel space: no CRS, or the pixel grid a .qupath.geojson names."""
    from ..writers.qupath import is_pixel_crs

    if "objectType" in gdf.columns:  # QuPath's flavour: pixels, whatever CRS GDAL assumed (older files)
        return False
    return gdf.crs is not None and not is_pixel_crs(gdf.crs)


def _shapes(geoms, transform) -> tuple[list[np.ndarray], list[int]]:
    """(row, col) vertex arrays of every polygon part, and the row of the frame each came from. `transform`:
    the source's pixel -> CRS transform (None: the map fallback, row = -y)."""
    inv = ~transform if transform is not None else None
    shapes, rows = [], []
    for i, g in enumerate(geoms):
        if g is None or g.is_empty:
            continue
        for poly in getattr(g, "geoms", [g]):
            if poly.geom_type != "Polygon":
                continue
            x, y = np.asarray(poly.exterior.coords)[:-1, :2].T  # napari closes the ring itself
            if inv is None:
                shapes.append(np.column_stack([-y, x]))
                rows.append(i)
                continue
            px, py = inv.a * x + inv.b * y + inv.c, inv.d * x + inv.e * y + inv.f
            # corners on pixel edges, napari's pixel centres on integers (module docstring)
            shapes.append(np.column_stack([py - 0.5, px - 0.5]))
            rows.append(i)
    return shapes, rows


def _column(values: np.ndarray) -> list:
    return [v.item() if isinstance(v, np.generic) else v for v in values]


def _shape_kwargs(name: str, features: dict, n: int) -> dict:
    from ..writers.qupath import class_colour

    r, g, b = (c / 255 for c in class_colour(name))
    return {"name": name, "shape_type": ["polygon"] * n, "edge_color": [r, g, b, 1.0],
            "face_color": [r, g, b, 0.25], "edge_width": 1, "features": features}


# -- label images and rasters ------------------------------------------------------------------------------
def _tiff_kind(p: str) -> str | None:
    """"labels": a label image --labels wrote (the OME name or the GeoTIFF tag, `writers.labels`); "raster":
    a GeoTIFF or a slide sam3tiles reads (`readers.slide.is_slide`); None: neither, or not a TIFF."""
    import tifffile

    from ..readers.slide import is_slide
    from ..writers.labels import TAG
    from ..writers.ome import LABELS_NAME

    try:
        with tifffile.TiffFile(p) as tf:
            if not _whole(tf):
                return None
            gdal = tf.pages[0].tags.get(42112)
            if (tf.is_ome and LABELS_NAME in (tf.ome_metadata or "")) or bool(gdal and TAG in str(gdal.value)):
                return "labels"
            geotiff = tf.is_geotiff
        return "raster" if geotiff or is_slide(p) else None
    except Exception:  # noqa: BLE001 - not a TIFF tifffile reads: not ours
        return None


def _whole(tf) -> bool:
    """Every strip or tile of every level of the first series lies within the file: a TIFF cut short (a
    copy or download that stopped) has its header and tile index but not all its tiles, which napari
    would only find reading them, and no reader can."""
    size = tf.filehandle.size
    for level in tf.series[0].levels:
        for page in (q for q in level.pages if q is not None):
            ends = np.asarray(page.dataoffsets, np.int64) + np.asarray(page.databytecounts, np.int64)
            if ends.size and int(ends.max()) > size:
                return False
    return True


def _tiff_levels(p: str):
    """(TiffFile, its first series, every level as a lazy zarr array, full resolution first). The file
    stays open: napari reads the levels lazily, tile by tile."""
    import tifffile
    import zarr

    tf = tifffile.TiffFile(p)
    series = tf.series[0]
    node = zarr.open(tf.aszarr(series=0), mode="r")
    levels = [node[str(i)] for i in range(len(series.levels))] if len(series.levels) > 1 else [node]
    if _planar_rgb(series):  # bands one after the other: napari's RGB has the samples last
        import dask.array as da

        levels = [da.from_zarr(level).transpose(1, 2, 0) for level in levels]
    return tf, series, levels


def _planar_rgb(series) -> bool:
    """An RGB(A) image stored band after band (planar configuration 2: GDAL's INTERLEAVE=BAND): axes SYX."""
    import tifffile

    page = series.keyframe
    return (series.axes == "SYX" and series.shape[0] in (3, 4)
            and page.photometric == tifffile.PHOTOMETRIC.RGB)


def _tiff_frame(tf, p: str) -> dict:
    """The layer metadata of a TIFF in the frame: a GeoTIFF's transform and CRS, else pixel space."""
    from affine import Affine

    if not tf.is_geotiff:
        return frame_metadata(Affine.identity(), None)
    import rasterio

    with rasterio.open(p) as ds:
        return frame_metadata(ds.transform, ds.crs.to_wkt() if ds.crs else None)


def _opened(p: str):
    """`_tiff_levels`, or None for a file that is no longer a whole TIFF tifffile reads (changed since
    `get_reader` looked: a reader says None for what it cannot read, and napari asks its other readers)."""
    try:
        opened = _tiff_levels(p)
    except Exception:  # noqa: BLE001 - whatever tifffile or zarr refuses
        return None
    if not _whole(opened[0]):
        opened[0].close()
        return None
    return opened


def read_labels(path, stack: bool = False) -> list[tuple] | None:
    """A labels layer: every level of the pyramid, full resolution first (lazy zarr arrays); None for a
    file that cannot be read."""
    p = _one(path)
    if p.lower().endswith(".ome.zarr"):
        try:
            return _zarr_layers(p) or None
        except Exception:  # noqa: BLE001 - a store zarr cannot open: not read
            return None
    if (opened := _opened(p)) is None:
        return None
    tf, _, levels = opened
    kwargs = {"name": Path(p).name.split(".")[0], "multiscale": len(levels) > 1,
              "metadata": {"path": p, "sam3tiles": _tiff_frame(tf, p)}}
    return [(levels if len(levels) > 1 else levels[0], kwargs, "labels")]


def read_raster(path, stack: bool = False) -> list[tuple] | None:
    """An image layer of a raster sam3tiles segments (a GeoTIFF, a slide): its overviews or pyramid as the
    levels, in the frame of our shapes and labels (its own pixels); RGB as RGB, however its bands are
    stored. None for a file that cannot be read."""
    p = _one(path)
    if (opened := _opened(p)) is None:
        return None
    tf, series, levels = opened
    kwargs = {"name": Path(p).name.split(".")[0], "multiscale": len(levels) > 1,
              "metadata": {"path": p, "sam3tiles": _tiff_frame(tf, p)}}
    if (series.axes.endswith("S") and series.shape[-1] in (3, 4)) or _planar_rgb(series):
        kwargs["rgb"] = True
    return [(levels if len(levels) > 1 else levels[0], kwargs, "image")]


def _zarr_groups(root: Path) -> list[tuple[str, dict]]:
    """(name, multiscales) of each image-label group the OME-Zarr lists (root `labels`, else `labels/.zattrs`)
    and holds, with every level folder there; empty when one is missing (a store with a group deleted)."""
    names = _attrs(root).get("labels") or [f"labels/{n}" for n in _attrs(root / "labels").get("labels", [])]
    groups = []
    for name in names if isinstance(names, list) else ():
        ms = (_attrs(root / str(name)).get("multiscales") or [None])[0]
        paths = [d.get("path") for d in ms.get("datasets") or []] if isinstance(ms, dict) else []
        if not paths or not all(isinstance(q, str) and (root / name / q).is_dir() for q in paths):
            return []
        groups.append((str(name), ms))
    return groups


def _zarr_layers(p: str) -> list[tuple]:
    """Each image-label group the OME-Zarr lists (`_zarr_groups`)."""
    import zarr
    from affine import Affine

    root = Path(p)
    layers = []
    for name, ms in _zarr_groups(root):
        group = zarr.open_group(str(root / name), mode="r")
        levels = [group[d["path"]] for d in ms["datasets"]]
        meta = {"path": str(root / name), "multiscales": ms, "sam3tiles": frame_metadata(Affine.identity(), None)}
        layers.append((levels if len(levels) > 1 else levels[0],
                       {"name": ms.get("name", Path(name).name), "multiscale": len(levels) > 1, "metadata": meta},
                       "labels"))
    return layers


def _attrs(folder: Path) -> dict:
    try:
        return json.loads((folder / ".zattrs").read_text())
    except (OSError, ValueError):
        return {}
