"""Bad input, case by case, through the command line: each gets its documented outcome (docs/jobs.md).

Every case runs `sam3tiles segment ...` or `sam3tiles run JOB.yaml` in-process (click's runner; a few
cases also in a subprocess) and checks: the exit code; on failure a message on stderr that starts with
'Error:' and names the problem; never a traceback; never an output file, a temporary file, a lock or a
work folder left beside the output; on documented handling (16-bit stretch, NaN as nodata, ...) a
complete output with the expected objects.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import geopandas as gpd
import numpy as np
import pytest
import rasterio
from click.testing import CliRunner
from shapely.geometry import box

from sam3tiles.cli.main import cli
from sam3tiles.demo import CRS_DEMO, ORIGIN, PIXEL, write_scene

BLUE = (18, 22, 232)
BG = (92, 112, 84)


# -- raster makers --------------------------------------------------------------------------------------

def _profile(count, h, w, dtype, crs=CRS_DEMO, **kw):
    prof = dict(driver="GTiff", width=w, height=h, count=count, dtype=dtype, tiled=True, blockxsize=256,
                blockysize=256, compress="deflate")
    if crs is not None:
        prof.update(crs=crs, transform=rasterio.Affine(PIXEL, 0, ORIGIN[0], 0, -PIXEL, ORIGIN[1]))
    prof.update(kw)
    return prof


def square_image(bands=3, h=400, w=500, value=BLUE, extra=None):
    """Background with one 60x80 px square at (100, 120)-(180, 180) in `value` (first 3 bands)."""
    data = np.zeros((bands, h, w), np.uint8)
    for b in range(bands):
        data[b] = BG[b % 3] if b < 3 else 40
        data[b, 120:180, 100:180] = value[b % 3] if b < 3 else 40
    if extra is not None:
        extra(data)
    return data


def write(path, data, crs=CRS_DEMO, **kw):
    c, h, w = data.shape
    with rasterio.open(path, "w", **_profile(c, h, w, data.dtype, crs=crs, **kw)) as dst:
        dst.write(data)
    return path


def square_geo_box(margin=-5):
    """The square's extent in the demo CRS, shrunk by -margin px (a tight example box)."""
    x0, y0, x1, y1 = 100 - margin, 120 - margin, 180 + margin, 180 + margin
    return (ORIGIN[0] + x0 * PIXEL, ORIGIN[1] - y1 * PIXEL, ORIGIN[0] + x1 * PIXEL, ORIGIN[1] - y0 * PIXEL)


# -- cases ----------------------------------------------------------------------------------------------

@dataclass
class Case:
    """`build(tmp) -> argv` (after 'sam3tiles'); expected exit code; regex the stderr must match."""

    build: Callable[[Path], list]
    code: int
    message: str
    objects: int | None = None  # for exit 0/5: objects the output must hold (None: any)
    keeps: tuple[str, ...] = ()  # files in the output folder that exist before and must survive unchanged
    check: Callable[[Path], None] | None = None
    subprocess: bool = False
    writes: bool | None = None  # whether an output is written (default: exit 0 or 5)


def seg(src, *extra, text=("blue",), out="out.gpkg"):
    def argv(tmp: Path):
        args = ["segment", str(src(tmp) if callable(src) else src)]
        for t in text:
            args += ["--text", t]
        return args + ["--backend", "reference", "--workers", "1", "--out", str(tmp / "o" / out), *extra]
    return argv


def f(maker):
    """A source path built in tmp by `maker(tmp) -> path`."""
    return maker


def _zero(tmp):
    p = tmp / "zero.tif"
    p.write_bytes(b"")
    return p


def _text(tmp):
    p = tmp / "notes.tif"
    p.write_text("this is not an image\n")
    return p


def _scene(tmp, name="scene.tif", **kw):
    p = tmp / name
    if not p.exists():
        write_scene(p, kw.pop("w", 1300), kw.pop("h", 1100), kw.pop("seed", 5), **kw)
    return p


def _truncated(tmp):
    p = _scene(tmp, "full.tif")
    q = tmp / "truncated.tif"
    q.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
    return q


def _absurd(tmp):
    import tifffile

    p = write(tmp / "small.tif", square_image(h=64, w=64), tiled=False, compress=None)
    with tifffile.TiffFile(p) as tf:
        tags = tf.pages[0].tags
        offs = [(tags[n].valueoffset, tags[n].dtype) for n in ("ImageWidth", "ImageLength")]
    with open(p, "r+b") as fh:
        for off, dt in offs:
            fh.seek(off)
            fh.write(struct.pack("<H", 65000) if dt == 3 else struct.pack("<I", 3_000_000_000))
    return p


def _corrupt_block(tmp):
    import tifffile

    p = _scene(tmp, "blocky.tif", w=2200, h=1000)
    with tifffile.TiffFile(p) as tf:
        page = tf.pages[0]
        off, cnt = page.dataoffsets[5], page.databytecounts[5]  # block row 0, col 5: x 1280-1536 (tiles 1, 2)
    with open(p, "r+b") as fh:
        fh.seek(off + 2)
        fh.write(b"\xff" * (cnt - 4))
    return p


def _nodata_all(tmp):
    return write(tmp / "nodata.tif", np.zeros((3, 300, 400), np.uint8), nodata=0)


def _bands(n, alpha=False):
    def make(tmp):
        data = square_image(bands=n)
        # GDAL makes a 4-band uint8 GeoTIFF RGBA unless told otherwise: MINISBLACK for R,G,B,NIR
        kw = {"photometric": "RGB", "alpha": "YES"} if alpha else {"photometric": "MINISBLACK"}
        p = write(tmp / f"b{n}{'a' if alpha else ''}.tif", data, **kw)
        if alpha:
            with rasterio.open(p, "r+") as ds:
                ds.colorinterp = [rasterio.enums.ColorInterp.red, rasterio.enums.ColorInterp.green,
                                  rasterio.enums.ColorInterp.blue, rasterio.enums.ColorInterp.alpha]
        return p
    return make


def _thirteen(tmp):
    # a Sentinel-2-like stack: the square in bands 4,3,2 (R,G,B)
    data = np.full((13, 400, 500), 30, np.uint8)
    for band, v in ((4, BLUE[0]), (3, BLUE[1]), (2, BLUE[2])):
        data[band - 1] = BG[{4: 0, 3: 1, 2: 2}[band]]
        data[band - 1, 120:180, 100:180] = v
    return write(tmp / "s2.tif", data)


def _grey(tmp):
    data = np.full((1, 400, 500), 60, np.uint8)
    data[0, 120:180, 100:180] = 250
    return write(tmp / "grey.tif", data)


def _dtype(dtype):
    def make(tmp):
        p = tmp / f"{dtype}.tif"
        write_scene(p, 1200, 1000, 9, dtype=dtype)  # int16 and float32 scenes hold negative values
        if dtype == "float32":
            with rasterio.open(p, "r+") as ds:
                data = ds.read(window=rasterio.windows.Window(0, 0, 300, 200))
                data[:] = np.nan
                ds.write(data, window=rasterio.windows.Window(0, 0, 300, 200))
        return p
    return make


def _plain(tmp):
    return write(tmp / "plain.tif", square_image(), crs=None)


def _square(tmp):
    return write(tmp / "square.tif", square_image())


def _one_pixel(tmp):
    return write(tmp / "one.tif", np.full((3, 1, 1), 200, np.uint8), tiled=False)


def _box_file(crs, name, outside=False):
    def make(tmp):
        x0, y0, x1, y1 = square_geo_box()
        if outside:
            x0, x1 = x0 + 50_000, x1 + 50_000
        gdf = gpd.GeoDataFrame({"label": [1]}, geometry=[box(x0, y0, x1, y1)], crs=CRS_DEMO.to_wkt())
        if crs is not None:
            gdf = gdf.to_crs(crs)
        else:
            gdf = gdf.set_crs(None, allow_override=True)
        p = tmp / name
        gdf.to_file(p)
        return p
    return make


def seg_box_file(maker):
    def argv(tmp):
        return ["segment", str(_square(tmp)), "--box-file", str(maker(tmp)), "--backend", "reference",
                "--workers", "1", "--out", str(tmp / "o" / "out.gpkg")]
    return argv


def _job(text_or_dict, name="job.yaml"):
    def argv(tmp):
        _square(tmp)
        body = text_or_dict if isinstance(text_or_dict, str) else json.dumps(text_or_dict)
        p = tmp / name
        p.write_text(body)
        return ["run", str(p)]
    return argv


GOOD_JOB = {"inputs": ["square.tif"], "prompts": {"text": ["blue"]}, "backend": {"name": "reference"},
            "output": {"path": "o/out.gpkg"}}


def _with(**sections):
    job = json.loads(json.dumps(GOOD_JOB))
    for k, v in sections.items():
        if isinstance(v, dict) and isinstance(job.get(k), dict):
            job[k].update(v)
        else:
            job[k] = v
    return job


def _model_dir(kind):
    def make(tmp):
        d = tmp / f"model-{kind}"
        if kind == "missing":
            return d
        d.mkdir()
        if kind == "corrupt":
            from sam3tiles.model.files import REQUIRED_GRAPH_FILES, VOCAB_NAME

            for name in REQUIRED_GRAPH_FILES:
                (d / name).write_bytes(b"\x08\x07garbage" * 64)
            (d / VOCAB_NAME).write_bytes(gzip.compress(b"not the CLIP vocabulary"))
        return d
    return make


def seg_model(kind):
    def argv(tmp):
        return ["segment", str(_square(tmp)), "--text", "building", "--backend", "onnx", "--model",
                str(_model_dir(kind)(tmp)), "--out", str(tmp / "o" / "out.gpkg")]
    return argv


def _unwritable(tmp):
    if os.geteuid() == 0:
        return Path("/sys")  # root writes anywhere else; sysfs refuses new files even to root
    d = tmp / "ro"
    d.mkdir()
    d.chmod(0o555)
    return d


def _lock_live(tmp):
    (tmp / "o").mkdir(exist_ok=True)
    (tmp / "o" / "out.gpkg.lock").write_text(json.dumps({"pid": os.getpid(), "host": os.uname().nodename}))
    return _square(tmp)


def _store_corrupt(tmp):
    w = tmp / "o" / "out.gpkg.sam3tiles-work"
    w.mkdir(parents=True)
    (w / "tiles.sqlite").write_bytes(b"this is not an SQLite database" * 100)
    return _square(tmp)


def _existing(tmp):
    (tmp / "o").mkdir(exist_ok=True)
    (tmp / "o" / "out.gpkg").write_text("precious")
    return _square(tmp)


def _check_report(**expect):
    def check(tmp):
        rep = json.loads((tmp / "o" / "out.gpkg.report.json").read_text())
        for k, v in expect.items():
            got = rep[k] if not callable(v) else v(rep)
            assert got == (v if not callable(v) else True), (k, got)
    return check


def _no_crs(tmp):
    assert gpd.read_file(tmp / "o" / "out.gpkg").crs is None


CASES: dict[str, Case] = {
    # -- files that are not (whole) rasters: exit 3
    "zero-byte-file": Case(seg(_zero), 3, r"zero\.tif is empty \(0 bytes\)", subprocess=True),
    "text-file-named-tif": Case(seg(_text), 3, r"notes\.tif is not a raster GDAL can read"),
    "truncated-tiff": Case(seg(_truncated), 3, r"truncated\.tif is truncated: .*copy it again"),
    "absurd-header-dimensions": Case(seg(_absurd), 3, r"small\.tif: .*(header|truncated).*corrupt"),
    "folder-as-input": Case(seg(lambda t: t), 3, r"is a directory, not a raster"),
    "missing-input": Case(seg(lambda t: t / "nope.tif"), 3, r"nope\.tif: no such file"),
    "glob-matches-nothing": Case(seg(lambda t: t / "*.jp2"), 2, r"matches no file"),
    # a damaged block: its tiles fail (retried, then listed); the rest is written; exit 5
    "corrupt-block": Case(seg(_corrupt_block), 5, r"2 failed", check=_check_report(failed=2, done=1)),
    "corrupt-block-strict": Case(seg(_corrupt_block, "--strict"), 5, r"failed after 2 retries: .*--strict stops",
                                 writes=False),
    # -- georeferencing, bands, data types: documented handling
    "missing-crs": Case(seg(_plain), 0, r"wrote 1 objects", objects=1, check=_no_crs),
    "1-band": Case(seg(_grey, text=("white",)), 0, r"wrote 1 objects", objects=1),
    "2-bands": Case(seg(_bands(2)), 3, r"has 2 bands: choose 3 as R,G,B or 1 as grey with --bands"),
    "4-bands-no-alpha": Case(seg(_bands(4)), 3, r"has 4 bands: choose 3 as R,G,B .*--bands"),
    "4-bands-rgba": Case(seg(_bands(4, alpha=True)), 0, r"wrote 1 objects", objects=1),
    "13-bands": Case(seg(_thirteen), 3, r"has 13 bands: choose 3 as R,G,B or 1 as grey with --bands"),
    "13-bands-with-bands-4-3-2": Case(seg(_thirteen, "--bands", "4,3,2"), 0, r"wrote 1 objects", objects=1),
    "band-out-of-range": Case(seg(_square, "--bands", "3,2,9"), 3, r"band 9 does not exist"),
    "uint16-stretched": Case(seg(_dtype("uint16")), 0, r"wrote \d+ objects",
                             check=_check_report(objects=lambda r: r["objects"] >= 10)),
    "int16-negative-stretched": Case(seg(_dtype("int16")), 0, r"wrote \d+ objects",
                                     check=_check_report(objects=lambda r: r["objects"] >= 10)),
    "float32-negative-and-nan": Case(seg(_dtype("float32")), 0, r"wrote \d+ objects",
                                     check=_check_report(objects=lambda r: r["objects"] >= 10)),
    "all-nodata": Case(seg(_nodata_all), 0, r"1 skipped \(nodata\)", objects=0,
                       check=_check_report(skipped=1, done=0, objects=0)),
    "smaller-than-a-tile": Case(seg(_square), 0, r"tiles: 1 total", objects=1),
    "1x1-image": Case(seg(_one_pixel, text=("white",)), 0, r"tiles: 1 total", objects=0),
    # -- prompts: exit 2
    "empty-prompt": Case(seg(_square, text=("",)), 2, r"--text prompt is empty"),
    "blank-prompt": Case(seg(_square, text=("   ",)), 2, r"--text prompt is empty"),
    "overlong-prompt": Case(seg(_square, text=("very " * 80 + "blue",)), 2, r"characters long: .*shorten it"),
    "unknown-colour": Case(seg(_square, text=("bleu",)), 2, r"'bleu' is not one"),
    "no-prompt": Case(seg(_square, text=()), 2, r"nothing to find"),
    "box-outside-the-raster": Case(seg(_square, "--box", "100,100,200,200", text=()), 2,
                                   r"--box 100,100,200,200 lies outside every input .*EPSG:32633"),
    "box-malformed": Case(seg(_square, "--box", "1,2,3", text=()), 2, r"MINX,MINY,MAXX,MAXY"),
    # -- box files
    "box-file-in-another-crs": Case(seg_box_file(_box_file("EPSG:4326", "boxes-4326.gpkg")), 0,
                                    r"wrote 1 objects", objects=1),
    "box-file-without-crs": Case(seg_box_file(_box_file(None, "boxes-nocrs.gpkg")), 3,
                                 r"has no CRS but the raster has one"),
    "box-file-geojson-with-utm-coordinates": Case(seg_box_file(_box_file(None, "boxes-utm.geojson")), 3,
                                                  r"is longitude/latitude but its coordinates .* are not"),
    "box-file-outside": Case(seg_box_file(_box_file(CRS_DEMO.to_wkt(), "far.gpkg", outside=True)), 3,
                             r"lie outside every input"),
    "box-file-missing": Case(seg_box_file(lambda t: t / "none.gpkg"), 3, r"none\.gpkg: no such file"),
    "box-file-not-vector": Case(seg_box_file(_text), 3, r"is not a vector file GDAL can read"),
    # -- outputs: exit 2
    "unwritable-output-folder": Case(lambda t: ["segment", str(_square(t)), "-t", "blue", "--backend",
                                                "reference", "--out", str(_unwritable(t) / "out.gpkg")], 2,
                                     r"is not writable"),
    "missing-output-folder": Case(seg(_square, out="missing/out.gpkg"), 2, r"does not exist: create it first"),
    "unknown-output-format": Case(seg(_square, out="out.xyz"), 2, r"unknown format \.xyz"),
    "existing-output": Case(seg(_existing), 2, r"exists: pass --overwrite", keeps=("out.gpkg",)),
    "output-locked-by-a-live-run": Case(seg(_lock_live), 2, r"is being written by another run",
                                        keeps=("out.gpkg.lock",)),
    "corrupt-checkpoint-store": Case(seg(_store_corrupt), 2, r"checkpoint store .* --fresh",
                                     keeps=("out.gpkg.sam3tiles-work",)),
    # -- job files: exit 2
    "invalid-yaml": Case(_job("inputs: [square.tif\nprompts: {text: blue}\n"), 2,
                         r"job\.yaml line \d+, column \d+: not valid YAML", subprocess=True),
    "unknown-yaml-keys": Case(_job(_with(tiling={"tile_sise": 1008}, colour="red")), 2,
                              r"tiling\.tile_sise: unknown key: did you mean 'tile_size'\?[\s\S]*colour: unknown key"),
    "yaml-wrong-types": Case(_job(_with(tiling={"scale": -1, "overlap": "wide"})), 2,
                             r"tiling\.overlap: must be a whole number \(got 'wide'\)[\s\S]*tiling\.scale: must be > 0"),
    "yaml-missing-input-file": Case(_job(_with(inputs=["gone.tif", "square.tif"])), 2,
                                    r"inputs\[0\]: no such file: .*gone\.tif"),
    "yaml-not-a-mapping": Case(_job("- just\n- a list\n"), 2, r"the job must be a mapping"),
    "yaml-empty": Case(_job(""), 2, r"job\.yaml is empty"),
    # -- model files: exit 4
    "missing-model-folder": Case(seg_model("missing"), 4, r"does not exist[\s\S]*sam3tiles model fetch"),
    "empty-model-folder": Case(seg_model("empty"), 4, r"lacks sam3_image_encoder\.onnx[\s\S]*sam3tiles model fetch"),
    "corrupt-model-folder": Case(seg_model("corrupt"), 4, r"sam3tiles model (fetch|verify)", subprocess=True),
}


def _invoke(argv: list[str], in_subprocess: bool, cwd: Path):
    if in_subprocess:
        p = subprocess.run([sys.executable, "-m", "sam3tiles.cli", *argv], capture_output=True, text=True,
                           cwd=cwd, timeout=120)
        return p.returncode, p.stdout, p.stderr
    r = CliRunner().invoke(cli, argv)
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    return r.exit_code, r.stdout, r.stderr


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input(name, tmp_path):
    case = CASES[name]
    argv = case.build(tmp_path)
    out_dir = tmp_path / "o"
    out_dir.mkdir(exist_ok=True)
    before = {p.name: (p.read_bytes() if p.is_file() else None) for p in out_dir.iterdir()}
    code, stdout, stderr = _invoke(argv, case.subprocess, tmp_path)
    text = stdout + stderr
    assert "Traceback" not in text, text
    assert code == case.code, f"exit {code}, expected {case.code}:\n{text}"
    assert re.search(case.message, stderr), f"no /{case.message}/ in:\n{stderr}"
    if code not in (0, 5):
        assert stderr.startswith("Error: "), stderr
        assert len(stderr.strip().splitlines()) <= 12, stderr
    left = {p.name for p in out_dir.iterdir()}
    for name_kept in case.keeps:  # what was there before is untouched
        assert name_kept in left and (before[name_kept] is None or
                                      (out_dir / name_kept).read_bytes() == before[name_kept])
    temps = [n for n in left if ".tmp" in n or n.endswith(".lock") and n not in case.keeps]
    assert not temps, temps
    outputs = [n for n in left - set(case.keeps) if not n.endswith(".sam3tiles-work")
               and not n.endswith(".report.json") and not n.endswith(".preview.png")]
    if case.writes if case.writes is not None else code in (0, 5):
        assert len(outputs) == 1, left
        out = out_dir / outputs[0]
        if case.objects is not None:
            assert len(gpd.read_file(out)) == case.objects
        assert (out_dir / (out.name + ".report.json")).exists()
        assert (out_dir / (out.name + ".preview.png")).exists()
    else:
        assert outputs == [], f"a failed run left {outputs}"
        if name != "corrupt-block-strict":  # --strict keeps the tiles that finished, for the rerun
            assert not [n for n in left - set(case.keeps) if n.endswith(".sam3tiles-work")], left
    if case.check is not None:
        case.check(tmp_path)


def test_there_are_at_least_25_cases():
    assert len(CASES) >= 25


def test_documented_exit_codes_match_the_errors():
    from sam3tiles import errors

    assert (errors.EXIT_OK, errors.EXIT_INTERNAL, errors.EXIT_USAGE, errors.EXIT_INPUT, errors.EXIT_MODEL,
            errors.EXIT_FAILED_TILES) == (0, 1, 2, 3, 4, 5)
    doc = (Path(__file__).resolve().parents[1] / "docs" / "jobs.md").read_text()
    for code, words in ((0, "done"), (1, "internal error"), (2, "usage or job-file error"), (3, "input data error"),
                        (4, "model error"), (5, "finished with failed tiles")):
        assert re.search(rf"\|\s*{code}\s*\|\s*{words}", doc, re.I), (code, words)


def test_worker_errors_keep_their_type_through_dask():
    """An error raised in a Dask task inside `except <GDAL error>` must come back as itself (exit code)."""
    import distributed.protocol.pickle as dp
    import tblib.pickling_support
    from distributed.core import collect_causes

    from sam3tiles.errors import ModelNotFoundError, RasterReadError, shippable

    class Unpicklable(Exception):
        @property
        def args(self):  # like rasterio's CPLE errors: tblib cannot set it back
            return ("x",)

    @shippable
    def task(kind):
        try:
            raise Unpicklable()
        except Unpicklable:
            raise kind("f.tif: cannot read: the file is damaged") from None

    for kind in (RasterReadError, ModelNotFoundError):
        with pytest.raises(kind) as info:
            task(kind)
        e = info.value
        tblib.pickling_support.install(e, *collect_causes(e))
        back = dp.loads(dp.dumps(e))
        assert type(back) is kind and back.exit_code == kind.exit_code
