"""`consensus.shift_views` moves each tile's part of an object to the views' consensus by buffering and shifting
the object, clipped to the tile's core. It buffered the WHOLE object once per tile: a river across 20 tiles
paid 20 buffers of all of it (issue 49's CPU bar: held-out long seed 101 under `wobble` took 2.6 x the
reference backend's merge, 0.33 s of it in these buffers). Each tile's move now starts from the object near
its core only; the outline is the same (equal as geometry to 1e-9 of its area, on grown, shrunk and shifted
tiles of a long meandering river and of a ring-shaped lake)."""

from __future__ import annotations

import numpy as np
import shapely
import shapely.affinity
from affine import Affine

from sam3tiles.merge import consensus
from sam3tiles.tiling.frame import TileFrames
from sam3tiles.tiling.grid import TileGrid
from sam3tiles.vectorize.pieces import MASK_CELL


def _river(n: int = 2000) -> shapely.Polygon:
    xs = np.linspace(0, 9000, n)
    mid = 1500 + 300 * np.sin(xs / 400) + 40 * np.sin(xs / 37)
    return shapely.Polygon([*zip(xs, mid - 45), *zip(xs[::-1], (mid + 45)[::-1])])


def _lake() -> shapely.Polygon:
    t = np.linspace(0, 2 * np.pi, 1500, endpoint=False)
    r = 1200 + 60 * np.sin(7 * t)
    outer = np.column_stack([2500 + r * np.cos(t), 1800 + r * np.sin(t)])
    return shapely.Polygon(outer, [np.column_stack([2500 + 500 * np.cos(t), 1800 + 500 * np.sin(t)])[::-1]])


def _whole_buffer_form(geom, own, tiles, frames):
    """The move as it was written: the whole object buffered and shifted for each tile, clipped to its core."""
    parts = []
    for t, (g, dx, dy) in zip(tiles, own):
        moved = shapely.buffer(geom, -g, join_style="mitre") if abs(g) >= 0.1 * MASK_CELL else geom
        moved = shapely.transform(moved, lambda xy, dx=dx, dy=dy: xy - [dx, dy])
        parts.append(shapely.intersection(moved, frames[t].core))
    return shapely.union_all([geom.difference(shapely.union_all([frames[t].core for t in tiles])), *parts])


def test_each_tiles_move_from_the_object_near_its_core_gives_the_same_outline():
    grid = TileGrid(9200, 3800, transform=Affine(1, 0, 0, 0, 1, 0))
    frames = dict(TileFrames(grid))
    rng = np.random.default_rng(3)
    for geom in (_river(), _lake()):
        tiles = [t for t, f in frames.items() if f.core.intersects(geom)]
        assert len(tiles) >= 8
        cap = consensus.CAP_CELLS * MASK_CELL
        own = rng.uniform(-cap, cap, (len(tiles), 3))
        own[::4, 0] = 0.0  # some tiles only shifted
        got = consensus.moved_parts(geom, own, tiles, frames, MASK_CELL)
        want = _whole_buffer_form(geom, own, tiles, frames)
        assert got.is_valid and abs(got.area - want.area) < 1e-9 * want.area
        assert got.symmetric_difference(want).area < 1e-9 * want.area



def test_the_moves_at_map_coordinates_on_a_pixel_staircase_give_the_same_outline():
    """The buffers taken at small coordinates and moved back (GEOS's robust fallbacks at 10^5-10^6 cost a
    staircase 3 x the CPU), the parts joined as a stitch's: the outline of the plain form (each buffer at map
    coordinates, a cascaded union), to 1e-6 of its area, valid, on a river drawn as a mask's pixel staircase
    at UTM-like coordinates."""
    from rasterio.features import rasterize, shapes

    pixel = 0.3
    at = Affine(pixel, 0, 500000.0, 0, -pixel, 4100000.0)
    river = shapely.affinity.affine_transform(_river(), [0.4 * pixel, 0, 0, -0.4 * pixel, 500000.0, 4099780.0])
    mask = rasterize([river], out_shape=(1500, 3700), transform=at).astype(np.uint8)
    staircase = max((shapely.geometry.shape(g) for g, v in shapes(mask, mask=mask > 0, transform=at)),
                    key=lambda g: g.area)
    grid = TileGrid(3700, 1500, transform=at)
    frames = dict(TileFrames(grid))
    cell = MASK_CELL * pixel
    tiles = [t for t, f in frames.items() if f.core.intersects(staircase)]
    assert len(tiles) >= 4
    rng = np.random.default_rng(4)
    cap = consensus.CAP_CELLS * cell
    own = rng.uniform(-cap, cap, (len(tiles), 3))
    own[::4, 0] = 0.0
    got = consensus.moved_parts(staircase, own, tiles, frames, cell)
    parts = []
    for t, (g, dx, dy) in zip(tiles, own):
        moved = shapely.buffer(staircase, -g, join_style="mitre") if abs(g) >= 0.1 * cell else staircase
        parts.append(shapely.intersection(shapely.transform(moved, lambda xy, dx=dx, dy=dy: xy - [dx, dy]),
                                          frames[t].core))
    rest = staircase.difference(shapely.union_all([frames[t].core for t in tiles]))
    want = shapely.union_all([rest, *parts])
    assert got.is_valid and got.symmetric_difference(want).area < 1e-6 * want.area

def test_regions_components_are_scipys():
    """`parts.regions` groups parts within the gap by a union-find where few: the same groups, in the same
    order, as scipy's connected components (kept for many edges)."""
    import scipy.sparse
    from scipy.sparse.csgraph import connected_components

    from sam3tiles.merge.parts import _components

    rng = np.random.default_rng(9)
    for n, m in [(1, 0), (2, 1), (7, 5), (40, 30), (300, 400)]:
        a, b = rng.integers(0, n, m), rng.integers(0, n, m)
        a, b = np.concatenate([a, b, np.arange(n)]), np.concatenate([b, a, np.arange(n)])  # as STRtree gives
        got = _components(n, a, b)
        _, want = connected_components(scipy.sparse.coo_matrix((np.ones(len(a)), (a, b)), shape=(n, n)),
                                       directed=False)
        # the same partition, labelled by first appearance in node order
        first = {label: k for k, label in enumerate(dict.fromkeys(want.tolist()))}
        assert got == [min(i for i, x in enumerate(want.tolist()) if x == w) for w in want.tolist()]
        assert [first[w] for w in want.tolist()] == [list(dict.fromkeys(got)).index(g) for g in got]
