"""Georeferencing is exact: a mask of known pixels, given straight to the post-processing (no model),
comes out in the CRS within half a tile pixel of those pixels' edges, on any tile, at any scale."""

from __future__ import annotations

import numpy as np
import pytest
from affine import Affine
from hypothesis import given, settings
from hypothesis import strategies as st

from sam3tiles.model.runtime import MASK_SIZE, MODEL_SIZE, Detections
from sam3tiles.tiling.grid import TileGrid
from sam3tiles.vectorize.pieces import crop_detections, pieces_from_crops

CELL = MODEL_SIZE / MASK_SIZE  # 3.5 tile pixels per mask cell


def detections_for_cells(r0, r1, c0, c1) -> Detections:
    """One instance whose mask is 1 on cells [r0, r1) x [c0, c1) of the 288 grid."""
    m = np.zeros((1, 1, MASK_SIZE, MASK_SIZE), np.float32)
    m[0, 0, r0:r1, c0:c1] = 1.0
    box = np.array([[c0 / MASK_SIZE, r0 / MASK_SIZE, c1 / MASK_SIZE, r1 / MASK_SIZE]], np.float32)
    return Detections(box, np.array([0.9], np.float32), m)


@settings(max_examples=80, deadline=None)
@given(
    scale=st.sampled_from([0.5, 1.0, 1.25, 2.0, 3.0]),
    row=st.integers(0, 5), col=st.integers(0, 5),
    r0=st.integers(0, 280), c0=st.integers(0, 280),
    h=st.integers(2, 60), w=st.integers(2, 60),
    res=st.sampled_from([0.1, 0.3, 2.0]),
)
def test_known_mask_lands_within_half_a_tile_pixel(scale, row, col, r0, c0, h, w, res):
    transform = Affine(res, 0, 350000.0, 0, -res, 5200000.0)
    grid = TileGrid(6000, 6000, scale=scale, transform=transform)
    row, col = min(row, grid.shape[0] - 1), min(col, grid.shape[1] - 1)
    tile = grid.tile(row, col)
    r1, c1 = min(r0 + h, MASK_SIZE), min(c0 + w, MASK_SIZE)
    crops = crop_detections(detections_for_cells(r0, r1, c0, c1), 0, 0, tile.valid_wh)
    pieces = pieces_from_crops(crops, tile)
    # the expected edges in tile pixels, clipped to the tile's content
    ex0, ey0 = c0 * CELL, r0 * CELL
    ex1, ey1 = min(c1 * CELL, tile.valid_wh[0]), min(r1 * CELL, tile.valid_wh[1])
    if ex1 - ex0 < 1 or ey1 - ey0 < 1:
        assert len(pieces) == 0 or pieces.geometry[0].area < 2 * (res / scale) ** 2 * 4
        return
    assert len(pieces) == 1
    geom = pieces.geometry[0]
    assert geom.is_valid and geom.geom_type == "Polygon"
    half = 0.5 * res / scale  # half a tile pixel in CRS units
    x_min, y_max = tile.transform @ (ex0, ey0)
    x_max, y_min = tile.transform @ (ex1, ey1)
    bx0, by0, bx1, by1 = geom.bounds
    assert bx0 == pytest.approx(x_min, abs=half + 1e-6)
    assert bx1 == pytest.approx(x_max, abs=half + 1e-6)
    assert by0 == pytest.approx(y_min, abs=half + 1e-6)
    assert by1 == pytest.approx(y_max, abs=half + 1e-6)
    # a rectangle stays a rectangle: its area matches the expected one to within half a pixel per edge
    assert geom.area == pytest.approx((x_max - x_min) * (y_max - y_min),
                                      abs=half * 2 * (x_max - x_min + y_max - y_min) + 1e-6)


def test_padding_and_nodata_never_become_objects():
    grid = TileGrid(1200, 700, transform=Affine(1, 0, 0, 0, -1, 700))
    tile = grid.tile(0, 1)  # runs past the right edge: content 448 px wide... or less
    vw, vh = tile.valid_wh
    assert vw < 1008 and vh < 1008
    det = detections_for_cells(0, MASK_SIZE, 0, MASK_SIZE)  # the whole input, padding included
    valid = np.zeros((MODEL_SIZE, MODEL_SIZE), bool)
    valid[:vh, :vw] = True
    valid[:50, :50] = False  # a nodata corner
    pieces = pieces_from_crops(crop_detections(det, 0, 0, tile.valid_wh, valid), tile)
    (geom,) = pieces.geometry
    x0, y0, x1, y1 = geom.bounds
    # only the content: the tile's window clipped to the image, minus the nodata corner
    assert (x1 - x0, y1 - y0) == (vw, vh)
    assert geom.area == pytest.approx(vw * vh - 50 * 50)


def test_holes_are_kept():
    tile = TileGrid(1008, 1008).tile(0, 0)
    m = np.zeros((1, 1, MASK_SIZE, MASK_SIZE), np.float32)
    m[0, 0, 100:160, 100:160] = 1
    m[0, 0, 120:140, 120:140] = 0
    det = Detections(np.array([[100 / 288, 100 / 288, 160 / 288, 160 / 288]], np.float32),
                     np.array([0.8], np.float32), m)
    (geom,) = pieces_from_crops(crop_detections(det, 0, 0, tile.valid_wh), tile).geometry
    assert geom.geom_type == "Polygon" and len(geom.interiors) == 1
    assert geom.is_valid
