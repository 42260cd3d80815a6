"""Each input once: one file named twice (a path with './', a symlink, a hard link, a byte-identical copy, a
.txt list naming it by two paths, one URL spelt two ways) is segmented once and said once; a sidecar a glob
caught (.ovr, .aux.xml, a world file) is skipped beside its raster and refused alone; the kept-apart note
names each file's own pixel size; an output name given alone says the input is missing.

Real GeoTIFFs written by rasterio in tmp dirs (`testing.mosaic.split_raster` cuts one scene into files),
the command line in-process through click's runner, the reference backend, outputs read back with geopandas.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import geopandas as gpd
import numpy as np
import pytest
import rasterio
from click.testing import CliRunner
from rasterio.enums import Resampling
from rasterio.windows import Window

from sam3tiles.cli.main import cli
from sam3tiles.run.planning.once import url_key
from sam3tiles.testing.demo import write_scene
from sam3tiles.testing.mosaic import split_raster

FILES = ["r0_c0.tif", "r0_c1.tif", "r1_c0.tif", "r1_c1.tif"]


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    return write_scene(tmp_path_factory.mktemp("scene") / "scene.tif", 1300, 1100, seed=5)


@pytest.fixture
def pieces(scene, tmp_path, monkeypatch):
    """The scene cut into 2 x 2 files in tmp/a, tmp the working folder (relative paths as a user types them)."""
    split_raster(scene.path, tmp_path / "a", cols=2, rows=2, name="r{row}_c{col}.tif")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "o").mkdir()
    return tmp_path


def invoke(*argv) -> tuple[int, str]:
    r = CliRunner().invoke(cli, [str(a) for a in argv])
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    return r.exit_code, r.stdout + r.stderr


def segment(inputs, out, *extra) -> tuple[int, str]:
    return invoke("segment", *inputs, "--text", "blue", "--backend", "reference", "--workers", "1", "--no-preview",
                  "--out", out, *extra)


@pytest.fixture(scope="module")
def once(scene, tmp_path_factory) -> int:
    """The objects of the four files, each named once."""
    tmp = tmp_path_factory.mktemp("once")
    split_raster(scene.path, tmp / "a", cols=2, rows=2, name="r{row}_c{col}.tif")
    code, text = segment([tmp / "a" / f for f in FILES], tmp / "once.gpkg")
    assert code == 0, text
    return len(gpd.read_file(tmp / "once.gpkg"))


# -- one file named twice ---------------------------------------------------------------------------------

def _list(tmp: Path) -> list[str]:
    (tmp / "inputs.txt").write_text("a/r0_c0.tif\na/../a/r0_c0.tif\na/r0_c1.tif\na/r1_c0.tif\na/r1_c1.tif\n")
    return ["inputs.txt"]


def _symlink(tmp: Path) -> list[str]:
    os.symlink("r0_c0.tif", tmp / "a" / "z_link.tif")  # beside its target: a glob catches both
    return ["a/*.tif"]


def _hard_link(tmp: Path) -> list[str]:
    os.link(tmp / "a" / "r0_c0.tif", tmp / "b.tif")
    return [*(f"a/{f}" for f in FILES), "b.tif"]


def _copy(tmp: Path) -> list[str]:
    (tmp / "b").mkdir()
    shutil.copyfile(tmp / "a" / "r1_c1.tif", tmp / "b" / "copy.tif")  # another name, another time: same bytes
    return [*(f"a/{f}" for f in FILES), "b/copy.tif"]


@dataclass
class Twice:
    """`build(tmp) -> inputs` (the four files, one of them named twice); the note the run must give once."""

    build: Callable[[Path], list[str]]
    note: str


TWICE = {
    "a path with ./": Twice(lambda tmp: [*(f"a/{f}" for f in FILES), "a/./r0_c0.tif"],
                            r"inputs: a/r0_c0\.tif named twice \(a/\./r0_c0\.tif: the same file\), segmented once"),
    "a glob and the path": Twice(lambda tmp: ["a/*.tif", "a/r1_c0.tif"],
                                 r"inputs: a/r1_c0\.tif named twice, segmented once"),
    "a symlink beside its target": Twice(_symlink, r"inputs: a/r0_c0\.tif named twice \(a/z_link\.tif: the same "
                                                   r"file\), segmented once"),
    "a hard link": Twice(_hard_link, r"inputs: a/r0_c0\.tif named twice \(b\.tif: the same file\), segmented once"),
    "a byte-identical copy": Twice(_copy, r"inputs: a/r1_c1\.tif named twice \(b/copy\.tif: a byte-identical "
                                          r"copy\), segmented once"),
    "a list naming it by two paths": Twice(_list, r"inputs: \S*a/r0_c0\.tif named twice \(\S*a/\.\./a/r0_c0\.tif: "
                                                  r"the same file\), segmented once"),
}


@pytest.mark.parametrize("name", list(TWICE))
def test_a_file_named_twice_is_segmented_once(name, pieces, once):
    case = TWICE[name]
    code, text = segment(case.build(pieces), "o/out.gpkg")
    assert code == 0 and "Traceback" not in text, text
    assert len(gpd.read_file("o/out.gpkg")) == once
    assert len(re.findall(case.note, text)) == 1, text  # said once
    report = json.loads(Path("o/out.gpkg.report.json").read_text())
    assert len(report["inputs"]) == 4 and len(report["input_notes"]) == 1, report["input_notes"]
    assert "same ground" not in text  # never kept apart as a second map of the same ground


def test_a_file_named_twice_gets_one_output_in_a_folder(pieces, once):
    code, text = segment([*(f"a/{f}" for f in FILES), "a/./r1_c1.tif"], "o/")
    assert code == 0, text
    outs = sorted(p.name for p in Path("o").glob("*.gpkg"))
    assert outs == [f.replace(".tif", ".gpkg") for f in FILES]
    assert sum(len(gpd.read_file(Path("o") / n)) for n in outs) == once


def test_files_of_one_size_and_other_bytes_stay_two(tmp_path):
    """The copy rule compares content, not sizes: two files of one size with other pixels are two inputs."""
    from sam3tiles.run.planning.once import distinct_inputs

    for name, value in (("x.tif", 10), ("y.tif", 11)):
        with rasterio.open(tmp_path / name, "w", driver="GTiff", width=64, height=64, count=1, dtype="uint8") as d:
            d.write(np.full((1, 64, 64), value, np.uint8))
    paths = [str(tmp_path / "x.tif"), str(tmp_path / "y.tif")]
    assert os.path.getsize(paths[0]) == os.path.getsize(paths[1])
    got = distinct_inputs(paths)
    assert got.paths == paths and got.notes == []


URLS = {  # spellings of one URL (one input), and URLs that are others
    "same": [("https://Host.example/a/x.tif", "https://host.example/a/./x.tif"),
             ("https://host.example/x.tif", "https://host.example:443/x.tif"),
             ("https://host.example/x.tif", "/vsicurl/https://host.example/x.tif"),
             ("https://host.example/x.tif#frag", "https://host.example/b/../x.tif"),
             ("s3://bucket/k/x.tif", "/vsis3/bucket/k/x.tif")],
    "other": [("https://host.example/x.tif", "https://host.example/y.tif"),
              ("https://host.example/x.tif?v=1", "https://host.example/x.tif?v=2"),
              ("http://host.example:8080/x.tif", "http://host.example/x.tif")],
}


@pytest.mark.parametrize("kind,a,b", [(k, a, b) for k, pairs in URLS.items() for a, b in pairs])
def test_urls_are_one_input_when_they_name_one_file(kind, a, b):
    from sam3tiles.run.planning.once import distinct_inputs

    assert (url_key(a) == url_key(b)) is (kind == "same")
    assert len(distinct_inputs([a, b]).paths) == (1 if kind == "same" else 2)


# -- sidecars ---------------------------------------------------------------------------------------------

def _ovr(tmp: Path) -> str:
    with rasterio.Env(TIFF_USE_OVR=True), rasterio.open(tmp / "a" / "r0_c0.tif", "r+") as ds:
        ds.build_overviews([2, 4], Resampling.average)  # GDAL writes them beside it: r0_c0.tif.ovr
    return "a/r0_c0.tif.ovr"


def _aux(tmp: Path) -> str:
    (tmp / "a" / "r0_c1.tif.aux.xml").write_text("<PAMDataset><Metadata><MDI key='k'>v</MDI></Metadata></PAMDataset>")
    return "a/r0_c1.tif.aux.xml"


def _world(tmp: Path) -> str:
    (tmp / "a" / "r1_c0.tfw").write_text("0.3\n0\n0\n-0.3\n500000.15\n4099999.85\n")
    return "a/r1_c0.tfw"


SIDECARS = {"an external overview": (_ovr, "the external overview"),
            "auxiliary metadata": (_aux, "the auxiliary metadata"),
            "a world file": (_world, "the world file")}


@pytest.mark.parametrize("name", list(SIDECARS))
def test_a_sidecar_a_glob_caught_is_skipped_with_a_word(name, pieces, once):
    make, what = SIDECARS[name]
    side = make(pieces)
    code, text = segment(["a/*"], "o/")
    assert code == 0 and "Traceback" not in text, text
    assert sorted(p.name for p in Path("o").glob("*.gpkg")) == [f.replace(".tif", ".gpkg") for f in FILES]
    assert sum(len(gpd.read_file(p)) for p in Path("o").glob("*.gpkg")) == once
    assert len(re.findall(rf"inputs: {re.escape(side)} skipped: {what} of a/r\d_c\d\.tif", text)) == 1, text


@pytest.mark.parametrize("name", list(SIDECARS))
def test_a_sidecar_named_without_its_raster_is_refused(name, pieces):
    make, what = SIDECARS[name]
    side = make(pieces)
    code, text = segment([side], "o/out.gpkg")
    assert code == 3 and "Traceback" not in text, text
    assert re.search(rf"Error: {re.escape(side)} is {what} of a/r\d_c\d\.tif .*not a raster of its own: give "
                     r"a/r\d_c\d\.tif instead", text), text
    assert list(Path("o").iterdir()) == []


def test_a_planar_separate_tiff_reads_its_samples_in_place(pieces):
    """The IndexError's cause: an .ovr (samples stored plane by plane, axes SYX) opened by the slide reader
    was read as if its samples came last."""
    from sam3tiles.readers import open_source

    _ovr(pieces)
    with open_source("a/r0_c0.tif.ovr") as src, rasterio.open("a/r0_c0.tif") as ds:
        assert src.kind == "slide" and (src.width, src.height) == (ds.width // 2, ds.height // 2)
        rgb, valid = src.read_window(Window(0, 0, src.width, src.height), (130, 110))
        ref = ds.read(out_shape=(3, 110, 130), resampling=Resampling.average)
    assert rgb.shape == (3, 110, 130) and valid.all()
    assert np.abs(rgb.astype(float).mean(axis=(1, 2)) - ref.mean(axis=(1, 2))).max() < 2


# -- the kept-apart note ----------------------------------------------------------------------------------

@pytest.mark.parametrize("first,second", [("uint8", "uint16"), ("uint16", "uint8")])
def test_the_kept_apart_note_names_each_files_own_data_type(tmp_path, first, second):
    # (issue 47 case 9 named pixel sizes; since issue 52 another pixel size is warped onto the map's lattice,
    # so the note's values are shown on the data types that still keep files apart)
    for k, dtype in enumerate((first, second)):
        write_scene(tmp_path / f"{k}_{dtype}.tif", 600, 500, seed=2, dtype=dtype)
    code, text = invoke("plan", str(tmp_path / "*.tif"))
    assert code == 0, text
    note = next(ln for ln in text.splitlines() if "kept apart" in ln)
    assert note.endswith(f"1_{second}.tif touch but are not one map: other bands or data types "
                         f"(0_{first}.tif 3 band(s) {first}, 1_{second}.tif 3 band(s) {second})"), note


def test_one_extent_at_two_pixel_sizes_is_the_same_ground_twice(tmp_path):
    for k, (pixel, w, h) in enumerate(((0.3, 600, 500), (0.6, 300, 250))):
        write_scene(tmp_path / f"{k}.tif", w, h, seed=2, pixel=pixel)
    code, text = invoke("plan", str(tmp_path / "*.tif"))
    assert code == 0, text
    note = next(ln for ln in text.splitlines() if "kept apart" in ln)
    assert note.endswith("1.tif touch but are not one map: the same ground (100% of the smaller inside the other: "
                         "two dates?)"), note


# -- an output given alone --------------------------------------------------------------------------------

ALONE = {  # the one argument -> (exit code, what stderr must say)
    "out.gpkg": (2, r"Error: no input given: out\.gpkg names an output; name the raster\(s\) to segment before it "
                    r"\(segment IN\.tif out\.gpkg"),
    "out.parquet": (2, r"Error: no input given: out\.parquet names an output"),
    "scene.tif": (2, r"Error: no output given: add --out"),  # an input alone: the output is what is missing
}


@pytest.mark.parametrize("arg", list(ALONE))
def test_an_output_given_alone_says_the_input_is_missing(arg, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, text = invoke("segment", "--text", "blue", arg)
    expected, message = ALONE[arg]
    assert code == expected and "Traceback" not in text, text
    assert re.search(message, text), text
    assert list(tmp_path.iterdir()) == []
