"""Rule 5's stitch unions each object's parts clipped to their cores (`parts.union_parts`): GEOS's buffer by 0
of them as one multipolygon, in place of a cascaded union that cost three times as much where masks'
staircases overlap along core lines (cores overlap by a pixel or two). The same area as `shapely.union_all`
on random overlapping sets of pixel-drawn blobs clipped to overlapping cores; a clip's slivers of line left
out (the union is polygonal); the cascaded union where the buffer's answer fails its check."""

from __future__ import annotations

import numpy as np
import pytest
import shapely
from shapely.geometry import LineString, box

from sam3tiles.merge import parts
from sam3tiles.merge.parts import union_parts


def _blob(rng, cx, cy, r, n=160):
    t = np.linspace(0, 2 * np.pi, n, endpoint=False)
    rr = r * (1 + 0.3 * np.convolve(rng.normal(0, 1, n + 20), np.ones(20) / 20, "same")[10:10 + n])
    g = shapely.make_valid(shapely.Polygon(np.round(np.column_stack([cx + rr * np.cos(t), cy + rr * np.sin(t)]))))
    return [q for q in shapely.get_parts(g) if q.geom_type == "Polygon"]


@pytest.mark.parametrize("seed", range(2))
def test_the_union_of_parts_clipped_to_overlapping_cores_is_the_cascaded_unions(seed):
    rng = np.random.default_rng(seed)
    cores = [box(x - 1, y - 1, x + 101, y + 101) for x in range(0, 300, 100) for y in range(0, 300, 100)]
    for _ in range(15):
        blobs = [p for _ in range(rng.integers(2, 10)) for p in _blob(rng, *rng.uniform(0, 300, 2),
                                                                          rng.uniform(15, 80))]
        clips = shapely.intersection(np.asarray(blobs, dtype=object)[:, None], np.asarray(cores)[None, :]).ravel()
        clips = clips[shapely.area(clips) > 0]
        got, want = union_parts(clips), shapely.union_all(clips)
        assert got.geom_type in ("Polygon", "MultiPolygon") and got.is_valid
        assert shapely.symmetric_difference(got, want).area <= 1e-9 * want.area


def test_a_clips_lines_are_left_out_and_one_part_is_itself():
    square = box(0, 0, 10, 10)
    clip = shapely.GeometryCollection([square, LineString([(10, 0), (20, 0)])])
    got = union_parts(np.asarray([clip, box(10, 0, 20, 10)], dtype=object))
    assert got.geom_type == "Polygon" and got.area == 200
    assert union_parts(np.asarray([clip], dtype=object)).equals(square)


def test_where_the_buffer_loses_area_the_cascaded_union_is_taken(monkeypatch):
    a, b = box(0, 0, 10, 10), box(5, 0, 15, 10)
    monkeypatch.setattr(parts.shapely, "buffer", lambda g, d, **k: box(0, 0, 1, 1))  # (an answer that lost)
    assert union_parts(np.asarray([a, b], dtype=object)).equals(shapely.union_all([a, b]))
