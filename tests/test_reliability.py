"""Nothing lost, nothing silently wrong (issue 14), for the cases a table of single commands cannot show:
checkpoints that hold data and never run code, input identities that follow the pixels' origin (archive
members, VRT sources, URLs, --verify-inputs), full disks, reruns after exit 5, the report written before
the outputs appear, rotated label images; and a hypothesis fuzz over options and job files (no exit 1).
"""

from __future__ import annotations

import http.server
import json
import os
import pickle
import shutil
import sqlite3
import subprocess
import threading
import zipfile
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import rasterio
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sam3tiles.cli.main import cli
from sam3tiles.run.pipeline import segment_job
from sam3tiles.testing.demo import CRS_DEMO, ORIGIN, PIXEL

from sam3tiles.testing import BLUE, RED
from sam3tiles.testing import blob_image as _image
from sam3tiles.testing import write_demo_raster as _write




def _run(src, tmp, texts=("blue",), **kw):
    kw.setdefault("out", tmp / "o.gpkg")
    kw.setdefault("overwrite", True)
    return segment_job(str(src), list(texts), backend="reference", workers=1, **kw)


# -- checkpoints: data, not code ---------------------------------------------------------------------------

class _Boom:
    def __reduce__(self):
        return (os.system, (f"touch {os.environ.get('S3T_BOOM', '/nonexistent/boom')}",))


def test_a_crafted_checkpoint_row_is_recomputed_never_executed(tmp_path, monkeypatch):
    from sam3tiles.run.recording.checkpoint import decode_result, encode_result

    src = _write(tmp_path / "a.tif", _image())
    gdf, rep = _run(src, tmp_path)
    db = tmp_path / "o.gpkg.sam3tiles-work" / "tiles.sqlite"
    boom = tmp_path / "boom"
    monkeypatch.setenv("S3T_BOOM", str(boom))
    con = sqlite3.connect(db)
    con.execute("UPDATE tiles SET result = ?", (pickle.dumps(_Boom()),))  # a shared work folder, tampered with
    con.commit()
    con.close()
    gdf2, rep2 = _run(src, tmp_path)
    assert not boom.exists(), "a checkpoint row ran code"
    assert rep2.checkpoint["reused"] == 0 and rep2.done == 1
    assert len(gdf2) == len(gdf) == 1
    # a row of the wrong shape (valid JSON, wrong types) is recomputed too
    good = encode_result(decode_result(sqlite3.connect(db).execute("SELECT result FROM tiles").fetchone()[0]), None)
    bad = good.replace(b'"skipped":false', b'"skipped":"no"')
    assert decode_result(bad) is None and decode_result(good) is not None


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=300))
def test_decode_result_never_raises(blob):
    from sam3tiles.run.recording.checkpoint import decode_result

    assert decode_result(b"S3TR" + blob) is None or True
    decode_result(blob)


def test_checkpoint_rows_round_trip():
    from shapely.geometry import MultiPolygon, box

    from sam3tiles.run.recording.checkpoint import decode_result, encode_result
    from sam3tiles.run.recording.checkpoint import TileResult
    from sam3tiles.tiling.piecekey import piece_key
    from sam3tiles.vectorize.pieces import Pieces

    p = Pieces(geometry=[box(0, 0, 1, 1), MultiPolygon([box(2, 2, 3, 3), box(5, 5, 6, 6)])],
               score=[np.float32(0.75), 0.5], prompt=[0, 0], tile_key=[piece_key(1, 0), piece_key(1, 1)],
               complete=[np.bool_(True), False],
               edge_dist=[float("inf"), 3.0])
    r = TileResult(1, p, seconds={"read": 0.1}, unusable_prompts=("x",), saturated_prompts=(0,))
    back = decode_result(encode_result(r, None))
    assert back.pieces.score == [0.75, 0.5] and back.pieces.edge_dist == [float("inf"), 3.0]
    assert [g.equals(h) for g, h in zip(back.pieces.geometry, p.geometry)] == [True, True]
    assert (back.tile_index, back.unusable_prompts, back.saturated_prompts) == (1, ("x",), (0,))


# -- input identity follows where the pixels come from -----------------------------------------------------

def test_a_changed_zip_member_is_recomputed(tmp_path):
    for name, colour in (("blue.tif", BLUE), ("red.tif", RED)):
        _write(tmp_path / name, _image(colour))
    z = tmp_path / "scenes.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.write(tmp_path / "blue.tif", "scene.tif")
    src = f"/vsizip/{z}/scene.tif"
    gdf, rep = _run(src, tmp_path)
    assert len(gdf) == 1 and rep.done == 1
    _, rep = _run(src, tmp_path)
    assert rep.resumed == 1  # unchanged: resumed
    with zipfile.ZipFile(z, "w") as zf:  # the same member name, other pixels
        zf.write(tmp_path / "red.tif", "scene.tif")
    gdf, rep = _run(src, tmp_path)
    assert rep.resumed == 0 and rep.done == 1 and len(gdf) == 0  # no blue square any more


def test_a_changed_vrt_source_is_recomputed(tmp_path):
    _write(tmp_path / "part.tif", _image(BLUE))
    bands = "".join(f'<VRTRasterBand dataType="Byte" band="{b}"><SimpleSource><SourceFilename relativeToVRT="1">'
                    f"part.tif</SourceFilename><SourceBand>{b}</SourceBand></SimpleSource></VRTRasterBand>"
                    for b in (1, 2, 3))
    vrt = tmp_path / "m.vrt"
    vrt.write_text(f'<VRTDataset rasterXSize="500" rasterYSize="400"><SRS>{CRS_DEMO.to_wkt()}</SRS><GeoTransform>'
                   f"{ORIGIN[0]},{PIXEL},0,{ORIGIN[1]},0,{-PIXEL}</GeoTransform>{bands}</VRTDataset>")
    gdf, _ = _run(vrt, tmp_path)
    assert len(gdf) == 1
    _write(tmp_path / "part.tif", _image(RED))  # the VRT file itself is unchanged
    gdf, rep = _run(vrt, tmp_path)
    assert rep.resumed == 0 and len(gdf) == 0


class _RangeHandler(http.server.SimpleHTTPRequestHandler):
    """Static files with HTTP range requests (what GDAL's /vsicurl/ reads with)."""

    def log_message(self, *a):
        pass

    def do_GET(self):  # noqa: N802
        rng = self.headers.get("Range")
        path = Path(self.translate_path(self.path))
        if not rng or not path.is_file():
            return super().do_GET()
        data = path.read_bytes()
        a, _, b = rng.removeprefix("bytes=").partition("-")
        a, b = int(a), min(int(b) if b else len(data) - 1, len(data) - 1)
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {a}-{b}/{len(data)}")
        self.send_header("Content-Length", str(b - a + 1))
        self.send_header("Last-Modified", self.date_time_string(int(path.stat().st_mtime)))
        self.end_headers()
        self.wfile.write(data[a:b + 1])


def test_a_changed_remote_input_is_recomputed(tmp_path):
    served = tmp_path / "www"
    served.mkdir()
    _write(served / "scene.tif", _image(BLUE))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(_RangeHandler, directory=str(served)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"/vsicurl/http://127.0.0.1:{server.server_address[1]}/scene.tif"
        with rasterio.Env(GDAL_DISABLE_READDIR_ON_OPEN="EMPTY_DIR", CPL_VSIL_CURL_CACHE_SIZE="0"):
            gdf, _ = _run(url, tmp_path)
            assert len(gdf) == 1
            data = _image(RED, at=(10, 10))
            _write(served / "scene.tif", data)  # new content, new size and time
            st = (served / "scene.tif").stat()
            os.utime(served / "scene.tif", (st.st_atime + 5, st.st_mtime + 5))
            from sam3tiles.readers.identity import file_stamp

            assert file_stamp(url) is not None
            _, rep = _run(url, tmp_path)
            assert rep.resumed == 0
    finally:
        server.shutdown()


def test_verify_inputs_hashes_content(tmp_path):
    src = _write(tmp_path / "a.tif", _image())
    _run(src, tmp_path, verify_inputs=True)
    os.utime(src, (1, 1))  # touched, same content: resumed with --verify-inputs, recomputed without
    _, rep = _run(src, tmp_path, verify_inputs=True)
    assert rep.resumed == 1
    _, rep = _run(src, tmp_path)
    assert rep.resumed == 0


# -- full disks --------------------------------------------------------------------------------------------

@pytest.fixture
def tiny_disk(tmp_path):
    d = tmp_path / "disk"
    d.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(d)],
                                           capture_output=True).returncode != 0:
        pytest.skip("needs root to mount a small tmpfs")
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], check=False)


def _fill(d: Path, leave: int) -> None:
    free = shutil.disk_usage(d).free
    with open(d / "filler", "wb") as f:
        f.write(b"\0" * max(0, free - leave))


@pytest.mark.parametrize("leave", [0, 4096, 40_000, 120_000])  # lock, store, store, output
def test_a_full_disk_is_exit_2_naming_the_folder_and_leaves_nothing(tiny_disk, tmp_path, leave):
    src = _write(tmp_path / "a.tif", _image())
    _fill(tiny_disk, leave)
    r = CliRunner().invoke(cli, ["segment", str(src), "-t", "blue", "--backend", "reference", "--workers", "1",
                                 "--out", str(tiny_disk / "out.gpkg")])
    assert r.exit_code == 2, (r.exit_code, r.stderr, r.exception)
    assert str(tiny_disk) in r.stderr and "Traceback" not in r.stderr
    assert any(w in r.stderr for w in ("space", "full", "cannot be used")), r.stderr
    from sam3tiles.run.recording.workfolder import is_work_dir

    left = [p for p in tiny_disk.iterdir() if p.name != "filler"]
    # no output, lock or temporary file; a work folder only if it holds checkpoints of finished tiles
    assert all(p.name == "out.gpkg.sam3tiles-work" and is_work_dir(p) for p in left), left


# -- reruns: exit 5 resumes, the report comes before the output ---------------------------------------------

def _damaged(tmp):
    import tifffile

    from sam3tiles.testing.demo import write_scene

    p = tmp / "blocky.tif"
    write_scene(p, 2200, 1000, 5)
    with tifffile.TiffFile(p) as tf:
        off, cnt = tf.pages[0].dataoffsets[5], tf.pages[0].databytecounts[5]
    with open(p, "r+b") as fh:
        fh.seek(off + 2)
        fh.write(b"\xff" * (cnt - 4))
    return p


def test_rerun_after_exit_5_resumes_without_overwrite(tmp_path):
    src = _damaged(tmp_path)
    argv = ["segment", str(src), "-t", "blue", "--backend", "reference", "--workers", "1", "--out",
            str(tmp_path / "o.gpkg")]
    r = CliRunner().invoke(cli, argv)
    assert r.exit_code == 5, r.stderr
    r = CliRunner().invoke(cli, argv)  # as the docs say: rerun the same command
    assert r.exit_code == 5, r.stderr
    rep = json.loads((tmp_path / "o.gpkg.report.json").read_text())
    assert rep["resumed"] == 1 and rep["failed"] == 2
    (tmp_path / "o.gpkg").write_bytes((tmp_path / "o.gpkg").read_bytes() + b"\0")  # changed since: not ours now
    r = CliRunner().invoke(cli, argv)
    assert r.exit_code == 2 and "exists" in r.stderr


def test_a_complete_output_is_still_not_replaced_without_overwrite(tmp_path):
    src = _write(tmp_path / "a.tif", _image())
    argv = ["segment", str(src), "-t", "blue", "--backend", "reference", "--workers", "1", "--out",
            str(tmp_path / "o.gpkg")]
    assert CliRunner().invoke(cli, argv).exit_code == 0
    r = CliRunner().invoke(cli, argv)
    assert r.exit_code == 2 and "exists: pass --overwrite" in r.stderr


def test_the_report_is_in_place_before_the_output(tmp_path):
    src = _write(tmp_path / "a.tif", _image())
    _run(src, tmp_path, labels=tmp_path / "labels.tif")
    report = (tmp_path / "o.gpkg.report.json").stat()
    for out in ("o.gpkg", "labels.tif"):  # a rename sets the ctime: each output arrived after the report
        assert (tmp_path / out).stat().st_ctime_ns >= report.st_mtime_ns


def test_deferred_renames_leave_nothing_when_abandoned(tmp_path):
    from sam3tiles.writers.atomic import Deferred, atomic_path, deferred_renames

    pending = Deferred()
    with deferred_renames(pending):
        with atomic_path(tmp_path / "x.json") as t:
            t.write_text("{}")
    assert not (tmp_path / "x.json").exists() and len(list(tmp_path.iterdir())) == 1
    pending.discard()
    assert list(tmp_path.iterdir()) == []


# -- label images of rotated rasters -------------------------------------------------------------------------

def test_labels_of_a_rotated_raster_cover_the_object(tmp_path):
    import math

    from affine import Affine

    t = Affine(PIXEL, 0, ORIGIN[0], 0, -PIXEL, ORIGIN[1]) @ Affine.rotation(30)
    src = _write(tmp_path / "rot.tif", _image(), transform=t)
    gdf, _ = _run(src, tmp_path, labels=tmp_path / "labels.tif")
    assert len(gdf) == 1
    with rasterio.open(tmp_path / "labels.tif") as ds:
        lab = ds.read(1)
    area_px = gdf.area.iloc[0] / PIXEL ** 2
    assert math.isclose(area_px, 60 * 80, rel_tol=0.1)  # the square, found
    assert abs(int((lab == 1).sum()) - area_px) < 0.01 * area_px, (int((lab == 1).sum()), area_px)


# -- fuzz: option values and job files never give an internal error --------------------------------------------

_WEIRD = st.sampled_from(["", " ", "-5", "0", "-1", "1e-30", "1e30", "inf", "-inf", "nan", "1.5", "abc", "3,2,1",
                          "9", "64", "65", "1008", "1009", "4096", "/", ".", "~", "*", "[", "a,b"])
_OPTIONS = ["--tile-size", "--overlap", "--scale", "--gsd", "--bands", "--min-area", "--simplify", "--workers",
            "--threads", "--work-dir", "--box", "--text"]


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("fuzz")
    _write(d / "square.tif", _image())
    (d / "o").mkdir()
    return d


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(st.sampled_from(_OPTIONS), _WEIRD), min_size=1, max_size=3))
def test_fuzz_options_never_exit_1(fuzz_dir, opts):
    argv = ["segment", str(fuzz_dir / "square.tif"), "--backend", "reference", "--out",
            str(fuzz_dir / "o" / "out.gpkg"), "--overwrite", "-q", "-t", "blue"]
    for name, value in opts:
        argv += [name, value]
    if not any(n == "--workers" for n, _ in opts):
        argv += ["--workers", "1"]
    if not any(n == "--work-dir" for n, _ in opts):
        argv += ["--work-dir", str(fuzz_dir / "o" / "work")]
    cwd = os.getcwd()
    os.chdir(fuzz_dir)
    try:
        r = CliRunner().invoke(cli, argv)
    finally:
        os.chdir(cwd)
    assert r.exit_code in (0, 2, 3), (argv, r.exit_code, r.stderr, r.exception)
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr
    assert (fuzz_dir / "square.tif").exists()


_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True),
                     st.text(max_size=8), st.sampled_from(["square.tif", "o/out.gpkg", "reference", ".", "*.tif"]))
_KEYS = st.sampled_from(["inputs", "prompts", "text", "boxes", "box_file", "backend", "name", "model", "tiling",
                         "tile_size", "overlap", "scale", "gsd", "bands", "output", "path", "work_dir", "report",
                         "labels", "overwrite", "run", "workers", "retries", "strict", "postprocess", "min_area", "x"])
_YAML = st.recursive(_SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(_KEYS, inner, max_size=4)), max_leaves=12)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.dictionaries(_KEYS, _YAML, max_size=6), st.booleans())
def test_fuzz_job_files_never_exit_1(fuzz_dir, job, garble):
    import yaml

    text = yaml.safe_dump(job)
    if garble:
        text = text.replace(":", ": [", 1)
    p = fuzz_dir / "fuzz.yaml"
    p.write_text(text)
    r = CliRunner().invoke(cli, ["run", str(p), "--dry-run"])
    assert r.exit_code in (0, 2, 3, 4), (text, r.exit_code, r.stderr, r.exception)
    assert "internal error" not in r.stderr
