"""The napari reader (npe2 plugin, `napari.yaml` beside it): our vector outputs as shapes layers, our label
images as labels layers. Install with `pip install "sam3tiles[napari]"`, then drop a file on napari.

Nothing here imports napari: each reader returns napari's LayerData tuples `(data, kwargs, layer_type)`,
so it runs (and is tested) through npe2 alone.

One frame for both layer kinds, napari's: a labels (or image) layer draws its pixel (r, c) centred at
data coordinate (r, c), so pixel centres are at integers and pixel (r, c) covers [r - 0.5, r + 0.5].

* Pixel space (slides; rasters without a CRS): world = data = (row, col) of the source's level 0, with
  the pixel centres at integers, as napari draws the labels layer and any image layer of the source
  itself. Our polygons have their corners on pixel edges (x right, y down; pixel (r, c) is
  [c, c + 1] x [r, r + 1]), so a vertex (x, y) becomes (row, col) = (y - 0.5, x - 0.5).
* A map CRS: world = (-y, x) in CRS units (north up); vertices are taken as they are, and a GeoTIFF label
  image's affine maps its pixel (r, c) to the CRS coordinates of that pixel's centre (transform of
  (c + 0.5, r + 0.5)), not of its corner.

* Vector outputs (the formats `writers.formats` marks `napari`: .gpkg, .parquet, .fgb, .geojson and
  .qupath.geojson): one shapes layer per prompt, named after it, in the prompt's colour (the QuPath
  classification colour, `writers.qupath.class_colour`),
  polygons as (row, col) vertices in the frame above. Holes are not drawn (napari's shapes have none);
  a MultiPolygon gives one shape per part. `id`, `score`, `prompt` (and the area columns) are features.
* Label images (.tif / .ome.tif written by `--labels`, .ome.zarr): a labels layer, the pyramid as a
  multiscale list of lazy arrays (zarr, read as napari asks), in the frame above.

Only files sam3tiles wrote are claimed, told by the mark every writer puts into the file's metadata: the
`sam3tiles` run metadata (a GeoPackage or FlatGeobuf layer's metadata item, GeoParquet's pandas attrs,
the GeoJSON FeatureCollection's foreign member; `writers.vector`, `frames.file_metadata`), the label
TIFF's tag or OME name (`writers.labels.TAG`, `writers.ome.LABELS_NAME`), the OME-Zarr root's `sam3tiles`
attribute. Anything else, or a file that cannot be read, gets None from `get_reader`, so napari asks its
other readers. Of a GeoPackage only the marked layers are read. (`writers.vector.write_vector` called
without `metadata` writes no mark: such a file is not claimed.)
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np

from ..writers.formats import format_for

RASTER = (".tif", ".tiff")
FEATURES = ("id", "score", "prompt", "area", "area_px", "area_um2", "n_tiles")


def get_reader(path):
    """npe2 `get_reader`: the reader function for one of our outputs, else None (napari then asks its other
    readers). Ours: the sam3tiles mark in the file's metadata (module docstring); a file that cannot be
    read is not claimed either."""
    if isinstance(path, (list, tuple)):
        if len(path) != 1:
            return None
        path = path[0]
    p = str(path).rstrip("/" + os.sep)
    low = p.lower()
    if low.endswith(".ome.zarr") and os.path.isdir(p):
        return read_labels if "sam3tiles" in _attrs(Path(p)) else None  # `writers.ome.open_ome_zarr`
    if low.endswith(RASTER) and os.path.isfile(p):
        return read_labels if _our_tiff(p) else None
    fmt = format_for(p)  # the formats napari opens: `writers.formats` (`Format.napari`)
    if fmt is not None and fmt.napari and (os.path.isfile(p) or (fmt.dataset and os.path.isdir(p))):
        return read_vector if _marked_layers(p) else None
    return None


def _marked_layers(p: str) -> list:
    """The layers of a vector file that carry sam3tiles' run metadata (`writers.vector`: a GeoPackage or
    FlatGeobuf layer's `sam3tiles` metadata item, GeoParquet's pandas attrs, GeoJSON's foreign member);
    `[None]` for a one-layer format; `[]` when the file is not ours or cannot be read."""
    driver = _driver(p)  # where the writer put the mark: by the format's GDAL driver
    try:
        if driver == "Parquet":
            return [None] if _parquet_mark(p) else []
        if driver == "GeoJSON":
            return [None] if _geojson_mark(p) else []
        import pyogrio

        return [str(name) for name, _ in pyogrio.list_layers(p)
                if "sam3tiles" in (pyogrio.read_info(p, layer=str(name)).get("layer_metadata") or {})]
    except Exception:  # noqa: BLE001 - whatever GDAL, Arrow or the JSON parser refuses is not ours to claim
        return []


def _driver(p: str) -> str | None:
    """The GDAL driver of the format `p`'s name asks for (`writers.formats`), or None."""
    fmt = format_for(p)
    return fmt.driver if fmt is not None else None


def _parquet_mark(p: str) -> bool:
    """GeoParquet (a `geo` schema item) whose pandas attrs hold `sam3tiles`; a dataset: its first part."""
    import pyarrow.parquet as pq

    part = min(Path(p).glob("*.parquet")) if os.path.isdir(p) else p
    meta = pq.read_schema(part).metadata or {}
    return b"geo" in meta and "sam3tiles" in json.loads(meta.get(b"PANDAS_ATTRS", b"{}"))


#: How much of a GeoJSON is read for its head (the members before `features`).
GEOJSON_HEAD = 1 << 20
_SPACE = re.compile(r"\s*")


def _geojson_mark(p: str) -> bool:
    """A FeatureCollection whose `sam3tiles` member is an object. GDAL and `writers.qupath` write it before
    `features`, so the head is read member by member up to `features`, never the features themselves."""
    with open(p, encoding="utf-8-sig") as f:
        head = f.read(GEOJSON_HEAD)
    decode = json.JSONDecoder().raw_decode
    i = _SPACE.match(head).end()
    if not head.startswith("{", i):
        return False
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
    return members.get("type") == "FeatureCollection" and isinstance(members.get("sam3tiles"), dict)


def _one(path) -> str:
    return str(path[0] if isinstance(path, (list, tuple)) else path).rstrip("/" + os.sep)


# -- vectors -----------------------------------------------------------------------------------------------
def read_vector(path, stack: bool = False) -> list[tuple]:
    """Shapes layers (one per prompt) of a sam3tiles vector output: of each layer with our mark (a file
    without it: its first layer). Several layers of one GeoPackage: `layer prompt` names the shapes layers."""
    p = _one(path)
    ours = _marked_layers(p) or [None]
    layers = []
    for layer in ours:
        gdf = _read_frame(p, layer)
        flip = _has_crs(gdf)
        prompts = gdf["prompt"].astype(str) if "prompt" in gdf.columns else np.full(len(gdf), layer or Path(p).stem)
        for name in dict.fromkeys(prompts):
            part = gdf[np.asarray(prompts == name)]
            shapes, rows = _shapes(part.geometry.values, flip)
            feats = {c: _column(part[c].to_numpy()[rows]) for c in FEATURES if c in part.columns}
            kwargs = _shape_kwargs(name, feats, len(shapes))
            if len(ours) > 1:
                kwargs["name"] = f"{layer} {name}"
            layers.append((shapes, kwargs, "shapes"))
    return layers


def _read_frame(p: str, layer: str | None = None):
    import geopandas as gpd

    if _driver(p) == "Parquet":
        return gpd.read_parquet(p)
    return gpd.read_file(p, layer=layer) if layer is not None else gpd.read_file(p)


def _has_crs(gdf) -> bool:
    """A map CRS (north up: rows are -y). Pixel space: no CRS, or the pixel grid a .qupath.geojson names."""
    from ..writers.qupath import is_pixel_crs

    if "objectType" in gdf.columns:  # QuPath's flavour: pixels, whatever CRS GDAL assumed (older files)
        return False
    return gdf.crs is not None and not is_pixel_crs(gdf.crs)


def _shapes(geoms, flip: bool) -> tuple[list[np.ndarray], list[int]]:
    """(row, col) vertex arrays of every polygon part, and the row of the frame each came from."""
    shapes, rows = [], []
    for i, g in enumerate(geoms):
        if g is None or g.is_empty:
            continue
        for poly in getattr(g, "geoms", [g]):
            if poly.geom_type != "Polygon":
                continue
            xy = np.asarray(poly.exterior.coords)[:-1, :2]  # napari closes the ring itself
            # pixel space: corners on pixel edges, napari's pixel centres on integers (module docstring)
            shapes.append(np.column_stack([-xy[:, 1], xy[:, 0]]) if flip else xy[:, ::-1] - 0.5)
            rows.append(i)
    return shapes, rows


def _column(values: np.ndarray) -> list:
    return [v.item() if isinstance(v, np.generic) else v for v in values]


def _shape_kwargs(name: str, features: dict, n: int) -> dict:
    from ..writers.qupath import class_colour

    r, g, b = (c / 255 for c in class_colour(name))
    return {"name": name, "shape_type": ["polygon"] * n, "edge_color": [r, g, b, 1.0],
            "face_color": [r, g, b, 0.25], "edge_width": 1, "features": features}


# -- label images ------------------------------------------------------------------------------------------
def _our_tiff(p: str) -> bool:
    """A label image --labels wrote: the OME name or the GeoTIFF tag (`writers.labels`)."""
    import tifffile

    from ..writers.labels import TAG
    from ..writers.ome import LABELS_NAME

    try:
        with tifffile.TiffFile(p) as tf:
            gdal = tf.pages[0].tags.get(42112)
            return (tf.is_ome and LABELS_NAME in (tf.ome_metadata or "")) or bool(gdal and TAG in str(gdal.value))
    except Exception:  # noqa: BLE001 - not a TIFF tifffile reads: not ours
        return False


def read_labels(path, stack: bool = False) -> list[tuple]:
    """A labels layer: every level of the pyramid, full resolution first (lazy zarr arrays)."""
    p = _one(path)
    if p.lower().endswith(".ome.zarr"):
        return _zarr_layers(p)
    import tifffile
    import zarr

    tf = tifffile.TiffFile(p)  # stays open: napari reads the levels lazily, tile by tile
    node = zarr.open(tf.aszarr(series=0), mode="r")
    levels = [node[str(i)] for i in range(len(tf.series[0].levels))] if len(tf.series[0].levels) > 1 else [node]
    kwargs = {"name": Path(p).name.split(".")[0], "multiscale": len(levels) > 1}
    if tf.is_geotiff:
        kwargs["affine"] = _geo_affine(tf)
    kwargs["metadata"] = {"path": p}
    return [(levels if len(levels) > 1 else levels[0], kwargs, "labels")]


def _zarr_layers(p: str) -> list[tuple]:
    """Each image-label group the OME-Zarr lists (root `labels`, else `labels/.zattrs`)."""
    import zarr

    root = Path(p)
    names = _attrs(root).get("labels") or [f"labels/{n}" for n in _attrs(root / "labels").get("labels", [])]
    layers = []
    for name in names:
        group = zarr.open_group(str(root / name), mode="r")
        ms = _attrs(root / name)["multiscales"][0]
        levels = [group[d["path"]] for d in ms["datasets"]]
        meta = {"path": str(root / name), "multiscales": ms}
        layers.append((levels if len(levels) > 1 else levels[0],
                       {"name": ms.get("name", Path(name).name), "multiscale": len(levels) > 1, "metadata": meta},
                       "labels"))
    return layers


def _attrs(folder: Path) -> dict:
    try:
        return json.loads((folder / ".zattrs").read_text())
    except (OSError, ValueError):
        return {}


def _geo_affine(tf) -> list[list[float]]:
    """The GeoTIFF's pixel -> CRS transform as napari's 3x3 affine in the (-y, x) frame of the shapes: napari
    draws pixel (r, c) centred at data (r, c), so (r, c) goes to the CRS coordinates of that pixel's centre."""
    import rasterio
    from affine import Affine

    with rasterio.open(tf.filehandle.path) as ds:
        t = ds.transform * Affine.translation(0.5, 0.5)
    return [[-t.e, -t.d, -t.f], [t.b, t.a, t.c], [0.0, 0.0, 1.0]]
