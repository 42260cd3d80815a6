"""The tile grid: cores partition the image, windows stay in the padded bounds, content is never
stretched."""

from __future__ import annotations

import math

import pytest
from affine import Affine
from hypothesis import given, settings
from hypothesis import strategies as st

from sam3tiles.errors import UsageError
from sam3tiles.tiling.grid import TileGrid, scale_for_gsd, squash_tile

dims = st.integers(min_value=1, max_value=9000)
scales = st.sampled_from([0.25, 0.5, 0.7, 1.0, 1.5, 2.0, 3.0])
overlaps = st.integers(min_value=0, max_value=400)


@settings(max_examples=150, deadline=None)
@given(dims, dims, scales, overlaps)
def test_cores_cover_the_image_exactly_once(w, h, scale, overlap):
    grid = TileGrid(w, h, scale=scale, overlap=overlap)
    sw, sh = grid.scaled_wh
    total = 0.0
    rows, cols = grid.shape
    for t in grid:
        x0, y0, x1, y1 = t.core_xyxy
        assert x1 > x0 and y1 > y0
        total += (x1 - x0) * (y1 - y0)
        # neighbours share core edges exactly: no gap, no overlap
        if t.col + 1 < cols:
            assert grid.tile(t.row, t.col + 1).core_xyxy[0] == x1
        else:
            assert x1 == pytest.approx(sw)
        if t.row + 1 < rows:
            assert grid.tile(t.row + 1, t.col).core_xyxy[1] == y1
        else:
            assert y1 == pytest.approx(sh)
        if t.col == 0:
            assert x0 == 0
        if t.row == 0:
            assert y0 == 0
    assert total == pytest.approx(sw * sh, rel=1e-9)


@settings(max_examples=150, deadline=None)
@given(dims, dims, scales, overlaps)
def test_windows_inside_padded_bounds_and_cores_inside_windows(w, h, scale, overlap):
    grid = TileGrid(w, h, scale=scale, overlap=overlap)
    pw, ph = grid.padded_wh
    sw, sh = grid.scaled_wh
    assert pw >= sw and ph >= sh
    for t in grid:
        assert 0 <= t.x0 and t.x0 + t.size <= pw
        assert 0 <= t.y0 and t.y0 + t.size <= ph
        cx0, cy0, cx1, cy1 = t.core_xyxy
        assert t.x0 <= cx0 and cx1 <= t.x0 + t.valid_wh[0] + 1e-9
        assert t.y0 <= cy0 and cy1 <= t.y0 + t.valid_wh[1] + 1e-9
        # valid content never exceeds the image nor the tile
        assert 1 <= t.valid_wh[0] <= t.size and t.x0 + t.valid_wh[0] < sw + 1
        assert 1 <= t.valid_wh[1] <= t.size and t.y0 + t.valid_wh[1] < sh + 1
        # an object up to `overlap` wide centred in a core lies wholly inside the window
        assert cx0 - t.x0 >= overlap / 2 - 1e-9 or t.col == 0
        assert t.x0 + t.size - cx1 >= overlap / 2 - 1e-9 or t.col == grid.shape[1] - 1


@settings(max_examples=60, deadline=None)
@given(dims, dims, scales)
def test_never_stretched(w, h, scale):
    grid = TileGrid(w, h, scale=scale)
    for t in grid:
        win = t.src_window
        # the same scale on both axes, for every tile: content is resampled uniformly, never squashed
        assert t.valid_wh[0] / win.width == pytest.approx(scale)
        assert t.valid_wh[1] / win.height == pytest.approx(scale)
        a = t.transform
        assert abs(a.a) == pytest.approx(abs(a.e))


def test_small_image_is_one_padded_tile():
    grid = TileGrid(300, 200)
    (t,) = list(grid)
    assert t.valid_wh == (300, 200) and t.size == 1008
    assert t.interior == (False, False, False, False)


def test_tile_transform_maps_tile_pixels_to_crs():
    src = Affine(0.5, 0, 1000, 0, -0.5, 2000)
    grid = TileGrid(5000, 4000, scale=2.0, transform=src)
    t = grid.tile(1, 2)
    # tile pixel (0,0) is grid pixel (x0, y0) = source pixel (x0/2, y0/2)
    assert t.transform @ (0, 0) == pytest.approx(src @ (t.x0 / 2, t.y0 / 2))
    assert t.transform @ (1008, 1008) == pytest.approx(src @ ((t.x0 + 1008) / 2, (t.y0 + 1008) / 2))


def test_bad_parameters_are_usage_errors():
    with pytest.raises(UsageError, match="^scale must be a positive number"):
        TileGrid(100, 100, scale=0)
    with pytest.raises(UsageError, match="^overlap must be between 0 and"):
        TileGrid(100, 100, overlap=600)
    with pytest.raises(UsageError, match="^gsd must be positive"):
        scale_for_gsd(Affine.identity(), -1)


def test_gsd_scale():
    assert scale_for_gsd(Affine(0.3, 0, 0, 0, -0.3, 0), 0.15) == pytest.approx(2.0)


def test_squash_tile_stretches_the_whole_image():
    t = squash_tile(4000, 2000, Affine.identity())
    assert t.transform @ (1008, 1008) == pytest.approx((4000, 2000))
    assert not math.isclose(t.scale_xy[0], t.scale_xy[1])


def test_grid_is_hashable_and_tokenizes_deterministically():
    from dask.base import tokenize

    a, b = TileGrid(5000, 4000, scale=0.5), TileGrid(5000, 4000, scale=0.5)
    assert hash(a) == hash(b) and tokenize(a) == tokenize(b)
    assert tokenize(a) != tokenize(TileGrid(5000, 4000, scale=0.6))
