"""Several decoder passes of one prompt on one tile are one answer (issue 36, case 1).

A decoder of one box slot (the published v0.3.0 graphs) runs one pass per example box; a 16-slot decoder
one pass per 16. Each pass with a positive box returns every object like it, so the passes overlap: the
run must give each object once, as the one-box run does. Real contract graphs (`sam3tiles.testing.graphs`)
run through the command line; scenes from `test_exemplars._scene` (3x3 tiles)."""

from __future__ import annotations

import geopandas as gpd
import pytest
from click.testing import CliRunner

from sam3tiles.cli.main import cli
from sam3tiles.testing.graphs import build_contract_models
from test_exemplars import _box_arg, _scene


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    return _scene(tmp_path_factory.mktemp("passes") / "scene.tif")


@pytest.fixture(scope="module")
def one_slot(tmp_path_factory):
    """The published v0.3.0 layout: one box slot a decoder pass."""
    return build_contract_models(tmp_path_factory.mktemp("m1") / "model", box_slots=1)


def _segment(tmp, name, path, boxes, *backend) -> gpd.GeoDataFrame:
    out = tmp / f"{name}.gpkg"
    args = ["-q", "segment", str(path), *[a for b in boxes for a in ("--box", b)], *backend, "--workers", "1",
            "--no-preview", "--out", str(out)]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output + repr(r.exception)
    return gpd.read_file(out)


def _same_objects(got: gpd.GeoDataFrame, want: gpd.GeoDataFrame) -> None:
    """No object twice, and the objects of `want`: each matched one to one at IoU > 0.9."""
    wkb = list(got.geometry.to_wkb())
    assert len(wkb) == len(set(wkb)), f"{len(wkb) - len(set(wkb))} exact duplicates of {len(wkb)} objects"
    assert len(got) == len(want) > 0, (len(got), len(want))
    import shapely

    tree = shapely.STRtree(list(got.geometry))
    for g in want.geometry:
        hits = tree.query(g, predicate="intersects")
        best = max((g.intersection(got.geometry.iloc[j]).area / g.union(got.geometry.iloc[j]).area for j in hits),
                   default=0.0)
        assert best > 0.9, g.wkt[:80]


def _blue_boxes(truth, n):
    """`n` example boxes on blue objects of the top-left tile (so that it holds them all: passes there)."""
    boxes = [_box_arg(r) for k, r in truth if k == "blue" and r[2] < 900 and r[3] < 900][:n]
    assert len(boxes) == n
    return boxes


@pytest.mark.parametrize("n", [2, 3, 17])
def test_several_boxes_on_a_one_slot_decoder_give_each_object_once(scene, one_slot, tmp_path, n):
    path, truth = scene
    model = ("--model", str(one_slot), "--device", "cpu")
    one = _segment(tmp_path, "one", path, _blue_boxes(truth, 1), *model)
    many = _segment(tmp_path, f"many{n}", path, _blue_boxes(truth, n), *model)
    _same_objects(many, one)


@pytest.mark.parametrize("n", [17, 20])
def test_a_second_pass_on_the_16_slot_reference_backend_adds_no_duplicate(scene, tmp_path, n):
    path, truth = scene
    one = _segment(tmp_path, "one", path, _blue_boxes(truth, 1), "--backend", "reference")
    many = _segment(tmp_path, f"many{n}", path, _blue_boxes(truth, n), "--backend", "reference")
    _same_objects(many, one)
