"""One parse of a TIFF's header (`readers.tiffhead`, issue 48): the slide and truncation checks from one
parse, and the open's probe reads only where the file's byte ranges do not prove it whole."""

from __future__ import annotations

import struct

import numpy as np
import pytest
import rasterio
import tifffile
from affine import Affine

from sam3tiles.errors import RasterReadError
from sam3tiles.options import Options
from sam3tiles.readers import open_source
from sam3tiles.readers.tiffhead import tiff_head
from sam3tiles.run.planning.maps import group_inputs

PIXEL = 0.5


def _write(path, side=300, col=0, row=0, **kw):
    rng = np.random.default_rng(col * 31 + row)
    profile = dict(driver="GTiff", width=side, height=side, count=3, dtype="uint8", crs="EPSG:32633",
                   transform=Affine(PIXEL, 0, 400000 + PIXEL * side * col, 0, -PIXEL, 5000000 - PIXEL * side * row),
                   tiled=True, blockxsize=128, blockysize=128, compress="deflate")
    profile.update(kw)
    with rasterio.open(path, "w", **profile) as ds:
        ds.write(rng.integers(1, 255, (3, side, side), dtype=np.uint8))
    return path


def _spoil_first_block(path) -> None:
    """Overwrite the first chunk's bytes (its byte range stays inside the file)."""
    with tifffile.TiffFile(path) as tf:
        off, cnt = tf.pages[0].dataoffsets[0], tf.pages[0].databytecounts[0]
    with open(path, "r+b") as fh:
        fh.seek(off)
        fh.write(b"\xff" * cnt)


@pytest.mark.parametrize("kw", [dict(compress="deflate"), dict(compress="lzw", tiled=False, blockysize=7),
                                dict(compress=None, interleave="band")])
def test_whole_files_are_proven_whole_by_their_byte_ranges(tmp_path, kw):
    head = tiff_head(str(_write(tmp_path / "a.tif", side=301, **kw)))
    assert head is not None and head.whole and not head.truncated and not head.slide
    assert head.shape == (301, 301) and 0 < head.end <= head.size


def test_a_truncated_file_is_neither_whole_nor_opened(tmp_path):
    p = _write(tmp_path / "a.tif")
    raw = p.read_bytes()
    p.write_bytes(raw[: len(raw) * 2 // 3])
    head = tiff_head(str(p))
    assert head.truncated and not head.whole
    with pytest.raises(RasterReadError, match=r"a\.tif is truncated: its pixel data ends at byte"):
        open_source(str(p), stretch=None)


@pytest.mark.parametrize("tiled", [False, True])
def test_a_header_that_lists_too_few_chunks_is_not_proven_whole(tmp_path, tiled):
    """A file whose ImageLength was raised: its listed chunks cannot cover it, so its byte ranges prove
    nothing and it is probed on open (libtiff reads it leniently, as before: the probe passes)."""
    p = _write(tmp_path / "tall.tif", side=64, compress=None, tiled=tiled, blockysize=16 if tiled else 64,
               blockxsize=16)
    assert tiff_head(str(p)).whole
    with tifffile.TiffFile(p) as tf:
        tag = tf.pages[0].tags["ImageLength"]
        off, dtype = tag.valueoffset, tag.dtype
    with open(p, "r+b") as fh:
        fh.seek(off)
        fh.write(struct.pack("<H", 200) if dtype == 3 else struct.pack("<I", 200))
    head = tiff_head(str(p))
    assert head is not None and head.shape == (64, 200) and not head.whole and not head.truncated


def test_a_codec_gdal_may_lack_is_still_probed(tmp_path):
    """JPEG is no plain codec: a JPEG GeoTIFF whose first block is spoilt is refused on open (probed); the
    same damage in a deflate file whose ranges prove it whole is left to the tile that reads it."""
    jpeg = _write(tmp_path / "j.tif", compress="jpeg")
    _spoil_first_block(jpeg)
    assert not tiff_head(str(jpeg)).whole
    with pytest.raises(RasterReadError, match=r"j\.tif: cannot read its pixels"):
        open_source(str(jpeg), stretch=None)
    flate = _write(tmp_path / "d.tif")
    _spoil_first_block(flate)
    assert tiff_head(str(flate)).whole
    with open_source(str(flate), stretch=None) as src:
        assert src.width == 300
        with pytest.raises(RasterReadError, match=r"d\.tif: cannot read window .*damaged or truncated"):
            src.read_window(rasterio.windows.Window(0, 0, 64, 64), (64, 64))


def test_a_truncated_file_among_many_is_refused_by_name(tmp_path):
    """Planning many files reads each header once, without probes where the ranges prove a file whole: the
    one cut short among them is still refused with the truncation message, naming it."""
    paths = [str(_write(tmp_path / f"f{r}{c}.tif", col=c, row=r)) for r in range(4) for c in range(4)]
    cut = tmp_path / "f21.tif"
    raw = cut.read_bytes()
    cut.write_bytes(raw[: len(raw) - 100])
    with pytest.raises(RasterReadError, match=r"f21\.tif is truncated: .*copy it again"):
        group_inputs(paths, Options(backend="reference"))
    _write(cut, col=1, row=2)
    grouping = group_inputs(paths, Options(backend="reference"))
    assert [len(g.members) for g in grouping.maps] == [16]


def test_not_a_tiff_has_no_head(tmp_path):
    png = tmp_path / "x.png"
    with rasterio.open(png, "w", driver="PNG", width=8, height=8, count=1, dtype="uint8") as ds:
        ds.write(np.zeros((1, 8, 8), np.uint8))
    assert tiff_head(str(png)) is None and tiff_head(str(tmp_path / "missing.tif")) is None
    assert tiff_head(str(tmp_path)) is None
