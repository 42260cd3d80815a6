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
