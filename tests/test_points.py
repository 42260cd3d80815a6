"""Clicks and point layers (issue 41): the point decoder of the four-graph layout, the reference backend's
answer to a click, and points as prompts through the whole run (`--point`, `--point-file`, job keys, API).

Real components: the four-graph contract graphs of `sam3tiles.testing.graphs` in real onnxruntime sessions,
GeoTIFFs written by rasterio, outputs read back with geopandas/pyogrio."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from sam3tiles.cli.main import cli
from sam3tiles.errors import ModelError
from sam3tiles.model import layouts as mc  # `info` moved beside the layouts table
from sam3tiles.model.onnx import OnnxRuntime
from sam3tiles.model.points import HOLE_CELLS, fill_holes
from sam3tiles.model.reference import ReferenceRuntime
from sam3tiles.model.runtime import Click, TileImage, clicks_problem
from sam3tiles.testing.graphs import (CLICK_IOUS, SECOND_PASS_IOU, blank_tile, build_contract_models,
                                      build_four_graph_models, paint)


@pytest.fixture(scope="module")
def four(tmp_path_factory):
    return build_four_graph_models(tmp_path_factory.mktemp("m") / "model")


@pytest.fixture(scope="module")
def differs(tmp_path_factory):
    return build_four_graph_models(tmp_path_factory.mktemp("m") / "model", point="differs")


def _tile(*paints) -> TileImage:
    img = blank_tile()
    for x0, y0, x1, y1, colour in paints:
        paint(img, x0, y0, x1, y1, colour)
    return TileImage(img, np.ones((1008, 1008), bool))


def _cells(det) -> np.ndarray:
    return det.masks[0, 0] > 0.5


def _box_cells(x0, y0, x1, y1) -> np.ndarray:
    """The 288-grid cells whose centres lie in the pixel box."""
    c = (np.arange(288) + 0.5) * 1008 / 288
    return ((c[:, None] >= y0) & (c[:, None] < y1)) & ((c[None, :] >= x0) & (c[None, :] < x1))


# -- the model: the point decoder driven as published ------------------------------------------------------

def test_model_info_reads_the_four_graph_layout(four, differs):
    info = mc.info(four)
    assert info.layout == "16-slot layout (as in sam3-onnx v0.6.0), point decoder: clicks usable"
    assert not info.point_differences and not info.differences
    assert "sam3_point_decoder.onnx" in info.format()
    assert "input  point_coords float32 [1,num_points,2]" in info.format()
    bad = mc.info(differs)
    assert "clicks refused" in bad.layout and not bad.differences  # text prompts still fit
    text = bad.format()
    assert "unexpected input orig_im_size int64 [2]" in text
    assert "input point_labels int64 [1,num_points], where sam3tiles feeds point_labels float32 [1,N]" in text
    r = CliRunner().invoke(cli, ["model", "info", str(differs)])
    assert r.exit_code == 0 and "orig_im_size" in r.output and "clicks refused" in r.output


def test_one_encode_feeds_both_decoders(four):
    rt = OnnxRuntime(four, device="cpu")
    emb = rt.encode(_tile((100, 100, 300, 260, "red"), (500, 500, 700, 700, "blue")), clicks=True)
    text = rt.decode(emb, rt.prepare_prompt("blue"))
    click = rt.decode_clicks(emb, [Click((200, 180))])
    assert rt.counters["encodes"] == 1 and rt.counters["click_decodes"] == 2  # two passes
    assert len(text) == 1 and _cells(text).sum() == _box_cells(500, 500, 700, 700).sum()
    assert len(click) == 1 and (_cells(click) == _box_cells(100, 100, 300, 260)).all()


def test_two_passes_the_best_candidate_by_predicted_iou(four):
    """The candidates come as (a part, the object, the whole window), so index order would take the part;
    the argmax of the predicted IoU takes the object, and the second pass (the object's logits fed back)
    answers with its own IoU."""
    rt = OnnxRuntime(four, device="cpu")
    emb = rt.encode(_tile((100, 100, 300, 260, "red")), clicks=True)
    det = rt.decode_clicks(emb, [Click((200, 180))])
    assert CLICK_IOUS.index(max(CLICK_IOUS)) == 1
    assert det.scores[0] == pytest.approx(SECOND_PASS_IOU)
    assert (_cells(det) == _box_cells(100, 100, 300, 260)).all()
    x0, y0, x1, y1 = det.boxes[0] * 1008
    assert (x0, y0, x1, y1) == pytest.approx((100.8, 98, 301, 262.5), abs=3.6)


def test_holes_up_to_256_cells_are_filled(four):
    rt = OnnxRuntime(four, device="cpu")
    small, large = (180, 150, 215, 185), (420, 150, 530, 250)  # 10x10 and 31x28 cells of another colour
    emb = rt.encode(_tile((100, 100, 300, 260, "red"), *[(*b, "green") for b in (small,)],
                          (380, 100, 600, 300, "red"), (*large, "green")), clicks=True)
    det = rt.decode_clicks(emb, [Click((130, 130))])
    cells = _cells(det)
    assert cells[_box_cells(*small)].all()  # the small hole is filled
    assert not cells[_box_cells(*large)][5:-5].any() and _box_cells(*large).sum() > HOLE_CELLS
    logits = np.full((8, 8), 5.0)
    logits[2:4, 2:4] = -5
    assert (fill_holes(logits, 3) == logits).all() and (fill_holes(logits, 4) > 0).all()


def test_a_negative_click_takes_a_look_alike_away(four):
    rt = OnnxRuntime(four, device="cpu")
    emb = rt.encode(_tile((100, 100, 300, 260, "red"), (300, 100, 420, 260, (200, 0, 0))), clicks=True)
    both = rt.decode_clicks(emb, [Click((200, 180))])
    assert (_cells(both) == _box_cells(100, 100, 420, 260)).all()  # the look-alike matches the click's colour
    one = rt.decode_clicks(emb, [Click((200, 180)), Click((360, 180), positive=False)])
    assert (_cells(one) == _box_cells(100, 100, 300, 260)).all()


def test_a_point_decoder_that_differs_is_refused_naming_its_inputs(differs, tmp_path):
    rt = OnnxRuntime(differs, device="cpu")
    problem = clicks_problem(rt)
    assert "orig_im_size int64 [2]" in problem and "point_labels int64 [1,num_points]" in problem
    assert "Its inputs are: image_embeddings float32 [1,256,72,72]" in problem
    with pytest.raises(ModelError, match="orig_im_size"):
        rt.encode(_tile(), clicks=True)
    three = OnnxRuntime(build_contract_models(tmp_path / "v030"), device="cpu")
    assert "sam3_point_decoder.onnx" in clicks_problem(three) and "has none" in clicks_problem(three)


def test_the_reference_backend_answers_the_region_under_the_click():
    rt = ReferenceRuntime()
    tile = _tile((100, 100, 300, 260, (230, 20, 25)), (300, 100, 420, 260, (190, 20, 25)),
                 (600, 600, 700, 700, (230, 20, 25)))
    assert clicks_problem(rt) is None
    det = rt.decode_clicks(rt.encode(tile, clicks=True), [Click((200, 180))])
    assert (_cells(det) == _box_cells(100, 100, 420, 260)).all()  # touching look-alike, not the far copy
    det = rt.decode_clicks(tile, [Click((200, 180)), Click((360, 180), positive=False)])
    assert (_cells(det) == _box_cells(100, 100, 300, 260)).all()
    background = rt.decode_clicks(tile, [Click((800, 300))])
    assert _cells(background).mean() > 0.8  # the region under a background click: the caller checks its area
    assert len(rt.decode_clicks(tile, [Click((200, 180), positive=False)])) == 0


# -- points through the whole run --------------------------------------------------------------------------

import geopandas as gpd  # noqa: E402
import shapely  # noqa: E402

import sam3tiles  # noqa: E402
from sam3tiles.testing import write_raster  # noqa: E402
from sam3tiles.testing.pointscene import write_point_scene  # noqa: E402


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    """2400 x 2200 px (9 tiles): small objects, objects across seams, two larger than a tile, 3 background
    points; the point layer in lon/lat (reprojected by the run) with columns to carry."""
    d = tmp_path_factory.mktemp("scene")
    s = write_point_scene(d / "scene.tif", 2400, 2200, seed=3)
    s.points.to_crs(4326).to_file(d / "points.gpkg")
    return s


def _iou(a, b) -> float:
    return float(shapely.area(shapely.intersection(a, b)) / shapely.area(shapely.union(a, b)))


def _segment(*args) -> tuple:
    r = CliRunner().invoke(cli, ["segment", *map(str, args), "--backend", "reference", "--workers", "1"])
    return r.exit_code, r.output


def test_a_point_layer_gives_one_whole_object_per_point_with_its_columns(scene, tmp_path):
    out = tmp_path / "objects.gpkg"
    code, output = _segment(scene.path, "--point-file", scene.path.parent / "points.gpkg", "-o", out)
    assert code == 0, output
    got = gpd.read_file(out)
    pts = scene.points
    assert len(got) == len(pts)  # one row per positive point, in the file's order
    assert list(got["name"]) == list(pts["name"]) and list(got["height"]) == pytest.approx(list(pts["height"]))
    assert "label" not in got.columns and {"found", "status", "point_id"} <= set(got.columns)
    objects = got[got["kind"] != "background"]
    assert objects["found"].all() and (objects["status"] == "found").all()
    truth = scene.truth.set_index("name").geometry
    ious = {n: _iou(g, truth[n]) for n, g in zip(objects["name"], objects.geometry)}
    text = _text_ious(scene)  # the same objects found by text prompts (their colours' names)
    assert all(ious[n] >= text[n] - 0.02 for n in ious), (ious, text)
    assert min(ious.values()) >= 0.85 and np.mean(list(ious.values())) >= 0.95, ious
    kinds = dict(zip(scene.truth["name"], scene.truth["kind"]))
    assert {"small", "seam", "large"} <= set(kinds.values())
    large = objects[objects["kind"] == "large"]
    assert (large["n_tiles"] > 1).all()  # followed into the tiles their cores reach, joined
    back = got[got["kind"] == "background"]
    assert not back["found"].any() and (back["status"] == "background").all() and back.geometry.isna().all()
    report = __import__("json").loads(out.with_name("objects.gpkg.report.json").read_text())
    p = report["points"]
    assert p["given"] == len(pts) and p["found"] == len(objects) and p["background"] == len(back)
    assert report["objects"] == len(objects)


def _text_ious(scene) -> dict:
    """Each object's best IoU among the objects a text prompt of its colour's name found."""
    got = sam3tiles.segment(str(scene.path), sorted(set(scene.truth["colour"])), backend="reference", checkpoint=False)
    return {row["name"]: max((_iou(g, row.geometry) for g in got.geometry[got["prompt"] == row["colour"]]), default=0.0)
            for _, row in scene.truth.iterrows()}


def test_points_in_one_tile_share_one_encode(scene, tmp_path):
    """Every point's home tile is encoded once for all its points; a tile is encoded again only to follow an
    object that reaches past it."""
    gdf, report = sam3tiles.segment(str(scene.path), point_file=str(scene.path.parent / "points.gpkg"),
                                    backend="reference", checkpoint=False), None
    report = gdf.attrs["sam3tiles_report"]
    p = report["points"]
    assert p["home_tiles"] <= 9 and p["encodes"] == p["home_tiles"] + p["follow_encodes"] + p["zoom_encodes"]
    assert p["zoom_encodes"] == 3 * 2  # each background click asked again at half and a quarter of the zoom
    assert p["encodes"] < len(scene.points)  # several points a window


def test_not_found_rows_are_kept_by_the_formats_with_a_table(scene, tmp_path):
    pts = scene.points.iloc[[0, len(scene.points) - 1]]  # an object, a background point
    args = [a for p in pts.geometry for a in ("--point", f"{p.x},{p.y}")]
    for name in ("o.parquet", "o.fgb", "o.geojson"):
        out = tmp_path / name
        code, output = _segment(scene.path, *args, "-o", out, "--no-preview")
        assert code == 0, output
        got = gpd.read_parquet(out) if name.endswith("parquet") else gpd.read_file(out)
        assert list(got["found"]) == [True, False] and got.geometry.isna().tolist() == [False, True], name
        assert list(got["point_id"]) == [1, 2]
    out = tmp_path / "o.coco.json"
    code, output = _segment(scene.path, *args, "-o", out, "--no-preview")
    assert code == 0, output
    assert len(__import__("json").loads(out.read_text())["annotations"]) == 1  # objects only


def test_a_negative_point_acts_on_the_positive_beside_it(tmp_path):
    img = np.full((3, 600, 800), 90, np.uint8)
    img[:, 100:300, 100:300] = np.asarray([230, 20, 25], np.uint8)[:, None, None]
    img[:, 100:300, 300:420] = np.asarray([190, 20, 25], np.uint8)[:, None, None]  # a touching look-alike
    src = write_raster(tmp_path / "in.tif", img)
    t = rasterio_transform(src)
    x, y = t @ (200, 200)
    nx, ny = t @ (360, 200)
    both = sam3tiles.segment(str(src), points=(x, y), backend="reference", checkpoint=False)
    one = sam3tiles.segment(str(src), points=[(x, y), f"{nx},{ny},neg"], backend="reference", checkpoint=False)
    assert len(both) == len(one) == 1  # a negative point is no object: no row
    cell = abs(t.a) * 1008 / 288  # a mask cell in CRS units
    assert both.geometry[0].bounds[2] == pytest.approx((t @ (420, 0))[0], abs=cell)
    assert one.geometry[0].bounds[2] == pytest.approx((t @ (300, 0))[0], abs=cell)


def rasterio_transform(path):
    import rasterio

    with rasterio.open(path) as ds:
        return ds.transform


def test_points_on_an_image_without_a_crs_are_pixels(tmp_path):
    s = write_point_scene(tmp_path / "plain.tif", 1300, 1100, seed=1, crs=None, n_background=1)
    p = s.points.geometry.iloc[0]
    got = sam3tiles.segment(str(s.path), points=[(p.x, p.y)], backend="reference", checkpoint=False)
    assert got.crs is None and got["found"].all()
    assert _iou(got.geometry[0], s.truth.geometry[0]) > 0.9


def test_job_keys_and_api_keywords_give_the_same_rows(scene, tmp_path):
    import yaml

    job = {"inputs": [str(scene.path)], "prompts": {"point_file": "points.gpkg", "points": []},
           "backend": {"name": "reference"}, "output": {"path": str(tmp_path / "job.gpkg")}}
    (scene.path.parent / "job.yaml").write_text(yaml.safe_dump(job))
    r = CliRunner().invoke(cli, ["run", str(scene.path.parent / "job.yaml")])
    assert r.exit_code == 0, r.output
    api = sam3tiles.segment(str(scene.path), point_file=scene.path.parent / "points.gpkg", backend="reference",
                            checkpoint=False)
    from_job = gpd.read_file(tmp_path / "job.gpkg")
    assert list(from_job["name"]) == list(api["name"]) and list(from_job["found"]) == list(api["found"])


# -- the four-graph contract graphs end to end --------------------------------------------------------------

def _contract_scene(tmp_path):
    """1500 x 1200 px (2 x 2 tiles, core seams at 880): each object a colour of its own; one across the
    vertical seam, one band longer than a tile, one small; the background grey."""
    img = np.full((3, 1200, 1500), 90, np.uint8)
    objects = {"seam": ((800, 200, 960, 330), (255, 0, 0)), "band": ((100, 700, 1400, 820), (0, 0, 255)),
               "small": ((200, 300, 260, 350), (0, 255, 0))}
    for (x0, y0, x1, y1), c in objects.values():
        img[:, y0:y1, x0:x1] = np.asarray(c, np.uint8)[:, None, None]
    src = write_raster(tmp_path / "in.tif", img)
    t = rasterio_transform(src)
    boxes = {k: shapely.box(*(t @ v[0][:2]), *(t @ v[0][2:])) for k, v in objects.items()}
    return src, t, {k: shapely.box(*b.bounds) for k, b in boxes.items()}


def test_the_four_graph_layout_runs_points_through_the_cli(four, tmp_path):
    src, t, truth = _contract_scene(tmp_path)
    clicks = [f"{g.centroid.x},{g.centroid.y}" for g in truth.values()] + [",".join(map(str, t @ (1300, 300)))]
    out = tmp_path / "o.gpkg"
    args = ["segment", str(src), "--backend", "onnx", "--model", str(four), "--device", "cpu", "-o", str(out)]
    r = CliRunner().invoke(cli, [*args, *(a for c in clicks for a in ("--point", c))])
    assert r.exit_code == 0, r.output
    got = gpd.read_file(out)
    assert list(got["found"]) == [True, True, True, False] and got["status"].iloc[3] == "background"
    for (name, g), geom, score in zip(truth.items(), got.geometry, got["score"]):
        assert _iou(geom, g) > (0.9 if name == "small" else 0.95), name  # 60 x 50 px: 3.5 px mask cells
        assert score == pytest.approx(SECOND_PASS_IOU)  # the second pass answered
    assert got["n_tiles"].iloc[1] > 1  # the band, followed across its tiles
    assert "point_decoder" in r.output  # the providers each graph ran on, the point decoder's too


def test_a_point_decoder_the_run_cannot_drive_is_exit_4_naming_its_inputs(differs, tmp_path):
    src, _, truth = _contract_scene(tmp_path)
    g = truth["small"].centroid
    r = CliRunner().invoke(cli, ["segment", str(src), "--point", f"{g.x},{g.y}", "--backend", "onnx", "--model",
                                 str(differs), "--device", "cpu", "-o", str(tmp_path / "o.gpkg")])
    assert r.exit_code == 4 and "orig_im_size int64 [2]" in r.output and "Traceback" not in r.output


def test_a_point_is_at_home_in_the_tile_whose_core_holds_it():
    from sam3tiles.tiling.grid import TileGrid

    grid = TileGrid(3000, 2600)
    rng = np.random.default_rng(0)
    for x, y in rng.uniform(0, [3000, 2600], (200, 2)):
        t = grid.tile_at(x, y)
        x0, y0, x1, y1 = t.core_xyxy
        assert x0 <= x < x1 and y0 <= y < y1
    assert grid.tile_at(880, 10).col == 1 and grid.tile_at(879.9, 10).col == 0  # a core edge: the next tile's
    assert grid.tile_at(-5, 99999).index == grid.tile(grid.shape[0] - 1, 0).index  # past the edge: the nearest
    assert [t.index for t in grid.tiles_over(800, 10, 900, 20)] == [0, 1]


def test_points_are_a_run_of_their_own_and_a_dry_run_says_what_they_cost(scene, tmp_path):
    from sam3tiles.errors import UsageError
    from sam3tiles.run.planning.plan import plan_run
    from sam3tiles.run.planning.targets import Targets

    p = scene.points.geometry.iloc[0]
    with pytest.raises(UsageError, match=r"points \(points, point_file\) are prompts of their own, not beside prompts"):
        sam3tiles.segment(str(scene.path), "red", points=(p.x, p.y), backend="reference", checkpoint=False)
    with pytest.raises(UsageError, match=r"points: give points as 'X,Y\[,neg\]' text"):
        sam3tiles.segment(str(scene.path), points=3.5, backend="reference", checkpoint=False)
    plan = plan_run(str(scene.path), point_file=scene.path.parent / "points.gpkg",
                    options=sam3tiles.Options(backend="reference"), targets=Targets(checkpoint=False))
    text = "\n".join(plan.describe())
    n = len(scene.points)
    assert (f"points: {n} positive (one object each, one row each), 0 negative; "
            "columns carried: name, kind, height") in text
    assert f"({n} clicks x 2 point decoder passes)" in text and plan.estimates()["encodes"] <= 9
    assert sam3tiles.GeoPoint(1.0, 2.0, False) == sam3tiles.GeoPoint.parse("1,2,neg")


class _FailsLeft(ReferenceRuntime):
    """The reference backend whose clicks fail left of x = 300 in a tile (a tile that keeps failing)."""

    def decode_clicks(self, embedding, clicks):
        if clicks[0].xy[0] < 300:
            raise RuntimeError("the GPU fell over")
        return super().decode_clicks(embedding, clicks)


def _two_squares(tmp_path, name="in.tif", x_off=0.0):
    img = np.full((3, 1400, 1400), 90, np.uint8)
    img[:, 100:200, 100:200] = np.asarray([230, 20, 25], np.uint8)[:, None, None]  # home tile 0
    img[:, 1100:1200, 1100:1200] = np.asarray([18, 22, 232], np.uint8)[:, None, None]  # home tile 3
    src = write_raster(tmp_path / name, img, transform=__import__("affine").Affine(0.5, 0, 400000 + x_off, 0, -0.5,
                                                                                   5000000))
    t = rasterio_transform(src)
    return src, [t @ (150, 150), t @ (1150, 1150)]


def test_a_point_whose_tile_failed_is_a_failed_row_and_counts(tmp_path):
    src, pts = _two_squares(tmp_path)
    gdf = sam3tiles.segment(str(src), points=pts, backend=_FailsLeft(), retries=0, checkpoint=False)
    assert list(gdf["status"]) == ["failed", "found"] and list(gdf["found"]) == [False, True]
    report = gdf.attrs["sam3tiles_report"]
    assert report["failed"] == 1 and report["points"]["failed"] == 1 and report["objects"] == 1
    from sam3tiles.errors import TilesFailedError

    with pytest.raises(TilesFailedError, match="tile 0 .* failed"):
        sam3tiles.segment(str(src), points=pts, backend=_FailsLeft(), retries=0, strict=True, checkpoint=False)


def test_an_object_larger_than_the_tiles_allowed_is_partial(scene, monkeypatch):
    from sam3tiles.run.executing import points as run_points

    monkeypatch.setattr(run_points, "MAX_TILES", 1)
    large = scene.points[scene.points["kind"] == "large"].geometry.iloc[0]
    gdf = sam3tiles.segment(str(scene.path), points=(large.x, large.y), backend="reference", checkpoint=False)
    assert list(gdf["status"]) == ["partial"] and gdf["found"].all() and gdf["n_tiles"].iloc[0] == 1


def test_points_over_several_inputs_run_in_the_first_that_holds_them(tmp_path, caplog):
    a, pa = _two_squares(tmp_path, "a.tif")
    b, pb = _two_squares(tmp_path, "b.tif", x_off=700.0)  # 1400 px to the east: adjoining a
    outside = (pb[1][0] + 5000, pb[1][1])
    layer = tmp_path / "pts.gpkg"
    gpd.GeoDataFrame({"tree": ["oak", "elm", "far"]}, geometry=gpd.points_from_xy(*zip(pa[1], pb[0], outside)),
                     crs=32633).to_file(layer)
    gdf = sam3tiles.segment([str(a), str(b)], point_file=layer, backend="reference", checkpoint=False)
    assert list(gdf["source"]) == [str(a), str(b)] and list(gdf["point_id"]) == [1, 2]  # outside: no row
    assert list(gdf["tree"]) == ["oak", "elm"]
    assert gdf["found"].all() and gdf.attrs["sam3tiles_report"]["points"]["outside"] == 1
    assert "1 positive point(s)" in caplog.text and "outside every input" in caplog.text
