"""The quicklook's picture from the run's own tiles (`thumbs.Picture`): the image as a read of it shows
it, with no second decode of the image, and a read after all where the tiles did not cover it."""

import numpy as np
import pytest
import rasterio
from PIL import Image
from rasterio.transform import from_origin

import sam3tiles
from sam3tiles.readers import open_source
from sam3tiles.tiling.grid import TileGrid
from sam3tiles.writers import quicklook as Q
from sam3tiles.writers.thumbs import MAX_SIDE, Picture, panel_wh, take


def _gradient_tif(path, w, h, seed=0):
    """A smooth image (so a sample one step away differs little) with blocks of colour on it."""
    yy, xx = np.mgrid[0:h, 0:w]
    rgb = np.stack([(xx * 255 // w), (yy * 255 // h), ((xx + yy) * 255 // (w + h))]).astype(np.uint8)
    rng = np.random.default_rng(seed)
    for _ in range(12):
        x, y = rng.integers(0, w - 200), rng.integers(0, h - 200)
        rgb[:, y:y + 150, x:x + 150] = rng.integers(0, 256, 3)[:, None, None]
    with rasterio.open(path, "w", driver="GTiff", width=w, height=h, count=3, dtype="uint8", crs="EPSG:32633",
                       transform=from_origin(500000, 4100000, 0.5, 0.5), tiled=True, compress="deflate") as ds:
        ds.write(rgb)
    return rgb


def _picture(path, w, h, tiles=None, grid_kw=None):
    pic = Picture(w, h, panel_wh(w, h, MAX_SIDE))
    with open_source(str(path)) as src:
        grid = TileGrid(w, h, transform=src.transform, **(grid_kw or {}))
        for t in list(grid) if tiles is None else [list(grid)[i] for i in tiles]:
            step = pic.step(t)
            pic.add(t, take(src.read_tile(t).rgb, t.valid_wh, step), step)
    return pic, len(list(grid))


@pytest.mark.parametrize("w,h,grid_kw", [(3100, 2300, {}), (2500, 1700, {"scale": 1.5}), (1300, 900, {}),
                                        (5200, 3100, {"scale": 0.4})])
def test_picture_from_tiles_is_the_image_at_the_picture_size(tmp_path, w, h, grid_kw):
    rgb = _gradient_tif(tmp_path / "g.tif", w, h)
    pic, n = _picture(tmp_path / "g.tif", w, h, grid_kw=grid_kw)
    got = pic.image()
    assert got is not None and n > 1
    pw, ph = panel_wh(w, h, MAX_SIDE)
    assert got.shape == (ph, pw, 3)
    # the source pixel under each picture pixel's centre (nearest), as a decimated read gives it
    ys = np.minimum(((np.arange(ph) + 0.5) * h / ph).astype(int), h - 1)
    xs = np.minimum(((np.arange(pw) + 0.5) * w / pw).astype(int), w - 1)
    want = np.moveaxis(rgb[:, ys][:, :, xs], 0, -1).astype(int)
    diff = np.abs(got.astype(int) - want)
    # a tile's copy samples every step-th pixel: one step off at most, away from the blocks' edges
    assert np.median(diff) <= 1 and (diff.max(axis=-1) > 8).mean() < 0.03
    # the blocks are where they are: a picture of them at most a pixel off
    cover = (diff.max(axis=-1) > 60).mean()
    assert cover < 0.01


def test_picture_missing_a_tile_is_not_used(tmp_path):
    _gradient_tif(tmp_path / "g.tif", 2600, 2000)
    pic, n = _picture(tmp_path / "g.tif", 2600, 2000, tiles=[i for i in range(12) if i != 5])
    assert n == 12 and pic.image() is None
    with open_source(str(tmp_path / "g.tif")) as src:
        t = list(TileGrid(2600, 2000, transform=src.transform))[5]
    pic.add(t, None, pic.step(t))  # a tile without data: black, and covered
    assert pic.image() is not None


def _reads(monkeypatch):
    calls = []
    real = Q.overview

    def spy(*a):
        calls.append(a)
        return real(*a)

    monkeypatch.setattr(Q, "overview", spy)
    return calls


def test_preview_of_an_image_too_large_to_decimate_is_drawn_from_its_tiles(tmp_path, monkeypatch):
    """Past READ_BUDGET without overviews the preview was grey; now the tiles draw it, and the image is
    never decoded a second time. A rerun that resumes every tile reads it (here: too large, so grey)."""
    w, h = 2600, 2000
    rgb = _gradient_tif(tmp_path / "g.tif", w, h)
    monkeypatch.setattr(Q, "READ_BUDGET", 10_000)  # this image is then "too large to decimate"
    calls = _reads(monkeypatch)
    out = tmp_path / "o.gpkg"
    sam3tiles.segment(str(tmp_path / "g.tif"), "red", backend="reference", out=str(out))
    assert calls == []  # no read of the image for the picture
    img = np.asarray(Image.open(f"{out}.preview.png").convert("RGB")).astype(int)
    pw, ph = panel_wh(w, h, MAX_SIDE)
    ys = ((np.arange(ph) + 0.5) * h / ph).astype(int)
    xs = ((np.arange(pw) + 0.5) * w / pw).astype(int)
    want = (np.moveaxis(rgb[:, ys][:, :, xs], 0, -1).astype(np.uint16) * 3 // 4).astype(int)  # dimmed
    assert np.median(np.abs(img[:ph, :pw] - want)) <= 1
    grey = np.all(img[:ph, :pw] == Q.NO_IMAGE, axis=-1).mean()
    assert grey < 0.01
    sam3tiles.segment(str(tmp_path / "g.tif"), "red", backend="reference", out=str(out), overwrite=True)
    assert len(calls) == 1  # every tile resumed: no tile brought its pixels, so the image is asked for
    img = np.asarray(Image.open(f"{out}.preview.png").convert("RGB"))
    assert np.all(img[:ph, :pw] == Q.NO_IMAGE, axis=-1).mean() > 0.9  # and too large: grey, as said



def test_the_panel_under_the_outlines_is_every_level_at_three_quarters():
    """The quicklook's picture is dimmed to floor(3 v / 4) per level, exactly, for every level 0-255."""
    from affine import Affine

    from sam3tiles.run.executing.runner import InputResult
    from sam3tiles.units import Frame

    rng = np.random.default_rng(5)
    rgb = rng.integers(0, 256, (300, 400, 3), dtype=np.uint8)
    rgb[0, :256, 0] = np.arange(256)
    res = InputResult("x.tif", 0, frame=Frame(None, Affine.identity(), 400, 300), picture=rgb)
    img, drawn = Q._panel(res, 400, None)
    assert drawn and img.size == (400, 300)
    assert np.array_equal(np.asarray(img), (rgb.astype(int) * 3 // 4).astype(np.uint8))


def test_the_quicklook_drawn_beside_the_output_outlines_every_chunk(tmp_path, monkeypatch):
    """The output and its quicklook are drawn from one read of the objects, the PNG encoded while the
    output is written: with the objects read 7 at a time the preview is the same picture, pixel for
    pixel, as with them read at once, and the spool is read once per output plus once for the frame
    `segment` returns."""
    import geopandas as gpd

    from sam3tiles.testing.demo import write_scene
    from sam3tiles.writers import stream

    write_scene(tmp_path / "s.tif", 2200, 1700, seed=3)
    sam3tiles.segment(str(tmp_path / "s.tif"), ["red", "blue"], backend="reference", out=str(tmp_path / "one.gpkg"))
    reads = []
    real = stream.ObjectSpool.frames

    def counted(self, *a, **k):
        reads.append(a)
        return real(self, *a, **k)

    monkeypatch.setattr(stream.ObjectSpool, "frames", counted)
    monkeypatch.setattr(stream, "CHUNK_ROWS", 7)
    got = sam3tiles.segment(str(tmp_path / "s.tif"), ["red", "blue"], backend="reference",
                            out=str(tmp_path / "many.gpkg"))
    assert len(got) > 3 * 7 and len(reads) == 2
    assert len(gpd.read_file(tmp_path / "many.gpkg")) == len(got)
    one = np.asarray(Image.open(tmp_path / "one.gpkg.preview.png").convert("RGB"))
    many = np.asarray(Image.open(tmp_path / "many.gpkg.preview.png").convert("RGB"))
    assert one.shape == many.shape and np.array_equal(one, many)
