"""Several decoder passes of one prompt on one tile are one answer (issue 36, case 1).

A decoder of one box slot (the published v0.3.0 graphs) runs one pass per example box; a 16-slot decoder
one pass per 16. Each pass with a positive box returns every object like it, so the passes overlap: the
run must give each object once, as the one-box run does. Real contract graphs (`sam3tiles.testing.graphs`)
run through the command line; scenes from `test_exemplars._scene` (3x3 tiles)."""

from __future__ import annotations

import json

import geopandas as gpd
import pytest
from click.testing import CliRunner
from test_exemplars import _box_arg, _scene

from sam3tiles.cli.main import cli
from sam3tiles.testing.graphs import build_contract_models


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    return _scene(tmp_path_factory.mktemp("passes") / "scene.tif")


@pytest.fixture(scope="module")
def one_slot(tmp_path_factory):
    """The published v0.3.0 layout: one box slot a decoder pass."""
    return build_contract_models(tmp_path_factory.mktemp("m1") / "model", box_slots=1)


def _segment(tmp, name, path, boxes, *backend, report=False):
    """The objects of a `segment` run on the command line (and its report)."""
    out = tmp / f"{name}.gpkg"
    args = ["-q", "segment", str(path), *[a for b in boxes for a in ("--box", b)], *backend, "--workers", "1",
            "--no-preview", "--overwrite", "--out", str(out)]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output + repr(r.exception)
    gdf = gpd.read_file(out)
    return (gdf, json.loads((tmp / f"{name}.gpkg.report.json").read_text())) if report else gdf


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
    many, rep = _segment(tmp_path, f"many{n}", path, _blue_boxes(truth, n), *model, report=True)
    _same_objects(many, one)
    # the top-left tile took n passes, the others one per exemplar pasted into them (up to 4) and their own
    assert rep["decoder_passes"]["extra"] >= n - 1 and rep["decoder_passes"]["folded"] > 0
    assert rep["exemplars"]["pasted"] > 0 and rep["exemplars"]["dropped"] > 0  # screened in every pass
    if n == 17:  # the tiles' stored parts are the one answer: a rerun resumes every tile to the same objects
        again, rep2 = _segment(tmp_path, f"many{n}", path, _blue_boxes(truth, n), *model, report=True)
        assert rep2["resumed"] == rep["done"] > 0 and rep2["done"] == 0
        assert sorted(again.geometry.to_wkb()) == sorted(many.geometry.to_wkb())


@pytest.mark.parametrize("n", [17, 20])
def test_a_second_pass_on_the_16_slot_reference_backend_adds_no_duplicate(scene, tmp_path, n):
    path, truth = scene
    one = _segment(tmp_path, "one", path, _blue_boxes(truth, 1), "--backend", "reference")
    many = _segment(tmp_path, f"many{n}", path, _blue_boxes(truth, n), "--backend", "reference")
    _same_objects(many, one)


# -- the merge of one prompt's passes, on crops as the model worker makes them ----------------------------

def _crop(pass_index, cells, score, cell0=(10, 10), shape=(12, 12)):
    """An InstanceCrop whose mask is `cells` (row, col ranges inside a `shape` crop at `cell0`)."""
    import numpy as np

    from sam3tiles.vectorize.pieces import InstanceCrop

    probs = np.zeros(shape, np.float16)
    (r0, r1), (c0, c1) = cells
    probs[r0:r1, c0:c1] = 0.9
    px = tuple(int(v * 3.5) for v in (cell0[1], cell0[0], cell0[1] + shape[1], cell0[0] + shape[0]))
    return InstanceCrop(0, pass_index, score, px, cell0, probs)


def test_passes_fold_one_object_keep_the_better_score_and_every_distinct_one():
    from sam3tiles.vectorize.pieces import merge_passes

    a0 = _crop(0, ((2, 8), (2, 8)), 0.80)
    b0 = _crop(0, ((0, 4), (0, 4)), 0.70, cell0=(40, 40))
    a1 = _crop(1, ((2, 8), (3, 9)), 0.90)  # the same object a cell to the right: IoU 30/42, a better score
    c1 = _crop(1, ((0, 4), (0, 4)), 0.60, cell0=(80, 80))  # an object only the second pass found
    near1 = _crop(1, ((2, 8), (8, 12)), 0.95)  # a neighbour touching `a`: overlaps it in no cell
    crops, folded = merge_passes([[a0, b0], [a1, c1, near1]])
    assert folded == 1 and [(c.score, c.cell0) for c in crops] == [(0.70, (40, 40)), (0.90, (10, 10)),
                                                                   (0.60, (80, 80)), (0.95, (10, 10))]
    assert {c.pass_index for c in crops} == {0}  # one answer: one piece key
    # two masks of one pass that overlap are the model's own answer: both stay
    same, folded = merge_passes([[a0, a1]])
    assert folded == 0 and len(same) == 2
    # three passes that return one object: once, with the best of the three scores
    one, folded = merge_passes([[a0], [a1], [_crop(2, ((2, 8), (2, 9)), 0.85)]])
    assert folded == 2 and [c.score for c in one] == [0.90]


def test_negatives_go_into_every_pass_or_the_tile_is_refused():
    from sam3tiles.errors import PromptError
    from sam3tiles.model.runtime import ExampleBox
    from sam3tiles.prompts.prompt import box_passes

    pos = [ExampleBox((0.1 * i + 0.05, 0.5, 0.02, 0.02), True) for i in range(5)]
    neg = [ExampleBox((0.5, 0.1 * i + 0.05, 0.02, 0.02), False) for i in range(3)]
    passes = box_passes(pos + neg[:1], 2)
    assert [sum(b.positive for b in p) for p in passes] == [1] * 5 and all(neg[0] in p for p in passes)
    assert box_passes(neg[:1], 1) == [neg[:1]]  # a text and one negative: one pass of one slot
    for boxes, slots in ((pos[:1] + neg[:1], 1), (pos + neg, 3), (neg, 2)):
        with pytest.raises(PromptError, match="no negative fits|at most . fits?: give at most . negative examples"):
            box_passes(boxes, slots)


def test_a_negative_only_prompt_is_refused_by_the_api_before_any_work(scene, tmp_path):
    import sam3tiles
    from sam3tiles.errors import PromptError

    path, truth = scene
    neg = next(r for k, r in truth if k == "navy")
    with pytest.raises(PromptError, match="a negative example needs a text or a positive example beside it"):
        sam3tiles.segment(str(path), boxes=[_box_arg(neg, ",neg")], backend="reference", out=tmp_path / "o.gpkg")
    assert list(tmp_path.iterdir()) == []


def test_tiles_an_earlier_version_stored_with_every_pass_are_computed_again(scene, tmp_path, monkeypatch):
    """A work folder of a version before passes were one answer holds, for a tile of several passes, every
    pass's objects: a rerun must not take them for this version's answer."""
    from sam3tiles.run.executing import runner, tasks
    from sam3tiles.run.pipeline import segment_job

    path, truth = scene
    boxes = _blue_boxes(truth, 17)
    out = tmp_path / "o.gpkg"
    with monkeypatch.context() as m:  # what that version did: the passes' crops as they came
        m.setattr(tasks, "merge_passes", lambda passes: ([c for p in passes for c in p], 0))
        m.setattr(runner, "_prompt_key", lambda tp: [tp.text, [[(b.cxcywh, b.positive) for b in ps]
                                                              for ps in tp.passes]], raising=False)
        old, _ = segment_job(str(path), [], boxes=boxes, backend="reference", out=out)
    wkb = list(old.geometry.to_wkb())
    assert len(wkb) > len(set(wkb))  # (the duplicates that version wrote)
    gdf, rep = segment_job(str(path), [], boxes=boxes, backend="reference", out=out, overwrite=True)
    wkb = list(gdf.geometry.to_wkb())
    assert len(wkb) == len(set(wkb)) and rep.done >= 1 and rep.resumed == rep.tiles - rep.done


def test_a_small_object_one_pass_saw_a_cell_larger_all_round_is_folded_and_a_fused_pair_gives_way():
    """A 3 x 6 cell object that another pass returned grown by a cell on every side (5 x 8: IoU 0.45) is one
    object; so is a pair one pass saw fused and another pass as two: the better-scored answer stays."""
    from sam3tiles.vectorize.pieces import merge_passes

    small = _crop(0, ((4, 7), (3, 9)), 0.8)
    grown = _crop(1, ((3, 8), (2, 10)), 0.7)
    one, folded = merge_passes([[small], [grown]])
    assert folded == 1 and [c.score for c in one] == [0.8]
    left, right = _crop(0, ((2, 8), (0, 5)), 0.9), _crop(0, ((2, 8), (6, 11)), 0.85)
    fused = _crop(1, ((2, 8), (0, 11)), 0.7)
    two, folded = merge_passes([[left, right], [fused]])
    assert folded == 1 and [c.score for c in two] == [0.9, 0.85]
    fused_first = _crop(1, ((2, 8), (0, 11)), 0.95)
    one, folded = merge_passes([[left, right], [fused_first]])
    assert folded == 2 and [c.score for c in one] == [0.95]
