"""Country-scale runs: objects streamed to the outputs as merge blocks finish (same objects, same ids, same
order as in memory), the partitioned GeoParquet dataset, `return_objects=False`, remote inputs (a COG over
HTTP with a presigned-style query string, STAC items and item collections, lists of inputs) served by a
local byte-range server, and the country benchmark's smoke size."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import geopandas as gpd
import numpy as np
import pandas as pd
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
import shapely
from shapely.geometry import MultiPolygon
from click.testing import CliRunner
from range_server import serve

from sam3tiles.errors import UsageError
from sam3tiles.run.pipeline import segment_job
from sam3tiles.testing.demo import write_scene
from sam3tiles.writers import stream

PROMPTS = ["red", "blue"]


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    d = tmp_path_factory.mktemp("scale")
    write_scene(d / "scene.tif", 1500, 1300, seed=3)
    return d / "scene.tif"


@pytest.fixture(scope="module")
def reference(scene):
    """The objects held in memory (what `segment()` returns), as one table."""
    gdf, rep = segment_job(str(scene), PROMPTS, backend="reference", checkpoint=False)
    assert rep.objects == len(gdf) > 10
    return gdf


def _multi(gdf: gpd.GeoDataFrame) -> gpd.GeoDataFrame:
    out = gdf.copy()
    out.geometry = [MultiPolygon([g]) if g.geom_type == "Polygon" else g for g in gdf.geometry]
    return out


def _same(a: gpd.GeoDataFrame, b: gpd.GeoDataFrame, source: bool = True) -> None:
    """Same rows in the same order: ids, columns and exact geometries (`source`: the same input, too)."""
    assert len(a) == len(b)
    cols = ["id", "prompt", "score", "area_m2", "area_px", "n_tiles", "backend", "model"] + ["source"] * source
    pd.testing.assert_frame_equal(pd.DataFrame(a[cols]).reset_index(drop=True),
                                  pd.DataFrame(b[cols]).reset_index(drop=True), check_dtype=False)
    assert bool(shapely.equals_exact(np.asarray(a.geometry.values), np.asarray(b.geometry.values), 0).all())


def test_streamed_outputs_equal_the_objects_in_memory_whatever_the_blocks(scene, reference, tmp_path, monkeypatch):
    # small chunks and one-tile blocks: many blocks finish out of order, many chunks are appended
    monkeypatch.setattr(stream, "CHUNK_ROWS", 7)
    assert list(reference["id"]) == list(range(1, len(reference) + 1))
    for name, block in (("o.gpkg", 1), ("o.parquet", 2)):
        _, rep = segment_job(str(scene), PROMPTS, backend="reference", out=tmp_path / name, merge_block=block,
                             return_objects=False)
        assert rep.objects == len(reference)
        back = gpd.read_parquet(tmp_path / name) if name.endswith("parquet") else gpd.read_file(tmp_path / name)
        # a GeoPackage written in several chunks is MultiPolygon throughout (writers.vector._write_gpkg)
        _same(back, reference if name.endswith("parquet") else _multi(reference))
        assert not list(tmp_path.glob("*.sam3tiles-work/*.spool.sqlite"))  # the spool is gone
    # the single GeoParquet file's metadata covers every part: bbox, geometry types, the run's metadata
    geo = json.loads(pq.read_schema(tmp_path / "o.parquet").metadata[b"geo"])
    bbox = geo["columns"]["geometry"]["bbox"]
    assert np.allclose(bbox, reference.total_bounds)
    assert b"sam3tiles" in pq.read_schema(tmp_path / "o.parquet").metadata[b"PANDAS_ATTRS"]  # the run's metadata


def test_chunks_hold_a_bounded_share_of_geometry_bytes_not_only_of_rows(scene, reference, tmp_path, monkeypatch):
    # issue 48: 20,000 objects a chunk held ~500 MB of long outlines at 10^5 tiles; a chunk is now also bounded by
    # its WKB (CHUNK_BYTES): with a budget of about three mean objects, parts of one to three, the same table
    import shapely as sh

    mean = float(np.mean([len(g) for g in sh.to_wkb(np.asarray(reference.geometry.values))]))
    monkeypatch.setattr(stream, "CHUNK_BYTES", int(3 * mean))
    out = str(tmp_path / "objects.parquet") + "/"
    segment_job(str(scene), PROMPTS, backend="reference", out=out, return_objects=False)
    parts = sorted((tmp_path / "objects.parquet").iterdir())
    assert -(-len(reference) // 3) <= len(parts) <= len(reference)  # one part before (20,000 rows a chunk)
    _same(gpd.read_parquet(tmp_path / "objects.parquet"), reference)


def test_partitioned_dataset_reads_as_one_table(scene, reference, tmp_path, monkeypatch):
    monkeypatch.setattr(stream, "CHUNK_ROWS", 10)
    out = str(tmp_path / "objects.parquet") + "/"
    segment_job(str(scene), PROMPTS, backend="reference", out=out, return_objects=False,
                         min_area=0.0, simplify=0.0)
    parts = sorted((tmp_path / "objects.parquet").iterdir())
    assert len(parts) == -(-len(reference) // 10) and all(p.suffix == ".parquet" for p in parts)
    assert (tmp_path / "objects.parquet.report.json").exists()
    # geopandas and pyarrow.dataset read the folder as one table; the covering bbox column filters parts
    _same(gpd.read_parquet(tmp_path / "objects.parquet"), reference)
    table = ds.dataset(tmp_path / "objects.parquet", format="parquet")
    assert table.count_rows() == len(reference)
    assert "bbox" in table.schema.names
    x0, y0, x1, y1 = reference.geometry.iloc[0].bounds
    hit = table.to_table(filter=(ds.field("bbox", "xmax") >= x0) & (ds.field("bbox", "xmin") <= x1)
                         & (ds.field("bbox", "ymax") >= y0) & (ds.field("bbox", "ymin") <= y1))
    assert 1 <= hit.num_rows < len(reference) and 1 in hit.column("id").to_pylist()
    # an existing dataset needs --overwrite, and a folder that is not a dataset is never replaced
    with pytest.raises(UsageError, match="exists"):
        segment_job(str(scene), PROMPTS, backend="reference", out=out, return_objects=False)
    other = tmp_path / "mine.parquet"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="not Parquet parts"):
        segment_job(str(scene), PROMPTS, backend="reference", out=str(other) + "/", overwrite=True)
    assert (other / "notes.txt").read_text() == "mine"


def test_min_area_simplify_per_block_and_labels_from_the_spool(scene, reference, tmp_path):
    import rasterio

    small, _ = segment_job(str(scene), PROMPTS, backend="reference", checkpoint=False, min_area=40.0,
                           simplify=0.6, merge_block=1, labels=tmp_path / "l.tif")
    expect = reference.copy()
    expect["geometry"] = expect.geometry.simplify(0.6, preserve_topology=True)
    expect = expect[expect.geometry.area >= 40.0]
    assert 0 < len(small) < len(reference)
    assert bool(shapely.equals_exact(np.asarray(small.geometry.values), np.asarray(expect.geometry.values), 0).all())
    assert list(small["id"]) == list(range(1, len(small) + 1))
    with rasterio.open(tmp_path / "l.tif") as src:
        img = src.read(1)
        r, c = src.index(*small.geometry.iloc[-1].representative_point().coords[0])
    assert set(np.unique(img)) - {0} <= set(small["id"]) and img[r, c] == small["id"].iloc[-1]


# -- remote inputs ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def served(scene, tmp_path_factory):
    """The scene as a COG and a STAC item beside it (relative href), served over HTTP with byte ranges."""
    import rasterio
    from rasterio.shutil import copy as rio_copy

    d = tmp_path_factory.mktemp("www")
    rio_copy(scene, d / "scene.tif", driver="COG")
    with rasterio.open(d / "scene.tif") as src:
        bounds = list(src.bounds)
    item = {"type": "Feature", "stac_version": "1.0.0", "id": "scene-1", "bbox": bounds, "geometry": None,
            "properties": {"datetime": "2026-01-01T00:00:00Z"}, "links": [],
            "assets": {"visual": {"href": "scene.tif",
                                  "type": "image/tiff; application=geotiff; profile=cloud-optimized"},
                       "thumbnail": {"href": "thumb.png", "type": "image/png"}}}
    (d / "item.json").write_text(json.dumps(item))
    with serve(d) as url:
        yield d, url


def test_presigned_url_and_stac_item_give_the_local_objects(served, reference, tmp_path):
    d, url = served
    presigned = f"{url}/scene.tif?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature=ab%2Fcd&X-Amz-Expires=3600"
    gdf, rep = segment_job(presigned, PROMPTS, backend="reference", checkpoint=False)
    assert set(gdf["source"]) == {f"{url}/scene.tif"}  # the URL as given; its signature is no part of it
    _same(gdf, reference, source=False)
    log = (d / "requests.log").read_text()
    assert "GET /scene.tif?X-Amz-Algorithm" in log  # the query string reached the server
    # a STAC item over HTTP (relative href), and one on disk pointing at the URL
    for item in (f"{url}/item.json", _local_item(d, tmp_path, f"{url}/scene.tif")):
        got, _ = segment_job(item, PROMPTS, backend="reference", checkpoint=False, asset="visual")
        _same(got, reference, source=False)
        assert set(got["source"]) == {f"{url}/scene.tif"}  # the asset's href
    # an item collection (a saved STAC search) and a text file of inputs expand to their rasters
    coll = tmp_path / "search.json"
    feature = json.loads((d / "item.json").read_text()) | {"links": [{"rel": "self", "href": f"{url}/item.json"}]}
    coll.write_text(json.dumps({"type": "FeatureCollection", "features": [feature]}))
    from sam3tiles.run.planning.inputs import expand_inputs

    assert expand_inputs(str(coll), "visual") == [f"{url}/scene.tif"]
    lst = tmp_path / "inputs.txt"
    lst.write_text(f"# a list\n{presigned}\n\nlocal.tif\n")
    assert expand_inputs(str(lst)) == [presigned, str(tmp_path / "local.tif")]


def _local_item(d: Path, tmp: Path, href: str) -> str:
    item = json.loads((d / "item.json").read_text())
    item["assets"]["visual"]["href"] = href
    (tmp / "item-local.json").write_text(json.dumps(item))
    return str(tmp / "item-local.json")


def test_stac_asset_errors_list_the_assets(served, tmp_path):
    from sam3tiles.cli.main import cli

    d, url = served
    r = CliRunner().invoke(cli, ["segment", f"{url}/item.json", "--text", "red", "--backend", "reference",
                                 "--asset", "nir", "--out", str(tmp_path / "o.gpkg")])
    assert r.exit_code == 2 and "no asset 'nir'" in r.output and "visual (image/tiff" in r.output
    assert "thumbnail (image/png)" in r.output and "Traceback" not in r.output
    # without --asset, the one raster asset (the thumbnail is a PNG too: so two) must be chosen
    r = CliRunner().invoke(cli, ["segment", str(d / "item.json"), "--text", "red", "--backend", "reference",
                                 "--out", str(tmp_path / "o.gpkg")])
    assert r.exit_code == 2 and "choose the image with --asset KEY" in r.output
    assert not (tmp_path / "o.gpkg").exists()


# -- the country benchmark ---------------------------------------------------------------------------------

def test_country_benchmark_smoke():
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, "-m", "benchmarks.bench_country", "--smoke", "--json"], cwd=root,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["tiles"] >= 36 and res["peak_rss_mb"] > 0 and res["driver_cpu_ms_per_tile"] > 0
    assert res["scheduler_cpu_ms_per_tile"] > 0  # the scheduler is a process of its own, measured apart
    assert res["driver_and_scheduler_ms_per_tile"] == pytest.approx(
        res["driver_cpu_ms_per_tile"] + res["scheduler_cpu_ms_per_tile"], abs=0.01)
    assert res["tasks_alive_peak"] <= 64  # batches of tiles, not three tasks a tile


def test_job_file_keeps_urls_literal_and_takes_the_asset(tmp_path):
    from sam3tiles.jobs import job_call, parse_job

    url = "https://bucket.s3.amazonaws.com/a/tile_[1].tif?X-Amz-Signature=ab%2Fcd&X-Amz-Expires=60"
    lj = parse_job(f"inputs: ['{url}', /vsis3/b/c.tif]\nasset: visual\nprompts: {{text: [building]}}\n"
                   "output: {path: out.parquet/}\n", base=tmp_path)
    assert lj.inputs == [url, "/vsis3/b/c.tif"] and lj.output.endswith("out.parquet/")
    assert job_call(lj)["options"].asset == "visual"


def test_remote_file_changed_between_runs_is_recomputed_not_resumed(served, tmp_path):
    """Checkpoints of a URL input are keyed by its ETag / Last-Modified / size: a rerun after the file was
    replaced (a run killed, the file updated, the run resubmitted) recomputes every tile."""
    import rasterio

    d, url = served
    cog = d / "scene.tif"
    backup = tmp_path / "scene.tif"
    shutil.copy2(cog, backup)
    src = f"{url}/scene.tif?sig=x"
    out = tmp_path / "o.gpkg"
    _, first = segment_job(src, ["red"], backend="reference", out=out, return_objects=False)
    # the same file under a new signature (a presigned URL signed again after a walltime kill): resumed
    _, again = segment_job(f"{url}/scene.tif?sig=y", ["red"], backend="reference", out=out, overwrite=True,
                           return_objects=False)
    assert first.done == first.tiles and again.resumed == again.tiles  # unchanged: resumed
    try:
        with rasterio.open(cog) as s:
            profile, data = s.profile, s.read()
        data[:, :200, :200] = 0  # another version of the file, same size on disk or not
        with rasterio.open(tmp_path / "v2.tif", "w", **{**profile, "driver": "COG"}) as dst:
            dst.write(data)
        shutil.copy(tmp_path / "v2.tif", cog)
        # the rerun is a new process, as after a kill (this one's GDAL caches the old file's blocks)
        run = subprocess.run([sys.executable, "-m", "sam3tiles.cli", "-q", "segment", src, "--text", "red",
                              "--backend", "reference", "--out", str(out), "--overwrite"], capture_output=True,
                             text=True, timeout=300)
        assert run.returncode == 0, run.stderr
        changed = json.loads(Path(str(out) + ".report.json").read_text())
        assert changed["resumed"] == 0 and changed["done"] == changed["tiles"] == first.tiles
    finally:
        shutil.copy2(backup, cog)


def test_cloud_paths_are_identified_through_gdal(served, capfd, monkeypatch):
    """s3:// gs:// az:// and /vsis3/-like paths: the ETag / Last-Modified / size come from GDAL's own request
    (its credentials). Checked through /vsicurl/, the same GDAL call; a changed file changes the stamp,
    even in the process that saw the old one (GDAL's cache is cleared first)."""
    from sam3tiles.readers.identity import file_stamp, gdal_stamp

    d, url = served
    (d / "v.bin").write_bytes(b"1" * 100)
    first = gdal_stamp(f"/vsicurl/{url}/v.bin")
    assert first is not None and first.endswith("|100")
    assert gdal_stamp(f"/vsicurl/{url}/v.bin") == first
    time.sleep(0.01)
    (d / "v.bin").write_bytes(b"2" * 120)
    assert gdal_stamp(f"/vsicurl/{url}/v.bin") not in (None, first)
    # a cloud path GDAL cannot reach (no network here): unknown (never resumed), and no GDAL error printed
    monkeypatch.setenv("AWS_NO_SIGN_REQUEST", "YES")  # no credential search (seconds on a machine off EC2)
    assert file_stamp("s3://no-such-bucket-sam3tiles/x.tif") is None
    assert "ERROR" not in capfd.readouterr().err


def test_a_killed_runs_spool_is_removed_by_the_next_run_but_not_a_living_one(tmp_path):
    """A walltime kill leaves the spool (about the output's size) in the work folder: the rerun removes it;
    a spool another living run holds in the same folder stays."""
    stale = tmp_path / "objects-deadbeef.spool.sqlite"
    stale.write_bytes(b"x" * 1000)
    mine = tmp_path / "my-notes.sqlite"  # not a spool: never touched
    mine.write_bytes(b"y")
    living = stream.ObjectSpool(tmp_path)
    living.db  # created, and held
    other = stream.ObjectSpool(tmp_path)
    other.db
    assert not stale.exists() and mine.exists()
    assert living.path.exists() and other.path.exists()
    other.close()
    living.close()
    assert not living.path.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["my-notes.sqlite"]
