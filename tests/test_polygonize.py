"""The batched per-tile polygonizing (`polygonize.polygonize_crops`) against doing it object by object
(`vectorize.upsample` + `vectorize.mask_to_geometry`, one rasterio `shapes` call per mask): the same
geometries, coordinate for coordinate, and the same mask extents."""

import numpy as np
import pytest
import shapely
from affine import Affine

from sam3tiles.vectorize.pieces import InstanceCrop, _cells_for, mask_to_geometry, upsample
from sam3tiles.vectorize.polygonize import _LARGE_PX, polygonize_crops, shelf_pack


def _crop(rng, box, holes=False, kind="blob"):
    x0, y0, x1, y1 = box
    r0, r1 = _cells_for(y0, y1)
    c0, c1 = _cells_for(x0, x1)
    shape = (r1 - r0, c1 - c0)
    if kind == "blob":  # smooth probabilities: a few regions, some with holes
        p = rng.random(shape)
        for _ in range(2):
            p = (p + np.roll(p, 1, 0) + np.roll(p, 1, 1) + np.roll(p, -1, 0) + np.roll(p, -1, 1)) / 5
        p = (p - p.min()) / max(np.ptp(p), 1e-9)
    elif kind == "noise":  # many tiny parts, diagonal contacts (4-connectivity decides)
        p = rng.random(shape)
    else:  # nothing above 0.5
        p = np.full(shape, 0.2)
    valid = rng.random((y1 - y0, x1 - x0)) > 0.1 if holes else None
    return InstanceCrop(int(rng.integers(2)), 0, float(rng.random()), box, (r0, c0), p.astype(np.float16), valid)


def _random_crops(rng, n):
    out = []
    for k in range(n):
        w, h = (int(v) for v in rng.integers(1, 60, 2))
        x0, y0 = (int(v) for v in rng.integers(0, 1008 - 60, 2))
        kind = ("blob", "blob", "noise", "empty")[k % 4]
        out.append(_crop(rng, (x0, y0, x0 + w, y0 + h), holes=k % 3 == 0, kind=kind))
    return out


def _per_object(crops, base):
    geoms, ext = [], []
    for c in crops:
        m = upsample(c)
        rows, cols = np.flatnonzero(m.any(axis=1)), np.flatnonzero(m.any(axis=0))
        ext.append((cols[0], rows[0], cols[-1] + 1, rows[-1] + 1) if len(rows) else (-1, -1, -1, -1))
        geoms.append(mask_to_geometry(m, base @ Affine.translation(c.box_px[0], c.box_px[1])))
    return geoms, np.array(ext, dtype=np.int64).reshape(-1, 4)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_batched_equals_per_object(seed):
    rng = np.random.default_rng(seed)
    crops = _random_crops(rng, 60)
    # one instance larger than a tile's worth of small ones: the separable path for large boxes
    crops.append(_crop(rng, (0, 0, 700, 400), holes=seed == 1))
    assert 700 * 400 > _LARGE_PX
    base = Affine(0.5, 0.0, 500000.0, 0.0, -0.5, 4200000.0)
    want, want_ext = _per_object(crops, base)
    got, got_ext = polygonize_crops(crops, base)
    assert np.array_equal(got_ext, want_ext)
    assert sum(g is None for g in want) >= 15  # the empty masks
    for g, w in zip(got, want):
        assert (g is None) == (w is None)
        if w is not None:
            assert g.geom_type == w.geom_type
            assert shapely.equals_exact(g, w, 0.0)
            assert g.is_valid


def test_no_crops():
    geoms, ext = polygonize_crops([], Affine.identity())
    assert geoms == [] and ext.shape == (0, 4)


def test_shelf_pack_never_overlaps():
    rng = np.random.default_rng(3)
    w, h = rng.integers(1, 300, 200), rng.integers(1, 300, 200)
    sx, sy, (H, W) = shelf_pack(w, h)
    cover = np.zeros((H, W), np.int32)
    for k in range(len(w)):
        cover[sy[k]:sy[k] + h[k], sx[k]:sx[k] + w[k]] += 1
    assert cover.max() == 1 and cover.sum() == int((w * h).sum())
    assert H * W < 2 * int((w * h).sum())  # packed, not one row or one column
