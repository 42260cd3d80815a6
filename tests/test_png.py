"""The quicklook's PNG writer: read back with Pillow, pixel for pixel; no larger than Pillow's encoding."""

import io
import zlib

import numpy as np
import pytest
from PIL import Image

from sam3tiles.writers.png import png_bytes, write_png


@pytest.mark.parametrize("shape", [(1, 1, 3), (7, 5, 3), (300, 411, 3)])
def test_pillow_reads_back_the_same_pixels(shape, tmp_path):
    rng = np.random.default_rng(len(shape) + shape[0])
    rgb = rng.integers(0, 256, shape, dtype=np.uint8)
    rgb[: shape[0] // 2] = rgb[: shape[0] // 2] // 16 * 16  # runs, where the filter's wrap-around matters
    write_png(tmp_path / "p.png", rgb)
    with Image.open(tmp_path / "p.png") as im:
        assert im.mode == "RGB" and im.size == (shape[1], shape[0])
        assert np.array_equal(np.asarray(im), rgb)


def test_refuses_what_is_not_an_rgb_picture():
    with pytest.raises(ValueError, match="RGB picture"):
        png_bytes(np.zeros((4, 4), np.uint8))


def test_no_larger_than_pillows_encoding():
    rng = np.random.default_rng(0)
    rgb = (rng.integers(0, 40, (1024, 1024, 3)) + np.linspace(0, 200, 1024)[None, :, None]).astype(np.uint8)
    b = io.BytesIO()
    Image.fromarray(rgb).save(b, "PNG", compress_level=3, compress_type=zlib.Z_RLE)
    assert len(png_bytes(rgb)) <= 1.05 * len(b.getvalue())


@pytest.mark.parametrize("bands", [1, 2, 3, 4])
def test_rows_compressed_in_bands_at_once_are_one_zlib_stream(bands, tmp_path):
    """The bands of rows compressed at once join into one valid zlib stream (zlib checks the Adler-32),
    Pillow reads the same pixels back, and the file is no larger than one band's by more than a few bytes."""
    from sam3tiles.writers.png import deflate

    rng = np.random.default_rng(bands)
    rgb = (rng.integers(0, 40, (517, 300, 3)) + np.linspace(0, 200, 300)[None, :, None]).astype(np.uint8)
    rows = np.ascontiguousarray(rgb.reshape(517, -1))
    assert zlib.decompress(deflate(rows, bands)) == rows.tobytes()
    data = png_bytes(rgb, bands)
    with Image.open(io.BytesIO(data)) as im:
        assert np.array_equal(np.asarray(im), rgb)
    assert len(data) <= len(png_bytes(rgb, 1)) + 16 * bands
