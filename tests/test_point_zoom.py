"""Points on objects larger than half a tile's window: asked again zoomed out, found whole (reference backend)."""

from __future__ import annotations

import geopandas as gpd
import numpy as np
import pytest
import shapely

import sam3tiles
from sam3tiles.run.executing import points as run_points
from sam3tiles.testing.demo import ORIGIN, PIXEL, write_scene


@pytest.fixture(scope="module")
def fields(tmp_path_factory):
    """3000 x 2600 px (16 tiles): two fields larger than a tile, 111 px apart, 40 buildings; a point inside
    each object, then 3 on bare ground; the layer written as a GeoPackage with a `name` column."""
    d = tmp_path_factory.mktemp("fields")
    scene = write_scene(d / "fields.tif", 3000, 2600, seed=2, n_cars=0, n_fields=3, n_buildings=40)  # 2 fit
    truth = scene.truth
    rng = np.random.default_rng(5)
    back = []
    while len(back) < 3:
        x, y = rng.uniform(60, 2940), rng.uniform(60, 2540)
        p = shapely.Point(ORIGIN[0] + x * PIXEL, ORIGIN[1] - y * PIXEL)
        # bare ground, not in a gap between fields: a click there answers more than half its home window, and
        # so does it zoomed out (a click on a strip of ground hemmed in by fields is followed as an object)
        if all(p.distance(g) > (300 if c == "yellow" else 20) * PIXEL for g, c in zip(truth.geometry, truth["class"])):
            back.append(p)
    layer = gpd.GeoDataFrame({"name": [f"o{k}" for k in range(len(truth))] + ["bg0", "bg1", "bg2"],
                              "kind": [*truth["class"], "background", "background", "background"]},
                             geometry=[g.representative_point() for g in truth.geometry] + back, crs=truth.crs)
    layer.to_file(d / "points.gpkg")
    return scene, d / "points.gpkg"


def _run(scene, layer):
    return sam3tiles.segment(str(scene.path), point_file=str(layer), backend="reference", checkpoint=False)


@pytest.fixture(scope="module")
def got(fields):
    return _run(*fields)


def _iou(a, b) -> float:
    if a is None:
        return 0.0
    return float(shapely.area(shapely.intersection(a, b)) / shapely.area(shapely.union(a, b)))


def test_a_field_larger_than_a_tile_clicked_is_found_whole(fields, got):
    scene, _ = fields
    truth = scene.truth
    is_field = (truth["class"] == "yellow").to_numpy()
    assert is_field.sum() == 2
    rows = got.iloc[: len(truth)][is_field]
    assert rows["found"].all() and (rows["status"] == "found").all()
    ious = [_iou(g, t) for g, t in zip(rows.geometry, truth.geometry[is_field])]
    assert min(ious) >= 0.99, ious
    assert (rows["n_tiles"] > 1).all()  # stitched at full resolution from the tiles it crosses
    p = got.attrs["sam3tiles_report"]["points"]
    assert p["zoomed"] == 2 and p["zoom_encodes"] >= 2


def test_a_click_on_bare_ground_stays_background_at_every_zoom(got):
    back = got[got["kind"] == "background"]
    assert len(back) == 3 and not back["found"].any() and (back["status"] == "background").all()
    assert back.geometry.isna().all()
    p = got.attrs["sam3tiles_report"]["points"]
    assert p["background"] == 3
    depth = run_points.ZOOM_OUT_DEPTH  # a background click is asked at every zoom, a field until it closes
    assert 3 * depth + 2 <= p["zoom_encodes"] <= 3 * depth + 2 * depth


def test_buildings_come_out_as_without_zooming_out_and_recall_over_all(fields, got, monkeypatch):
    scene, layer = fields
    truth = scene.truth
    monkeypatch.setattr(run_points, "ZOOM_OUT_DEPTH", 0)
    before = _run(scene, layer)
    is_building = (truth["class"] == "blue").to_numpy()
    now, then = got.iloc[: len(truth)][is_building], before.iloc[: len(truth)][is_building]
    assert now["found"].all() and list(now["status"]) == list(then["status"])
    assert all(a.equals(b) for a, b in zip(now.geometry, then.geometry))
    is_field = ~is_building
    assert not before.iloc[: len(truth)][is_field]["found"].any()  # what zooming out changes: the fields
    ious = np.asarray([_iou(g, t) for g, t in zip(got.geometry[: len(truth)], truth.geometry)])
    assert (ious >= 0.5).mean() >= 0.99


def test_a_dry_run_says_a_point_may_cost_zoomed_out_encodes(fields):
    from sam3tiles.run.planning.plan import plan_run
    from sam3tiles.run.planning.targets import Targets

    scene, layer = fields
    plan = plan_run(str(scene.path), point_file=layer, options=sam3tiles.Options(backend="reference"),
                    targets=Targets(checkpoint=False))
    n = plan.points.positives
    assert f"zoom-outs: up to {2 * n} encodes (2 a point whose answer fills its window" in "\n".join(plan.describe())
