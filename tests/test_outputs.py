"""Outputs and units as GIS and microscopy tools take them: square metres on lon/lat rasters, microns on
slides, RFC 7946 GeoJSON, layers in existing GeoPackages, COCO read by pycocotools, the quicklook,
--min-score / --max-area, GeoParquet with its bbox covering. Rasters and slides are written here; runs
use the reference backend (real pipeline, real Dask cluster); files are read back with pyogrio,
geopandas, pyarrow and pycocotools."""

from __future__ import annotations

import json
import warnings

import geopandas as gpd
import numpy as np
import pyarrow.parquet as pq
import pyogrio
import pytest
import rasterio
import rasterio.features
import shapely
import tifffile
from affine import Affine
from click.testing import CliRunner
from PIL import Image
from rasterio.crs import CRS

from sam3tiles.cli.main import cli
from sam3tiles.errors import UsageError
from sam3tiles.readers import open_source
from sam3tiles.run.planning.outputs import COLUMNS
from sam3tiles.run.pipeline import segment_job
from sam3tiles.run.planning.plan import gsd_scale as _gsd_scale
from sam3tiles.testing.demo import COLOURS, layout
from sam3tiles.testing.slidegen import Pyramid, write_slide
from sam3tiles.units import Frame, ome_pixel_size_um, pixel_size
from sam3tiles.writers import write_vector

LAT, LON = 60.0, 10.0  # at 60 degrees north a degree of longitude is half a degree of latitude on the ground
PIXEL_M = 0.3
BACKGROUND = (92, 112, 84)


def lonlat_scene(path, width=640, height=500, seed=3):
    """An EPSG:4326 raster of square 0.3 m pixels (in degrees: twice as wide as tall at 60 N) holding the
    demo's 10x20 px vehicles in red; returns (path, vehicles in pixel coordinates)."""
    objs = [g for c, g in layout(width, height, seed, n_buildings=0, n_fields=0, n_cars=14) if c == "red"]
    img = np.empty((3, height, width), np.uint8)
    img[:] = np.asarray(BACKGROUND, np.uint8)[:, None, None]
    mask = rasterio.features.rasterize([(g, 1) for g in objs], out_shape=(height, width), dtype="uint8") > 0
    img[:, mask] = np.asarray(COLOURS["red"], np.uint8)[:, None]
    m_lat = 111_412.0  # metres per degree of latitude at 60 N (WGS84)
    m_lon = 55_800.0   # metres per degree of longitude at 60 N (WGS84)
    t = Affine(PIXEL_M / m_lon, 0, LON, 0, -PIXEL_M / m_lat, LAT + height * PIXEL_M / m_lat / 2)
    with rasterio.open(path, "w", driver="GTiff", width=width, height=height, count=3, dtype="uint8",
                       crs=CRS.from_epsg(4326), transform=t) as dst:
        dst.write(img)
    return path, objs


@pytest.fixture(scope="module")
def lonlat(tmp_path_factory):
    return lonlat_scene(tmp_path_factory.mktemp("lonlat") / "lonlat.tif")


def run(path, prompts, **kw):
    kw.setdefault("workers", 2)
    kw.setdefault("checkpoint", False)
    gdf, report = segment_job(path if isinstance(path, list) else str(path), prompts, backend="reference", **kw)
    assert report.failed == 0
    return gdf, report


# -- units -----------------------------------------------------------------------------------------------

def test_lonlat_min_area_in_square_metres_keeps_every_vehicle(lonlat, tmp_path):
    path, cars = lonlat
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # --gsd in metres: 0.075 m is a 4x zoom, where the mask grid (3.5 px cells at scale 1) is finer
        # than a pixel, so the areas measure the units rather than the mask resolution
        gdf, _ = run(path, ["red"], min_area=5, gsd=0.075, out=tmp_path / "cars.gpkg", checkpoint=True,
                     work_dir=tmp_path / "work")
    assert not [w for w in caught if "geographic CRS" in str(w.message)]
    # the spool's rows come back as the output table; no pixel size: no um2; lon/lat: the area in m^2
    assert list(gdf.columns) == ["id", "prompt", "score", "area_m2", "area_px", "n_tiles", "source", "backend",
                                 "model", "geometry"]
    assert len(gdf) == len(cars)
    truth = np.asarray([g.area for g in cars]) * PIXEL_M ** 2  # about 18 m^2 each
    with open_source(path) as src:
        frame = Frame.of(src)
    pix = gpd.GeoSeries([shapely.affinity.affine_transform(g, _inverse(frame.transform)) for g in gdf.geometry])
    order = [int(np.argmin([c.centroid.distance(p.centroid) for c in cars])) for p in pix]
    assert sorted(order) == list(range(len(cars)))  # one object per vehicle
    # `area_m2` is the polygons' true ground area: the geodesic area on the WGS84 ellipsoid agrees to 0.5 %
    from pyproj import Geod

    geodesic = np.asarray([abs(Geod(ellps="WGS84").geometry_area_perimeter(g)[0]) for g in gdf.geometry])
    assert np.allclose(gdf["area_m2"], geodesic, rtol=0.005)
    assert np.allclose(gdf["area_m2"] / gdf["area_px"], PIXEL_M ** 2, rtol=0.01)  # m^2 per pixel at this latitude
    # and near the vehicles' drawn area: the reference backend's colour match loses the bilinear edge band
    # (about half a source pixel a side, -13 % on 10x20 px), a segmentation error, not a unit one
    ratio = gdf["area_m2"].to_numpy() / truth[order]
    assert np.all(np.abs(ratio - 1) < 0.2) and abs(np.median(ratio) - 1) < 0.15, ratio
    # the unit is in the layer's metadata; a larger --min-area in m^2 drops them all
    meta = json.loads(pyogrio.read_info(tmp_path / "cars.gpkg")["layer_metadata"]["sam3tiles"])
    assert meta["units"]["area_m2"].startswith("square metres") and "equal-area" in meta["units"]["area_m2"]
    again, report = run(path, ["red"], min_area=40, gsd=0.075, checkpoint=True, work_dir=tmp_path / "work")
    assert len(again) == 0 and report.resumed == report.tiles  # (the tiles come from the checkpoints)


def _inverse(t: Affine) -> list[float]:
    i = ~t
    return [i.a, i.b, i.d, i.e, i.c, i.f]


def test_lonlat_gsd_and_simplify_are_metres(lonlat):
    path, _ = lonlat
    with open_source(path) as src:
        size, unit = pixel_size(Frame.of(src))
        assert unit == "metre" and size == pytest.approx(PIXEL_M, rel=0.01)
        assert _gsd_scale(src, 0.15) == pytest.approx(2.0, rel=0.01)
    # a 0.2 m tolerance moves no vertex by more than 0.2 m: the polygons stay near the unsimplified ones
    plain, _ = run(path, ["red"])
    simple, _ = run(path, ["red"], simplify=0.2)
    assert len(plain) == len(simple)
    assert np.all(np.abs(simple["area_m2"].to_numpy() / plain["area_m2"].to_numpy() - 1) < 0.1)


def test_gsd_without_a_pixel_size_is_refused(tmp_path):
    Image.fromarray(np.zeros((50, 60, 3), np.uint8)).save(tmp_path / "plain.png")
    refused = pytest.raises(UsageError, match="^gsd=0.5: .* zoom with scale instead")
    with open_source(tmp_path / "plain.png") as src, refused:
        _gsd_scale(src, 0.5)


def test_ome_pixel_size_units():
    ome = ('<OME xmlns="http://www.openmicroscopy.org/Schemas/OME/2016-06"><Image ID="Image:0"><Pixels '
           'PhysicalSizeX="{x}" PhysicalSizeXUnit="{u}" PhysicalSizeY="{y}" {extra}/></Image></OME>')
    assert ome_pixel_size_um(ome.format(x=250, u="nm", y=0.5, extra='PhysicalSizeYUnit="µm"')) == (0.25, 0.5)
    assert ome_pixel_size_um(ome.format(x=0.3, u="µm", y=0.3, extra="")) == (0.3, 0.3)
    assert ome_pixel_size_um('<OME><Image><Pixels SizeX="3"/></Image></OME>') is None
    assert ome_pixel_size_um(None, "Aperio Image Library |AppMag = 40|MPP = 0.2520") == (0.252, 0.252)


# -- slides -------------------------------------------------------------------------------------------------

def test_slide_area_um2_and_gsd_in_microns(tmp_path):
    slide = write_slide(tmp_path / "s.ome.tif", 700, 600, seed=2, pyramid=Pyramid(levels=2))  # PhysicalSizeX 0.25 um
    with open_source(slide.path) as src:
        assert src.pixel_size_um == (0.25, 0.25)
        assert _gsd_scale(src, 0.5) == pytest.approx(0.5)  # 0.5 um per pixel: half the resolution
    out = tmp_path / "nuclei.qupath.geojson"
    gdf, _ = run(slide.path, ["indigo"], out=out)
    assert len(gdf) > 10
    assert list(gdf.columns) == [*COLUMNS, "geometry"]  # the spool's rows come back as the output table
    assert np.allclose(gdf["area_um2"], gdf["area_px"] * 0.0625)
    doc = json.loads(out.read_text())
    assert doc["name"] == "nuclei" and pyogrio.list_layers(out)[0, 0] == "nuclei"
    features = doc["features"]
    assert all(f["properties"]["measurements"]["Area µm^2"] == pytest.approx(f["properties"]["area_px"] * 0.0625)
               for f in features)


def test_slide_without_pixel_size_says_so_once_and_stays_in_pixels(tmp_path, caplog):
    img = np.full((300, 400, 3), 230, np.uint8)
    img[100:140, 100:160] = (80, 12, 128)
    tifffile.imwrite(tmp_path / "bare.ome.tif", img, ome=True, metadata={"axes": "YXS"}, photometric="rgb")
    with caplog.at_level("WARNING"):
        gdf, _ = run(tmp_path / "bare.ome.tif", ["indigo"])
    said = [r for r in caplog.records if "no physical pixel size" in r.getMessage()]
    assert len(said) == 1 and "area_um2" not in gdf.columns and len(gdf) == 1


# -- GeoJSON, FlatGeobuf, GeoParquet -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def utm_objects():
    polys = [shapely.box(500000 + 3 * i, 4100000, 500002.1 + 3 * i, 4100001.2) for i in range(5)]
    gdf = gpd.GeoDataFrame({"id": np.arange(1, 6), "prompt": ["car"] * 5, "score": np.full(5, 0.9, np.float32)},
                           geometry=polys, crs=32633)
    gdf["area_m2"] = gdf.geometry.area
    frame = Frame(CRS.from_epsg(32633), Affine(0.3, 0, 500000, 0, -0.3, 4100010), 100, 100)
    return gdf, {"s.tif": frame}


def test_geojson_is_rfc7946_rounded_or_native_on_request(utm_objects, tmp_path):
    gdf, frames = utm_objects
    write_vector(gdf, tmp_path / "cars.geojson", metadata={"version": "x"}, frames=frames)
    doc = json.loads((tmp_path / "cars.geojson").read_text())
    assert "crs" not in doc and doc["name"] == "cars" and doc["sam3tiles"] == {"version": "x"}
    x, y = doc["features"][0]["geometry"]["coordinates"][0][0]
    assert 14.9 < x < 15.1 and 37 < y < 37.1  # lon, lat
    digits = {len(repr(v).split(".")[1]) for v in (x, y) if "." in repr(v)}
    assert max(digits) <= 7  # 0.3 m pixels: 1e-7 degrees (1 cm) keeps a tenth of a pixel
    back = gpd.read_file(tmp_path / "cars.geojson").to_crs(32633)
    assert back.geometry.area.to_numpy() == pytest.approx(gdf.area.to_numpy(), rel=0.01)
    write_vector(gdf, tmp_path / "native.geojson", frames=frames, geojson_crs="native")
    assert gpd.read_file(tmp_path / "native.geojson").crs.to_epsg() == 32633


def test_flatgeobuf_layer_is_the_stem_and_holds_the_metadata(utm_objects, tmp_path):
    gdf, frames = utm_objects
    write_vector(gdf, tmp_path / "cars.fgb", metadata={"version": "x"}, frames=frames)
    assert [str(n) for n in pyogrio.list_layers(tmp_path / "cars.fgb")[:, 0]] == ["cars"]
    info = pyogrio.read_info(tmp_path / "cars.fgb")["layer_metadata"]
    assert json.loads(info["sam3tiles"]) == {"version": "x"} and "square metre" in info["DESCRIPTION"]


def test_geoparquet_has_the_bbox_covering_and_metadata(utm_objects, tmp_path):
    gdf, frames = utm_objects
    write_vector(gdf, tmp_path / "cars.parquet", metadata={"version": "x"}, frames=frames)
    schema = pq.read_schema(tmp_path / "cars.parquet")
    geo = json.loads(schema.metadata[b"geo"])
    assert geo["columns"]["geometry"]["covering"]["bbox"]["xmin"] == ["bbox", "xmin"] and "bbox" in schema.names
    assert gpd.read_parquet(tmp_path / "cars.parquet").attrs["sam3tiles"] == {"version": "x"}


# -- GeoPackage layers -------------------------------------------------------------------------------------

def cli_run(*args):
    return CliRunner().invoke(cli, ["-q", "segment", *map(str, args), "--backend", "reference", "--workers", "2",
                                    "--no-preview"])


def test_layer_into_an_existing_geopackage_keeps_the_other_layers(lonlat, tmp_path, utm_objects):
    path, cars = lonlat
    gpkg = tmp_path / "project.gpkg"
    roads, _ = utm_objects
    pyogrio.write_dataframe(roads, gpkg, layer="roads")
    r = cli_run(path, "-t", "red", "--out", gpkg, "--layer", "buildings")
    assert r.exit_code == 0, r.output
    assert sorted(pyogrio.list_layers(gpkg)[:, 0]) == ["buildings", "roads"]
    assert len(gpd.read_file(gpkg, layer="buildings")) == len(cars)
    r = cli_run(path, "-t", "red", "--out", gpkg, "--layer", "buildings")  # the layer exists: refused
    assert r.exit_code == UsageError.exit_code and "--overwrite" in r.output and "other layers" in r.output
    r = cli_run(path, "-t", "red", "--out", gpkg, "--layer", "buildings", "--overwrite", "--min-area", "40")
    assert r.exit_code == 0, r.output
    assert sorted(pyogrio.list_layers(gpkg)[:, 0]) == ["buildings", "roads"]
    assert len(gpd.read_file(gpkg, layer="buildings")) == 0
    assert gpd.read_file(gpkg, layer="roads").geometry.equals(roads.geometry)
    # --overwrite without --layer replaces the stem's layer only
    r = cli_run(path, "-t", "red", "--out", gpkg, "--overwrite")
    assert r.exit_code == 0, r.output
    assert sorted(pyogrio.list_layers(gpkg)[:, 0]) == ["buildings", "project", "roads"]
    assert not list(tmp_path.glob(".project.*"))  # no temporary file left
    r = cli_run(path, "-t", "red", "--out", tmp_path / "o.fgb", "--layer", "x")
    assert r.exit_code == UsageError.exit_code and "GeoPackage" in r.output


def test_each_layer_keeps_its_own_report_and_preview(lonlat, tmp_path):
    """Two runs into one GeoPackage, each with its --layer: each layer has its report and quicklook
    (`OUT.LAYER.report.json`, `OUT.LAYER.preview.png`); the second run leaves the first's as they were."""
    path, cars = lonlat
    gpkg = tmp_path / "geo.gpkg"

    def segment(layer, *extra):
        r = CliRunner().invoke(cli, ["-q", "segment", str(path), "-t", "red", "--backend", "reference", "--workers",
                                     "1", "--out", str(gpkg), "--layer", layer, *extra])
        assert r.exit_code == 0, r.output

    segment("roads")
    first = {n: (tmp_path / f"geo.gpkg.roads.{n}").read_bytes() for n in ("report.json", "preview.png")}
    segment("buildings", "--min-area", "1")
    assert {n: (tmp_path / f"geo.gpkg.roads.{n}").read_bytes() for n in first} == first
    assert json.loads(first["report.json"])["objects"] == len(cars)
    assert (tmp_path / "geo.gpkg.buildings.preview.png").exists()
    assert json.loads((tmp_path / "geo.gpkg.buildings.report.json").read_text())["parameters"]["min_area"] == 1
    assert not (tmp_path / "geo.gpkg.report.json").exists()  # no report shared by the layers
    # the job file's output.layer names them alike
    job = tmp_path / "job.yaml"
    job.write_text(json.dumps({"inputs": [str(path)], "prompts": {"text": ["red"]}, "backend": {"name": "reference"},
                               "output": {"path": "geo.gpkg", "layer": "cars"}}))
    r = CliRunner().invoke(cli, ["-q", "run", str(job)])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "geo.gpkg.cars.report.json").exists() and (tmp_path / "geo.gpkg.cars.preview.png").exists()
    assert {n: (tmp_path / f"geo.gpkg.roads.{n}").read_bytes() for n in first} == first


# -- COCO ---------------------------------------------------------------------------------------------------

def test_coco_is_read_by_pycocotools(lonlat, tmp_path):
    from pycocotools.coco import COCO

    path, cars = lonlat
    out = tmp_path / "objects.coco.json"
    gdf, _ = run(path, ["red"], out=out, labels=tmp_path / "labels.tif")
    coco = COCO(str(out))
    assert [c["name"] for c in coco.loadCats(coco.getCatIds())] == ["red"]
    (img,) = coco.loadImgs(coco.getImgIds())
    assert (img["file_name"], img["width"], img["height"]) == ("lonlat.tif", 640, 500)
    anns = coco.loadAnns(coco.getAnnIds())
    assert len(anns) == len(cars) and all(0.5 <= a["score"] <= 1 for a in anns)
    with rasterio.open(tmp_path / "labels.tif") as ds:
        labels = ds.read(1)
    for a in anns[:5]:
        mine = coco.annToMask(a).astype(bool)
        truth = labels == a["id"]
        assert (mine & truth).sum() / (mine | truth).sum() >= 0.85  # pycocotools' own polygon fill rule
        x, y, w, h = a["bbox"]
        rows, cols = np.nonzero(truth)
        assert abs(x - cols.min()) <= 1 and abs(x + w - cols.max() - 1) <= 1 and abs(y - rows.min()) <= 1


def test_coco_object_with_a_hole_is_an_exact_rle(tmp_path):
    from pycocotools.coco import COCO

    ring = shapely.box(10, 20, 40, 50).difference(shapely.box(20, 30, 30, 40))
    gdf = gpd.GeoDataFrame({"id": [7], "prompt": ["donut"], "score": [0.8], "area_px": [ring.area],
                            "source": ["img.png"]}, geometry=[ring])
    write_vector(gdf, tmp_path / "d.coco.json", frames={"img.png": Frame(None, Affine.identity(), 64, 48)},
                 prompts=["donut"])
    coco = COCO(str(tmp_path / "d.coco.json"))
    (ann,) = coco.loadAnns(coco.getAnnIds())
    want = rasterio.features.rasterize([(ring, 1)], out_shape=(48, 64), dtype="uint8")
    assert np.array_equal(coco.annToMask(ann), want) and ann["area"] == ring.area == 800


# -- filters, preview -----------------------------------------------------------------------------------------

def test_min_score_and_max_area(lonlat, tmp_path):
    path, cars = lonlat
    base, _ = run(path, ["red"])
    cut = float(np.median(base["score"]))
    high, _ = run(path, ["red"], min_score=cut)
    assert len(high) == int((base["score"] >= np.float32(cut)).sum()) and (high["score"] >= np.float32(cut)).all()
    small, _ = run(path, ["red"], max_area=float(np.median(base["area_m2"])))
    assert 0 < len(small) < len(base) and (small["area_m2"] <= np.median(base["area_m2"])).all()
    r = cli_run(path, "-t", "red", "--out", tmp_path / "o.gpkg", "--min-score", "0.3")
    assert r.exit_code == UsageError.exit_code and "0.5" in r.output and not (tmp_path / "o.gpkg").exists()
    with pytest.raises(UsageError, match="already drop"):
        run(path, ["red"], min_score=0.3)


def test_preview_outlines_objects_and_is_bounded(lonlat, tmp_path, monkeypatch):
    from sam3tiles.writers import quicklook

    path, cars = lonlat
    out = tmp_path / "cars.gpkg"
    r = CliRunner().invoke(cli, ["-q", "segment", str(path), "-t", "red", "--backend", "reference", "--workers", "2",
                                 "--out", str(out)])
    assert r.exit_code == 0, r.output
    img = np.asarray(Image.open(f"{out}.preview.png").convert("RGB"))
    assert max(img.shape[:2]) <= quicklook.MAX_SIDE + 200
    red = np.asarray(quicklook.class_colour("red"))
    assert (np.abs(img.astype(int) - red).sum(axis=2) < 30).sum() > 100  # outlines in the prompt's colour
    assert not (tmp_path / "none.gpkg.preview.png").exists()
    # an image with no small enough level is not decoded; overviews make it drawable
    monkeypatch.setattr(quicklook, "READ_BUDGET", 100_000)
    assert quicklook.overview(str(path), None, (320, 250)) is None
    import shutil

    copy = shutil.copy(path, tmp_path / "with_overviews.tif")
    with rasterio.open(copy, "r+") as ds:
        ds.build_overviews([2, 4], rasterio.enums.Resampling.average)
    got = quicklook.overview(str(copy), None, (160, 125))
    assert got is not None and got.shape == (125, 160, 3)
    r = CliRunner().invoke(cli, ["-q", "segment", str(path), "-t", "red", "--backend", "reference", "--workers", "2",
                                 "--out", str(tmp_path / "none.gpkg"), "--no-preview"])
    assert r.exit_code == 0 and not (tmp_path / "none.gpkg.preview.png").exists()


def test_preview_of_several_inputs_has_a_panel_each(lonlat, tmp_path):
    from sam3tiles.testing import other_file
    from sam3tiles.writers import quicklook

    path, cars = lonlat
    other = other_file(path, tmp_path / "other.tif")
    gdf, _ = run([path, other], ["red"], out=tmp_path / "both.gpkg")
    assert len(gdf) == 2 * len(cars)
    img = np.asarray(Image.open(tmp_path / "both.gpkg.preview.png").convert("RGB")).astype(int)
    side = quicklook.MAX_SIDE // 2
    assert img.shape[1] == 2 * side
    red = np.abs(img - np.asarray(quicklook.class_colour("red"))).sum(axis=2) < 30
    assert red[:side, :side].sum() > 50 and red[:side, side:].sum() > 50  # outlines in both panels


def test_quicklook_benchmark_smoke():
    from benchmarks.bench_quicklook import run

    rows = run([400])
    assert [r["overviews"] for r in rows] == [False, True] and all(r["image_drawn"] for r in rows)
