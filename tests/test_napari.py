"""The napari plugin through npe2 (no viewer): its manifest, the entry point naming it, and our outputs
opened as napari layer data with the right coordinates (vertices in (row, col), checked against the
slide's own pixels and the label image)."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import numpy as np
import pytest
import shapely
import tifffile

import sam3tiles
from sam3tiles.integrations.napari import get_reader
from sam3tiles.run.executing.frames import file_metadata
from sam3tiles.run.pipeline import segment_job
from sam3tiles.testing.slidegen import Pyramid, write_slide
from sam3tiles.writers import write_vector

npe2 = pytest.importorskip("npe2")
MANIFEST = Path(sam3tiles.__file__).parent / "integrations" / "napari.yaml"
PROMPTS = ["indigo", "crimson"]


@pytest.fixture(scope="module")
def plugin():
    from npe2 import PluginManager, PluginManifest

    pm = PluginManager.instance()
    manifest = PluginManifest.from_file(MANIFEST)
    if manifest.name not in pm:
        pm.register(manifest)
    yield pm
    pm.unregister(manifest.name)


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("napari")
    slide = write_slide(d / "s.ome.tif", 900, 640, seed=7, shape="rect", pyramid=Pyramid(levels=2))
    gdf, report = segment_job(str(slide.path), PROMPTS, backend="reference", workers=2, checkpoint=False,
                              out=d / "o.gpkg", labels=d / "labels.ome.tif")
    meta = file_metadata(report, gdf)  # what the run writes into each of its outputs: the mark of ours
    write_vector(gdf, d / "o.qupath.geojson", metadata=meta)
    write_vector(gdf, d / "o.parquet", metadata=meta)
    return slide, gdf, d


def read(path, plugin):
    """Through npe2 where napari offers our reader by the name; a COG `.tif` or an `.ome.zarr` (napari gives
    them its own reader) through `get_reader`, as `add_to` opens them."""
    if "sam3tiles" in {r.plugin_name for r in plugin.iter_compatible_readers([str(path)])}:
        return npe2.read([str(path)], stack=False, plugin_name="sam3tiles")
    reader = get_reader(str(path))
    if reader is None:
        raise ValueError(f"sam3tiles refused the file {path}")
    return reader(str(path))


def _pixel(v: float) -> int:
    """The pixel napari draws at data coordinate `v` (pixel centres at integers)."""
    return int(np.floor(v + 0.5))


def test_entry_point_names_the_manifest():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((Path(sam3tiles.__file__).parent.parent / "pyproject.toml").read_text())
    manifest = {"sam3tiles": "sam3tiles.integrations:napari.yaml"}
    assert project["project"]["entry-points"]["napari.manifest"] == manifest
    assert "napari.yaml" in project["tool"]["setuptools"]["package-data"]["sam3tiles.integrations"]
    assert npe2.PluginManifest.from_file(MANIFEST).name == project["project"]["name"]
    assert "npe2" in " ".join(project["project"]["optional-dependencies"]["napari"])


@pytest.mark.parametrize("name", ["o.gpkg", "o.qupath.geojson", "o.parquet"])
def test_vector_outputs_open_as_shapes_layers_in_row_col_order(outputs, plugin, name):
    slide, gdf, d = outputs
    layers = read(d / name, plugin)
    assert sorted(kw["name"] for _, kw, kind in layers if kind == "shapes") == sorted(set(gdf["prompt"]))
    image = tifffile.imread(slide.path, level=0)  # (rows, cols, RGB)
    for data, kw, kind in layers:
        mine = gdf[gdf["prompt"] == kw["name"]]
        assert kind == "shapes" and len(data) == len(mine) == len(kw["features"]["id"])
        assert sorted(kw["features"]["id"]) == sorted(mine["id"])
        assert all(0.5 <= s <= 1 for s in kw["features"]["score"])
        assert kw["edge_color"] != layers[0][1]["edge_color"] or kw is layers[0][1]  # one colour per prompt
        verts, oid = data[0], kw["features"]["id"][0]
        geom = mine.set_index("id").geometry[oid]
        # (row, col) = (y, x) less half a pixel: napari draws pixel (r, c) centred at (r, c)
        assert np.allclose(verts, np.asarray(geom.exterior.coords)[:-1, ::-1] - 0.5, atol=1e-3)
        # the source pixel napari draws under the shape's inside point is the object's colour, not the background
        r, c = shapely.Polygon(verts[:, ::-1]).representative_point().coords[0][::-1]
        assert not np.allclose(image[_pixel(r), _pixel(c)], image[0, 0], atol=30)
        truth = slide.truth.geometry[slide.truth.intersects(shapely.Point(c + 0.5, r + 0.5))]
        assert len(truth) == 1 and abs(truth.iloc[0].bounds[1] - verts[:, 0].min()) <= 3  # rows are y


def test_label_images_open_as_multiscale_labels_layers(outputs, plugin, tmp_path):
    slide, gdf, d = outputs
    [(levels, kw, kind)] = read(d / "labels.ome.tif", plugin)
    assert kind == "labels" and kw["multiscale"] and [lvl.shape for lvl in levels] == [(640, 900), (320, 450)]
    shapes = {kw["features"]["id"][i]: v for data, kw, _ in read(d / "o.gpkg", plugin) for i, v in enumerate(data)}
    oid, verts = next(iter(shapes.items()))
    r, c = shapely.Polygon(verts[:, ::-1]).representative_point().coords[0][::-1]
    assert levels[0][_pixel(r), _pixel(c)] == oid  # the same (row, col) frame as the shapes
    from sam3tiles.writers.labels import write_labels

    write_labels(gdf, tmp_path / "l.ome.zarr", 900, 640, levels=slide.levels, pixel_size_um=(0.25, 0.25))
    [(zlevels, zkw, zkind)] = read(tmp_path / "l.ome.zarr", plugin)
    assert zkind == "labels" and zkw["multiscale"] and (np.asarray(zlevels[0]) == np.asarray(levels[0])).all()
    # a TIFF sam3tiles did not write is left to other readers
    tifffile.imwrite(tmp_path / "other.tif", np.zeros((10, 10), np.uint32))
    assert get_reader(str(tmp_path / "other.tif")) is None and get_reader(str(d / "labels.ome.tif")) is not None


def test_georeferenced_outputs_share_the_source_pixel_frame(plugin, tmp_path):
    """A map CRS: shapes and the COG labels in the source's pixel frame (data (row, col) = the centre of source
    pixel (row, col)), the frame any reader gives the source image; each layer's metadata maps back to the CRS.
    A file without the recorded pixel grid (an earlier version's) is drawn north up at (-y, x)."""
    import geopandas as gpd
    from affine import Affine

    from sam3tiles.run.executing.frames import pixel_frame
    from sam3tiles.units import Frame
    from sam3tiles.writers.labels import write_labels

    t = Affine(0.5, 0, 500000, 0, -0.5, 6000000)
    box = shapely.box(500100, 5999800, 500130, 5999850)  # 60 x 100 px at col 200, row 300
    gdf = gpd.GeoDataFrame({"id": [1], "prompt": ["roof"], "score": [0.9]}, geometry=[box], crs="EPSG:32633")
    grid = pixel_frame("scene.tif", Frame(gdf.crs, t, 500, 400))
    write_vector(gdf, tmp_path / "o.gpkg", metadata={"version": sam3tiles.__version__, "pixel_frame": grid})
    write_vector(gdf, tmp_path / "o.geojson", metadata={"version": sam3tiles.__version__, "pixel_frame": grid})
    write_labels(gdf, tmp_path / "l.tif", 500, 400, transform=t, crs="EPSG:32633")
    [(shapes, kw, _)] = read(tmp_path / "o.gpkg", plugin)
    # corners on pixel edges: col 200..260, row 300..400, less half a pixel
    assert np.allclose(shapes[0].min(axis=0), [299.5, 199.5]) and np.allclose(shapes[0].max(axis=0), [399.5, 259.5])
    [(wgs, _, _)] = read(tmp_path / "o.geojson", plugin)  # RFC 7946 lon/lat, back to the source's CRS
    assert np.allclose(wgs[0].min(axis=0), [299.5, 199.5], atol=0.02)
    [(levels, lkw, kind)] = read(tmp_path / "l.tif", plugin)
    assert kind == "labels" and kw["name"] == "roof" and "affine" not in lkw
    row, col = 300 + 50, 200 + 30  # a pixel inside the box: the same (row, col) in both layers
    assert np.asarray(levels[0] if lkw["multiscale"] else levels)[row, col] == 1
    assert shapely.Polygon(shapes[0][:, ::-1]).contains(shapely.Point(col, row))
    for meta in (kw["metadata"]["sam3tiles"], lkw["metadata"]["sam3tiles"]):  # back to the map
        x, y, _ = np.asarray(meta["data_to_crs"]) @ [row, col, 1]
        assert np.allclose([x, y], t @ (col + 0.5, row + 0.5)) and "32633" in meta["crs"]
    write_vector(gdf, tmp_path / "old.gpkg", metadata={"version": "0.0.9"})  # no pixel grid recorded
    [(old, okw, _)] = read(tmp_path / "old.gpkg", plugin)
    assert np.allclose(old[0].min(axis=0), [-5999850, 500100]) and "(-y, x)" in okw["metadata"]["sam3tiles"]["frame"]
    (tmp_path / "report.json").write_text('{"objects": 1}')
    assert get_reader(str(tmp_path / "report.json")) is None


def test_napari_builds_the_layers(outputs, plugin):
    """Where napari itself is installed (`.[napari]`): it takes our layer data as it is (no viewer)."""
    pytest.importorskip("napari")
    from napari.layers import Labels, Layer, Shapes

    slide, gdf, d = outputs
    for name, cls in (("o.gpkg", Shapes), ("o.qupath.geojson", Shapes), ("labels.ome.tif", Labels)):
        for data, meta, kind in read(d / name, plugin):
            layer = Layer.create(data, meta, kind)
            assert isinstance(layer, cls) and layer.name == meta["name"]
            if cls is Shapes:
                assert len(layer.data) == len(layer.features) and set(layer.features["prompt"]) == {meta["name"]}
            else:
                assert layer.multiscale and [tuple(a.shape) for a in layer.data] == [(640, 900), (320, 450)]


# -- issue 36, case 3: labels and shapes of one object in one frame ------------------------------------------
def _labels_centroid(level0, oid, affine=None) -> np.ndarray:
    """Where napari draws the object's pixels: pixel (r, c) is centred at data (r, c), then the affine."""
    rows, cols = np.nonzero(np.asarray(level0) == oid)
    centre = np.array([rows.mean(), cols.mean(), 1.0])
    return (np.asarray(affine) @ centre)[:2] if affine is not None else centre[:2]


def _shape_centroid(verts: np.ndarray) -> np.ndarray:
    return np.asarray(shapely.Polygon(verts).centroid.coords[0])  # (row, col) in, (row, col) out


def _largest_shape(shape_layers) -> tuple[int, np.ndarray]:
    """(id, vertices) of the largest shape of an object drawn as one polygon (holes are not drawn)."""
    counts: dict = {}
    for data, kw, _ in shape_layers:
        for oid in kw["features"]["id"]:
            counts[oid] = counts.get(oid, 0) + 1
    found = [(shapely.Polygon(v).area, oid, v) for data, kw, _ in shape_layers
             for oid, v in zip(kw["features"]["id"], data) if counts[oid] == 1]
    _, oid, verts = max(found, key=lambda t: t[0])
    return oid, verts


def test_slide_labels_and_shapes_of_one_object_share_a_centroid(outputs, plugin):
    """A slide run with --labels: the labels layer's pixels of an object sit centred under its shape."""
    slide, gdf, d = outputs
    oid, verts = _largest_shape(read(d / "o.gpkg", plugin))
    assert shapely.Polygon(verts).area > 400  # a real object, not a sliver
    [(levels, kw, _)] = read(d / "labels.ome.tif", plugin)
    labels = _labels_centroid(levels[0], oid, kw.get("affine"))
    assert np.allclose(labels, _shape_centroid(verts), rtol=0, atol=0.1), (labels, _shape_centroid(verts))


def test_georeferenced_labels_and_shapes_of_one_object_share_a_centroid(plugin, tmp_path):
    """A run on a 0.3 m GeoTIFF with --labels: the COG labels' pixels of an object sit under its shape."""
    from affine import Affine

    from sam3tiles.testing import blob_image, write_raster

    src = write_raster(tmp_path / "geo.tif", blob_image(h=400, w=500),
                       transform=Affine(0.3, 0, 500000, 0, -0.3, 6000000))
    segment_job(str(src), ["blue"], backend="reference", workers=1, checkpoint=False, out=tmp_path / "o.gpkg",
                labels=tmp_path / "l.tif")
    [(shapes, skw, _)] = read(tmp_path / "o.gpkg", plugin)
    [(levels, kw, _)] = read(tmp_path / "l.tif", plugin)
    oid, verts = _largest_shape([(shapes, skw, "shapes")])
    labels = _labels_centroid(levels[0] if kw["multiscale"] else levels, oid)
    assert np.allclose(labels, _shape_centroid(verts), rtol=0, atol=0.1), (labels, _shape_centroid(verts))  # 0.1 px


# -- issue 36, case 11: files that are not ours, or not readable, are left to other readers -------------------
def _pandas_parquet(d: Path) -> Path:
    import pandas as pd

    pd.DataFrame({"id": [1, 2], "prompt": ["a", "b"]}).to_parquet(d / "table.parquet")  # no geometry
    return d / "table.parquet"


def _points_geojson(d: Path) -> Path:
    import geopandas as gpd

    pts = gpd.GeoDataFrame({"name": ["a", "b"]}, geometry=[shapely.Point(15, 54), shapely.Point(15.1, 54.1)],
                           crs="EPSG:4326")
    pts.to_file(d / "points.geojson", driver="GeoJSON")
    return d / "points.geojson"


def _ome_zarr_image(d: Path, fmt=None) -> Path:
    from ome_zarr.writer import write_image

    image = np.random.default_rng(0).integers(0, 255, (128, 96), dtype=np.uint8)
    write_image(image, str(d / "image.ome.zarr"), axes="yx", scale_factors=(2,), **({"fmt": fmt} if fmt else {}))
    return d / "image.ome.zarr"


def _ome_zarr_04_image(d: Path) -> Path:
    """NGFF 0.4 (zarr 2, `.zattrs`), the format our label images have."""
    from ome_zarr.format import FormatV04

    path = _ome_zarr_image(d, FormatV04())
    assert "multiscales" in json.loads((path / ".zattrs").read_text())
    return path


def _garbage_gpkg(d: Path) -> Path:
    (d / "broken.gpkg").write_bytes(b"SQLite format 3\x00 and then nothing a database has" * 40)
    return d / "broken.gpkg"


def _polygons_gpkg(d: Path) -> Path:
    """Polygons with our very columns, written by geopandas: no sam3tiles mark, so not ours."""
    import geopandas as gpd

    gpd.GeoDataFrame({"id": [1], "prompt": ["roof"], "score": [0.9]}, geometry=[shapely.box(0, 0, 10, 10)],
                     crs="EPSG:32633").to_file(d / "other.gpkg")
    return d / "other.gpkg"


FOREIGN = {"pandas parquet": _pandas_parquet, "points geojson": _points_geojson,
           "ome-zarr image": _ome_zarr_image, "ome-zarr 0.4 image": _ome_zarr_04_image, "garbage gpkg": _garbage_gpkg,
           "foreign polygons gpkg": _polygons_gpkg}


@pytest.mark.parametrize("kind", list(FOREIGN))
def test_files_not_ours_or_unreadable_are_refused(plugin, tmp_path, kind):
    """get_reader says None (napari then asks its other readers) instead of claiming the file and failing."""
    path = FOREIGN[kind](tmp_path)
    assert path.exists()
    assert get_reader(str(path)) is None and get_reader([str(path)]) is None
    with pytest.raises(ValueError, match="refused the file"):
        read(path, plugin)


@pytest.fixture(scope="module")
def more_outputs(outputs, tmp_path_factory):
    """The rest of our formats: FlatGeobuf, a partitioned GeoParquet, an OME-Zarr label image, and a
    georeferenced run's GeoJSON (lon/lat; also named `.json`) and FlatGeobuf."""
    from affine import Affine

    from sam3tiles.testing import blob_image, write_raster
    from sam3tiles.writers.labels import write_labels

    slide, gdf, d = outputs
    e = tmp_path_factory.mktemp("more")
    meta = {"version": sam3tiles.__version__}
    write_vector(gdf, e / "o.fgb", metadata=meta)
    write_vector(gdf, e / "parts.parquet", metadata=meta, dataset=True)
    write_labels(gdf, e / "l.ome.zarr", 900, 640, levels=slide.levels)
    src = write_raster(e / "geo.tif", blob_image(h=400, w=500), transform=Affine(0.3, 0, 500000, 0, -0.3, 6000000))
    for name in ("g.geojson", "g.json", "g.fgb"):
        segment_job(str(src), ["blue"], backend="reference", workers=1, checkpoint=False, out=e / name)
    return e


OURS = {"o.gpkg": "shapes", "o.qupath.geojson": "shapes", "o.parquet": "shapes", "labels.ome.tif": "labels",
        "o.fgb": "shapes", "parts.parquet": "shapes", "l.ome.zarr": "labels", "g.geojson": "shapes",
        "g.json": "shapes", "g.fgb": "shapes"}


@pytest.mark.parametrize("name", list(OURS))
def test_our_outputs_are_still_read(outputs, more_outputs, plugin, name):
    path = outputs[2] / name if (outputs[2] / name).exists() else more_outputs / name
    assert get_reader(str(path)) is not None
    layers = read(path, plugin)
    assert layers and {kind for _, _, kind in layers} == {OURS[name]}
    assert all(len(data) for data, _, _ in layers)


def test_only_our_layers_of_a_shared_geopackage_are_read(outputs, plugin, tmp_path):
    """A GeoPackage holding another program's layer before ours: ours is read, the other is not."""
    slide, gdf, d = outputs
    path = _polygons_gpkg(tmp_path)  # layer "other", first in the file
    write_vector(gdf, path, layer="objects", metadata={"version": sam3tiles.__version__})
    layers = read(path, plugin)
    assert sorted(kw["name"] for _, kw, _ in layers) == sorted(set(gdf["prompt"]))
    assert sum(len(data) for data, _, _ in layers) == len(gdf)


# -- issue 40: napari itself chooses our reader, and the layers line up with the source image -----------------
NAPARI = importlib.util.find_spec("napari") is not None
needs_napari = pytest.mark.skipif(not NAPARI, reason="napari is not installed (pip install 'sam3tiles[napari]')")
OPEN = Path(__file__).with_name("napari_open.py")


def _napari_open(tmp_path: Path, paths, preferences: dict | None) -> tuple[dict, dict]:
    """`viewer.open(path, plugin=None)` on each path in a fresh napari whose settings file is the test's own
    (tests/napari_open.py), with `preferences` as `plugins.extension2reader`."""
    import subprocess
    import sys

    import yaml

    out = tmp_path / f"napari-{len(list(tmp_path.glob('napari-*')))}"
    out.mkdir()
    (out / "settings.yaml").write_text(yaml.safe_dump({"plugins": {"extension2reader": preferences or {}}}))
    env = {**os.environ, "NAPARI_CONFIG": str(out / "settings.yaml"), "QT_QPA_PLATFORM": "offscreen",
           "PYTHONPATH": os.pathsep.join([str(Path(sam3tiles.__file__).parents[1]), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, str(OPEN), str(out), *map(str, paths)], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    with np.load(out / "data.npz") as data:
        return json.loads((out / "layers.json").read_text()), {k: data[k] for k in data.files}


@pytest.fixture(scope="module")
def geo_outputs(tmp_path_factory):
    """A georeferenced run as a user makes it: a COG scene (UTM, 0.3 m pixels, overviews), two layers of one
    GeoPackage, the COG label image, an RFC 7946 GeoJSON (lon/lat), a GeoParquet and a FlatGeobuf."""
    from sam3tiles.testing.demo import add_overviews, write_scene

    d = tmp_path_factory.mktemp("geo")
    scene = write_scene(d / "scene.tif", 1300, 1100, seed=3)
    add_overviews(scene.path)
    run = dict(backend="reference", workers=1, checkpoint=False)
    segment_job(str(scene.path), ["blue"], out=d / "geo.gpkg", layer="buildings", labels=d / "geo-labels.tif", **run)
    segment_job(str(scene.path), ["red"], out=d / "geo.gpkg", layer="vehicles", **run)
    for name in ("geo.geojson", "geo.parquet", "geo.fgb"):
        segment_job(str(scene.path), ["blue"], out=d / name, **run)
    return scene, d


def _one_object_on_its_pixels(shapes: dict, labels: np.ndarray, image: np.ndarray, colour) -> None:
    """One object: each vertex of its shape lies on the edge of its labelled pixels (of the 4 pixels that meet
    at the vertex, its label holds 1 to 3), and the image under its inside is the object's colour."""
    oid, verts = max(((i, v) for i, v in shapes.items()), key=lambda iv: shapely.Polygon(iv[1]).area)
    assert shapely.Polygon(verts).area > 300, "a real object, not a sliver"
    mine = np.asarray(labels) == oid
    for r, c in verts:
        assert r % 1 == 0.5 and c % 1 == 0.5, (r, c)  # a pixel corner: centres are at integers
        rows, cols = [int(r - 0.5), int(r + 0.5)], [int(c - 0.5), int(c + 0.5)]
        around = [mine[y, x] for y in rows for x in cols if 0 <= y < mine.shape[0] and 0 <= x < mine.shape[1]]
        assert 1 <= sum(around) <= 3, (oid, r, c, around)
    r, c = shapely.Polygon(verts).representative_point().coords[0]
    assert mine[_pixel(r), _pixel(c)]
    assert np.abs(image[_pixel(r), _pixel(c)].astype(int) - colour).max() <= 40, image[_pixel(r), _pixel(c)]


def _shapes_of(found: dict, data: dict, path, name: str | None = None) -> dict:
    """{id: vertices} of a shapes layer (the one named `name`, else the first) napari opened from `path`."""
    layer = next(lay for lay in found[str(path)]["layers"]
                 if name is None or lay["name"].split(" [")[0] == name)  # napari numbers a name it holds: "x [1]"
    assert layer["kind"] == "shapes"
    ids = data[f"{layer['key']}/ids"]
    return {int(ids[i]): data[f"{layer['key']}/{i}"] for i in range(len(ids))}


@needs_napari
def test_napari_chooses_our_reader_and_the_objects_lie_on_the_scene(geo_outputs, tmp_path):
    """`napari scene.tif geo.gpkg geo-labels.tif` with napari's defaults: our vector outputs open with our
    reader (no other matches them), a plain `.tif` with napari's own (our manifest names no `*.tif`, so napari
    never asks about a TIFF), in the same frame: each object on its pixels. `add_to` opens the COG labels and
    the scene through our reader: their overviews as levels and the way back to the map."""
    import rasterio

    from sam3tiles.testing.demo import COLOURS

    scene, d = geo_outputs
    paths = [scene.path, d / "geo.gpkg", d / "geo-labels.tif", d / "geo.geojson", d / "geo.parquet", d / "geo.fgb"]
    found, data = _napari_open(tmp_path, [*paths, f"add_to:{scene.path}", f"add_to:{d / 'geo-labels.tif'}"], None)
    assert all("layers" in found[str(p)] for p in paths), found  # no dialog, no failure
    [plain] = found[str(scene.path)]["layers"]
    assert plain["kind"] == "image" and plain["rgb"] and not plain["multiscale"]  # napari's own reader
    [image] = found[f"add_to:{scene.path}"]["layers"]
    with rasterio.open(scene.path) as ds:
        sizes = [(ds.height, ds.width)] + [(-(-ds.height // f), -(-ds.width // f)) for f in ds.overviews(1)]
    assert image["kind"] == "image" and image["rgb"] and image["multiscale"]
    assert [tuple(s[:2]) for s in image["shapes"]] == sizes and len(sizes) > 1
    [labels] = found[f"add_to:{d / 'geo-labels.tif'}"]["layers"]
    assert labels["kind"] == "labels" and labels["multiscale"] and tuple(labels["shapes"][0]) == sizes[0]
    assert len(labels["shapes"]) > 1
    [napari_labels] = found[str(d / "geo-labels.tif")]["layers"]  # napari's own: the same pixels, one level
    assert np.array_equal(data[napari_labels["key"]], data[labels["key"]])
    assert sorted(lay["name"] for lay in found[str(d / "geo.gpkg")]["layers"]) == ["buildings blue", "vehicles red"]
    pixels, level0 = data[plain["key"]], data[labels["key"]]
    _one_object_on_its_pixels(_shapes_of(found, data, d / "geo.gpkg", "buildings blue"), level0, pixels,
                              COLOURS["blue"])
    for other in ("geo.geojson", "geo.parquet", "geo.fgb"):  # the same objects, ids and frame in every format
        same, mine = _shapes_of(found, data, d / other), _shapes_of(found, data, d / "geo.gpkg", "buildings blue")
        assert same.keys() == mine.keys()
        assert all(np.allclose(same[i], mine[i], atol=0.05 if other.endswith("json") else 1e-6) for i in mine), other
    meta = labels["metadata"]["sam3tiles"]
    x, y, _ = np.asarray(meta["data_to_crs"]) @ [10, 20, 1]  # pixel (10, 20)'s centre on the map
    assert np.allclose([x, y], [500000 + 0.3 * 20.5, 4100000 - 0.3 * 10.5])


@needs_napari
def test_napari_opens_a_slide_and_its_outputs_in_one_frame(outputs, tmp_path):
    """The microscopy run: the slide (an image, its pyramid as levels), the QuPath GeoJSON and GeoPackage,
    the OME-TIFF and OME-Zarr labels, each opened by napari's own choice of our reader."""
    from sam3tiles.integrations.napari import PREFERENCES
    from sam3tiles.writers.labels import write_labels

    slide, gdf, d = outputs
    write_labels(gdf, tmp_path / "l.ome.zarr", 900, 640, levels=slide.levels, pixel_size_um=(0.25, 0.25))
    paths = [slide.path, d / "o.gpkg", d / "o.qupath.geojson", d / "labels.ome.tif", tmp_path / "l.ome.zarr"]
    found, _ = _napari_open(tmp_path, paths, preferences=None)
    assert found[str(slide.path)] == found[str(d / "labels.ome.tif")] == {"dialog": ["napari", "sam3tiles"]}
    # a folder: napari's own reader alone (the manifest accepts none), which cannot read an NGFF label group
    assert found[str(tmp_path / "l.ome.zarr")] == {"failed": "napari"}
    found, data = _napari_open(tmp_path, [*paths[:-1], f"add_to:{paths[-1]}"], preferences=PREFERENCES)
    [image] = found[str(slide.path)]["layers"]
    assert image["kind"] == "image" and image["rgb"] and [s[:2] for s in image["shapes"]] == [[640, 900], [320, 450]]
    for key in (str(d / "labels.ome.tif"), f"add_to:{tmp_path / 'l.ome.zarr'}"):
        [labels] = found[key]["layers"]
        assert labels["kind"] == "labels" and labels["multiscale"] and labels["shapes"] == [[640, 900], [320, 450]]
        level0 = data[labels["key"]]
        for vector in ("o.gpkg", "o.qupath.geojson"):
            shapes = _shapes_of(found, data, d / vector, "indigo")
            colour = tifffile.imread(slide.path, level=0)[level0 == next(iter(shapes))].mean(axis=0)
            _one_object_on_its_pixels(shapes, level0, data[image["key"]], colour)


def test_the_segmented_images_open_as_image_layers(outputs, geo_outputs, plugin, tmp_path):
    """Through npe2 alone: a GeoTIFF (its overviews as levels) and a slide (its pyramid) are image layers in
    their own pixels, each with its way back to the map; a plain TIFF is left to other readers."""
    scene, d = geo_outputs
    slide = outputs[0]
    [(levels, kw, kind)] = read(scene.path, plugin)
    assert kind == "image" and kw["rgb"] and kw["multiscale"] and levels[0].shape == (1100, 1300, 3)
    assert np.array_equal(np.asarray(levels[0][100:110, 200:210]), tifffile.imread(scene.path)[100:110, 200:210])
    assert "32633" in kw["metadata"]["sam3tiles"]["crs"]
    [(levels, kw, kind)] = read(slide.path, plugin)
    assert kind == "image" and [lvl.shape[:2] for lvl in levels] == [(640, 900), (320, 450)]
    assert kw["metadata"]["sam3tiles"]["crs"] is None
    tifffile.imwrite(tmp_path / "plain.tif", np.zeros((10, 10, 3), np.uint8))
    assert get_reader(str(tmp_path / "plain.tif")) is None
