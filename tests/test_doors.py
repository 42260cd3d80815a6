"""Where users open the results: sources that tell inputs apart, area columns named for their unit that
GeoPandas does not hide, the report-only API. Rasters are written here; runs use the reference backend
(real pipeline); files are read back with pyogrio/geopandas."""

from __future__ import annotations

import json
import math

import geopandas as gpd
import numpy as np
import pyogrio
import pytest
import rasterio
from affine import Affine
from rasterio.crs import CRS

import sam3tiles
from sam3tiles.errors import UsageError
from sam3tiles.readers.remote import source_name
from sam3tiles.run.recording.report import RunReport
from sam3tiles.testing.demo import write_scene
from sam3tiles.units import Frame, area_column

FT = 0.3048  # metres per international foot


@pytest.fixture(scope="module")
def twins(tmp_path_factory):
    """Two different scenes with one file name: a/visual.tif and b/visual.tif."""
    d = tmp_path_factory.mktemp("twins")
    paths = []
    for i, sub in enumerate("ab"):
        (d / sub).mkdir()
        paths.append(write_scene(d / sub / "visual.tif", 700, 600, seed=20 + i).path)
    return paths


def test_two_inputs_with_one_file_name_keep_two_sources(twins, tmp_path):
    a, b = (str(p) for p in twins)
    gdf = sam3tiles.segment([a, b], "red", backend="reference", out=tmp_path / "all.gpkg", workers=1)
    assert set(gdf["source"]) == {a, b}
    written = gpd.read_file(tmp_path / "all.gpkg")
    for p in (a, b):
        alone = sam3tiles.segment(p, "red", backend="reference", checkpoint=False, workers=1)
        mine = written[written["source"] == p]
        assert len(mine) == len(alone) > 0 and np.allclose(sorted(mine["area_m2"]), sorted(alone["area_m2"]))
    # one .gpkg per input into a folder: both would be visual.gpkg; refused before any work
    (tmp_path / "each").mkdir()
    with pytest.raises(UsageError, match="visual.gpkg"):
        sam3tiles.segment([a, b], "red", backend="reference", out=tmp_path / "each")
    assert not list((tmp_path / "each").iterdir())


def test_source_is_the_input_as_given():
    assert source_name("tiles/a/visual.tif") == "tiles/a/visual.tif"
    assert source_name("https://h.example/c/visual.tif?X-Amz-Signature=s3cr3t#f") == "https://h.example/c/visual.tif"
    assert source_name("/vsicurl/https://h.example/v.tif?sig=1") == "/vsicurl/https://h.example/v.tif"
    assert source_name("s3://bucket/a/visual.tif") == "s3://bucket/a/visual.tif"


def test_area_column_names_its_unit():
    t = Affine(0.5, 0, 0, 0, -0.5, 0)
    assert area_column(Frame(CRS.from_epsg(4326), Affine(1e-5, 0, 10, 0, -1e-5, 60), 10, 10)) == "area_m2"
    assert area_column(Frame(CRS.from_epsg(32633), t, 10, 10)) == "area_m2"
    assert area_column(Frame(CRS.from_epsg(2992), t, 10, 10)) == "area_ft2"   # Oregon Lambert (ft)
    assert area_column(Frame(CRS.from_epsg(2263), t, 10, 10)) == "area_us_ft2"  # New York Long Island (ftUS)
    assert area_column(Frame(None, Affine.identity(), 10, 10)) == "area_px"


def test_feet_crs_area_column_is_not_hidden_and_is_in_the_metadata(twins, tmp_path):
    """GeoPandas' GeoDataFrame.area hides a column named `area` from `gdf.area`; ours are named for
    their unit, filter by --min-area in that unit, and say so in the file."""
    src = tmp_path / "feet.tif"
    with rasterio.open(twins[0]) as s:
        data, px = s.read(), s.transform.a
    with rasterio.open(src, "w", driver="GTiff", width=data.shape[2], height=data.shape[1], count=3, dtype="uint8",
                       crs=CRS.from_epsg(2992), transform=Affine(px / FT, 0, 1_000_000, 0, -px / FT, 800_000)) as d:
        d.write(data)
    out = tmp_path / "feet.gpkg"
    gdf = sam3tiles.segment(str(src), "red", backend="reference", out=out, workers=1)
    assert "area" not in gdf.columns and list(gdf.columns[:5]) == ["id", "prompt", "score", "area_ft2", "area_px"]
    assert len(gdf) > 3 and np.allclose(gdf["area_ft2"], gdf.area, rtol=1e-9)  # gdf.area: the geometry's
    assert np.allclose(gdf["area_ft2"] / gdf["area_px"], (px / FT) ** 2)
    meta = json.loads(pyogrio.read_info(out)["layer_metadata"]["sam3tiles"])
    assert set(meta["units"]) == {"area_ft2", "area_px"} and meta["units"]["area_ft2"].startswith("square feet")
    cut = float(np.median(gdf["area_ft2"]))
    big = sam3tiles.segment(str(src), "red", backend="reference", min_area=cut, checkpoint=False, workers=1)
    assert 0 < len(big) < len(gdf) and (big["area_ft2"] >= cut).all()


def test_segment_report_returns_only_the_report(twins, tmp_path):
    out = tmp_path / "o.parquet"
    report = sam3tiles.segment_report(str(twins[0]), "red", backend="reference", out=out, workers=1)
    assert isinstance(report, RunReport) and report.output == str(out) and report.objects > 0
    assert len(gpd.read_parquet(out)) == report.objects
    assert math.isfinite(report.wall_seconds)


# -- command-line habits ------------------------------------------------------------------------------

def _cli(*args):
    from click.testing import CliRunner

    from sam3tiles.cli.main import cli

    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def test_prompt_alias_overlap_fraction_and_positional_output(twins, tmp_path):
    src = twins[0]
    r = _cli("-q", "segment", src, "--prompt", "red", "--backend", "reference", "--overlap", "0.2",
             "--tile-size", "512", tmp_path / "o.gpkg")
    assert r.exit_code == 0, r.output
    gdf = gpd.read_file(tmp_path / "o.gpkg")
    report = json.loads((tmp_path / "o.gpkg.report.json").read_text())
    assert set(gdf["prompt"]) == {"red"} and report["parameters"]["overlap"] == round(0.2 * 512) == 102
    with_out = _cli("-q", "segment", src, "-t", "red", "--backend", "reference", "--out", tmp_path / "p.gpkg",
                    "--overlap", "102", "--tile-size", "512")
    assert with_out.exit_code == 0 and len(gpd.read_file(tmp_path / "p.gpkg")) == len(gdf)
    # both outputs, differing: refused before any work; the same twice is one
    r = _cli("segment", src, "-t", "red", "--backend", "reference", tmp_path / "a.gpkg", "--out", tmp_path / "b.gpkg")
    assert r.exit_code == UsageError.exit_code and "two outputs" in r.output
    assert not (tmp_path / "a.gpkg").exists() and not (tmp_path / "b.gpkg").exists()
    r = _cli("segment", src, "-t", "red", "--backend", "reference")
    assert r.exit_code == UsageError.exit_code and "no output given" in r.output
    assert sam3tiles.Options(overlap=0.2).overlap == 202  # of the default 1008 px tile
    for bad in ("1.5", "-0.2", "many"):
        r = _cli("segment", src, "-t", "red", "--backend", "reference", "--overlap", bad, tmp_path / "c.gpkg")
        assert r.exit_code == UsageError.exit_code and "--overlap" in r.output and "Traceback" not in r.output


# -- the quicklook --------------------------------------------------------------------------------------

def _flat_raster(path, width, height, rgb, gradient=False):
    data = np.empty((3, height, width), np.uint8)
    data[:] = np.asarray(rgb, np.uint8)[:, None, None]
    if gradient:  # left dark, right bright: a picture, not a grey fill
        data[:] = np.linspace(0, 255, width, dtype=np.float32).astype(np.uint8)[None, None, :]
    with rasterio.open(path, "w", driver="GTiff", width=width, height=height, count=3, dtype="uint8", tiled=True,
                       blockxsize=256, blockysize=256, compress="deflate", crs=CRS.from_epsg(32633),
                       transform=Affine(0.3, 0, 500000, 0, -0.3, 4100000)) as d:
        d.write(data)
    return path


@pytest.mark.parametrize("prompt", ["blue", "yellow"])
def test_outlines_contrast_with_a_background_of_their_own_colour(tmp_path, prompt):
    """An outline in the prompt's colour vanished on objects and ground of that colour: a halo (dark for a
    light colour, light for a dark one) keeps it visible."""
    from shapely.geometry import box

    from sam3tiles.run.executing.runner import InputResult
    from sam3tiles.writers import quicklook
    from sam3tiles.writers.qupath import class_colour

    colour = class_colour(prompt)
    src = _flat_raster(tmp_path / "flat.tif", 400, 300, colour)
    with rasterio.open(src) as s:
        frame = Frame(s.crs, s.transform, s.width, s.height)
        obj = box(*s.xy(200, 100, offset="ul"), *s.xy(100, 300, offset="ul"))  # a 200x100 px object
    gdf = gpd.GeoDataFrame({"prompt": [prompt]}, geometry=[obj], crs=frame.crs)
    png = quicklook.write_quicklook(tmp_path / "p.png", gdf, [InputResult(str(src), 0, frame=frame)], [prompt])
    img = np.asarray(__import__("PIL.Image", fromlist=["Image"]).open(png).convert("RGB")).astype(int)[:300]
    ground = img[20, 20]  # the (dimmed) image far from the outline
    ring = img[95:106, 95:306]  # a band across the top edge of the object
    assert np.abs(ring - ground).sum(axis=2).max() > 250, (ground, ring.max(axis=(0, 1)))
    assert (np.abs(ring - np.asarray(colour)).sum(axis=2) < 30).any()  # and the prompt's colour itself


def test_every_polygon_of_an_object_is_outlined_and_a_tiny_one_is_a_dot(tmp_path):
    """Each polygon of a MultiPolygon and of a collection is outlined (a collection's line is not drawn);
    an object smaller than 1.5 preview pixels either way is a dot in the prompt's colour on its halo."""
    from shapely.geometry import GeometryCollection, LineString, MultiPolygon, box

    from sam3tiles.run.executing.runner import InputResult
    from sam3tiles.writers import quicklook
    from sam3tiles.writers.qupath import class_colour

    src = _flat_raster(tmp_path / "g.tif", 400, 300, (90, 90, 90))
    with rasterio.open(src) as s:
        frame = Frame(s.crs, s.transform, s.width, s.height)
        px = lambda c0, r0, c1, r1: box(*s.xy(r1, c0, offset="ul"), *s.xy(r0, c1, offset="ul"))  # noqa: E731
        xy = lambda c, r: s.xy(r, c, offset="ul")  # noqa: E731
    objs = [MultiPolygon([px(20, 20, 60, 60), px(100, 20, 140, 60)]),
            GeometryCollection([px(200, 20, 240, 60), LineString([xy(20, 200), xy(380, 200)])]),
            px(300, 250, 300.5, 250.5)]
    gdf = gpd.GeoDataFrame({"prompt": ["red"] * 3}, geometry=objs, crs=frame.crs)
    png = quicklook.write_quicklook(tmp_path / "p.png", gdf, [InputResult(str(src), 0, frame=frame)], ["red"])
    img = np.asarray(__import__("PIL.Image", fromlist=["Image"]).open(png).convert("RGB")).astype(int)[:300]
    red = np.asarray(class_colour("red"))
    is_red = lambda a: (np.abs(a - red).sum(axis=-1) < 30)  # noqa: E731
    for c0 in (20, 100, 200):  # the left edge of each polygon, half way down
        assert is_red(img[40, c0 - 1: c0 + 2]).any(), c0
    assert not is_red(img[198:203, 150]).any()  # the line of the collection
    assert is_red(img[249:252, 299:302]).any()  # the dot


def test_an_image_without_overviews_is_drawn_by_a_bounded_decimated_read(tmp_path, monkeypatch):
    """A 4200x4000 GeoTIFF without overviews (over the old 16 Mpx budget) was drawn as flat grey."""
    from sam3tiles.writers import quicklook

    src = _flat_raster(tmp_path / "big.tif", 4200, 4000, (0, 0, 0), gradient=True)
    with rasterio.open(src) as s:
        assert s.overviews(1) == []
    rgb = quicklook.overview(str(src), None, (1024, 975))
    assert rgb is not None and rgb.shape == (975, 1024, 3)
    row = rgb[500, :, 0].astype(int)
    assert row[-10:].mean() - row[:10].mean() > 200  # the gradient, not a fill
    monkeypatch.setattr(quicklook, "READ_BUDGET", 4200 * 4000 - 1)  # still bounded: one pixel more is refused
    assert quicklook.overview(str(src), None, (1024, 975)) is None


def test_demo_scene_has_overviews(tmp_path):
    from sam3tiles.testing.demo import add_overviews

    scene = write_scene(tmp_path / "scene.tif", 1100, 900, seed=1).path
    assert add_overviews(scene) == [2, 4] and rasterio.open(scene).overviews(1) == [2, 4]
