"""Slides written every way TIFF allows, tissue detection on degenerate channels, and areas of interest at
the raster's edge or with Z coordinates, through the real pipeline (reference backend).

* the same slide written band-interleaved and planar (PlanarConfiguration 2), as a plain TIFF and an
  OME-TIFF, pyramidal or not (and by GDAL without a CRS) gives the same objects;
* a fluorescence slide with a flat, saturated, all-zero, hot-pixel or noise-only channel beside its nuclear
  stain: the tissue is found as without it, and no tile holding objects is skipped;
* the tissue note says what was found and what the run does, in words read once;
* an area that touches the raster only at an edge or a corner is said (or refused when it has no area
  inside it); an area with Z coordinates gives 2D outputs.
"""

from __future__ import annotations

import json
import warnings

import geopandas as gpd
import numpy as np
import pytest
import rasterio
import shapely
import tifffile
from click.testing import CliRunner
from rasterio.enums import Resampling
from shapely.geometry import Polygon

from sam3tiles.cli.main import cli
from sam3tiles.evaluate import evaluate
from sam3tiles.readers.slide import is_slide
from sam3tiles.run.pipeline import segment_job
from sam3tiles.testing.slidegen import write_slide
from sam3tiles.tiling.selection import NO_TISSUE
from sam3tiles.tiling.tissue import tissue_mask


TILING = {"tile_size": 512, "overlap": 128}


def run(path, prompts, **kw):
    kw.setdefault("workers", 1)
    gdf, report = segment_job(str(path), prompts, backend="reference", checkpoint=False, **TILING, **kw)
    assert report.failed == 0
    return gdf, report


def levels_of(path) -> list[np.ndarray]:
    """Every pyramid level of a slide, as tifffile gives them (YXS, CYX or YX)."""
    with tifffile.TiffFile(path) as tf:
        return [lvl.asarray() for lvl in tf.series[0].levels]


def write_tiff(path, levels: list[np.ndarray], *, planar: bool, ome: bool, rgb: bool = True) -> None:
    """`levels` (YXS for RGB, CYX or YX otherwise) as a tiled TIFF: RGB planar (SYX) or interleaved, plain or
    OME, the reduced levels in SubIFDs."""
    with tifffile.TiffWriter(path, ome=ome, bigtiff=True) as tw:
        for i, lvl in enumerate(levels):
            data = np.moveaxis(lvl, -1, 0) if rgb and planar else lvl
            kw = dict(photometric="rgb", planarconfig="separate" if planar else "contig") if rgb else \
                dict(photometric="minisblack")
            tw.write(data, tile=(256, 256), compression="zlib", **kw,
                     **({"subifds": len(levels) - 1} if i == 0 else {"subfiletype": 1}))


def write_gdal(path, level0: np.ndarray, interleave: str) -> None:
    """A GDAL tiled TIFF without a CRS, with overviews 2 and 4 (a pyramid tifffile sees: a slide)."""
    data = np.moveaxis(level0, -1, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rasterio.errors.NotGeoreferencedWarning)
        with rasterio.open(path, "w", driver="GTiff", width=data.shape[2], height=data.shape[1], count=3,
                           dtype="uint8", interleave=interleave, tiled=True, blockxsize=256, blockysize=256,
                           photometric="RGB") as ds:
            ds.write(data)
            ds.build_overviews([2, 4], Resampling.average)


def same_geometries(got, want) -> None:
    assert len(got) == len(want) > 0
    a = got.sort_values(["prompt", "area_px"]).geometry.values
    b = want.sort_values(["prompt", "area_px"]).geometry.values
    assert shapely.equals(np.asarray(a, dtype=object), np.asarray(b, dtype=object)).all()


# -- planar and interleaved --------------------------------------------------------------------------------

LAYOUTS = {  # name: (planar, OME, pyramid levels written, read as a slide)
    "interleaved-ome-pyramid": (False, True, 2, True),
    "planar-ome-pyramid": (True, True, 2, True),
    "planar-ome-one-level": (True, True, 1, True),
    "planar-tiff-pyramid": (True, False, 2, True),
    "planar-tiff-one-level": (True, False, 1, False),  # a plain TIFF: rasterio's
    "interleaved-tiff-pyramid": (False, False, 2, True),
}


@pytest.fixture(scope="module")
def bf(tmp_path_factory):
    """A brightfield slide, tissue on half of it, and the objects the run finds on it as generated."""
    d = tmp_path_factory.mktemp("bf")
    slide = write_slide(d / "bf.ome.tif", 1600, 1000, seed=11, tissue=0.5)
    gdf, report = run(slide.path, ["indigo", "crimson"])
    assert report.skipped_by  # the tissue mask skips glass
    return slide, gdf, d


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_planar_and_interleaved_slides_give_the_same_objects(bf, name):
    slide, want, d = bf
    planar, ome, n, as_slide = LAYOUTS[name]
    path = d / f"{name}.{'ome.tif' if ome else 'tif'}"
    write_tiff(path, levels_of(slide.path)[:n], planar=planar, ome=ome)
    with tifffile.TiffFile(path) as tf:
        assert tf.series[0].axes == ("SYX" if planar else "YXS") and len(tf.series[0].levels) == n
    assert is_slide(path) == as_slide
    got, report = run(path, ["indigo", "crimson"])
    same_geometries(got, want)


@pytest.mark.parametrize("interleave", ["band", "pixel"])
def test_a_gdal_pyramid_without_crs_band_or_pixel_interleaved_gives_the_same_objects(bf, interleave):
    slide, want, d = bf
    path = d / f"gdal-{interleave}.tif"
    write_gdal(path, levels_of(slide.path)[0], interleave)
    assert is_slide(path)
    got, _ = run(path, ["indigo", "crimson"])
    same_geometries(got, want)


# -- tissue on slides with degenerate channels -------------------------------------------------------------

def fluorescence(h=200, w=400, seed=0) -> tuple[np.ndarray, np.ndarray]:
    """A nuclear stain: dark glass with camera noise, dim tissue on an ellipse, bright nuclei on it (1, h, w);
    and where the tissue is."""
    rng = np.random.default_rng(seed)
    img = 150.0 + rng.uniform(-40, 40, (1, h, w))
    yy, xx = np.mgrid[0:h, 0:w]
    on = ((xx - 140) / 100.0) ** 2 + ((yy - 100) / 80.0) ** 2 <= 1
    img[0][on] = 600.0 + rng.uniform(-8, 8, int(on.sum()))
    img[0][on & (xx % 12 < 3) & (yy % 12 < 3)] = 20000.0
    return img.astype(np.float32), on


def degenerate(kind: str, shape: tuple[int, int], seed=1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kind == "flat":
        return np.full(shape, 1000.0)
    if kind == "saturated":
        return np.full(shape, 65535.0)
    if kind == "zero":
        return np.zeros(shape)
    if kind == "hot pixel":
        out = np.full(shape, 300.0)
        out[5, 7] = 65535.0
        return out
    if kind == "noise":  # a channel of camera noise alone, far brighter than the stain's glass
        return 3000.0 + rng.normal(0, 200, shape)
    if kind == "mostly saturated":
        return np.where(rng.random(shape) < 0.9, 65535.0, 40000.0 + rng.normal(0, 500, shape))
    raise ValueError(kind)


DEGENERATE = ["flat", "saturated", "zero", "hot pixel", "noise", "mostly saturated"]


@pytest.mark.parametrize("kind", DEGENERATE)
@pytest.mark.parametrize("position", [0, 1])
def test_a_degenerate_channel_beside_the_stain_changes_nothing_in_the_tissue_mask(kind, position):
    stain, on = fluorescence()
    alone = tissue_mask(stain)
    assert not alone.note and alone.mask[on].all()
    channels = [stain[0], degenerate(kind, stain.shape[1:])]
    tm = tissue_mask(np.stack(channels[::-1] if position else channels).astype(np.float32))
    assert not tm.note and tm.mode == "fluorescence"
    assert np.array_equal(tm.mask, alone.mask)


@pytest.mark.parametrize("kind", ["flat", "saturated", "zero"])
def test_a_brightfield_slide_with_a_flat_channel_finds_its_tissue(kind):
    stain, on = fluorescence()
    rgb = np.stack([255.0 - stain[0] / 100.0, 240.0 - 0.5 * (stain[0] > 300) * 80, degenerate(kind, on.shape)])
    rgb = np.clip(rgb, 0, 255).astype(np.float32)
    tm = tissue_mask(rgb)
    assert not tm.note and tm.mode == "brightfield"
    assert tm.mask[on].all() and tm.mask.mean() < on.mean() * 1.15


@pytest.mark.parametrize("kind", ["flat", "saturated", "zero", "hot pixel"])
def test_a_fluorescence_slide_with_a_degenerate_channel_runs_every_tile_with_objects(kind, tmp_path):
    """The issue's case: nuclear stain, its copy, and a degenerate third channel (RGB: nuclei yellow)."""
    slide = write_slide(tmp_path / "fl.ome.tif", 1600, 1000, seed=12, mode="fluorescence", tissue=0.5,
                        cell=64, fill=0.6, size=(20.0, 44.0))
    path = tmp_path / f"{kind}.ome.tif"
    write_tiff(path, [np.stack([lvl, lvl, degenerate(kind, lvl.shape).astype(lvl.dtype)])
                      for lvl in levels_of(slide.path)], planar=False, ome=True, rgb=False)
    got, report = run(path, ["yellow"])
    assert report.skipped_by.get(NO_TISSUE, 0) > 0 and "tissue on 5" in report.area["tissue"][0]
    assert evaluate(got, slide.truth.assign(**{"class": "yellow"}))["f1"].min() >= 0.995


# -- what the tissue note says ---------------------------------------------------------------------------------

def _two_edges() -> np.ndarray:
    """Two channels, each with tissue at one end of the slide, reaching its edges."""
    a, _ = fluorescence(seed=2)
    b = a.copy()
    a[0][:, :140] = 5000.0
    b[0][:, 260:] = 5000.0
    return np.concatenate([a, b])


def _uneven() -> np.ndarray:
    rng = np.random.default_rng(3)
    img = rng.uniform(0, 16000, (1, 200, 400))
    img[0][60:140, 100:300] = 20000.0
    return img.astype(np.float32)


def _coloured() -> np.ndarray:
    """Brightfield stained to its edges (eosin pink), with dark nuclei in its middle."""
    rng = np.random.default_rng(4)
    img = np.asarray((236.0, 196.0, 214.0))[:, None, None] + rng.uniform(-8, 8, (3, 200, 400))
    img[:, 80:120, 150:250] = np.asarray((80.0, 12.0, 128.0))[:, None, None]
    return img.astype(np.float32)


NOTES = {  # case: (overview, what the note says before "tissue cannot be told from glass, ...")
    "one value": (lambda: np.full((3, 200, 400), 200.0, np.float32), "every channel of the slide has one value"),
    "empty glass": (lambda: fluorescence()[0][:, :, 300:], "nothing on the slide differs from its border: all "
                    "glass, or tissue to the edges"),
    "tissue at the edges": (_two_edges, "the tissue seems to reach the slide's edges (only "),
    "uneven border": (_uneven, "the slide's border is too uneven to be empty glass"),
    "coloured border": (_coloured, "the slide's border is coloured or darker than empty glass"),
}


@pytest.mark.parametrize("case", list(NOTES))
def test_the_tissue_note_says_what_was_found_and_that_every_tile_runs(case):
    make, says = NOTES[case]
    tm = tissue_mask(make())
    assert tm.mask.all()
    assert says in tm.note, tm.note
    assert tm.note.endswith("tissue cannot be told from glass, so every tile is segmented (none skipped)")
    assert "background" not in tm.note and "no glass found" not in tm.note


# -- areas of interest at the raster's edge, and with Z ------------------------------------------------------

@pytest.fixture(scope="module")
def small(tmp_path_factory):
    d = tmp_path_factory.mktemp("small")
    return write_slide(d / "s.ome.tif", 1200, 900, seed=3)


EDGES = {  # --aoi: (exit code, what is said)
    "1200,900,1300,1000": (2, "only touches the input along an edge or at a corner (no area in common)"),  # corner
    "1200,0,1300,900": (2, "only touches the input along an edge or at a corner (no area in common)"),  # edge
    "1199.5,0,1300,900": (0, "s.ome.tif only in a sliver at its edge (450 px, 0.50% of the area): the run segments "
                             "the tiles along it and writes only the objects that reach into it"),
    "1300,0,1400,900": (2, "does not overlap the input: the area spans"),
}


@pytest.mark.parametrize("aoi", list(EDGES))
def test_an_area_touching_the_slide_at_an_edge_is_refused_and_a_sliver_is_said(small, aoi, tmp_path):
    code, says = EDGES[aoi]
    out = tmp_path / "o.gpkg"
    res = CliRunner().invoke(cli, ["segment", str(small.path), "--text", "indigo", "--backend", "reference",
                                   "--workers", "1", "--aoi", aoi, "--out", str(out), "--tissue", "off"])
    assert res.exit_code == code, res.output
    assert says in " ".join(res.output.split()), res.output
    assert "Traceback" not in res.output
    assert out.exists() == (code == 0)
    if code == 0:  # said in the report and the plan too
        report = json.loads((tmp_path / "o.gpkg.report.json").read_text())
        assert says in report["area"]["edge"][0]
        plan = CliRunner().invoke(cli, ["plan", str(small.path), "--aoi", aoi])
        assert plan.exit_code == 0 and "area: --aoi" in plan.output and "sliver" in plan.output


def _z_area(path, z=True, crs=None):
    ring = [(200, 100), (900, 120), (880, 800), (150, 760)]
    poly = Polygon([(x, y, 5.0 + i) for i, (x, y) in enumerate(ring)] if z else ring)
    if str(path).endswith(".geojson") and crs is None:  # a QuPath-like export: no crs member
        path.write_text(json.dumps({"type": "FeatureCollection", "features": [
            {"type": "Feature", "properties": {}, "geometry": shapely.geometry.mapping(poly)}]}))
    else:
        gpd.GeoDataFrame(geometry=[poly], crs=crs).to_file(path)
    return path


@pytest.mark.parametrize("clip", [False, True])
def test_an_area_with_z_gives_2d_outputs_on_a_slide(small, clip, tmp_path):
    flat, _ = run(small.path, ["indigo"], aoi=str(_z_area(tmp_path / "flat.geojson", z=False)), aoi_clip=clip,
                  tissue="off")
    out = tmp_path / "z.gpkg"
    got, _ = run(small.path, ["indigo"], aoi=str(_z_area(tmp_path / "z.geojson")), aoi_clip=clip, tissue="off",
                 out=out)
    assert not got.has_z.any() and not gpd.read_file(out).has_z.any()
    same_geometries(got, flat)


def test_an_area_with_z_in_another_crs_gives_2d_outputs_on_a_georeferenced_raster(tmp_path):
    from sam3tiles.testing.demo import CRS_DEMO, write_scene

    scene = write_scene(tmp_path / "scene.tif", 1000, 1000, seed=3, n_fields=0)
    with rasterio.open(scene.path) as ds:
        t = ds.transform
    ring = [(200, 100), (900, 120), (880, 800), (150, 760)]
    poly = Polygon([(t.c + t.a * col, t.f + t.e * row, 100.0) for col, row in ring])
    area = tmp_path / "area.gpkg"
    gpd.GeoDataFrame(geometry=[poly], crs=CRS_DEMO.to_wkt()).to_crs(4326).to_file(area)
    assert gpd.read_file(area).has_z.all()
    out = tmp_path / "o.gpkg"
    got, _ = run(scene.path, ["red", "blue"], aoi=str(area), aoi_clip=True, out=out)
    assert len(got) and not got.has_z.any() and not gpd.read_file(out).has_z.any()
