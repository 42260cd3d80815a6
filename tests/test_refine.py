"""Refinement: tiles whose prompt hits SAM 3's object cap are re-run zoomed in, only there and only for that
prompt; the merge keeps every object once; checkpoints per sub-tile; report, advice, --strict; plan.

Most scenes here are small: the reference backend's cap (200, `MAX_QUERIES`) is lowered to 40 together with
the saturation threshold derived from it exactly as in production (95 %), so a few hundred objects make
tiles saturate; tests/test_bench_refine.py runs the benchmark's smoke size with the real cap and density.
"""

from __future__ import annotations

import json
import sqlite3

import pytest
import shapely
from click.testing import CliRunner

from benchmarks.bench_refine import encodes, vehicles
from sam3tiles.cli.main import cli
from sam3tiles.errors import UsageError
from sam3tiles.evaluate import evaluate
from sam3tiles.model import reference
from sam3tiles.model.registry import clear_cache
from sam3tiles.prompts.prompt import GeoBox, Prompt
from sam3tiles.run.executing import tasks
from sam3tiles.run.pipeline import segment_job
from sam3tiles.run.recording.checkpoint import TileResult
from sam3tiles.testing.demo import write_scene
from sam3tiles.tiling.frame import TileFrames
from sam3tiles.tiling.grid import TileGrid
from sam3tiles.tiling.refine import NOTHING, RefineHook, Refiner, keep_larger_pieces
from sam3tiles.vectorize.pieces import Pieces

CAP = 40


@pytest.fixture(scope="module")
def cap():
    mp = pytest.MonkeyPatch()
    mp.setattr(reference, "MAX_QUERIES", CAP)
    mp.setattr(tasks, "SATURATION", int(0.95 * CAP))  # the production rule, on the lowered cap
    yield
    mp.undo()


def seg(path, prompts=("red",), **kw):
    clear_cache()  # encoder counters from 0
    kw.setdefault("checkpoint", False)
    gdf, rep = segment_job(str(path), list(prompts), backend="reference", workers=2, **kw)
    assert rep.failed == 0
    return gdf, rep


def scores(gdf, truth):
    row = evaluate(gdf, truth).iloc[0]
    return float(row.recall), float(row.precision)


# -- geometry -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("wh,scale", [((3000, 2200), 1.0), ((2000, 1100), 1.0), ((5003, 777), 0.5),
                                      ((900, 700), 1.0), ((1700, 1700), 2.0)])
def test_sub_tiles_partition_the_core_with_overlap_margins(wh, scale):
    grid = TileGrid(*wh, scale=scale)
    ref = Refiner(grid, 2)
    m = grid.overlap / 2
    for tile in grid:
        subs = ref.children(tile)
        assert len(subs) <= 4 or len(grid) == 1  # 3x3 only for a single-tile image's large core
        sx, sy = tile.scale_xy
        core = shapely.box(*[v * 2 for v in tile.core_xyxy])
        cores = [shapely.box(*s.core_xyxy) for s in subs]
        assert abs(sum(c.area for c in cores) - core.area) < 1e-6 and shapely.union_all(cores).equals(core)
        pw = shapely.box(2 * tile.x0, 2 * tile.y0, 2 * (tile.x0 + tile.valid_wh[0]), 2 * (tile.y0 + tile.valid_wh[1]))
        for s, c in zip(subs, cores):
            assert s.scale_xy == (2 * sx, 2 * sy) and ref.depth_of(s.index) == 1 and ref.path(s.index)[0] == tile.index
            win = shapely.box(s.x0, s.y0, s.x0 + s.valid_wh[0], s.y0 + s.valid_wh[1])
            assert win.buffer(1e-6).contains(c) and pw.buffer(1e-6).contains(win)  # inside the parent's window
            x0, y0, x1, y1 = s.core_xyxy
            # sibling seams keep overlap/2 of context each side (the seams of the parent's own core may keep less)
            for inner, gap in ((x0 > 2 * tile.core_xyxy[0], x0 - s.x0), (y0 > 2 * tile.core_xyxy[1], y0 - s.y0),
                               (x1 < 2 * tile.core_xyxy[2], s.x0 + s.size - x1),
                               (y1 < 2 * tile.core_xyxy[3], s.y0 + s.size - y1)):
                assert not inner or gap >= m - 1e-6
        for s in subs[:1]:  # indices are a function of the parent: the next level follows on
            assert ref.path(ref.children(s)[0].index) == [*ref.path(s.index), 0]


def test_parent_keeps_only_pieces_larger_than_half_the_sub_tile_overlap():
    p = Pieces([shapely.box(0, 0, 20, 10), shapely.box(0, 0, 200, 10), shapely.box(0, 0, 20, 10)],
               [0.9] * 3, [0, 0, 1], [0, 0, 0], [True] * 3, [50.0] * 3)
    assert keep_larger_pieces(p, {0}, 128.0) == 1
    assert [g.bounds[2] for g in p.geometry] == [200, 20] and p.prompt == [0, 1]


def test_hook_returns_the_sub_tiles_and_their_frames_for_the_loop_to_apply():
    grid = TileGrid(3000, 2200)
    tile = grid.tile(0, 0)
    hook = RefineHook(grid, "auto", 2, [Prompt("red"), Prompt(None, (GeoBox(0, 0, 10, 10),))], "s.tif")
    frame = TileFrames(grid)[tile.index]
    assert not frame.exclusive.is_empty  # a corner tile has an area no other window sees

    def result(saturated):
        return TileResult(tile.index, Pieces(), saturated=bool(saturated), saturated_prompts=saturated)

    assert hook.arrived(tile, result(()), True, frame) is NOTHING
    left = hook.arrived(tile, result((1,)), True, frame)  # box-only prompts are not refined
    assert left.saturated and not left.sub_tiles
    r = hook.arrived(tile, result((0, 1)), True, frame)
    assert not r.saturated and r.prompts == {0} and r.sub_tiles == tuple(hook.refiner.children(tile))
    assert r.frame.window.equals(frame.window) and r.frame.exclusive.is_empty  # shared with the sub-tiles
    for sub, f in zip(r.sub_tiles, r.sub_frames):
        assert f.window.equals(TileFrames(grid).frame(sub).window) and f.exclusive.is_empty
    with pytest.raises(AttributeError):
        r.prompts = frozenset()  # a value: the loop applies it, nothing writes it
    assert hook.stats.refined == {0: 1} and hook.stats.sub_tiles == {1: len(r.sub_tiles)}


def test_refine_options_are_checked():
    with pytest.raises(UsageError, match="^refine_depth must be"):
        segment_job("x.tif", ["red"], backend="reference", refine_depth=9)
    with pytest.raises(UsageError, match="^refine .always. is not one of auto, off"):
        segment_job("x.tif", ["red"], backend="reference", refine="always")


# -- scenes -------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def scenes(tmp_path_factory):
    d = tmp_path_factory.mktemp("refine")
    big = [("red", shapely.box(x, y, x + w, y + h)) for x, y, w, h in
           ((40, 620, 180, 60), (700, 700, 420, 70), (900, 60, 70, 300))]  # across sub-tile seams
    objs = vehicles(1300, 1300, 1, dense=0.1)
    objs = [o for o in objs if not any(o[1].buffer(8).intersects(b) for _, b in big)] + big
    return {
        "uniform": write_scene(d / "uniform.tif", 1300, 1300, 1, objects=objs),
        "quarter": write_scene(d / "quarter.tif", 2100, 2100, 2,
                               objects=vehicles(2100, 2100, 2, dense=0.12, sparse=0.005, region=(0.6, 0.6, 1, 1))),
        "sparse": write_scene(d / "sparse.tif", 1300, 1300, 3, objects=vehicles(1300, 1300, 3, dense=0.02)),
    }


@pytest.fixture(scope="module")
def uniform(cap, scenes, tmp_path_factory):
    """The dense scene with --refine off, then with defaults resuming the grid tiles from the first run's
    checkpoints: (scene, work dir, grid-tile keys, (gdf, report) off, (gdf, report) auto, report path)."""
    s = scenes["uniform"]
    work = tmp_path_factory.mktemp("uniform") / "work"
    off = seg(s.path, refine="off", checkpoint=True, work_dir=work)
    base = {k for (k,) in sqlite3.connect(work / "tiles.sqlite").execute("SELECT key FROM tiles")}
    rep_path = work.parent / "auto.report.json"
    auto = seg(s.path, checkpoint=True, work_dir=work, report_path=rep_path)
    return s, work, base, off, auto, rep_path


def test_dense_scene_refined_recall_precision_and_encoder_bound(uniform):
    s, _, _, (off, rep_off), (gdf, rep), _ = uniform
    recall, precision = scores(gdf, s.truth)
    assert recall >= 0.99 and precision >= 0.99, evaluate(gdf, s.truth).to_string()
    assert scores(off, s.truth)[0] < 0.9  # the cap loses objects without refinement
    ref = rep.refine
    assert ref["refined"].get("0", 0) >= 3 and rep.saturated == 0 and rep_off.saturated == ref["refined"]["0"]
    assert encodes(rep_off) == 4 and rep.resumed == 4  # the grid tiles came from the checkpoints
    assert encodes(rep) == ref["extra_encodes"] == sum(ref["sub_tiles"].values()) <= 4 * sum(ref["refined"].values())
    # the objects larger than a sub-tile's overlap come out once and whole
    for _, b in s.truth[s.truth.geometry.area > 5000].iterrows():
        hits = gdf[gdf.intersects(b.geometry)]
        assert len(hits) == 1 and hits.geometry.iloc[0].symmetric_difference(b.geometry).area < 0.1 * b.geometry.area


def test_dense_quarter_refines_only_there(cap, scenes):
    s = scenes["quarter"]
    gdf, rep = seg(s.path)
    recall, precision = scores(gdf, s.truth)
    assert recall >= 0.99 and precision >= 0.99
    refined = [t for t in rep.refine["tiles"] if t["depth"] == 0]
    assert 0 < len(refined) < 9
    for t in refined:  # the refined tiles' cores touch the dense quarter
        _, y0, x1, _ = t["core_bounds"]
        assert x1 > 500000 + 0.6 * 2100 * 0.3 and y0 < 4100000 - 0.6 * 2100 * 0.3
    assert encodes(rep) <= 9 + 4 * sum(rep.refine["refined"].values())


def test_no_saturated_tile_runs_as_refine_off(cap, scenes):
    s = scenes["sparse"]
    a, rep_a = seg(s.path)
    b, rep_b = seg(s.path, refine="off")
    assert rep_a.refine["refined"] == {} and encodes(rep_a) == encodes(rep_b) == rep_a.tiles
    assert a.geometry.to_wkb().tolist() == b.geometry.to_wkb().tolist()


def test_resume_mid_refinement_equals_an_uninterrupted_run(uniform):
    s, work, base, _, (full, _), _ = uniform
    con = sqlite3.connect(work / "tiles.sqlite")
    subs = sorted(k for (k,) in con.execute("SELECT key FROM tiles") if k not in base)
    assert len(subs) >= 6
    lost = subs[::3]  # a run killed during refinement: some sub-tiles finished, others not
    con.executemany("DELETE FROM tiles WHERE key = ?", [(k,) for k in lost])
    con.commit()
    con.close()
    # one tile in flight: sub-tiles queue at the front and still go through the same bounded submission
    again, rep = seg(s.path, checkpoint=True, work_dir=work, max_in_flight=1)
    assert encodes(rep) == len(lost) == rep.refine["extra_encodes"]
    assert again.geometry.to_wkb().tolist() == full.geometry.to_wkb().tolist()


def test_saturated_at_max_depth_advice_strict_and_plan(uniform, tmp_path, caplog):
    s, work, _, _, _, rep_path = uniform
    args = ["segment", str(s.path), "--text", "red", "--backend", "reference", "--workers", "2", "--work-dir",
            str(work)]  # the grid tiles resume from the checkpoints
    r = CliRunner().invoke(cli, args + ["--refine-depth", "0", "--out", str(tmp_path / "a.gpkg")])
    assert r.exit_code == 0, r.output
    advice = [m for m in caplog.messages if "object cap" in m]  # one line, to stderr through logging
    assert len(advice) == 1 and "tile(s) hit SAM 3's 200-object cap" in advice[0] and "--refine auto" in advice[0]
    r = CliRunner().invoke(cli, args + ["--refine", "off", "--strict", "--out", str(tmp_path / "b.gpkg")])
    assert r.exit_code == 5 and "--strict" in r.output
    report = json.loads(rep_path.read_text())
    n = report["refine"]["refined"]["0"]
    assert report["saturated"] == 0 and len(report["refine"]["tiles"]) == n
    # plan: the grid, the note on refinement, and with the report where it happened
    subs = sum(report["refine"]["sub_tiles"].values())
    r = CliRunner().invoke(cli, ["plan", str(s.path), "--report", str(rep_path), "--out", str(tmp_path / "plan.gpkg")])
    assert r.exit_code == 0, r.output
    assert "may add tiles" in r.output and f"{n} grid tile(s) refined, {subs} sub-tile(s) (depth 1: {subs})" in r.output
    import geopandas as gpd

    planned = gpd.read_file(tmp_path / "plan.gpkg")
    assert sorted(planned["depth"].value_counts().items()) == [(0, 4), (1, subs)]


def test_saturated_advice_from_python_names_keywords(uniform, caplog):
    """The same advice for a Python caller: the keyword to pass, not a flag (`wording.spoken`)."""
    s, work, _, _, _, _ = uniform
    with caplog.at_level("WARNING", logger="sam3tiles"):
        seg(s.path, refine="off", checkpoint=True, work_dir=work)  # resumes the grid tiles
    advice = [m for m in caplog.messages if "object cap" in m]
    assert len(advice) == 1 and "rerun with refine=auto (re-runs" in advice[0] and "--" not in advice[0], advice


def test_slide_sub_tiles_read_the_matching_pyramid_level(cap, tmp_path, monkeypatch):
    from sam3tiles.readers.slide import SlideSource
    from sam3tiles.testing.slidegen import Pyramid, write_slide

    # nuclei of 13-18 px at scale 0.5
    slide = write_slide(tmp_path / "bf.ome.tif", 2100, 2100, seed=7, pyramid=Pyramid(levels=2), names=("indigo",),
                        cell=44, fill=0.06, size=(26.0, 36.0))
    seen = []
    original = SlideSource._read_level

    def spy(self, lvl, *a):
        seen.append(lvl)
        return original(self, lvl, *a)

    monkeypatch.setattr(SlideSource, "_read_level", spy)
    gdf, rep = seg(slide.path, ["indigo"], scale=0.5, tissue="off")  # the tissue's overview aside
    assert rep.refine["refined"].get("0", 0) >= 1 and rep.saturated == 0
    subs = sum(rep.refine["sub_tiles"].values())
    # the grid tiles at scale 0.5 read level 1, the sub-tiles (scale 1) the full resolution
    assert seen.count(1) == 4 and seen.count(0) == subs
    table = evaluate(gdf, slide.truth)
    assert table.recall.min() >= 0.99 and table.precision.min() >= 0.99, table.to_string()


def test_job_file_refine_keys(tmp_path):
    from sam3tiles.jobs import job_options, parse_job

    body = "inputs: [a.tif]\nprompts: {text: [red]}\noutput: {path: o.gpkg}\n"
    opts = job_options(parse_job(body + "tiling: {refine: 'off', refine_depth: 3}\n", tmp_path, check_files=False))
    assert (opts.refine, opts.refine_depth) == ("off", 3)
    assert (job_options(parse_job(body, tmp_path, check_files=False)).refine,
            opts.__class__().refine_depth) == ("auto", 2)
    with pytest.raises(UsageError, match="tiling.refine_depth"):
        parse_job(body + "tiling: {refine_depth: 7}\n", tmp_path, check_files=False)


def test_sub_tiles_get_the_example_boxes_pasted_like_any_tile(cap, scenes):
    """A text prompt with an example box (--box-scope image): the refined sub-tiles get the exemplar pasted
    too (read at their zoom), and the dense scene is still found whole."""
    s = scenes["uniform"]
    c = s.truth.geometry.iloc[0].centroid  # a box inside a car: the reference backend takes its median colour
    boxes = [f"{c.x - 0.6:.6f},{c.y - 0.6:.6f},{c.x + 0.6:.6f},{c.y + 0.6:.6f}"]
    gdf, rep = seg(s.path, boxes=boxes)
    _, rep_off = seg(s.path, boxes=boxes, refine="off")
    subs = sum(rep.refine["sub_tiles"].values())
    assert subs >= 4 and rep.saturated == 0
    # every tile, grid tile or sub-tile, uses the example once: where it lies, or pasted
    for r in (rep, rep_off):
        assert r.exemplars["in_place"] + r.exemplars["pasted"] == r.tiles
    assert rep.tiles == rep_off.tiles + subs and rep.exemplars["dropped"] >= rep.exemplars["pasted"]
    recall, precision = scores(gdf, s.truth)
    assert recall >= 0.99 and precision >= 0.99, evaluate(gdf, s.truth).to_string()
