"""Exemplar transfer (--box-scope image): one example box finds its kind across the whole image.

Scenes are generated here: flat-coloured rectangles of two similar kinds on a noisy background, over
3x3 tiles. The reference backend and contract-exact ONNX graphs (real onnxruntime sessions) run them."""

from __future__ import annotations

import geopandas as gpd
import numpy as np
import pytest
import rasterio
import shapely
from affine import Affine
from conftest import write_raster
from onnx_graphs import build_contract_models
from shapely.geometry import box

from sam3tiles.evaluate import evaluate_class
from sam3tiles.prompts.exemplars import GUARD, MAX_PASTES, Exemplar, InputExemplars, place, plan_tile
from sam3tiles.prompts.prompt import GeoBox, Prompt, tile_boxes
from sam3tiles.run.pipeline import segment_job
from sam3tiles.tiling.grid import TileGrid

T = Affine(0.5, 0, 400000, 0, -0.5, 5000000)
BG = (92, 112, 84)
KINDS = {"blue": (18, 22, 232), "navy": (45, 45, 200), "magenta": (250, 10, 250)}


def _scene(path, kinds=("blue", "navy"), width=1900, height=1800, seed=0, step=110):
    """Rectangles of 28-60 px on a jittered lattice, kinds drawn at random; returns (path, truth rows)."""
    rng = np.random.default_rng(seed)
    img = (np.asarray(BG, np.float32)[:, None, None] + rng.uniform(-9, 9, (3, height, width))).astype(np.uint8)
    truth = []
    for y in range(20, height - step, step):
        for x in range(20, width - step, step):
            w, h = rng.integers(28, 61, 2)
            x0, y0 = x + rng.integers(0, step - w - 8), y + rng.integers(0, step - h - 8)
            kind = kinds[rng.integers(len(kinds))]
            img[:, y0:y0 + h, x0:x0 + w] = np.asarray(KINDS[kind], np.uint8)[:, None, None]
            truth.append((kind, (x0, y0, x0 + w, y0 + h)))
    write_raster(path, img, transform=T)
    return path, truth


def _crs(rect) -> shapely.Polygon:
    (a, b), (c, d) = T @ rect[:2], T @ rect[2:]
    return box(min(a, c), min(b, d), max(a, c), max(b, d))


def _box_arg(rect, tag="") -> str:
    return ",".join(f"{v:.4f}" for v in _crs(rect).bounds) + tag


def _score(gdf, truth, kind) -> dict:
    return evaluate_class(list(gdf.geometry), [_crs(r) for k, r in truth if k == kind])


@pytest.fixture(scope="module")
def two_kinds(tmp_path_factory):
    return _scene(tmp_path_factory.mktemp("ex") / "scene.tif")


def _far_exemplar(truth, kind):
    """An exemplar of `kind` in the top-left tile's core."""
    return next(r for k, r in truth if k == kind and r[2] < 600 and r[3] < 600)


def test_one_positive_box_finds_its_kind_and_a_negative_suppresses_its_kind_everywhere(two_kinds):
    path, truth = two_kinds
    pos = _far_exemplar(truth, "blue")
    neg = _far_exemplar(truth, "navy")
    boxes = [_box_arg(pos), _box_arg(neg, ",neg")]
    gdf, rep = segment_job(str(path), [], boxes=boxes, backend="reference", checkpoint=False)
    s = _score(gdf, truth, "blue")
    assert s["recall"] >= 0.95 and s["precision"] >= 0.95, s
    navy = [_crs(r) for k, r in truth if k == "navy"]
    assert shapely.STRtree(navy).query(list(gdf.geometry), predicate="intersects").size == 0  # not one, anywhere
    assert rep.tiles == 9 and rep.exemplars["pasted"] == 2 * 8 and rep.exemplars["no_room"] == 0  # 8 other tiles
    assert rep.exemplars["dropped"] >= 8  # at least the pasted copy of the positive, in every tile
    # without the negative (and with a text beside the box) the look-alike kind is found as well: the
    # negative is what suppressed it
    both, _ = segment_job(str(path), ["blue"], boxes=boxes[:1], backend="reference", checkpoint=False)
    assert evaluate_class(list(both.geometry), [_crs(r) for _, r in truth])["recall"] >= 0.95
    # today's behaviour: the boxes act only in the tile that holds them
    local, rep_t = segment_job(str(path), [], boxes=boxes, backend="reference", checkpoint=False, box_scope="tile")
    assert _score(local, truth, "blue")["recall"] < 0.4 and not rep_t.exemplars


def test_nothing_pasted_reaches_any_output(tmp_path):
    """One magenta object in the whole scene: every tile gets a pasted copy, the output has it once."""
    path, _ = _scene(tmp_path / "one.tif", kinds=("blue",), seed=1)
    with rasterio.open(path, "r+") as ds:
        img = ds.read()
        img[:, 300:340, 200:250] = np.asarray(KINDS["magenta"], np.uint8)[:, None, None]
        ds.write(img)
    rect = (200, 300, 250, 340)
    labels = tmp_path / "labels.tif"
    _, rep = segment_job(str(path), ["magenta"], boxes=[_box_arg(rect)], backend="reference",
                         out=tmp_path / "o.gpkg", labels=labels, checkpoint=False)
    assert rep.exemplars["pasted"] == 8 and rep.exemplars["dropped"] >= 8
    read = gpd.read_file(tmp_path / "o.gpkg")
    assert len(read) == 1 and read.geometry.iloc[0].intersection(_crs(rect)).area / _crs(rect).area > 0.85
    with rasterio.open(labels) as ds:
        lab = ds.read(1)
    assert set(np.unique(lab)) == {0, 1} and (lab > 0).sum() == pytest.approx(50 * 40, rel=0.1)


def test_contract_graphs_find_the_exemplars_kind_in_far_tiles(tmp_path):
    """The ONNX test decoder ignores the text ('visual') and segments by the colour under the positive
    boxes of each tile's own input: far tiles find the kind only through the pasted copy."""
    path, truth = _scene(tmp_path / "m.tif", kinds=("magenta", "blue"), seed=2)
    model = build_contract_models(tmp_path / "model", decoder="colour", grid=12, box_slots=1)  # as v0.3.0
    pos = _far_exemplar(truth, "magenta")
    kw = {"boxes": [_box_arg(pos)], "backend": "onnx", "model": str(model), "checkpoint": False}
    gdf, rep = segment_job(str(path), [], **kw)
    far = [_crs(r) for k, r in truth if k == "magenta" and min(r[0], r[1]) > 1100]
    assert len(far) > 10
    found = shapely.union_all(list(gdf.geometry))
    covered = np.asarray([g.intersection(found).area / g.area for g in far])
    assert (covered > 0.7).all(), covered  # 3.5 px mask cells on 28-60 px objects
    # nothing but magenta: no pasted pixel (nor a blue object) in the output
    assert found.difference(shapely.union_all([_crs(r).buffer(1.5) for k, r in truth if k == "magenta"])).area < 1
    local, _ = segment_job(str(path), [], box_scope="tile", **kw)
    assert not any(g.intersects(shapely.union_all(list(local.geometry))) for g in far)
    (counters,) = [c["onnx"] for c in rep.runtime_counters.values() if "onnx" in c]
    assert counters["encodes"] == rep.tiles == 9  # still one encoder run per tile


def test_placement_keeps_clear_of_the_core_and_prefers_far_corners():
    grid = TileGrid(3000, 3000)
    inner = grid.tile(1, 1)
    core = inner.core_tile_px
    spots = []
    for _ in range(4):
        at = place(inner, 100, 60, spots)
        assert at is not None
        x, y = at
        r = (x, y, x + 100, y + 60)
        assert r[0] >= core[2] + 1 + GUARD or r[2] <= core[0] - 1 - GUARD or \
            r[1] >= core[3] + 1 + GUARD or r[3] <= core[1] - 1 - GUARD
        spots.append(r)
    assert {(r[0] == 0, r[1] == 0) for r in spots} == {(True, True), (True, False), (False, True), (False, False)}
    assert place(inner, 120, 120, []) is None  # larger than the free margin (128 - 1 - GUARD)
    assert place(inner, 300, 100, []) is not None  # a long one fits along an edge
    edge = TileGrid(1200, 1200).tile(0, 1)  # 448 px of content, then padding
    x, y = place(edge, 200, 200, [])
    assert x >= 448 + GUARD  # in the padding, hiding nothing
    whole = TileGrid(1008, 1008).tile(0, 0)  # no padding, no margin: nowhere
    assert place(whole, 20, 20, []) is None


def test_bound_and_choice_of_pasted_exemplars():
    grid = TileGrid(4000, 4000)
    far = grid.tile(4, 4)
    rgb, valid = np.zeros((3, 40, 40), np.uint8), np.ones((40, 40), bool)
    # the grid has no georeferencing: boxes are in pixels, y down
    boxes = [GeoBox(100 + 300 * i, 100, 120 + 300 * i, 120, positive=i != 5) for i in range(7)]
    ex = [Exemplar(i, b, rgb, valid, (8, 8, 32, 32), ((b.minx + b.maxx) / 2, (b.miny + b.maxy) / 2))
          for i, b in enumerate(boxes)]
    prompts = [Prompt(None, tuple(boxes))]
    plan = plan_tile(far, prompts, boxes, ex)
    assert len(plan.pastes) == MAX_PASTES and len(plan.over_bound) == 7 - MAX_PASTES
    chosen = [p.exemplar for p in plan.pastes]
    # the nearest positive, then the (only) negative, then the nearest others
    assert chosen[0] == 6 and chosen[1] == 5 and chosen[2:] == [4, 3]
    assert all(not tile_boxes([b], far) for b in boxes)
    near = grid.tile(0, 0)
    plan0 = plan_tile(near, prompts, boxes, ex)
    assert len(plan0.in_place) >= 1 and all(p.exemplar not in {0} for p in plan0.pastes)
    key = plan.key(ex)
    moved = list(ex)
    moved[6] = Exemplar(6, GeoBox(boxes[6].minx + 1, boxes[6].miny, boxes[6].maxx + 1, boxes[6].maxy),
                        rgb, valid, (8, 8, 32, 32), ex[6].centre)
    assert plan.key(moved) != key  # a changed exemplar changes the checkpoint key of every tile it reached
    assert isinstance(InputExemplars(prompts, boxes, ex).warnings(256), list)


def test_box_scope_on_the_command_line_and_in_job_files(tmp_path, two_kinds):
    from click.testing import CliRunner

    from sam3tiles.cli.main import cli
    from sam3tiles.jobs import job_options, load_job

    path, truth = two_kinds
    pos = _far_exemplar(truth, "blue")
    r = CliRunner().invoke(cli, ["segment", str(path), "--box", _box_arg(pos), "--box-scope", "sideways",
                                 "--backend", "reference", "--out", str(tmp_path / "o.gpkg")])
    assert r.exit_code == 2 and "box-scope" in r.output
    job = tmp_path / "job.yaml"
    job.write_text(f"inputs: [{path}]\nprompts: {{boxes: ['{_box_arg(pos)}'], box_scope: tile}}\n"
                   f"backend: {{name: reference}}\noutput: {{path: {tmp_path / 'j.gpkg'}}}\n")
    assert job_options(load_job(job)).box_scope == "tile"
    job.write_text(job.read_text().replace("box_scope: tile", "box_scope: everywhere"))
    with pytest.raises(Exception, match="box_scope"):
        load_job(job)


def test_screen_drops_copies_and_clips_real_objects_reaching_the_core():
    """On an interior tile with a paste in its top-left corner: a detection on the paste alone is dropped;
    one running from the paste into the core is kept without the pasted pixels and marked cut (the
    neighbours see what the paste hides); one elsewhere is untouched."""
    from sam3tiles.model.runtime import Detections, TileImage
    from sam3tiles.prompts.exemplars import TilePastes
    from sam3tiles.vectorize.pieces import pieces_from_crops

    tile = TileGrid(3000, 3000).tile(1, 1)
    rgb, valid = np.full((3, 60, 60), 200, np.uint8), np.ones((60, 60), bool)
    image = TileImage(np.zeros((3, 1008, 1008), np.uint8), np.ones((1008, 1008), bool))
    composed, screen = TilePastes(((0, 0, rgb, valid),), tile.core_tile_px).compose(image)
    assert (composed.rgb[:, :60, :60] == 200).all() and screen.hides_content

    def mask(x0, y0, x1, y1):  # tile pixels -> 288 cells
        m = np.zeros((288, 288), np.float32)
        m[int(y0 / 3.5):int(np.ceil(y1 / 3.5)), int(x0 / 3.5):int(np.ceil(x1 / 3.5))] = 0.9
        return m

    rects = [(10, 10, 50, 50), (20, 40, 200, 300), (500, 500, 560, 560)]  # copy, reaching the core, elsewhere
    det = Detections(np.asarray([[v / 1008 for v in r] for r in rects], np.float32), np.full(3, 0.9, np.float32),
                     np.stack([mask(*r)[None] for r in rects]))
    crops = screen.crops(det, 0, 0, tile.valid_wh, None)
    assert screen.stats() == {"pasted": 1, "dropped": 1, "clipped": 1, "dropped.0": 1, "clipped.0": 1}
    pieces = pieces_from_crops(crops, tile)
    assert len(pieces) == 2 and sorted(pieces.complete) == [False, True]
    clipped = pieces.geometry[pieces.complete.index(False)]
    paste = shapely.box(*(tile.transform @ (0, 0)), *(tile.transform @ (64, 64)))
    assert clipped.intersection(paste).area == 0 and clipped.area > 0


def test_exemplar_benchmark_smoke(capsys):
    """benchmarks/bench_exemplar_gpu.py at its smoke size: the contract graphs on the CPU."""
    import json

    from benchmarks.bench_exemplar_gpu import main

    assert main(["--smoke", "--size", "1800", "--tiles", "1", "--json"]) == 0
    r = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert r["none_far"]["pred"] == 0 and r["pasted_far"]["tp"] > 0 and r["pasted_home"]["tp"] == r["in_place"]["tp"]
    assert r["ms"]["encode"] > 0 and r["box_slots"] == 1
    # issue 19: a building too large for the margin (the strip), and a chip cut from another scene
    assert r["strip_px"] > 0 and r["strip_pasted_far"]["tp"] > 0 and r["strip_none_far"]["pred"] == 0
    assert r["chip_far"]["tp"] > 0
