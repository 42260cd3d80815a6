"""Point files as people have them: columns named as the output's own, odd column types, `label` words (also in
box files), and points over maps in different CRSs.

Real components: GeoTIFFs written by rasterio, point files written by geopandas (or as GeoJSON text where a
property holds a list or an object, which geopandas does not write), the command line through CliRunner,
outputs read back with geopandas/pyarrow."""

from __future__ import annotations

import json

import geopandas as gpd
import numpy as np
import pyarrow.parquet as pq
import pytest
from affine import Affine
from click.testing import CliRunner
from rasterio.crs import CRS

from sam3tiles.cli.main import cli
from sam3tiles.testing import write_raster

RED = (230, 20, 25)
T0 = Affine(0.5, 0, 400000, 0, -0.5, 5000000)  # write_raster's default frame (UTM 33N)
UTM33 = CRS.from_epsg(32633)


def _raster(path, transform=T0, crs=UTM33):
    """600 x 600 px of grey with a red 100 x 100 px square at pixels 100-200."""
    img = np.full((3, 600, 600), 90, np.uint8)
    img[:, 100:200, 100:200] = np.asarray(RED, np.uint8)[:, None, None]
    return write_raster(path, img, transform=transform, crs=crs)


def _segment(*args):
    r = CliRunner().invoke(cli, ["segment", *map(str, args), "--backend", "reference", "--workers", "1",
                                 "--no-preview"])
    return r.exit_code, r.output


def _geojson(path, features, epsg=32633):
    """A GeoJSON point file from (x, y, properties), its CRS named (GDAL reads the member)."""
    fc = {"type": "FeatureCollection", "crs": {"type": "name", "properties": {"name": f"urn:ogc:def:crs:EPSG::{epsg}"}},
          "features": [{"type": "Feature", "properties": props, "geometry": {"type": "Point", "coordinates": [x, y]}}
                       for x, y, props in features]}
    path.write_text(json.dumps(fc))
    return path


# -- a point file's columns named as the output's own, and odd column types ----------------------------------

#: Per feature (the square, the background): the point file's columns, each named as one of the output's own,
#: in another case, as the prefixed name, or holding a list, an object or a date.
USER = {
    "id": [7, 8], "area_m2": ["big", "small"], "point_id": [99, 98], "n_tiles": [-5, -6], "source": ["mine", "yours"],
    "prompt": ["tree", "bush"], "score": ["high", "low"], "found": ["maybe", "no"], "status": ["old", "new"],
    "model": ["x", "y"], "fid": ["a", "b"], "Backend": ["b1", "b2"], "user_prompt": [1, 2],
    "tags": [["oak", "old"], []], "meta": [{"a": [1, 2], "b": "c"}, None], "when": ["2024-05-01T10:00:00", None],
    "tree": ["oak", "elm"],
}
#: How each is carried: ours keep their names, the user's go under `user_` (until the name is free).
CARRIED = {"id": "user_id", "area_m2": "user_area_m2", "point_id": "user_point_id", "n_tiles": "user_n_tiles",
           "source": "user_source", "prompt": "user_user_prompt", "score": "user_score", "found": "user_found",
           "status": "user_status", "model": "user_model", "fid": "user_fid", "Backend": "user_Backend",
           "user_prompt": "user_prompt", "tags": "tags", "meta": "meta", "when": "when", "tree": "tree"}


def _read(out):
    if out.name.endswith(".parquet"):
        assert pq.read_table(out).num_rows == 2  # pyarrow reads it too
        return gpd.read_parquet(out)
    return gpd.read_file(out)


def _json_value(v):
    """A list or object as the output holds it: JSON text, or (GeoJSON, where GDAL writes such text as JSON)
    the JSON value itself."""
    if isinstance(v, str):
        return json.loads(v)
    if isinstance(v, np.ndarray):
        return list(v)
    return None if v is None or (np.isscalar(v) and gpd.pd.isna(v)) else v  # null: read back as None or NaN


@pytest.mark.parametrize("name", ["o.gpkg", "o.fgb", "o.geojson", "o.parquet", "o.coco.json"])
def test_point_file_columns_named_as_ours_are_carried_under_the_prefix(tmp_path, name, caplog):
    src = _raster(tmp_path / "in.tif")
    xy = [T0 @ (150, 150), T0 @ (450, 450)]  # the square, the background
    layer = _geojson(tmp_path / "pts.geojson", [(x, y, {k: v[i] for k, v in USER.items()})
                                                 for i, (x, y) in enumerate(xy)])
    out = tmp_path / name
    code, output = _segment(src, "--point-file", layer, "-o", out)
    assert code == 0, output
    assert "id as user_id, area_m2 as user_area_m2" in caplog.text  # the warning names each rename
    report = json.loads(out.with_name(name + ".report.json").read_text())
    assert report["points"]["renamed"]["id"] == "user_id"
    if name.endswith(".coco.json"):
        assert len(json.loads(out.read_text())["annotations"]) == 1  # objects only: no columns carried
        return
    got = _read(out)
    # ours: names and values of a point run
    assert list(got["id"]) == [1, 2] and list(got["point_id"]) == [1, 2] and list(got["prompt"]) == ["point"] * 2
    assert list(got["n_tiles"]) == [1, 0] and list(got["source"]) == [str(src)] * 2
    assert list(got["status"]) == ["found", "background"] and list(got["found"]) == [True, False]
    assert got["area_m2"].iloc[0] == pytest.approx(got["area_px"].iloc[0] * 0.25) and got["area_m2"].iloc[0] > 2000
    assert got["score"].iloc[0] == pytest.approx(1.0) and list(got["model"].str[:10]) == ["reference:"] * 2
    assert list(got["backend"]) == ["reference"] * 2
    # the user's: every column, under its carried name, values as given
    for column, carried in CARRIED.items():
        assert carried in got.columns, (column, list(got.columns))
        values = list(got[carried])
        if column in ("tags", "meta"):
            assert [_json_value(v) for v in values] == USER[column], (column, values)
        elif column == "when":
            assert str(values[0]).replace(" ", "T").startswith("2024-05-01T10:00") and gpd.pd.isna(values[1])
        else:
            assert values == USER[column], (column, values)
    if name.endswith((".gpkg", ".parquet", ".fgb")):  # JSON text, not Python's repr
        assert got["meta"].iloc[0] == '{"a": [1, 2], "b": "c"}' and got["tags"].iloc[0] == '["oak", "old"]'


def test_a_text_value_in_a_column_named_as_ours_is_carried_not_an_internal_error(tmp_path):
    """A point file written by geopandas: `area_m2` text, `id` beside a `user_id` of its own."""
    src = _raster(tmp_path / "in.tif")
    x, y = T0 @ (150, 150)
    layer = tmp_path / "pts.gpkg"
    gpd.GeoDataFrame({"area_m2": ["big"], "id": [7], "user_id": [5], "AREA_PX": [-1.0]},
                     geometry=gpd.points_from_xy([x], [y]), crs=32633).to_file(layer)
    out = tmp_path / "o.gpkg"
    code, output = _segment(src, "--point-file", layer, "-o", out)
    assert code == 0, output
    got = gpd.read_file(out)
    assert got["area_m2"].iloc[0] > 2000 and got["area_px"].iloc[0] > 8000 and got["id"].iloc[0] == 1
    assert got["user_area_m2"].iloc[0] == "big" and got["user_AREA_PX"].iloc[0] == -1.0
    assert got["user_id"].iloc[0] == 5 and got["user_user_id"].iloc[0] == 7  # its own user_id keeps its name


# -- label words ---------------------------------------------------------------------------------------------

#: A `label` column's values and whether each marks a positive.
LABELS = [
    (["1", "0"], [True, False]), (["yes", "no"], [True, False]), (["YES", " No "], [True, False]),
    (["pos", "neg"], [True, False]), (["positive", "Negative"], [True, False]), (["fg", "bg"], [True, False]),
    (["foreground", "background"], [True, False]), (["true", "FALSE"], [True, False]),
    (["1.0", "0.0"], [True, False]), ([1, 0], [True, False]), ([1.0, 0.0], [True, False]),
    ([True, False], [True, False]), (["+", "-"], [True, False]), (["yes", None], [True, True]),
]


def _plan(tmp_path, src, **kw):
    import sam3tiles
    from sam3tiles.run.planning.plan import plan_run
    from sam3tiles.run.planning.targets import Targets

    return plan_run(str(src), options=sam3tiles.Options(backend="reference"), targets=Targets(checkpoint=False), **kw)


@pytest.mark.parametrize("values,positive", LABELS, ids=[repr(v[0]) for v in LABELS])
def test_label_words_mark_points_and_boxes(tmp_path, values, positive):
    src = _raster(tmp_path / "in.tif")
    xy = [T0 @ (150, 150), T0 @ (450, 450)]
    pts = gpd.GeoDataFrame({"label": values}, geometry=gpd.points_from_xy(*zip(*xy)), crs=32633)
    pts.to_file(tmp_path / "pts.gpkg")
    plan = _plan(tmp_path, src, point_file=tmp_path / "pts.gpkg")
    assert [p.positive for p in plan.points.points] == positive
    boxes = gpd.GeoDataFrame({"label": values}, geometry=pts.buffer(10, cap_style="square"), crs=32633)
    boxes.to_file(tmp_path / "boxes.gpkg")
    plan = _plan(tmp_path, src, box_file=tmp_path / "boxes.gpkg")
    assert [b.positive for b in plan.boxes] == positive


@pytest.mark.parametrize("what", ["--point-file", "--box-file"])
@pytest.mark.parametrize("values", [["yes", "maybe", "2"], [2, 1, -1]])
def test_a_label_that_is_no_label_is_refused_naming_it(tmp_path, what, values):
    src = _raster(tmp_path / "in.tif")
    xy = [T0 @ (150 + 100 * i, 150) for i in range(3)]
    gdf = gpd.GeoDataFrame({"label": values}, geometry=gpd.points_from_xy(*zip(*xy)), crs=32633)
    if what == "--box-file":
        gdf = gdf.set_geometry(gdf.buffer(10, cap_style="square"))
    gdf.to_file(tmp_path / "f.gpkg")
    out = tmp_path / "o.gpkg"
    code, output = _segment(src, what, tmp_path / "f.gpkg", "-o", out)
    assert code == 3, output
    bad = [repr(v) for v in values if v not in ("yes", 1)]
    assert all(b in output for b in bad) and "'label' column" in output, output
    assert "yes/" in output and "no/" in output and "Traceback" not in output  # the accepted spellings
    assert not out.exists()


def test_the_command_line_takes_the_same_label_words(tmp_path):
    from sam3tiles import GeoPoint
    from sam3tiles.errors import UsageError
    from sam3tiles.prompts.prompt import GeoBox

    assert not GeoPoint.parse("1,2,bg").positive and GeoPoint.parse("1,2,YES").positive
    assert not GeoBox.parse("0,0,1,1,no").positive
    with pytest.raises(UsageError, match="the last value must be 'neg' or 'pos'.*yes/"):
        GeoPoint.parse("1,2,maybe")


# -- points over maps in different CRSs ----------------------------------------------------------------------

#: The second map's CRS and transform: UTM 34N, and lon/lat (about 0.5 m pixels).
SECOND = {"utm34": (CRS.from_epsg(32634), Affine(0.5, 0, 500000, 0, -0.5, 5000000)),
          "lonlat": (CRS.from_epsg(4326), Affine(5e-6, 0, 21.0, 0, -5e-6, 45.0))}


@pytest.mark.parametrize("second", sorted(SECOND))
def test_points_go_to_the_map_that_holds_them_in_its_own_crs(tmp_path, second):
    crs_b, t_b = SECOND[second]
    a = _raster(tmp_path / "a.tif")
    b = _raster(tmp_path / "b.tif", transform=t_b, crs=crs_b)
    on_a = gpd.GeoSeries(gpd.points_from_xy(*zip(T0 @ (150, 150), T0 @ (450, 150))), crs=32633)
    on_b = gpd.GeoSeries(gpd.points_from_xy(*zip(t_b @ (150, 150))), crs=crs_b.to_wkt())
    lonlat = list(on_a.to_crs(4326)) + list(on_b.to_crs(4326))
    gpd.GeoDataFrame({"name": ["a", "a-neg", "b"], "label": [1, 0, 1]}, geometry=lonlat,
                     crs=4326).to_file(tmp_path / "pts.gpkg")
    out = tmp_path / "out"
    out.mkdir()
    code, output = _segment(a, b, "--point-file", tmp_path / "pts.gpkg", "-o", f"{out}/")
    assert code == 0, output
    got_a, got_b = gpd.read_file(out / "a.gpkg"), gpd.read_file(out / "b.gpkg")
    assert list(got_a["name"]) == ["a"] and list(got_b["name"]) == ["b"]
    assert got_a["found"].all() and got_b["found"].all()
    pixel = abs(t_b.a)
    x0, y0 = t_b @ (100, 200)
    x1, y1 = t_b @ (200, 100)
    assert got_b.geometry.iloc[0].bounds == pytest.approx((x0, y0, x1, y1), abs=4 * pixel)  # the square, in b's CRS
    report = json.loads((tmp_path / "out.report.json").read_text())
    p = report["points"]
    assert (p["given"], p["positive"], p["negative"], p["found"], p.get("outside", 0)) == (3, 2, 1, 2, 0)
    assert "points: 3 given (2 positive, 1 negative); 2 found" in output


def test_a_command_line_point_reaches_a_map_in_another_crs(tmp_path):
    """--point is in the first input's CRS; a point over the second map (UTM 34N) is placed there."""
    crs_b, t_b = SECOND["utm34"]
    a = _raster(tmp_path / "a.tif")
    b = _raster(tmp_path / "b.tif", transform=t_b, crs=crs_b)
    p = gpd.GeoSeries(gpd.points_from_xy(*zip(t_b @ (150, 150))), crs=32634).to_crs(32633).iloc[0]
    out = tmp_path / "out"
    out.mkdir()
    code, output = _segment(a, b, "--point", f"{p.x},{p.y}", "-o", f"{out}/")
    assert code == 0, output
    got_b = gpd.read_file(out / "b.gpkg")
    assert list(got_b["found"]) == [True] and len(gpd.read_file(out / "a.gpkg")) == 0
