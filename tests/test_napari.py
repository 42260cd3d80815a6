"""The napari plugin through npe2 (no viewer): its manifest, the entry point naming it, and our outputs
opened as napari layer data with the right coordinates (vertices in (row, col), checked against the
slide's own pixels and the label image)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import shapely
import tifffile

import sam3tiles
from sam3tiles.integrations.napari import get_reader
from sam3tiles.run.frames import file_metadata
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
    return npe2.read([str(path)], stack=False, plugin_name="sam3tiles")


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
        assert sorted(kw["features"]["id"]) == sorted(mine["id"]) and all(0.5 <= s <= 1 for s in kw["features"]["score"])
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


def test_georeferenced_outputs_share_one_north_up_frame(plugin, tmp_path):
    """A map CRS: shapes at (-y, x); the COG label image's affine puts its pixels in that same frame."""
    import geopandas as gpd
    from affine import Affine

    from sam3tiles.writers.labels import write_labels

    t = Affine(0.5, 0, 500000, 0, -0.5, 6000000)
    box = shapely.box(500100, 5999800, 500130, 5999850)  # 60 x 100 px at col 200, row 300
    gdf = gpd.GeoDataFrame({"id": [1], "prompt": ["roof"], "score": [0.9]}, geometry=[box], crs="EPSG:32633")
    write_vector(gdf, tmp_path / "o.gpkg", metadata={"version": sam3tiles.__version__})
    write_labels(gdf, tmp_path / "l.tif", 400, 500, transform=t, crs="EPSG:32633")
    [(shapes, kw, _)] = read(tmp_path / "o.gpkg", plugin)
    assert np.allclose(shapes[0][:, 0].min(), -5999850) and np.allclose(shapes[0][:, 1].min(), 500100)
    [(levels, lkw, kind)] = read(tmp_path / "l.tif", plugin)
    assert kind == "labels" and kw["name"] == "roof"
    m = np.asarray(lkw["affine"])
    row, col = 300 + 50, 200 + 30  # a pixel inside the box
    world = m @ [row, col, 1]  # napari draws pixel (row, col) centred at data (row, col): its centre on the map
    assert np.asarray(levels[0])[row, col] == 1
    assert np.allclose(world[:2], [-(6000000 - 0.5 * row - 0.25), 500000 + 0.5 * col + 0.25], rtol=0, atol=1e-6)
    assert shapely.Point(world[1], -world[0]).within(box)
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
    """A run on a 0.3 m GeoTIFF with --labels: the COG labels' affine puts the object's pixels under its shape."""
    from affine import Affine

    from sam3tiles.testing import blob_image, write_raster

    src = write_raster(tmp_path / "geo.tif", blob_image(h=400, w=500), transform=Affine(0.3, 0, 500000, 0, -0.3, 6000000))
    segment_job(str(src), ["blue"], backend="reference", workers=1, checkpoint=False, out=tmp_path / "o.gpkg",
                labels=tmp_path / "l.tif")
    [(shapes, skw, _)] = read(tmp_path / "o.gpkg", plugin)
    [(levels, kw, _)] = read(tmp_path / "l.tif", plugin)
    oid, verts = _largest_shape([(shapes, skw, "shapes")])
    labels = _labels_centroid(levels[0] if kw["multiscale"] else levels, oid, kw["affine"])
    assert np.allclose(labels, _shape_centroid(verts), rtol=0, atol=0.03), (labels, _shape_centroid(verts))  # 0.1 px


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
