"""Whole-slide microscopy: pyramidal OME-TIFF slides written here with tifffile, objects of known extent,
segmented by the real pipeline (reference backend) in full-resolution pixel space.

* brightfield RGB slide: precision and recall >= 0.97 per class;
* rectangles whose edges lie on pixel edges: polygon bounds within half a pixel of the truth (at
  --scale 4, where SAM 3's 288x288 mask grid is finer than a slide pixel: at --scale 1 its 3.5 px cells
  limit any backend to about 2 px);
* --scale 0.5 / 0.25 read pyramid levels 1 / 2, never the full resolution;
* 16-bit fluorescence: one global 2-98 % stretch, --channels picks the nuclear channel;
* --labels: a uint32 label image that agrees with the polygons (IoU >= 0.99 each, same ids);
* .qupath.geojson: QuPath detections (or annotations) of the documented shape, whose `crs` member GDAL
  reads as a pixel grid, not lon/lat; a plain .geojson of a slide is refused; GeoPackage and GeoParquet
  say "no CRS".
"""

from __future__ import annotations

import json
import logging
import pickle
import sqlite3
import uuid

import geopandas as gpd
import numpy as np
import pyarrow.parquet as pq
import pytest
import rasterio
import rasterio.features
import shapely
import tifffile
from affine import Affine
from click.testing import CliRunner
from rasterio.windows import Window

from sam3tiles.errors import BandError, InputDataError, UsageError
from sam3tiles.evaluate import evaluate
from sam3tiles.readers import open_source
from sam3tiles.readers.slide import SlideSource, is_slide
from sam3tiles.run.pipeline import segment_job
from sam3tiles.testing.slidegen import Pyramid, write_slide
from sam3tiles.tiling.grid import TileGrid
from sam3tiles.writers import NO_CRS_NOTE, write_vector

BF_PROMPTS = ["indigo", "crimson"]


def run(path, prompts, **kw):
    kw.setdefault("workers", 2)
    gdf, report = segment_job(str(path), prompts, backend="reference", checkpoint=False, **kw)
    assert report.failed == 0
    return gdf, report


def assert_found(gdf, truth, minimum=0.97):
    table = evaluate(gdf, truth)
    for row in table.itertuples():
        assert row.truth > 0 or row.pred == 0, table
        assert row.precision >= minimum and row.recall >= minimum, table.to_string()
    return table


@pytest.fixture(scope="module")
def slides(tmp_path_factory):
    d = tmp_path_factory.mktemp("slides")
    return {
        "bf": write_slide(d / "bf.ome.tif", 3000, 2500, seed=1),
        "rect": write_slide(d / "rect.ome.tif", 800, 700, seed=3, shape="rect", pyramid=Pyramid(levels=2)),
        "big": write_slide(d / "big.ome.tif", 4000, 3000, seed=4, cell=128, size=(56, 100), fill=0.5),
        "fl": write_slide(d / "fl.ome.tif", 2200, 1800, seed=5, mode="fluorescence"),
        "fl3": write_slide(d / "fl3.ome.tif", 1500, 1200, seed=6, mode="fluorescence", channels=3),
    }


@pytest.fixture(scope="module")
def bf_run(slides, tmp_path_factory):
    d = tmp_path_factory.mktemp("bf_run")
    gdf, _ = run(slides["bf"].path, BF_PROMPTS, out=d / "bf.gpkg", labels=d / "bf_labels.tif")
    return gdf, d


# -- reading ------------------------------------------------------------------------------------------


def test_slide_is_opened_once_and_its_stretch_computed_once(slides, caplog):
    """Constructing a SlideSource opens the file once: a 16-bit slide's statistics are computed once
    (the base class and the slide reader both opened it, so they were computed twice)."""
    caplog.set_level(logging.INFO, logger="sam3tiles.readers.slide")
    with SlideSource(slides["fl"].path) as src:
        assert src.dtype == np.uint16 and src.stretch is not None
    assert sum("stretch for" in r.getMessage() for r in caplog.records) == 1
def test_is_slide_only_for_ome_and_pyramids(slides, tmp_path):
    assert is_slide(slides["bf"].path) and is_slide(slides["fl3"].path)
    plain = tmp_path / "plain.tif"
    tifffile.imwrite(plain, np.zeros((64, 80, 3), np.uint8), photometric="rgb")
    assert not is_slide(plain)  # a plain TIFF stays with rasterio
    from sam3tiles.testing.demo import write_scene

    geo = write_scene(tmp_path / "geo.tif", 300, 200, seed=0).path
    assert not is_slide(geo)  # GeoTIFFs stay with rasterio
    (tmp_path / "x.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 32)
    assert not is_slide(tmp_path / "x.png") and not is_slide(tmp_path / "missing.tif")
    with open_source(slides["bf"].path) as src:
        assert isinstance(src, SlideSource)
        assert (src.width, src.height, src.count, src.crs) == (3000, 2500, 3, None)
        assert src.transform == Affine.identity() and src.band_count == 3
        assert src.n_levels == 3 and src.stretch is None


def test_window_reads_only_the_level_that_matches_the_scale(slides):
    with SlideSource(slides["bf"].path) as src:
        with tifffile.TiffFile(src.path) as tf:
            level1 = tf.series[0].levels[1].asarray()
        rgb, valid = src.read_window(Window(752, 752, 2016, 1744), (1008, 872))
        assert valid.all()
        assert np.array_equal(rgb, np.moveaxis(level1[376:376 + 872, 376:376 + 1008], -1, 0))
        assert src.levels_read == {1: 1}
        grid = TileGrid(src.width, src.height, scale=0.25)
        for tile in grid:
            src.read_tile(tile)
        assert src.levels_read == {1: 1, 2: len(grid)}
        # past the slide's edge: padding is invalid, never data
        rgb, valid = src.read_window(Window(2900, 2400, 200, 200), (150, 150))
        assert valid[:75, :75].all() and not valid[:, 76:].any() and not valid[76:, :].any()
        assert not rgb[:, ~valid].any()
        clone = pickle.loads(pickle.dumps(src))
        assert np.array_equal(clone.read_window(Window(10, 20, 300, 200), (300, 200))[0],
                              src.read_window(Window(10, 20, 300, 200), (300, 200))[0])
        clone.close()


@pytest.mark.parametrize("scale,level", [(0.5, 1), (0.25, 2)])
def test_scaled_runs_read_the_matching_pyramid_level(slides, monkeypatch, scale, level):
    seen = set()
    original = SlideSource._read_level

    def spy(self, lvl, *a):
        seen.add(lvl)
        return original(self, lvl, *a)

    monkeypatch.setattr(SlideSource, "_read_level", spy)
    gdf, report = run(slides["big"].path, BF_PROMPTS, scale=scale, tissue="off")  # the tissue's overview aside
    assert seen == {level}
    assert report.saturated == 0
    assert_found(gdf, slides["big"].truth)


def test_channel_and_axis_errors_name_the_fix(slides, tmp_path):
    with pytest.raises(BandError, match=r"channel 4 does not exist.*between 1 and 3"):
        SlideSource(slides["fl3"].path, bands=(4,))
    two = tmp_path / "two.ome.tif"
    tifffile.imwrite(two, np.zeros((2, 64, 64), np.uint16), metadata={"axes": "CYX"})
    with pytest.raises(BandError, match=r"with bands \(channel numbers, 1-based\), e\.g\. bands=1 "):
        SlideSource(two)
    stack = tmp_path / "z.ome.tif"
    tifffile.imwrite(stack, np.zeros((3, 64, 64), np.uint16), metadata={"axes": "ZYX"})
    with pytest.raises(InputDataError, match=r"Z=3.*own OME-TIFF"):
        SlideSource(stack)
    # singleton T and Z are fine
    tczyx = tmp_path / "t.ome.tif"
    tifffile.imwrite(tczyx, np.full((1, 1, 1, 64, 48), 7, np.uint8), metadata={"axes": "TCZYX"})
    with SlideSource(tczyx) as src:
        assert (src.width, src.height, src.count) == (48, 64, 1)
        rgb, _ = src.read_window(Window(0, 0, 48, 64), (48, 64))
        assert (rgb == 7).all()


# -- brightfield: accuracy, labels, outputs ---------------------------------------------------------------
def test_brightfield_slide_precision_recall(slides, bf_run):
    gdf, _ = bf_run
    assert gdf.crs is None and len(gdf) > 2000
    assert_found(gdf, slides["bf"].truth)
    # pixel space: full-resolution coordinates, inside the slide
    x0, y0, x1, y1 = gdf.total_bounds
    assert x0 >= 0 and y0 >= 0 and x1 <= 3000 and y1 <= 2500


def test_rectangle_vertices_within_half_a_pixel(slides):
    truth = slides["rect"].truth
    gdf, _ = run(slides["rect"].path, BF_PROMPTS, scale=4)
    assert_found(gdf, truth, minimum=1.0)
    tree = shapely.STRtree(truth.geometry.values)
    p, t = tree.query(gdf.geometry.values, predicate="intersects")
    assert len(p) == len(gdf) == len(truth)
    diff = np.abs(shapely.bounds(gdf.geometry.values[p]) - shapely.bounds(truth.geometry.values[t]))
    assert diff.max() <= 0.5 + 1e-9


def test_label_image_agrees_with_polygons(bf_run):
    gdf, d = bf_run
    written = gpd.read_file(d / "bf.gpkg")
    assert list(written["id"]) == list(gdf["id"]) == list(range(1, len(gdf) + 1))
    with rasterio.open(d / "bf_labels.tif") as ds:
        assert (ds.width, ds.height, ds.count, ds.dtypes[0]) == (3000, 2500, 1, "uint32")
        assert ds.crs is None and ds.transform == Affine.identity()
        assert ds.profile["tiled"] and ds.block_shapes[0] == (256, 256)
        labels = ds.read(1)
    assert set(np.unique(labels)) - {0} == set(gdf["id"])
    ious = []
    for oid, geom in zip(gdf["id"], gdf.geometry):
        bx0, by0, bx1, by1 = (int(v) for v in np.round(geom.bounds))
        bx0, by0 = max(bx0 - 1, 0), max(by0 - 1, 0)
        win = labels[by0:by1 + 1, bx0:bx1 + 1]
        mine = rasterio.features.rasterize([geom], out_shape=win.shape, transform=Affine.translation(bx0, by0),
                                           dtype="uint8").astype(bool)
        got = win == oid
        ious.append((mine & got).sum() / max((mine | got).sum(), 1))
    assert min(ious) >= 0.99


def test_no_crs_outputs_say_so(bf_run, tmp_path):
    gdf, d = bf_run
    con = sqlite3.connect(d / "bf.gpkg")
    srs_id, desc = con.execute("SELECT srs_id, description FROM gpkg_contents WHERE table_name='bf'").fetchone()
    org, definition = con.execute("SELECT organization, definition FROM gpkg_spatial_ref_sys WHERE srs_id=?",
                                  (srs_id,)).fetchone()
    con.close()
    assert desc.startswith(NO_CRS_NOTE)
    assert org.upper() != "EPSG" and "undefined" in definition.lower()
    assert gpd.read_file(d / "bf.gpkg").crs is None
    write_vector(gdf, tmp_path / "bf.parquet", metadata={"crs": NO_CRS_NOTE})
    geo = json.loads(pq.read_schema(tmp_path / "bf.parquet").metadata[b"geo"])
    assert "crs" in geo["columns"]["geometry"] and geo["columns"]["geometry"]["crs"] is None
    assert gpd.read_parquet(tmp_path / "bf.parquet").crs is None


# -- QuPath GeoJSON and the CLI -----------------------------------------------------------------------------
def validate_qupath(path, prompts, width, height, object_type="detection") -> list[dict]:
    """The shape QuPath's GeoJSON import reads: a FeatureCollection of Features with a UUID id, a
    (Multi)Polygon in pixel coordinates and properties objectType / classification{name,color} /
    measurements{name: number}."""
    doc = json.loads(path.read_text())
    assert doc["type"] == "FeatureCollection" and isinstance(doc["features"], list)
    for f in doc["features"]:
        assert f["type"] == "Feature"
        uuid.UUID(f["id"])
        geom = f["geometry"]
        assert geom["type"] in ("Polygon", "MultiPolygon")
        shape = shapely.geometry.shape(geom)
        assert shape.is_valid and not shape.is_empty
        x0, y0, x1, y1 = shape.bounds
        assert 0 <= x0 and 0 <= y0 and x1 <= width and y1 <= height
        props = f["properties"]
        assert props["objectType"] == object_type
        assert props.get("isLocked") is (False if object_type == "annotation" else None)
        cls = props["classification"]
        assert cls["name"] in prompts
        assert len(cls["color"]) == 3 and all(isinstance(c, int) and 0 <= c <= 255 for c in cls["color"])
        meas = props["measurements"]
        assert isinstance(meas, dict) and all(isinstance(v, (int, float)) for v in meas.values())
        assert 0.5 < meas["score"] <= 1.0 and meas["area_px"] > 0 and meas["id"] == props["id"]
        assert isinstance(props["name"], str)
    return doc["features"]


def test_cli_fluorescence_channels_geojson_and_labels(slides, tmp_path):
    from sam3tiles.cli.main import cli

    out, labels = tmp_path / "nuclei.qupath.geojson", tmp_path / "nuclei_labels.tif"
    args = ["segment", str(slides["fl3"].path), "--text", "white", "--backend", "reference", "--channels", "1",
            "--workers", "2", "--out", str(out), "--labels", str(labels), "-q"]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    features = validate_qupath(out, ["white"], 1500, 1200)
    pred = gpd.GeoDataFrame({"prompt": [f["properties"]["classification"]["name"] for f in features]},
                            geometry=[shapely.geometry.shape(f["geometry"]) for f in features])
    assert_found(pred, slides["fl3"].truth)
    with rasterio.open(labels) as ds:
        ids = set(np.unique(ds.read(1))) - {0}
    assert ids == {f["properties"]["id"] for f in features}
    # the label image is refused for several inputs, and an existing one is not overwritten silently
    res = CliRunner().invoke(cli, ["segment", str(slides["fl3"].path), str(slides["fl"].path), "--text", "white",
                                   "--backend", "reference", "--out", str(tmp_path / "both.gpkg"), "--labels",
                                   str(tmp_path / "both.tif"), "-q"])
    assert res.exit_code == UsageError.exit_code and "one input" in res.output
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == UsageError.exit_code and "exists" in res.output


def test_sixteen_bit_fluorescence_is_stretched_once(slides):
    slide = slides["fl"]
    with SlideSource(slide.path) as src:
        assert src.dtype == np.uint16 and src.count == 1
        lo, hi = src.stretch.lo[0], src.stretch.hi[0]
        assert 400 < lo < 700 and 15000 < hi < 21000
        tile = TileGrid(src.width, src.height).tile(1, 1)
        img = src.read_tile(tile)
        classes = np.zeros(img.valid.shape, bool)
        vw, vh = tile.valid_wh
        from sam3tiles.testing.slidegen import render_classes

        objs = render_classes(slide.objects, tile.x0, tile.y0, tile.x0 + vw, tile.y0 + vh)
        classes[:vh, :vw] = objs > 0
        grey = img.rgb[0]
        assert (img.rgb[0] == img.rgb[1]).all() and (img.rgb[1] == img.rgb[2]).all()
        assert np.percentile(grey[:vh, :vw][~classes[:vh, :vw]], 99) <= 10
        assert np.percentile(grey[classes], 1) >= 235
    gdf, report = run(slide.path, ["white"])
    assert_found(gdf, slide.truth)



def test_qupath_annotations_on_request(slides, tmp_path):
    """--qupath-type annotation: QuPath's editable objects (objectType annotation, unlocked), with the same
    classification, measurements and geometry as the detections."""
    from sam3tiles.cli.main import cli

    args = ["segment", str(slides["rect"].path), "--text", "indigo", "--backend", "reference", "--workers", "2",
            "--no-preview", "-q"]
    det, ann = tmp_path / "det.qupath.geojson", tmp_path / "ann.qupath.geojson"
    assert CliRunner().invoke(cli, [*args, "--out", str(det)]).exit_code == 0
    res = CliRunner().invoke(cli, [*args, "--out", str(ann), "--qupath-type", "annotation"])
    assert res.exit_code == 0, res.output
    d = validate_qupath(det, ["indigo"], 800, 700)
    a = validate_qupath(ann, ["indigo"], 800, 700, object_type="annotation")
    assert len(a) == len(d) > 0
    for fa, fd in zip(a, d):
        assert fa["geometry"] == fd["geometry"] and fa["properties"]["measurements"] == fd["properties"]["measurements"]
        assert fa["properties"]["classification"] == fd["properties"]["classification"]
    res = CliRunner().invoke(cli, [*args, "--out", str(tmp_path / "x.qupath.geojson"), "--qupath-type", "cell"])
    assert res.exit_code == UsageError.exit_code and "'annotation'" in res.output


def test_pixel_space_geojson_is_never_taken_for_lon_lat(slides, tmp_path):
    """A plain .geojson of a slide is refused before any work (GIS tools would read its pixels as lon/lat);
    the .qupath.geojson names its pixel grid, which GDAL reads as an engineering CRS, not WGS84."""
    from sam3tiles.cli.main import cli
    from sam3tiles.writers.qupath import is_pixel_crs

    args = ["segment", str(slides["rect"].path), "--text", "indigo", "--backend", "reference", "--no-preview", "-q"]
    res = CliRunner().invoke(cli, [*args, "--out", str(tmp_path / "cells.geojson")])
    assert res.exit_code == UsageError.exit_code and "cells.qupath.geojson" in res.output and "lon/lat" in res.output
    assert not list(tmp_path.iterdir())  # nothing written, not even a work folder or a report
    out = tmp_path / "cells.qupath.geojson"
    assert CliRunner().invoke(cli, [*args, "--out", str(out)]).exit_code == 0
    validate_qupath(out, ["indigo"], 800, 700)
    back = gpd.read_file(out)
    assert back.crs is not None and not back.crs.is_geographic and is_pixel_crs(back.crs)
    assert pyogrio_layer(out) == "cells"
    with pytest.raises(UsageError, match="has a CRS"):
        write_vector(back.set_crs("EPSG:32633", allow_override=True), tmp_path / "utm.qupath.geojson")
    with pytest.raises(UsageError, match="qupath.geojson"):
        write_vector(back.set_crs(None, allow_override=True), tmp_path / "plain.geojson")


def pyogrio_layer(path) -> str:
    import pyogrio

    return str(pyogrio.list_layers(path)[0, 0])
