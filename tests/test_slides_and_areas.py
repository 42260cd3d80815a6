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

import warnings

import numpy as np
import pytest
import rasterio
import shapely
import tifffile
from rasterio.enums import Resampling

from sam3tiles.readers.slide import is_slide
from sam3tiles.run.pipeline import segment_job
from sam3tiles.testing.slidegen import write_slide


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
