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
import warnings
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
from sam3tiles.testing.demo import CRS_DEMO, ORIGIN, PIXEL, write_scene

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
    may_create: tuple[str, ...] = ()  # paths (relative to tmp) outside the output folder a run may write
    also_writes: tuple[str, ...] = ()  # files in the output folder besides the output and its report


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
        with warnings.catch_warnings():  # pyogrio warns of a file without a CRS: the point of those cases
            warnings.filterwarnings("ignore", "'crs' was not provided", UserWarning)
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
    "missing-crs": Case(seg(_plain), 0, r"wrote 1 object to ", objects=1, check=_no_crs),
    "1-band": Case(seg(_grey, text=("white",)), 0, r"wrote 1 object to ", objects=1),
    "2-bands": Case(seg(_bands(2)), 3, r"has 2 bands: choose 3 as R,G,B or 1 as grey with --bands"),
    "4-bands-no-alpha": Case(seg(_bands(4)), 3, r"has 4 bands: choose 3 as R,G,B .*--bands"),
    "4-bands-rgba": Case(seg(_bands(4, alpha=True)), 0, r"wrote 1 object to ", objects=1),
    "13-bands": Case(seg(_thirteen), 3, r"has 13 bands: choose 3 as R,G,B or 1 as grey with --bands"),
    "13-bands-with-bands-4-3-2": Case(seg(_thirteen, "--bands", "4,3,2"), 0, r"wrote 1 object to ", objects=1),
    "band-out-of-range": Case(seg(_square, "--bands", "3,2,9"), 3, r"band 9 does not exist"),
    "uint16-stretched": Case(seg(_dtype("uint16")), 0, r"wrote \d+ objects? to ",
                             check=_check_report(objects=lambda r: r["objects"] >= 10)),
    "int16-negative-stretched": Case(seg(_dtype("int16")), 0, r"wrote \d+ objects? to ",
                                     check=_check_report(objects=lambda r: r["objects"] >= 10)),
    "float32-negative-and-nan": Case(seg(_dtype("float32")), 0, r"wrote \d+ objects? to ",
                                     check=_check_report(objects=lambda r: r["objects"] >= 10)),
    "all-nodata": Case(seg(_nodata_all), 0, r"1 skipped \(no data\)", objects=0,
                       check=_check_report(skipped=1, done=0, objects=0)),
    "smaller-than-a-tile": Case(seg(_square), 0, r"tiles: 1 in all", objects=1),
    "1x1-image": Case(seg(_one_pixel, text=("white",)), 0, r"tiles: 1 in all", objects=0),
    # -- prompts: exit 2
    "empty-prompt": Case(seg(_square, text=("",)), 2, r"--text: a prompt is empty"),
    "blank-prompt": Case(seg(_square, text=("   ",)), 2, r"--text: a prompt is empty"),
    "overlong-prompt": Case(seg(_square, text=("very " * 80 + "blue",)), 2, r"characters long: .*shorten it"),
    "unknown-colour": Case(seg(_square, text=("bleu",)), 2, r"'bleu' is not one"),
    "no-prompt": Case(seg(_square, text=()), 2, r"nothing to find"),
    "box-outside-the-raster": Case(seg(_square, "--box", "100,100,200,200", text=()), 2,
                                   r"--box 100,100,200,200 lies outside every input .*EPSG:32633"),
    "box-malformed": Case(seg(_square, "--box", "1,2,3", text=()), 2, r"MINX,MINY,MAXX,MAXY"),
    # -- box files
    "box-file-in-another-crs": Case(seg_box_file(_box_file("EPSG:4326", "boxes-4326.gpkg")), 0,
                                    r"wrote 1 object to ", objects=1),
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
                             r"tiling\.overlap: 'wide' is not a number: give pixels \(256\) or a fraction"
                             r"[\s\S]*tiling\.scale: must be > 0"),
    "yaml-missing-input-file": Case(_job(_with(inputs=["gone.tif", "square.tif"])), 2,
                                    r"inputs\[0\]: no such file: .*gone\.tif"),
    "yaml-not-a-mapping": Case(_job("- just\n- a list\n"), 2, r"the job must be a mapping"),
    "yaml-empty": Case(_job(""), 2, r"job\.yaml is empty"),
    # -- model files: exit 4
    "missing-model-folder": Case(seg_model("missing"), 4, r"does not exist[\s\S]*sam3tiles model fetch"),
    "empty-model-folder": Case(seg_model("empty"), 4, r"lacks sam3_image_encoder\.onnx[\s\S]*sam3tiles model fetch"),
    "corrupt-model-folder": Case(seg_model("corrupt"), 4, r"sam3tiles model (fetch|verify)", subprocess=True),
}


# -- issue 14: nothing lost, nothing silently wrong ----------------------------------------------------------
# Each case also checks (in test_bad_input) that no file outside the output folder changed or appeared,
# except under the paths a case names in `may_create`.

def _in(sub):
    """The square raster inside tmp/`sub`."""
    def make(tmp):
        d = tmp / sub
        d.mkdir(exist_ok=True)
        return write(d / "square.tif", square_image())
    return make


def seg_sq(*extra, text=("blue",), out="out.gpkg", src=None):
    return seg(src or _square, *extra, text=text, out=out)


def _foreign_dir(tmp):
    d = tmp / "mine"
    d.mkdir()
    (d / "precious.txt").write_text("not sam3tiles'")
    return d


def _marked_dir_with_notes(tmp):
    from sam3tiles.run.recording.workfolder import MARKER

    d = tmp / "work"
    d.mkdir()
    (d / MARKER).write_text(json.dumps({"tool": "sam3tiles", "schema": 1}))
    (d / "notes.txt").write_text("mine")
    return d


def _legacy_dir(tmp):
    """A work folder of an earlier version: tiles.sqlite only, holding a pickled row (never loaded)."""
    import pickle
    import sqlite3

    d = tmp / "legacy"
    d.mkdir()
    con = sqlite3.connect(d / "tiles.sqlite")
    con.execute("CREATE TABLE tiles (key TEXT PRIMARY KEY, schema INTEGER, result BLOB)")
    con.execute("INSERT INTO tiles VALUES ('k', 2, ?)", (pickle.dumps({"x": 1}),))
    con.commit()
    con.close()
    return d


def _gpkg_raster(tmp):
    p = tmp / "ortho.gpkg"
    c, h, w = 3, 400, 500
    with rasterio.open(p, "w", driver="GPKG", width=w, height=h, count=c, dtype="uint8", crs=CRS_DEMO,
                       transform=rasterio.Affine(PIXEL, 0, ORIGIN[0], 0, -PIXEL, ORIGIN[1])) as dst:
        dst.write(square_image())
    return p


def _vrt(missing=False):
    def make(tmp):
        _square(tmp)
        src = "gone.tif" if missing else "square.tif"
        bands = "".join(f'<VRTRasterBand dataType="Byte" band="{b}"><SimpleSource><SourceFilename relativeToVRT="1">'
                        f"{src}</SourceFilename><SourceBand>{b}</SourceBand></SimpleSource></VRTRasterBand>"
                        for b in (1, 2, 3))
        p = tmp / "mosaic.vrt"
        p.write_text(f'<VRTDataset rasterXSize="500" rasterYSize="400"><SRS>{CRS_DEMO.to_wkt()}</SRS>'
                     f"<GeoTransform>{ORIGIN[0]},{PIXEL},0,{ORIGIN[1]},0,{-PIXEL}</GeoTransform>{bands}</VRTDataset>")
        return p
    return make


def _crs_no_transform(tmp):
    p = tmp / "nogt.tif"
    with rasterio.open(p, "w", driver="GTiff", width=500, height=400, count=3, dtype="uint8", crs=CRS_DEMO) as dst:
        dst.write(square_image())
    return p


def _gcp_only(tmp):
    from rasterio.control import GroundControlPoint as G

    p = tmp / "gcps.tif"
    gcps = [G(0, 0, ORIGIN[0], ORIGIN[1]), G(0, 500, ORIGIN[0] + 150, ORIGIN[1]), G(400, 0, ORIGIN[0], ORIGIN[1] - 120)]
    with rasterio.open(p, "w", driver="GTiff", width=500, height=400, count=3, dtype="uint8", gcps=gcps,
                       crs=CRS_DEMO) as dst:
        dst.write(square_image())
    return p


def _rpc_only(tmp):
    from rasterio.rpc import RPC

    p = tmp / "rpcs.tif"
    rpc = RPC(height_off=0, height_scale=100, lat_off=45, lat_scale=0.1, line_den_coeff=[1] + [0] * 19,
              line_num_coeff=[0, 1] + [0] * 18, line_off=200, line_scale=200, long_off=10, long_scale=0.1,
              samp_den_coeff=[1] + [0] * 19, samp_num_coeff=[0, 0, 1] + [0] * 17, samp_off=250, samp_scale=250)
    with rasterio.open(p, "w", driver="GTiff", width=500, height=400, count=3, dtype="uint8", rpcs=rpc) as dst:
        dst.write(square_image())
    return p


def _paletted(tmp):
    p = tmp / "classes.tif"
    idx = np.zeros((1, 400, 500), np.uint8)
    idx[0, 120:180, 100:180] = 1
    with rasterio.open(p, "w", **_profile(1, 400, 500, "uint8", photometric="palette")) as dst:
        dst.write(idx)
        dst.write_colormap(1, {0: (*BG, 255), 1: (*BLUE, 255)})
    return p


def _utm34(tmp):
    p = tmp / "utm34.tif"
    with rasterio.open(p, "w", **_profile(3, 400, 500, "uint8", crs="EPSG:32634")) as dst:
        dst.write(square_image())
    return p


def _bracket_name(tmp):
    """`scene[1].tif` (the square) beside `scene1.tif` (no square): the literal name is meant."""
    write(tmp / "scene1.tif", square_image(value=BG))
    return write(tmp / "scene[1].tif", square_image())


def _same_stems(tmp):
    for k, sub in enumerate(("a", "b")):  # two files (one background pixel apart: a byte-identical copy is one input)
        (tmp / sub).mkdir()
        data = square_image()
        data[0, 0, 0] ^= k
        write(tmp / sub / "scene.tif", data)
    return tmp


def _out_dir_named_gpkg(tmp):
    (tmp / "o" / "out.gpkg").mkdir(parents=True)
    return _square(tmp)


def _lock(body, kind="file", age=60):
    def make(tmp):
        (tmp / "o").mkdir(exist_ok=True)
        lock = tmp / "o" / "out.gpkg.lock"
        if kind == "dir":
            lock.mkdir()
            if body:
                (lock / "x").write_text(body)
        else:
            lock.write_bytes(body.encode() if isinstance(body, str) else json.dumps(body).encode())
            t = os.stat(lock).st_mtime - age
            os.utime(lock, (t, t))
        return _square(tmp)
    return make


def _dead_pid():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _stale_temps(tmp):
    (tmp / "o").mkdir(exist_ok=True)
    (tmp / "o" / ".out.gpkg.report.1a2b3c4d.tmp.json").write_text("{")
    (tmp / "o" / ".labels.5e6f7a8b.tmp.tif").write_bytes(b"II*\x00")
    return _square(tmp)


def _many_boxes(tmp):
    """16,400 example boxes in one tile: more decoder passes than a tile can take."""
    x0, y0, _, _ = square_geo_box()
    n = 16_400
    xs = x0 + (np.arange(n) % 160) * 0.3
    ys = y0 + (np.arange(n) // 160) * 0.1
    p = tmp / "many.gpkg"
    gpd.GeoDataFrame({"label": np.ones(n, int)}, geometry=[box(x, y, x + 3, y + 3) for x, y in zip(xs, ys)],
                     crs=CRS_DEMO.to_wkt()).to_file(p)
    return p


def _empty_geoms(tmp):
    from shapely.geometry import Polygon

    x0, y0, x1, y1 = square_geo_box()
    p = tmp / "holes.gpkg"
    gpd.GeoDataFrame({"label": [1, 1]}, geometry=[box(x0, y0, x1, y1), Polygon()], crs=CRS_DEMO.to_wkt()).to_file(p)
    return p


def _job_file(body: str, name="job.yaml"):
    def argv(tmp):
        _square(tmp)
        (tmp / name).write_text(body)
        return ["run", str(tmp / name)]
    return argv


def _check_input_kept(name):
    def check(tmp):
        with rasterio.open(tmp / name) as ds:
            assert ds.count >= 1 and ds.driver in ("GTiff", "GPKG")
    return check


def _check_objects_source(expect_source):
    def check(tmp):
        rep = json.loads((tmp / "o" / "out.gpkg.report.json").read_text())
        assert [Path(i).name for i in rep["inputs"]] == [expect_source], rep["inputs"]
        assert rep["objects"] == 1
    return check


def _deep_flow(n):
    return "inputs: [square.tif]\nprompts: {text: [blue]}\noutput: {path: o/out.gpkg}\nx: " + "[" * n + "]" * n + "\n"


def _deep_block(n):
    return "inputs: [square.tif]\nprompts: {text: [blue]}\noutput: {path: o/out.gpkg}\nx:\n" + "".join(
        " " * (i + 1) + f"k{i}:\n" for i in range(n)) + " " * (n + 1) + "v: 1\n"


NEW_CASES: dict[str, Case] = {
    # -- 1. the work folder is owned
    "work-dir-empty": Case(seg_sq("--work-dir", ""), 2, r"--work-dir is empty \(an unset shell variable\?\)"),
    "work-dir-blank": Case(seg_sq("--work-dir", "  "), 2, r"--work-dir is empty"),
    "work-dir-dot": Case(seg_sq("--work-dir", ".", "--fresh"), 2, r"--work-dir \.: that is the current folder"),
    "work-dir-cwd-absolute": Case(lambda t: seg_sq("--work-dir", str(t), "--fresh")(t), 2, r"the current folder"),
    # (no --fresh where a regression would clear a folder outside the case's own: /, home, the tmp base)
    "work-dir-root": Case(seg_sq("--work-dir", "/"), 2, r"--work-dir /: that is the root folder"),
    "work-dir-home": Case(lambda t: seg_sq("--work-dir", str(Path.home()))(t), 2,
                          r"(your home folder|a folder above)"),
    "work-dir-above-cwd": Case(lambda t: seg_sq("--work-dir", str(t.parent))(t), 2,
                               r"a folder above the current or home folder"),
    "work-dir-holds-the-input": Case(lambda t: seg(_in("data"), "--work-dir", str(t / "data"), "--fresh")(t), 2,
                                     r"--work-dir .*data holds the input .*square\.tif"),
    "work-dir-is-the-input": Case(lambda t: seg_sq("--work-dir", str(_square(t)), "--fresh")(t), 2,
                                  r"holds the input .*square\.tif"),
    "work-dir-foreign-folder-fresh": Case(lambda t: seg_sq("--work-dir", str(_foreign_dir(t)), "--fresh")(t), 2,
                                          r"is not a sam3tiles work folder \(it holds 'precious\.txt'"),
    "work-dir-foreign-folder": Case(lambda t: seg_sq("--work-dir", str(_foreign_dir(t)))(t), 2,
                                    r"not a sam3tiles work folder"),
    "work-dir-is-a-file": Case(lambda t: seg_sq("--work-dir", str(_text(t)))(t), 2, r"is a file, not a folder"),
    "work-dir-marked-fresh-keeps-other-files": Case(
        lambda t: seg_sq("--work-dir", str(_marked_dir_with_notes(t)), "--fresh")(t), 0, r"wrote 1 object to ",
        objects=1, may_create=("work/",), check=lambda t: _assert_text(t / "work" / "notes.txt", "mine")),
    "work-dir-legacy-adopted-pickle-never-loaded": Case(
        lambda t: seg_sq("--work-dir", str(_legacy_dir(t)), "--fresh")(t), 0, r"wrote 1 object to ", objects=1,
        may_create=("legacy/",)),
    "job-work-dir-dot": Case(_job(_with(output={"path": "o/out.gpkg", "work_dir": "."})), 2,
                             r"output\.work_dir .*(holds the input|current folder)"),
    "job-work-dir-empty": Case(_job(_with(output={"path": "o/out.gpkg", "work_dir": " "})), 2,
                               r"output\.work_dir: is empty"),
    # -- 2. no output, label image, report or work folder is an input
    "labels-is-the-input": Case(lambda t: seg_sq("--labels", str(_square(t)), "--overwrite")(t), 2,
                                r"--labels .*square\.tif is the input .*square\.tif: it would be replaced",
                                check=_check_input_kept("square.tif")),
    "out-is-a-geopackage-raster-input": Case(
        lambda t: ["segment", str(_gpkg_raster(t)), "-t", "blue", "--backend", "reference", "--overwrite", "--out",
                   str(t / "ortho.gpkg")], 2, r"--out .*ortho\.gpkg is the input",
        check=_check_input_kept("ortho.gpkg")),
    "per-input-output-is-an-input": Case(
        lambda t: ["segment", str(_gpkg_raster(t)), "-t", "blue", "--backend", "reference", "--overwrite", "--out",
                   str(t)], 2, r"--out .*ortho\.gpkg is the input"),
    "labels-is-a-vrt-source": Case(lambda t: seg(_vrt(), "--labels", str(t / "square.tif"), "--overwrite")(t), 2,
                                   r"--labels .*square\.tif is the input .*square\.tif"),
    "labels-is-a-link-to-the-input": Case(
        lambda t: seg_sq("--labels", str(_link(t)), "--overwrite")(t), 2, r"--labels .*link\.tif is the input"),
    "out-is-the-box-file": Case(lambda t: ["segment", str(_square(t)), "--box-file",
                                           str(_box_file(CRS_DEMO.to_wkt(), "boxes.gpkg")(t)), "--backend", "reference",
                                           "--overwrite", "--out", str(t / "boxes.gpkg")], 2,
                                r"--out .*boxes\.gpkg is the box file \(--box-file "),
    "job-report-is-the-input": Case(_job(_with(output={"path": "o/out.gpkg", "report": "square.tif"})), 2,
                                    r"square\.tif is the input"),
    "job-labels-is-the-input": Case(_job(_with(output={"path": "o/out.gpkg", "labels": "square.tif",
                                                       "overwrite": True})), 2, r"square\.tif is the input"),
    "two-inputs-same-stem-into-a-folder": Case(
        lambda t: ["segment", str(_same_stems(t) / "a" / "scene.tif"), str(t / "b" / "scene.tif"), "-t", "blue",
                   "--backend", "reference", "--out", str(t / "o")], 2,
        r"a/scene\.tif and .*b/scene\.tif would both be written to scene\.gpkg: give --out a file"),
    # -- 5. rasters the tool cannot place, units, tiling
    "crs-without-geotransform": Case(seg(_crs_no_transform), 3, r"has a CRS \(EPSG:32633\) but no geotransform"),
    "gcps-only": Case(seg(_gcp_only), 3, r"ground control points only.*gdalwarp -t_srs EPSG:32633"),
    "rpcs-only": Case(seg(_rpc_only), 3, r"RPCs .*gdalwarp -rpc"),
    "paletted-expanded-to-rgb": Case(seg(_paletted), 0, r"wrote 1 object to ", objects=1),
    "overlap-0-with-seams": Case(seg_sq("--tile-size", "256", "--overlap", "0"), 2,
                                 r"--overlap 0 is below the \d+ px the merge needs: objects crossing a seam"),
    "overlap-5-with-seams": Case(seg_sq("--tile-size", "256", "--overlap", "5"), 2, r"--overlap 5 is below"),
    "tile-size-65-overlap-0": Case(seg_sq("--tile-size", "65", "--overlap", "0"), 2, r"--overlap 0 is below"),
    "overlap-0-single-tile-allowed": Case(seg_sq("--overlap", "0"), 0, r"wrote 1 object to ", objects=1),
    "tile-size-1009": Case(seg_sq("--tile-size", "1009"), 2, r"--tile-size.*1009 is not in the range 64<=x<=1008"),
    "tile-size-4096": Case(seg_sq("--tile-size", "4096"), 2, r"--tile-size.*4096 is not in the range"),
    "tile-size-63": Case(seg_sq("--tile-size", "63"), 2, r"--tile-size.*63 is not in the range"),
    "overlap-over-half-the-tile": Case(seg_sq("--overlap", "600"), 2, r"--overlap"),
    "job-tile-size-2000": Case(_job(_with(tiling={"tile_size": 2000})), 2, r"tiling\.tile_size: must be <= 1008"),
    "job-dry-run-overlap-0": Case(lambda t: _job(_with(tiling={"tile_size": 256, "overlap": 0}))(t) + ["--dry-run"],
                                  2, r"tiling\.overlap 0 is below"),
    # -- 6. literal names; whole-run checks before the first tile
    "literal-name-with-brackets": Case(seg(_bracket_name), 0, r"wrote 1 object to ", objects=1,
                                       check=_check_objects_source("scene[1].tif")),
    "job-literal-name-with-brackets": Case(lambda t: _job(_with(inputs=[_bracket_name(t).name]))(t), 0,
                                           r"wrote 1 object to ", objects=1,
                                           check=_check_objects_source("scene[1].tif")),
    "job-bracket-name-missing": Case(_job(_with(inputs=["missing[1].tif"])), 2, r"matches no file"),
    "out-is-a-directory": Case(seg(_out_dir_named_gpkg), 2, r"--out .*out\.gpkg is a folder, not a file",
                               keeps=("out.gpkg",)),
    "inputs-in-different-crss-one-output": Case(
        lambda t: ["segment", str(_square(t)), str(_utm34(t)), "-t", "blue", "--backend", "reference", "--out",
                   str(t / "o" / "out.gpkg")], 2, r"different CRSs.*EPSG:32633.*EPSG:32634"),
    "vrt-with-a-missing-source": Case(seg(_vrt(missing=True)), 3,
                                      r"mosaic\.vrt reads .*gone\.tif, which does not exist"),
    "vrt": Case(seg(_vrt()), 0, r"wrote 1 object to ", objects=1),
    # -- 7. locks and temporary files
    "lock-empty-file": Case(seg(_lock("")), 0, r"took over the lock .* \(empty\)", objects=1),
    "lock-garbage": Case(seg(_lock("\x00\x01garbage")), 0, r"took over the lock .*unreadable", objects=1),
    "lock-pid-none": Case(seg(_lock({"pid": None, "host": None})), 0, r"took over the lock", objects=1),
    "lock-of-a-dead-process": Case(lambda t: seg(_lock({"pid": _dead_pid(), "host": os.uname().nodename}))(t), 0,
                                   r"took over the lock .*no longer running", objects=1),
    "lock-empty-folder": Case(seg(_lock("", kind="dir")), 0, r"was an empty folder in place of the lock", objects=1),
    "lock-folder-with-files": Case(seg(_lock("x", kind="dir")), 2,
                                   r"is a folder with files in it, not a sam3tiles lock", keeps=("out.gpkg.lock",)),
    "lock-of-another-host": Case(seg(_lock({"pid": 1, "host": "elsewhere.example"})), 2,
                                 r"another run \(pid 1 on elsewhere\.example\)", keeps=("out.gpkg.lock",)),
    "stale-temps-of-report-and-labels": Case(lambda t: seg(_stale_temps, "--labels", str(t / "o" / "labels.tif"))(t),
                                             0, r"wrote 1 object to ", objects=1, also_writes=("labels.tif",)),
    # -- 8. user mistakes: exit 2 or 3, naming them
    "workers-negative": Case(seg_sq("--workers", "-5"), 2, r"--workers.*-5 is not in the range x>=1"),
    "workers-zero": Case(seg_sq("--workers", "0"), 2, r"--workers.*0 is not in the range"),
    "threads-negative": Case(seg_sq("--threads", "-1"), 2, r"--threads.*-1 is not in the range"),
    "gsd-inf": Case(seg_sq("--gsd", "inf"), 2, r"--gsd must be > 0 \(a finite number\) \(got inf\)"),
    "gsd-nan": Case(seg_sq("--gsd", "nan"), 2, r"--gsd must be .*\(got nan\)"),
    "gsd-zero": Case(seg_sq("--gsd", "0"), 2, r"--gsd.*0(\.0)? is not in the range x>0"),
    "gsd-negative": Case(seg_sq("--gsd", "-1"), 2, r"--gsd.*-1(\.0)? is not in the range x>0"),
    "gsd-tiny": Case(seg_sq("--gsd", "1e-30"), 2, r"--gsd 1e-30 on .*square\.tif .*means a scale of"),
    "scale-inf": Case(seg_sq("--scale", "inf"), 2, r"--scale.*(\(got inf\)|inf is not in the range)"),
    "scale-nan": Case(seg_sq("--scale", "nan"), 2, r"--scale.*nan"),
    "scale-zero": Case(seg_sq("--scale", "0"), 2, r"--scale.*0(\.0)? is not in the range 0<x<=64"),
    "scale-huge": Case(seg_sq("--scale", "1e9"), 2, r"--scale.*1000000000(\.0)? is not in the range 0<x<=64"),
    "min-area-nan": Case(seg_sq("--min-area", "nan"), 2, r"--min-area must be >= 0 .*\(got nan\)"),
    "min-area-negative": Case(seg_sq("--min-area", "-1"), 2, r"--min-area.*-1(\.0)? is not in the range x>=0"),
    "simplify-inf": Case(seg_sq("--simplify", "inf"), 2, r"--simplify must be >= 0 \(a finite number\) \(got inf\)"),
    "job-key-is-a-list": Case(_job_file("? [a, b]\n: 1\ninputs: [square.tif]\n"), 2,
                              r"a key must be a name, not a list"),
    "job-section-key-is-a-list": Case(_job_file("inputs: [square.tif]\nprompts: {text: blue}\n"
                                                "output: {path: o/out.gpkg}\ntiling: {? [1, 2] : 3}\n"), 2,
                                      r"a key must be a name, not a list"),
    "job-5000-levels-flow": Case(_job_file(_deep_flow(5000)), 2, r"nested more than \d+ levels deep"),
    "job-5000-levels-block": Case(_job_file(_deep_block(5000)), 2, r"nested more than \d+ levels deep"),
    "job-gsd-inf": Case(_job_file("inputs: [square.tif]\nprompts: {text: blue}\noutput: {path: o/out.gpkg}\n"
                                  "backend: {name: reference}\ntiling: {gsd: .inf}\n"), 2,
                         r"tiling\.gsd:? must be > 0 \(a finite number\) \(got inf\)"),
    "job-scale-nan": Case(_job_file("inputs: [square.tif]\nprompts: {text: blue}\noutput: {path: o/out.gpkg}\n"
                                    "backend: {name: reference}\ntiling: {scale: .nan}\n"), 2,
                           r"tiling\.scale: must be .*\(got nan\)"),
    "job-min-area-inf": Case(_job_file("inputs: [square.tif]\nprompts: {text: blue}\noutput: {path: o/out.gpkg}\n"
                                       "postprocess: {min_area: .inf}\n"), 2,
                              r"postprocess\.min_area:? must be >= 0 \(a finite number\) \(got inf\)"),
    "job-workers-negative": Case(_job(_with(run={"workers": -5})), 2, r"run\.workers: must be >= 1"),
    "more-than-1024-decoder-passes": Case(lambda t: ["segment", str(_square(t)), "--box-file", str(_many_boxes(t)),
                                                     "--backend", "reference", "--workers", "1", "--out",
                                                     str(t / "o" / "out.gpkg")], 2,
                                          r"holds 16400 example boxes .*decoder passes .*more than the 1024"),
    "box-file-with-an-empty-geometry": Case(lambda t: ["segment", str(_square(t)), "--box-file", str(_empty_geoms(t)),
                                                       "--backend", "reference", "--out", str(t / "o" / "out.gpkg")], 3,
                                            r"holes\.gpkg: feature 2 has an empty geometry"),
}


def _assert_text(path, text):
    assert path.read_text() == text


def _link(tmp):
    q = tmp / "link.tif"
    q.symlink_to(_square(tmp))
    return q


CASES.update(NEW_CASES)


# -- issue 20: files the run did not create, names the file system refuses, inputs that are no inputs ----------

def _side(name, body="mine"):
    """The square, and a file of the user's at o/`name` (where the run would write a side file)."""
    def make(tmp):
        (tmp / "o").mkdir(exist_ok=True)
        (tmp / "o" / name).write_text(body)
        return _square(tmp)
    return make


def _gpkg_with_layer(name):
    def make(tmp):
        (tmp / "o").mkdir(exist_ok=True)
        gpd.GeoDataFrame({"v": [1]}, geometry=[box(*square_geo_box())], crs=CRS_DEMO.to_wkt()).to_file(
            tmp / "o" / "out.gpkg", layer=name)
        return _square(tmp)
    return make


def _dangling_lock(tmp):
    (tmp / "o").mkdir(exist_ok=True)
    (tmp / "o" / "out.gpkg.lock").symlink_to(tmp / "o" / "nowhere")
    return _square(tmp)


def _zero_pixel_vrt(tmp):
    p = _vrt()(tmp)
    p.write_text(p.read_text().replace(f"{ORIGIN[0]},{PIXEL},0,", f"{ORIGIN[0]},0,0,"))
    return p


def _vrt_reading(name, src):
    bands = "".join(f'<VRTRasterBand dataType="Byte" band="{b}"><SimpleSource><SourceFilename relativeToVRT="1">'
                    f"{src}</SourceFilename><SourceBand>{b}</SourceBand></SimpleSource></VRTRasterBand>"
                    for b in (1, 2, 3))
    return (f'<VRTDataset rasterXSize="500" rasterYSize="400"><SRS>{CRS_DEMO.to_wkt()}</SRS>'
            f"<GeoTransform>{ORIGIN[0]},{PIXEL},0,{ORIGIN[1]},0,{-PIXEL}</GeoTransform>{bands}</VRTDataset>")


def _vrt_cycle(*names):
    def make(tmp):
        for k, n in enumerate(names):
            (tmp / n).write_text(_vrt_reading(n, names[(k + 1) % len(names)]))
        return tmp / names[0]
    return make


def _stac(assets):
    def make(tmp):
        _square(tmp)
        p = tmp / "item.json"
        p.write_text(json.dumps({"type": "FeatureCollection", "features": [
            {"type": "Feature", "id": "a", "assets": assets}]}))
        return p
    return make


def _self_list(tmp):
    _square(tmp)
    (tmp / "more.txt").write_text("square.tif\nlist.txt\n")
    (tmp / "list.txt").write_text("more.txt\n")
    return tmp / "list.txt"


def _labels_from_before(tmp):
    _square(tmp)
    write(tmp / "labels.tif", np.zeros((1, 400, 500), np.uint32) + 1)
    return ["segment", str(tmp / "*.tif"), "-t", "blue", "--backend", "reference", "--labels", str(tmp / "labels.tif"),
            "--overwrite", "--out", str(tmp / "o" / "out.gpkg")]


def _truth_pred(tmp):
    gdf = gpd.GeoDataFrame({"class": ["blue"], "prompt": ["blue"]}, geometry=[box(*square_geo_box())],
                           crs=CRS_DEMO.to_wkt())
    gdf.to_file(tmp / "truth.gpkg")
    gdf.to_file(tmp / "pred.gpkg")
    return [str(tmp / "pred.gpkg"), str(tmp / "truth.gpkg")]


WORK_FILES = ("sam3tiles-work.json", "tiles.sqlite", "outputs.json", "tiles.sqlite-wal", "tiles.sqlite-shm")

FAULT_CASES: dict[str, Case] = {
    # -- files beside the output that the run did not write: exit 2, kept
    "existing-report-not-written-by-the-run": Case(seg(_side("out.gpkg.report.json")), 2,
                                                   r"the report .*out\.gpkg\.report\.json exists and this run did not "
                                                   r"write it: pass --overwrite", keeps=("out.gpkg.report.json",)),
    "existing-preview-not-written-by-the-run": Case(seg(_side("out.gpkg.preview.png")), 2,
                                                    r"the preview .*out\.gpkg\.preview\.png exists .*--overwrite",
                                                    keeps=("out.gpkg.preview.png",)),
    "job-report-path-exists": Case(lambda t: _job(_with(output={"path": "o/out.gpkg", "report": "o/mine.json"}))(
        _side("mine.json")(t) and t), 2, r"mine\.json exists and this run did not write it", keeps=("mine.json",)),
    "job-report-is-the-output": Case(_job(_with(output={"path": "o/out.gpkg", "report": "o/out.gpkg"})), 2,
                                     r"output\.report .*out\.gpkg is also output\.path's path: "
                                     r"one would replace the other"),
    "job-report-is-the-preview": Case(_job(_with(output={"path": "o/out.gpkg", "report": "o/out.gpkg.preview.png"})),
                                      2, r"preview .*is also output\.report's path"),
    "demo-into-a-folder-with-the-users-scene": Case(
        lambda t: ["demo", "--out", str((_side("scene.tif", "my scene")(t), _side("truth.gpkg")(t))[0].parent / "o"),
                   "--size", "200x200"], 2, r"already holds scene\.tif and 1 more .*--overwrite",
        keeps=("scene.tif", "truth.gpkg")),
    "evaluate-out-exists": Case(lambda t: ["evaluate", *_truth_pred(t), "--out", str(_side("table.csv")(t).parent / "o"
                                                                                      / "table.csv")],
                                2, r"--out .*table\.csv exists: pass --overwrite", keeps=("table.csv",)),
    "evaluate-unknown-class-col": Case(lambda t: ["evaluate", *_truth_pred(t), "--class-col", "nosuch"], 2,
                                       r"--class-col nosuch: .*truth\.gpkg has no such column \(its columns: class"),
    # -- names: exit 2 before any work
    "out-name-with-a-newline": Case(seg_sq(out="o\nx.gpkg"), 2, r"control character \('\\n'"),
    "job-report-name-with-a-newline": Case(_job(_with(output={"path": "o/out.gpkg", "report": "o/r\nx.json"})), 2,
                                           r"output\.report .*control character"),
    "layer-300-characters": Case(seg_sq("--layer", "a" * 300), 2, r"too long for this file system .*shorten it"),
    "out-name-250-characters": Case(seg_sq(out="b" * 245 + ".gpkg"), 2, r"too long for this file system"),
    "layer-sqlite-sequence": Case(seg_sq("--layer", "sqlite_sequence"), 2, r"not a usable layer name .*sqlite_"),
    "layer-rtree-upper-case": Case(seg_sq("--layer", "RTREE_x"), 2, r"not a usable layer name"),
    "layer-differs-only-in-case": Case(seg(_gpkg_with_layer("Keep"), "--layer", "keep"), 2,
                                       r"already holds a layer 'Keep' \(SQLite names ignore case", keeps=("out.gpkg",)),
    # -- locks
    "lock-pid-2-to-the-64": Case(seg(_lock({"pid": 2 ** 64, "host": os.uname().nodename})), 0,
                                 r"took over the lock .*unreadable", objects=1),
    "lock-dangling-symlink": Case(seg(_dangling_lock), 0, r"took over the lock .*a link to nothing", objects=1),
    "out-inside-its-own-work-dir": Case(lambda t: seg_sq("--work-dir", str(t / "o"))(t), 0, r"wrote 1 object to ",
                                        objects=1, also_writes=WORK_FILES),
    "job-out-inside-its-own-work-dir": Case(_job(_with(output={"path": "o/out.gpkg", "work_dir": "o"})), 0,
                                            r"wrote 1 object to ", objects=1, also_writes=WORK_FILES),
    # -- inputs that cannot be used as they are
    "geotransform-pixel-size-0": Case(seg(_zero_pixel_vrt), 3, r"pixel size of 0 .*gdal_edit\.py"),
    "vrt-reads-itself": Case(seg(_vrt_cycle("loop.vrt")), 3,
                             r"loop\.vrt reads itself \(loop\.vrt -> loop\.vrt, a cycle"),
    "vrts-read-each-other": Case(seg(_vrt_cycle("a.vrt", "b.vrt")), 3, r"a\.vrt -> b\.vrt -> a\.vrt, a cycle"),
    "stac-assets-is-a-string": Case(seg(_stac("square.tif")), 3, r"item\.json.*its 'assets' is not a JSON object"),
    "stac-asset-is-a-string": Case(seg(_stac({"image": "square.tif"})), 3, r"asset 'image' is not a JSON object"),
    "input-list-names-itself": Case(seg(_self_list), 2, r"names itself \(list\.txt -> more\.txt -> list\.txt, a cycle"),
    "input-glob-picks-up-its-own-labels": Case(_labels_from_before, 2,
                                               r"the input .*labels\.tif is this run's own label image"),
    "scheduler-not-an-address": Case(seg_sq("--scheduler", "not a url at all"), 2,
                                     r"'not a url at all' is not a Dask scheduler address: give tcp://HOST:PORT"),
    "job-scheduler-not-an-address": Case(_job(_with(run={"scheduler": "not a url at all"})), 2,
                                         r"not a Dask scheduler address"),
}
CASES.update(FAULT_CASES)


# -- issue 36 (4): a device that cannot be had, options the run would ignore ----------------------------------

def _contract_model(tmp):
    from sam3tiles.testing.graphs import build_contract_models

    return build_contract_models(tmp / "model", decoder="colour", grid=1)


def seg_onnx(*extra):
    def argv(tmp):
        return ["segment", str(_square(tmp)), "--text", "blue", "--backend", "onnx", "--model",
                str(_contract_model(tmp)), *extra, "--out", str(tmp / "o" / "out.gpkg")]
    return argv


def _onnx_job(**backend):
    def argv(tmp):
        _contract_model(tmp)
        return _job(_with(backend={"name": "onnx", "model": "model", **backend}))(tmp)
    return argv


def _has_cuda() -> bool:
    import onnxruntime

    return "CUDAExecutionProvider" in onnxruntime.get_available_providers()


DOOR_CASES: dict[str, Case] = {
    # a device or precision the backend would ignore: exit 2
    "device-reference-backend-tensorrt": Case(seg_sq("--device", "tensorrt"), 2,
                                              r"--device tensorrt: the reference backend takes no device or "
                                              r"precision .*: leave --device out, or give --backend onnx"),
    "device-reference-backend-cpu": Case(seg_sq("--device", "cpu"), 2, r"--device cpu: the reference backend"),
    "precision-reference-backend": Case(seg_sq("--precision", "tf32"), 2,
                                        r"--precision tf32: the reference backend takes no device"),
    "job-device-reference-backend": Case(_job(_with(backend={"name": "reference", "device": "cuda"})), 2,
                                         r"backend\.device cuda: the reference backend takes no device"),
    # --qupath-type shapes QuPath's GeoJSON only
    "qupath-type-into-a-geopackage": Case(seg_sq("--qupath-type", "annotation"), 2,
                                          r"--qupath-type annotation: .*out\.gpkg is no QuPath GeoJSON .*"
                                          r"name it out\.qupath\.geojson, or leave --qupath-type out"),
    "job-qupath-type-into-a-geopackage": Case(_job(_with(output={"path": "o/out.gpkg", "qupath_type": "annotation"})),
                                              2, r"output\.qupath_type annotation: .*is no QuPath GeoJSON"),
}
if not _has_cuda():  # the CPU build of onnxruntime: --device cuda cannot be had, exit 4 before any tile
    DOOR_CASES.update({
        "device-cuda-without-cuda": Case(seg_onnx("--device", "cuda"), 4,
                                         r"--device cuda: this onnxruntime \(.*\) has no CUDAExecutionProvider "
                                         r"\(it offers .*CPUExecutionProvider.*\): install onnxruntime-gpu with CUDA "
                                         r"12 and cuDNN 9 .*, or use --device cpu"),
        "job-device-cuda-without-cuda": Case(_onnx_job(device="cuda"), 4,
                                             r"backend\.device cuda: this onnxruntime .* has no "
                                             r"CUDAExecutionProvider.*or use backend\.device cpu"),
    })
CASES.update(DOOR_CASES)


# -- issue 36: files a run writes beside its output (preview, report, labels) against what it reads ---------------

def _png(path, mark: int = 0):
    """The square as a plain PNG (no CRS: pixel coordinates) at `path`; `mark` > 0 changes one background pixel,
    so that two such files are two files (a byte-identical copy is one input)."""
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    data = square_image()
    data[0, 0, 0] ^= mark
    Image.fromarray(np.moveaxis(data, 0, -1)).save(path, format="PNG")
    return path


def _chip(tmp, name="chip.tif"):
    """A 50x40 px example image of the square's colour."""
    from PIL import Image

    tmp.mkdir(exist_ok=True)
    p = tmp / name
    Image.fromarray(np.full((40, 50, 3), BLUE, np.uint8)).save(p, format="PNG" if name.endswith(".png") else "TIFF")
    return p


def _hard_link(p, name):
    q = p.parent / name
    os.link(p, q)
    return q


def _as_preview(tmp):
    """A raster where the run's quicklook goes (o/out.gpkg.preview.png): an image of the user's."""
    return _png(tmp / "o" / "out.gpkg.preview.png")


def _preview_link(tmp):
    """A link to the input, where the run's quicklook goes."""
    (tmp / "o").mkdir(exist_ok=True)
    (tmp / "o" / "out.gpkg.preview.png").symlink_to(_png(tmp / "photo.png"))
    return _png(tmp / "photo.png")


def _report_box_file(tmp):
    """A box file named like the run's report (GeoJSON is JSON)."""
    (tmp / "o").mkdir(exist_ok=True)
    return _box_file(CRS_DEMO.to_wkt(), "o/out.gpkg.report.json")(tmp)


def _from_before(*names, out=True):
    """The square, and what an earlier run of the job left: `names` (labels.tif, ...) and its output."""
    def make(tmp):
        _square(tmp)
        for n in names:
            if n.endswith(".tif"):
                write(tmp / n, np.zeros((1, 400, 500), np.uint32) + 1)
            elif n.endswith(".png"):
                _png(tmp / n)
        if out:
            (tmp / "o").mkdir(exist_ok=True)
            (tmp / "o" / "out.gpkg").write_text("the earlier run's output")
    return make


def _stac_items_with_report(tmp):
    """STAC items in o/ (inputs: o/*.json) and the report an earlier run wrote beside them."""
    (tmp / "o").mkdir(exist_ok=True)
    (tmp / "o" / "item.json").write_text(json.dumps({"type": "Feature", "id": "a", "assets": {
        "image": {"href": str(_square(tmp)), "type": "image/tiff"}}}))
    (tmp / "o" / "out.gpkg.report.json").write_text(json.dumps({"version": "0", "objects": 1}))


def _job_after(prepare, job):
    def argv(tmp):
        prepare(tmp)
        return _job(job)(tmp)
    return argv


def _damaged_record(body):
    """The work folder of an earlier run, its record of its outputs damaged, and the report it wrote."""
    def make(tmp):
        from sam3tiles.run.recording.workfolder import MARKER

        w = tmp / "o" / "out.gpkg.sam3tiles-work"
        w.mkdir(parents=True)
        (w / MARKER).write_text(json.dumps({"tool": "sam3tiles", "schema": 1}))
        (w / "outputs.json").write_text(body)
        (tmp / "o" / "out.gpkg.report.json").write_text(json.dumps({"version": "0", "objects": 1}))
        return _square(tmp)
    return make


_OWN = r" \(an input pattern that picks up what an earlier run wrote\?\): narrow the inputs"

SIDE_CASES: dict[str, Case] = {
    # -- a side file is never an input, an example image or the box file (resolved paths; nothing replaced)
    "quicklook-is-the-input": Case(seg(_as_preview, "--overwrite"), 2,
                                   r"the preview .*out\.gpkg\.preview\.png is the input .*out\.gpkg\.preview\.png: it "
                                   r"would be replaced; give --out another name, or pass --no-preview",
                                   keeps=("out.gpkg.preview.png",)),
    "quicklook-is-a-link-to-the-input": Case(seg(_preview_link, "--overwrite"), 2,
                                             r"the preview .*out\.gpkg\.preview\.png is the input .*photo\.png"),
    "labels-is-an-example-image": Case(
        lambda t: seg_sq("--example-image", str(_chip(t)), "--labels", "chip.tif", "--overwrite")(t), 2,
        r"--labels chip\.tif is an example image \(--example-image .*chip\.tif\): it would be replaced; write the "
        r"label image elsewhere"),
    "labels-is-a-hard-link-to-an-example-image": Case(
        lambda t: seg_sq("--example-image", str(_chip(t)), "--labels", str(_hard_link(t / "chip.tif", "same.tif")),
                         "--overwrite")(t), 2,
        r"--labels .*same\.tif is an example image \(--example-image .*chip\.tif\)"),
    "quicklook-is-an-example-image": Case(
        lambda t: seg_sq("--example-image", str(_chip(t / "o", "out.gpkg.preview.png")), "--overwrite")(t), 2,
        r"the preview .*out\.gpkg\.preview\.png is an example image \(--example-image .*out\.gpkg\.preview\.png\)",
        keeps=("out.gpkg.preview.png",)),
    "report-is-the-box-file": Case(lambda t: seg_box_file(_report_box_file)(t) + ["--overwrite"], 2,
                                   r"the report .*out\.gpkg\.report\.json is the box file \(--box-file ",
                                   keeps=("out.gpkg.report.json",)),
    "job-report-is-an-example-image": Case(
        lambda t: _job(_with(prompts={"example_images": [str(_chip(t, "chip.png"))]},
                             output={"path": "o/out.gpkg", "report": "chip.png", "overwrite": True}))(t), 2,
        r"output\.report .*chip\.png is an example image \(prompts\.example_images .*chip\.png\)"),
    # -- a job whose input pattern picks up what its earlier run wrote: named as its own, before "exists"
    "job-glob-picks-up-its-own-labels": Case(
        _job_after(_from_before("labels.tif"), _with(inputs=["*.tif"], output={"path": "o/out.gpkg",
                                                                                "labels": "labels.tif"})), 2,
        r"the input .*labels\.tif is this run's own label image" + _OWN + r", or write the label image elsewhere",
        keeps=("out.gpkg",)),
    "job-glob-picks-up-its-own-preview": Case(
        _job_after(lambda t: (_png(t / "o" / "photo.png"), _png(t / "o" / "out.gpkg.preview.png", mark=1)),
                   _with(inputs=["o/*.png"], output={"path": "o/out.gpkg", "overwrite": True})), 2,
        r"the input .*out\.gpkg\.preview\.png is this run's own preview" + _OWN
        + r", or give output\.path another name",
        keeps=("photo.png", "out.gpkg.preview.png")),
    "job-glob-picks-up-its-own-report": Case(
        _job_after(_stac_items_with_report, _with(inputs=["o/*.json"], output={"path": "o/out.gpkg"})), 2,
        r"the input .*out\.gpkg\.report\.json is this run's own report" + _OWN,
        keeps=("item.json", "out.gpkg.report.json")),
    # -- the work folder's record of what its runs wrote, damaged: named, with what to do
    "outputs-record-garbage": Case(seg(_damaged_record("garbage")), 2,
                                   r"the report .*out\.gpkg\.report\.json exists and this run cannot tell whether it "
                                   r"wrote it: .*out\.gpkg\.sam3tiles-work/outputs\.json.* is damaged \(not JSON\).*"
                                   r"pass --overwrite.*--fresh",
                                   keeps=("out.gpkg.report.json", "out.gpkg.sam3tiles-work")),
    "outputs-record-another-json": Case(seg(_damaged_record('{"type": "FeatureCollection"}')), 2,
                                        r"outputs\.json.* is damaged \(not sam3tiles' record",
                                        keeps=("out.gpkg.report.json", "out.gpkg.sam3tiles-work")),
}
CASES.update(SIDE_CASES)


# -- issue 36: negative examples alone, or where a decoder pass has no room for them --------------------------

def _gbox(margin=-5, tag=""):
    return ",".join(f"{v:.3f}" for v in square_geo_box(margin)) + tag


def _background_box(tag=",neg"):
    """A box on the background right of the square (pixels 300-340 x 250-290)."""
    x0, y0, x1, y1 = 300, 250, 340, 290
    return f"{ORIGIN[0] + x0 * PIXEL},{ORIGIN[1] - y1 * PIXEL},{ORIGIN[0] + x1 * PIXEL},{ORIGIN[1] - y0 * PIXEL}{tag}"


def _neg_chip(tmp):
    from PIL import Image

    p = tmp / "chip.png"
    Image.new("RGB", (40, 30), BLUE).save(p)
    return f"{p},neg"


def _neg_box_file(tmp):
    p = tmp / "negs.gpkg"
    gpd.GeoDataFrame({"label": [0]}, geometry=[box(*square_geo_box())], crs=CRS_DEMO.to_wkt()).to_file(p)
    return p


def seg_one_slot(*boxes, text=()):
    """`segment` of the square on 1-slot contract graphs (the published v0.3.0 decoder layout)."""
    def argv(tmp):
        from sam3tiles.testing.graphs import build_contract_models

        model = build_contract_models(tmp / "m1", box_slots=1)
        return ["segment", str(_square(tmp)), *[a for t in text for a in ("--text", t)],
                *[a for b in boxes for a in ("--box", b)], "--backend", "onnx", "--model", str(model),
                "--device", "cpu", "--workers", "1", "--out", str(tmp / "o" / "out.gpkg")]
    return argv


NEGATIVE_ONLY = r"a negative example needs a text or a positive example beside it"
ONE_SLOT_NEG = r"decoder takes 1 example box a pass.* no negative fits: leave the negative examples out"
PASSES_CASES: dict[str, Case] = {
    "negative-box-alone": Case(seg(_square, "--box", _gbox(tag=",neg"), text=()), 2, NEGATIVE_ONLY + r".*--text"),
    "negative-example-image-alone": Case(lambda t: seg(_square, "--example-image", _neg_chip(t), text=())(t), 2,
                                         NEGATIVE_ONLY + r".*--example-image"),
    "negative-box-file-alone": Case(lambda t: ["segment", str(_square(t)), "--box-file", str(_neg_box_file(t)),
                                               "--backend", "reference", "--out", str(t / "o" / "out.gpkg")], 2,
                                    NEGATIVE_ONLY),
    "job-negative-box-alone": Case(_job(_with(prompts={"text": [], "boxes": [_gbox(tag=",neg")]})), 2,
                                   NEGATIVE_ONLY + r".*prompts\.text"),
    "one-slot-positive-and-negative-boxes": Case(seg_one_slot(_gbox(), _gbox(-8), _gbox(-10), _background_box()), 2,
                                                 ONE_SLOT_NEG),
    "one-slot-text-positive-and-negative": Case(seg_one_slot(_gbox(), _background_box(), text=("blue",)), 2,
                                                ONE_SLOT_NEG),
    "one-slot-text-and-one-negative": Case(seg_one_slot(_background_box(), text=("blue",)), 0, r"wrote 1 object to ",
                                           objects=1),
}
CASES.update(PASSES_CASES)


# -- points as prompts (issue 41) ----------------------------------------------------------------------------

def _pt(x=140, y=150, tag=""):
    """A point at pixel (x, y) of the square scene, in its CRS (140, 150: the blue square's middle)."""
    return f"{ORIGIN[0] + x * PIXEL},{ORIGIN[1] - y * PIXEL}{tag}"


def _point_file(geoms=None, crs=CRS_DEMO.to_wkt(), name="points.gpkg", where=None):
    def make(tmp):
        from shapely.geometry import Point

        pts = geoms if geoms is not None else [Point(*map(float, _pt().split(",")))]
        folder = where(tmp) if where else tmp
        folder.mkdir(exist_ok=True)
        p = folder / name
        with warnings.catch_warnings():  # pyogrio warns of a file without a CRS: the point of the no-crs case
            warnings.filterwarnings("ignore", "'crs' was not provided", UserWarning)
            gpd.GeoDataFrame({"label": [1] * len(pts)}, geometry=pts, crs=crs).to_file(p)
        return p
    return make


def seg_points(*points, point_file=None, text=(), model=None, extra=(), out="out.gpkg"):
    def argv(tmp):
        args = ["segment", str(_square(tmp)), *[a for t in text for a in ("--text", t)],
                *[a for p in points for a in ("--point", p)]]
        if point_file is not None:
            args += ["--point-file", str(point_file(tmp))]
        backend = ["--backend", "reference"] if model is None else ["--backend", "onnx", "--model", str(model(tmp)),
                                                                     "--device", "cpu"]
        return [*args, *backend, "--workers", "1", "--out", str(tmp / "o" / out), *extra]
    return argv


def _four(kind):
    def make(tmp):
        from sam3tiles.testing.graphs import build_contract_models, build_four_graph_models

        return (build_contract_models(tmp / "m3") if kind == "v0.3.0"
                else build_four_graph_models(tmp / "m4", point=kind))
    return make


def _far_point():
    from shapely.geometry import Point

    return [Point(ORIGIN[0] + 90_000, ORIGIN[1])]


def _polygon():
    return [box(*square_geo_box())]


POINTS_CASES: dict[str, Case] = {
    "point-beside-text": Case(seg_points(_pt(), text=("blue",)), 2, r"are prompts of their own, not beside --text"),
    "point-third-value": Case(seg_points(_pt(tag=",maybe")), 2, r"--point .*the last value must be 'neg' or 'pos'"),
    "point-not-numbers": Case(seg_points("east,north"), 2, r"--point 'east,north': the coordinates must be numbers"),
    "point-outside": Case(seg_points(f"{ORIGIN[0] - 5000},{ORIGIN[1]}"), 2, r"--point .* lies outside every input"),
    "points-negative-only": Case(seg_points(_pt(tag=",neg")), 2, r"are all negative.*add a positive point"),
    "points-squash": Case(seg_points(_pt(), extra=("--squash",)), 2, r"--squash: points run on the tile grid"),
    "points-with-an-area": Case(seg_points(_pt(), extra=("--aoi", "1,2,3,4")), 2,
                                r"--aoi: a point run encodes only the tiles under its points"),
    "point-file-missing": Case(seg_points(point_file=lambda t: t / "nope.gpkg"), 3, r"--point-file .*no such file"),
    "point-file-polygons": Case(seg_points(point_file=_point_file(_polygon())), 3,
                                r"feature 1 is a Polygon, not a point: give a layer of points"),
    "point-file-no-crs": Case(seg_points(point_file=_point_file(crs=None)), 3, r"--point-file .* has no CRS"),
    "point-file-all-outside": Case(seg_points(point_file=_point_file(_far_point())), 3,
                                   r"--point-file .*all its 1 point\(s\) lie outside every input"),
    "point-file-is-the-output": Case(seg_points(point_file=_point_file(where=lambda t: t / "o", name="out.gpkg")), 2,
                                     r"--out .* is the point file \(--point-file .*\): it would be replaced",
                                     keeps=("out.gpkg",)),
    "point-without-a-point-decoder": Case(seg_points(_pt(), model=_four("v0.3.0")), 4,
                                          r"clicks need the point decoder sam3_point_decoder.onnx"),
    "point-decoder-differs": Case(seg_points(_pt(), model=_four("differs")), 4,
                                  r"(?s)interface sam3tiles cannot drive.*orig_im_size int64 \[2\]"),
    "point-on-background-is-a-row": Case(seg_points(_pt(), _pt(400, 350)), 0, r"wrote 1 object to ", objects=2),
    "job-point-bad": Case(_job(_with(prompts={"text": [], "points": ["1,2,3,4"]})), 2,
                          r"prompts\.points\[0\]: .*give X,Y\[,neg\]"),
}
CASES.update(POINTS_CASES)


# -- issue 40: the inputs are checked before the model (a wrong path is exit 3 with or without the model) ------

def seg_no_model(src, *extra):
    """`segment` with the default backend (onnx) and --model naming an empty folder: no model there."""
    def argv(tmp: Path):
        (tmp / "no-model").mkdir(exist_ok=True)
        return ["segment", str(src(tmp) if callable(src) else src), "--text", "building", "--model",
                str(tmp / "no-model"), "--out", str(tmp / "o" / "out.gpkg"), *extra]
    return argv


DOORS40_CASES: dict[str, Case] = {
    "missing-input-without-the-model": Case(seg_no_model(lambda t: t / "nope.tif"), 3, r"nope\.tif: no such file"),
    "unreadable-input-without-the-model": Case(seg_no_model(_zero), 3, r"zero\.tif"),
    "good-input-without-the-model": Case(seg_no_model(_square), 4, r"(?s)no-model lacks .*sam3tiles model fetch"),
}
CASES.update(DOORS40_CASES)


# -- many files as one map (issue 38) ----------------------------------------------------------------------

def _halves(tmp, gap: int = 0, damaged: bool = False):
    """The square scene cut at column 140 (through the square) into two files in tmp/halves/, the right one
    `gap` px further right (a gap: two maps); `damaged`: the right one truncated. Returns the glob."""
    d = tmp / "halves"
    d.mkdir(exist_ok=True)
    data = square_image()
    for name, c0, c1 in (("left.tif", 0, 140), ("right.tif", 140, data.shape[2])):
        at = rasterio.Affine(PIXEL, 0, ORIGIN[0] + (c0 + (gap if c0 else 0)) * PIXEL, 0, -PIXEL, ORIGIN[1])
        write(d / name, np.ascontiguousarray(data[:, :, c0:c1]), transform=at, compress=None, tiled=False)
    if damaged:
        raw = (d / "right.tif").read_bytes()
        (d / "right.tif").write_bytes(raw[: len(raw) // 2])
    return str(d / "*.tif")


MOSAIC_CASES: dict[str, Case] = {
    "mosaic-object-across-the-file-edge-is-whole": Case(seg(_halves), 0, r"wrote 1 object to ", objects=1),
    "mosaic-no-mosaic-cuts-it-and-warns": Case(seg(_halves, "--no-mosaic"), 0,
                                               r"touch or overlap.*--no-mosaic.*cut or doubled", objects=2),
    "mosaic-coco-output-refused": Case(seg(_halves, out="out.coco.json"), 2,
                                       r"COCO annotations are in each input image's pixels.*--no-mosaic"),
    "mosaic-labels-of-two-maps-refused": Case(lambda t: seg(lambda t: _halves(t, gap=40), "--labels",
                                                            str(t / "o" / "labels.tif"))(t), 2,
                                              r"--labels writes the label image of one input.*the inputs form 2 maps"),
    "mosaic-damaged-member-named": Case(seg(lambda t: _halves(t, damaged=True)), 3, r"right\.tif is truncated"),
}
CASES.update(MOSAIC_CASES)


# -- issue 39: areas of interest that cannot be one, refused before any tile ---------------------------------

def _area_file(kind, name="area.gpkg", crs=CRS_DEMO):
    """A vector file in tmp: `kind` polygon (the square's box), points, lines, empty, broken, or nocrs."""
    from shapely.geometry import LineString

    def make(tmp):
        p = tmp / name
        if kind == "broken":
            p.write_text('{"type": "FeatureCollection", "features": [')
            return p
        sq = box(*square_geo_box(20))
        geoms = {"polygon": [sq], "half": [box(sq.bounds[0], sq.bounds[1], sq.centroid.x, sq.bounds[3])],
                 "points": [sq.centroid], "lines": [LineString(sq.exterior.coords)], "empty": [],
                 "nocrs": [sq]}[kind]
        gdf = gpd.GeoDataFrame(geometry=geoms, crs=None if kind == "nocrs" or crs is None else crs.to_wkt())
        with warnings.catch_warnings():  # pyogrio warns of a file without a CRS: the point of the nocrs case
            warnings.filterwarnings("ignore", "'crs' was not provided", UserWarning)
            gdf.to_file(p)
        return p
    return make


def seg_aoi(area, *extra, src=None):
    def argv(tmp):
        a = area(tmp) if callable(area) else area
        return seg(src or _square, "--aoi", str(a), *extra)(tmp)
    return argv


def _aoi_job(aoi):
    def argv(tmp):
        return _job(_with(tiling={"aoi": aoi(tmp) if callable(aoi) else aoi}))(tmp)
    return argv


def _clipped_half(tmp):
    got = gpd.read_file(tmp / "o" / "out.gpkg")
    assert len(got) == 1 and got.geometry.iloc[0].area == pytest.approx(got["area_m2"].iloc[0])
    assert got["area_px"].iloc[0] < 0.75 * 60 * 80  # the half of the square inside the area


MISSES = r"does not overlap the input: the area spans 1,2,3,4 and .*square\.tif: 500000,.*check the area's CRS"
AOI_CASES: dict[str, Case] = {
    "aoi-no-overlap": Case(seg_aoi("1,2,3,4"), 2, r"--aoi 1,2,3,4 " + MISSES),
    "plan-aoi-no-overlap": Case(lambda t: ["plan", str(_square(t)), "--aoi", "1,2,3,4"], 2, r"--aoi 1,2,3,4 " + MISSES),
    "job-aoi-no-overlap": Case(_aoi_job([1, 2, 3, 4]), 2, r"tiling\.aoi 1\.0,2\.0,3\.0,4\.0 does not overlap"),
    "aoi-points": Case(seg_aoi(_area_file("points")), 3, r"area\.gpkg holds points .*an area is polygons: buffer"),
    "aoi-lines": Case(seg_aoi(_area_file("lines")), 3, r"area\.gpkg holds lines .*buffer them first"),
    "aoi-empty-file": Case(seg_aoi(_area_file("empty")), 3, r"area\.gpkg holds no geometry: draw the area"),
    "aoi-broken-file": Case(seg_aoi(_area_file("broken", "area.geojson")), 3,
                            r"area\.geojson is not a vector file GDAL can read .*give a GeoPackage"),
    "aoi-missing-file": Case(seg_aoi("nowhere.gpkg"), 3, r"--aoi nowhere\.gpkg: no such file: check the path"),
    "aoi-no-crs-on-a-georeferenced-raster": Case(seg_aoi(_area_file("nocrs")), 3,
                                                 r"has no CRS but the raster has one \(EPSG:32633\).*-a_srs"),
    "aoi-a-crs-on-a-pixel-image": Case(seg_aoi(_area_file("polygon"), src=_plain), 3,
                                       r"is in EPSG:32633, but the image has no CRS .*level-0 pixels"),
    "aoi-box-corners-swapped": Case(seg_aoi("500030,4099900,500010,4099950"), 2, r"MINX < MAXX and MINY < MAXY"),
    "aoi-unknown-layer": Case(seg_aoi(lambda t: f"{_area_file('polygon')(t)}:nope"), 2,
                              r"has no layer 'nope': its layers are area"),
    "job-aoi-missing-file": Case(_aoi_job("nowhere.gpkg"), 2, r"tiling\.aoi: no such file: .*nowhere\.gpkg"),
    "tissue-not-a-choice": Case(seg(_square, "--tissue", "maybe"), 2, r"--tissue.*'maybe' is not one of"),
    # documented handling: the objects in the area whole, or clipped to it
    "aoi-around-the-square": Case(seg_aoi(_area_file("polygon")), 0, r"wrote 1 object to ", objects=1),
    "aoi-clips-half-the-square": Case(seg_aoi(_area_file("half"), "--aoi-clip"), 0, r"wrote 1 object to ", objects=1,
                                      check=_clipped_half),
}
CASES.update(AOI_CASES)


# -- a model folder given to a backend that loads none is said, not silently ignored (issue 36's last case) ---

MODEL_IGNORED_CASES: dict[str, Case] = {
    "model-with-the-reference-backend": Case(seg(_square, "--model", "/nowhere/sam3"), 0,
                                             r"--model /nowhere/sam3: not used by the reference backend, .*"
                                             r"--backend onnx", objects=1),
}
CASES.update(MODEL_IGNORED_CASES)


def _invoke(argv: list[str], in_subprocess: bool, cwd: Path):
    if in_subprocess:
        p = subprocess.run([sys.executable, "-m", "sam3tiles.cli", *argv], capture_output=True, text=True,
                           cwd=cwd, timeout=120)
        return p.returncode, p.stdout, p.stderr
    import logging

    records: list[str] = []  # under pytest the CLI's logging.basicConfig is a no-op: collect warnings here

    class Collect(logging.Handler):
        def emit(self, record):
            records.append(f"{record.levelname} {record.name}: {record.getMessage()}\n")

    handler = Collect(logging.WARNING)
    logging.getLogger().addHandler(handler)
    try:
        r = CliRunner().invoke(cli, argv)
    finally:
        logging.getLogger().removeHandler(handler)
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    return r.exit_code, r.stdout, r.stderr + "".join(records)


def _tree(root: Path) -> dict:
    """Every file and folder under `root` except the output folder 'o': relative path -> bytes (None: folder)."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if rel == "o" or rel.startswith("o/"):
            continue
        out[rel] = None if p.is_dir() and not p.is_symlink() else p.read_bytes() if p.is_file() else "link"
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input(name, tmp_path, monkeypatch):
    case = CASES[name]
    monkeypatch.chdir(tmp_path)  # relative paths ('.') name the case's own folder
    argv = case.build(tmp_path)
    out_dir = tmp_path / "o"
    out_dir.mkdir(exist_ok=True)
    before = {p.name: (p.read_bytes() if p.is_file() else None) for p in out_dir.iterdir()}
    tree = _tree(tmp_path)
    code, stdout, stderr = _invoke(argv, case.subprocess, tmp_path)
    text = stdout + stderr
    after = _tree(tmp_path)
    allowed = lambda rel: any(rel == m.rstrip("/") or rel.startswith(m) for m in case.may_create)  # noqa: E731
    changed = sorted(k for k in set(tree) | set(after) if tree.get(k, 0) != after.get(k, 0) and not allowed(k))
    assert not changed, f"files outside the output folder changed or appeared: {changed}"
    assert "Traceback" not in text, text
    assert code == case.code, f"exit {code}, expected {case.code}:\n{text}"
    assert re.search(case.message, stderr), f"no /{case.message}/ in:\n{stderr}"
    if code not in (0, 5):
        assert stderr.startswith("Error: ") or stderr.startswith("Usage: ") and "\nError: " in stderr, stderr
        assert len(stderr.strip().splitlines()) <= 12, stderr
    left = {p.name for p in out_dir.iterdir()}
    for name_kept in case.keeps:  # what was there before is untouched
        assert name_kept in left and (before[name_kept] is None or
                                      (out_dir / name_kept).read_bytes() == before[name_kept])
    temps = [n for n in left if ".tmp" in n or n.endswith(".lock") and n not in case.keeps]
    assert not temps, temps
    outputs = [n for n in left - set(case.keeps) - set(case.also_writes) if not n.endswith(".sam3tiles-work")
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


def test_there_are_at_least_100_cases():
    assert len(CASES) >= 100


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
