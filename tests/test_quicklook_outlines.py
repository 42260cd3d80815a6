"""The quicklook's outlines at scale (issue 48): after the last tile of a 10^5-tile run the driver's memory rose
from ~320 MB to 1.36 GB; most of it was the quicklook gathering every vertex of a 20,000-object chunk as
Python floats, though a panel pixel holds hundreds of them. The outline pass now takes a few objects at a time
and draws only a ring's points in distinct quarter pixels of the panel: the same picture, memory that follows a
batch."""

from __future__ import annotations

import tracemalloc

import numpy as np
import shapely
from PIL import Image, ImageDraw
from rasterio.transform import Affine

from sam3tiles.units import Frame
from sam3tiles.writers import quicklook


def _objects(n: int, vertices: int, spread: float, seed: int = 0):
    import geopandas as gpd

    rng = np.random.default_rng(seed)
    centres = rng.uniform(50, spread - 50, (n, 2))
    geoms = shapely.buffer(shapely.points(centres), rng.uniform(8, 40, n), quad_segs=vertices // 4)
    return gpd.GeoDataFrame({"prompt": ["red"] * n}, geometry=geoms)


def test_outlining_many_detailed_objects_holds_a_batch_not_the_chunk():
    # 6,000 objects of ~400 vertices (2.4 M points) onto a 1000 px panel of a 100,000 px image: the pass held
    # every point as Python floats (203 MB traced before); now a batch's arrays (~22 MB), whatever the chunk
    objs = _objects(6000, 400, 100_000)
    frame = Frame(None, Affine.identity(), 100_000, 100_000)
    img = Image.new("RGB", (1000, 1000))
    tracemalloc.start()
    try:
        quicklook._outline(ImageDraw.Draw(img), objs, frame, 0.01, 0.01, {"red": (255, 0, 0)})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 40 * 2**20, peak / 2**20
    assert np.asarray(img).any()  # and it drew


def test_outlines_drawn_from_distinct_quarter_pixels_are_the_outlines_of_every_vertex():
    # at a scale where objects are tens of panel pixels: the picture is that of every vertex drawn
    objs = _objects(300, 2000, 4000, seed=1)
    frame = Frame(None, Affine.identity(), 4000, 4000)
    s = 0.25
    got = Image.new("RGB", (1000, 1000))
    quicklook._outline(ImageDraw.Draw(got), objs, frame, s, s, {"red": (255, 0, 0)})
    want = Image.new("RGB", (1000, 1000))
    draw = ImageDraw.Draw(want)
    for g in objs.geometry:
        line = (np.asarray(g.exterior.coords) * s).ravel().tolist()
        draw.line(line, fill=quicklook.halo((255, 0, 0)), width=3, joint="curve")
        draw.line(line, fill=(255, 0, 0), width=1)
    a, b = np.asarray(got).astype(int), np.asarray(want).astype(int)
    assert (b.sum(axis=2) > 0).sum() > 20_000
    differ = (np.abs(a - b).sum(axis=2) > 0).mean()
    assert differ < 0.002, differ
