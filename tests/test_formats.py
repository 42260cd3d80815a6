"""The output formats are one table (`sam3tiles.writers.formats`): a format added there is written by
`segment`, taken by the command line as its last argument, listed by the messages and help that name the
formats, and held to its pixel/CRS rule, with no other module edited. Checked by registering a throwaway
format at run time (GeoJSONSeq through GDAL; a Python writer), and by a scan that finds no list of format
endings outside the table."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import geopandas as gpd
import pyogrio
import pytest
import shapely
from click.testing import CliRunner

import sam3tiles
from sam3tiles.cli.main import cli
from sam3tiles.errors import UsageError
from sam3tiles.testing.demo import write_scene
from sam3tiles.writers import formats, write_vector
from sam3tiles.writers.formats import (COCO, FORMATS, GEOJSON, GPKG, MAP, PARQUET, QUPATH, Format, format_for,
                                       last_argument)

PACKAGE = Path(sam3tiles.__file__).parent

#: The throwaway format: newline-delimited GeoJSON (RFC 8142) through GDAL's GeoJSONSeq driver, which writes
#: WGS84 lon/lat (so pixel coordinates would be read as degrees: a MAP format). One table row, nothing else.
SEQ = Format("GeoJSON Lines", (".geojsonl",), "vector:write_ogr", driver="GeoJSONSeq", space=MAP,
             why="GeoJSON Lines is WGS84 lon/lat", help="newline-delimited GeoJSON (RFC 8142)")


@pytest.fixture
def seq():
    formats.register(SEQ)
    try:
        yield SEQ
    finally:
        formats.unregister(SEQ)


@pytest.fixture(scope="module")
def scenes(tmp_path_factory):
    d = tmp_path_factory.mktemp("formats")
    return write_scene(d / "utm.tif", 600, 500, seed=2), write_scene(d / "pixels.tif", 600, 500, seed=2, crs=None)


def _cli(*args) -> tuple[int, str]:
    r = CliRunner().invoke(cli, ["-q", *map(str, args)])
    return r.exit_code, r.output


def _seg(scene, *args) -> tuple:
    return ("segment", scene.path, "--text", "red", "--backend", "reference", "--no-preview", *args)


def test_a_registered_gdal_format_is_written_taken_last_and_listed(seq, scenes, tmp_path):
    utm, _ = scenes
    out = tmp_path / "objects.geojsonl"
    code, text = _cli(*_seg(utm, out))  # as the last argument, rio style
    assert code == 0, text
    back = gpd.read_file(out)
    report = json.loads((tmp_path / "objects.geojsonl.report.json").read_text())
    assert len(back) == report["objects"] > 0 and back.crs.to_epsg() == 4326  # GDAL wrote it: lon/lat
    assert pyogrio.read_info(out)["driver"] == "GeoJSONSeq"
    minx, miny, maxx, maxy = back.total_bounds
    assert 14 < minx < maxx < 16 and 36 < miny < maxy < 38 and set(back["prompt"]) == {"red"}
    assert last_argument("x.geojsonl", out_given=True) and format_for("X.GEOJSONL") is seq
    # the messages and help that list the formats name it
    code, text = _cli(*_seg(utm, "--out", tmp_path / "objects.xyz"))
    assert code == UsageError.exit_code and "unknown format .xyz" in text and ".geojsonl" in text
    assert ".geojsonl" in formats.help_text() and "RFC 8142" in formats.help_text()
    assert not list(tmp_path.glob("objects.xyz*"))


def test_a_registered_map_format_refuses_pixel_space_naming_what_fits(seq, scenes, tmp_path):
    _, pixels = scenes
    code, text = _cli(*_seg(pixels, "--out", tmp_path / "cells.geojsonl"))
    assert code == UsageError.exit_code, text
    assert "GeoJSON Lines is WGS84 lon/lat" in text and "cells.qupath.geojson" in text and "cells.gpkg" in text
    assert not list(tmp_path.iterdir())  # refused before any work


def test_a_registered_python_writer_gets_the_chunks_or_one_frame(tmp_path):
    seen = []

    def write_wkt(rows, tmp, target):
        rows = list(rows) if target.format.chunked else [rows]
        seen.append([len(r) for r in rows])
        tmp.write_text("".join(g.wkt + "\n" for r in rows for g in r.geometry))

    boxes = [gpd.GeoDataFrame(geometry=[shapely.box(i, 0, i + 1, 1)] * 2, crs=32633) for i in range(3)]
    for chunked in (True, False):
        fmt = formats.register(Format("WKT lines", (".wkt",), write_wkt, chunked=chunked, help="WKT, a line each"))
        try:
            write_vector(iter(boxes), tmp_path / f"{chunked}.wkt")
        finally:
            formats.unregister(fmt)
        assert len((tmp_path / f"{chunked}.wkt").read_text().splitlines()) == 6
    assert seen == [[2, 2, 2], [6]]  # chunked: as they came; else joined in memory first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["False.wkt", "True.wkt"]  # nothing else left


def test_format_for_takes_the_longest_ending():
    assert format_for("a/cells.qupath.geojson") is QUPATH and format_for("x.geojson") is GEOJSON
    assert format_for("x.coco.json") is COCO and format_for("x.json") is GEOJSON
    assert format_for("X.GPKG") is GPKG and format_for("objects.parquet/") is PARQUET
    assert format_for("x.geoparquet") is PARQUET and format_for(".gpkg") is None and format_for("x.tif") is None
    assert QUPATH.stem("a/cells.qupath.geojson") == "cells" and GPKG.stem("b.GPKG") == "b"


def test_the_cli_last_argument_rule():
    # an ending only outputs have: always; one a STAC input may have (.geojson): only without --out; .json never
    assert last_argument("o.gpkg", True) and last_argument("o.coco.json", True) and last_argument("o.parquet/", True)
    assert last_argument("o.geojson", False) and not last_argument("o.geojson", True)
    assert last_argument("o.qupath.geojson", False) and not last_argument("o.qupath.geojson", True)
    assert not last_argument("item.json", False) and not last_argument("scene.tif", False)
    assert last_argument("outs/", False) and not last_argument("outs/", True) and not last_argument("o.gpkg/", True)


def test_every_writer_loads_and_every_ending_is_one_formats():
    assert all(callable(f.write()) for f in FORMATS)
    ends = [s for f in FORMATS for s in f.suffixes]
    assert len(ends) == len(set(ends)) and all(s == s.lower() and s.startswith(".") for s in ends)
    with pytest.raises(ValueError, match="must be new"):
        formats.register(Format("again", (".gpkg",), "vector:write_ogr"))


def test_no_list_of_format_endings_outside_the_table():
    # a tuple, list, set or dict of two or more format endings is a format table of its own: it belongs in
    # writers/formats.py (docstrings and messages may name a format; they do not decide anything). The
    # readers are exempt: a STAC input ends in .json or .geojson too, which is no output format's rule.
    ends = {s for f in FORMATS for s in f.suffixes}
    found = []
    for p in sorted(PACKAGE.rglob("*.py")):
        if p == PACKAGE / "writers" / "formats.py" or p.parent == PACKAGE / "readers":
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set, ast.Dict)):
                items = node.keys if isinstance(node, ast.Dict) else node.elts
                strs = [n.value.lower().rstrip("/") for n in items if isinstance(n, ast.Constant) and
                        isinstance(n.value, str)]
                if sum(s in ends for s in strs) >= 2:
                    found.append(f"{p.relative_to(PACKAGE)}:{node.lineno}")
    assert not found, f"lists of output endings outside sam3tiles/writers/formats.py: {found}"
