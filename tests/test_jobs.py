"""Job files: validation messages, paths and globs, the segment_job call, --dry-run, and the example jobs
in configs/ (each validates; the ones with fast data generation run end to end)."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import geopandas as gpd
import pytest
import yaml
from click.testing import CliRunner

from sam3tiles.cli.main import cli
from sam3tiles.errors import JobFileError
from sam3tiles.jobs import job_call, load_job, parse_job
from sam3tiles.testing.demo import write_scene

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))
MINE = {"buildings.yaml": ("aerial", "blue"), "cars-zoom.yaml": ("parking", "red"),
        "solar-panels-box.yaml": ("panels", "blue")}


def _make_data():
    spec = importlib.util.spec_from_file_location("make_data", ROOT / "examples" / "make_data.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _problems(text, base=".", check_files=True) -> list[str]:
    with pytest.raises(JobFileError) as info:
        parse_job(text, base, "job.yaml", check_files=check_files)
    msg = str(info.value)
    assert msg.startswith("job.yaml")
    return [ln.strip() for ln in msg.splitlines()[1:]] or [msg.split(": ", 1)[1]]


MINIMAL = "inputs: [a.tif]\nprompts: {text: [blue]}\noutput: {path: o.gpkg}\n"


@pytest.mark.parametrize("text, expect", [
    ("inputs: [a.tif]\nprompts: {text: [blue]}\noutput: {path: o.gpkg}\ncolour: red\n",
     ["colour: unknown key: remove it or use one of asset, backend, description, grid, inputs, output, postprocess, "
      "prompts, run, tiling"]),
    (MINIMAL + "tiling: {scael: 2}\n", ["tiling.scael: unknown key: did you mean 'scale'? remove it or use one "
                                         "of aoi, bands, gsd, overlap, refine, refine_depth, scale, squash, "
                                         "tile_size, tissue"]),
    (MINIMAL + "tiling: {scale: -1}\n", ["tiling.scale: must be > 0.0 (got -1)"]),
    (MINIMAL + "tiling: {tile_size: big}\n", ["tiling.tile_size: must be a whole number (got 'big')"]),
    (MINIMAL + "tiling: {bands: [1, 2]}\n", ["tiling.bands: give 1 band (grey) or 3 bands (R,G,B), e.g. [4, 3, 2] "
                                             "(got 2 bands)"]),
    (MINIMAL + "tiling: {bands: '4,3,x'}\n", ["tiling.bands: give 1 band (grey) or 3 bands (R,G,B), e.g. [4, 3, 2] "
                                              "(got '4,3,x')"]),
    (MINIMAL + "tiling: {bands: false}\n", ["tiling.bands: give 1 band (grey) or 3 bands (R,G,B), e.g. [4, 3, 2] "
                                           "(got False)"]),
    (MINIMAL + "tiling: {bands: [{a: 1}]}\n", ["tiling.bands: give 1 band (grey) or 3 bands (R,G,B), e.g. "
                                               "[4, 3, 2] (got [{'a': 1}])"]),
    (MINIMAL + "tiling: {overlap: 600}\n", ["tiling.overlap: must be less than half of tiling.tile_size, at most "
                                            "503 (got 600)"]),
    (MINIMAL + "backend: {name: onxx}\n", ["backend.name: must be one of 'onnx', 'reference' or 'simulated' "
                                           "(got 'onxx')"]),
    (MINIMAL + "backend: {name: reference, model: m}\n", ["backend.model: only the onnx backend reads model files "
                                                          "(backend.name is 'reference'): remove backend.model or "
                                                          "set backend.name: onnx"]),
    (MINIMAL + "run: {strict: maybe, workers: 0, retries: 99}\n",
     ["run.workers: must be >= 1 (got 0)", "run.retries: must be <= 20 (got 99): allowed from 0 to 20",
      "run.strict: must be true or false (got 'maybe')"]),
    (MINIMAL + "postprocess: {min_area: -1}\n", ["postprocess.min_area: must be >= 0.0 (got -1)"]),
    ("inputs: []\nprompts: {text: [blue]}\noutput: {path: o.gpkg}\n", ["inputs: must not be empty: name at least one"]),
    ("inputs: [a.tif]\nprompts: {}\noutput: {path: o.gpkg}\n",
     ["prompts: nothing to find: give text (e.g. text: [building]), boxes or box_file"]),
    ("inputs: [a.tif]\nprompts: {text: ['  ']}\noutput: {path: o.gpkg}\n",
     ["prompts.text[0]: is empty: give words such as 'building'"]),
    ("inputs: [a.tif]\nprompts: {boxes: ['1,2,3']}\noutput: {path: o.gpkg}\n",
     ["prompts.boxes[0]: give MINX,MINY,MAXX,MAXY[,neg] in the raster's CRS"]),
    ("inputs: [a.tif]\nprompts: {text: blue}\n", ["output: required: add it"]),
    ("inputs: [a.tif]\nprompts: {text: blue}\noutput: o.gpkg\n", ["output: must be a mapping of keys (got 'o.gpkg')"]),
    ("prompts: {text: blue}\nprompts: {text: red}\n", ["not valid YAML (found the key 'prompts' twice): check the "
                                                       "indentation, colons and quoting there"]),
])
def test_validation_names_the_key_and_the_fix(text, expect):
    got = _problems(text, check_files=False)
    assert sorted(got) == sorted(expect) or (len(expect) == 1 and expect[0] in got[0]), got


def test_yaml_errors_give_line_and_column():
    with pytest.raises(JobFileError, match=r"^job\.yaml line 2, column 8: not valid YAML \(expected ',' or ']'"):
        parse_job("inputs: [a.tif\nprompts: x\n", ".", "job.yaml")


def test_all_problems_at_once():
    got = _problems("inputs: [a.tif]\nprompts: {text: blue}\noutput: {path: o.gpkg}\n"
                    "tiling: {scale: 0, squash: 3}\nrun: {workers: -2}\nextra: 1\n", check_files=False)
    assert len(got) == 4, got


def test_missing_files_are_reported_before_any_work(tmp_path):
    (tmp_path / "a.tif").write_bytes(b"")
    got = _problems("inputs: [a.tif, b.tif, 'tiles/*.tif', sub]\nprompts: {text: blue, box_file: boxes.gpkg}\n"
                    "output: {path: o.gpkg}\n", tmp_path)
    assert got == [f"inputs[1]: no such file: {tmp_path / 'b.tif'} (relative paths are resolved against the job "
                   "file's folder)",
                   f"inputs[2]: the pattern 'tiles/*.tif' matches no file (looked in {tmp_path}): check it",
                   f"inputs[3]: no such file: {tmp_path / 'sub'} (relative paths are resolved against the job "
                   "file's folder)",
                   f"prompts.box_file: no such file: {tmp_path / 'boxes.gpkg'}"]


def test_paths_resolve_against_the_job_folder_and_globs_expand(tmp_path):
    d = tmp_path / "jobs"
    d.mkdir()
    (tmp_path / "data").mkdir()
    for n in ("b.tif", "a.tif", "c.png"):
        (tmp_path / "data" / n).write_bytes(b"x")
    (d / "j.yaml").write_text("inputs: ['../data/*.tif', ../data/a.tif]\nprompts: {text: car}\n"
                              "backend: {name: onnx, model: ../models/sam3}\n"
                              "output: {path: ../out/cars.parquet, work_dir: work, report: r.json}\n"
                              "tiling: {bands: '4,3,2', gsd: 0.15}\nrun: {retries: 0, strict: true, workers: 3}\n")
    lj = load_job(d / "j.yaml")
    assert lj.inputs == [str(tmp_path / "data" / "a.tif"), str(tmp_path / "data" / "b.tif")]
    assert lj.output == str(tmp_path / "out" / "cars.parquet")
    assert lj.model == str(tmp_path / "models" / "sam3") and lj.work_dir == str(d / "work")
    kw = job_call(lj, fresh=True)
    assert kw["inputs"] == lj.inputs and kw["text"] == ["car"] and kw["fresh"] is True
    assert kw["report_path"] == str(d / "r.json") and kw["work_dir"] == str(d / "work")
    o = kw["options"]
    assert (o.backend, o.model, o.bands, o.gsd, o.retries, o.strict, o.workers) == \
           ("onnx", lj.model, (4, 3, 2), 0.15, 0, True, 3)
    assert job_call(lj, strict=False)["options"].strict is False


def test_labels_go_to_segment_job_as_a_target(tmp_path):
    from sam3tiles.run.planning.targets import Targets

    (tmp_path / "a.tif").write_bytes(b"x")
    lj = parse_job("inputs: [a.tif]\nprompts: {text: nucleus}\noutput: {path: n.gpkg, labels: n-labels.tif}\n",
                   tmp_path)
    kw = job_call(lj)
    targets, rest = Targets.split(kw)
    assert kw["labels"] == str(tmp_path / "n-labels.tif") == targets.labels and "labels" not in rest
    assert targets.out == str(tmp_path / "n.gpkg") and not targets.overwrite and "options" in rest


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_every_config_validates(path):
    lj = load_job(path, check_files=False)
    assert lj.inputs and lj.output
    assert yaml.safe_load(path.read_text())  # plain YAML, too


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
    """configs/ and the data they name, copied into a temporary tree (relative paths keep working)."""
    root = tmp_path_factory.mktemp("ex")
    shutil.copytree(ROOT / "configs", root / "configs")
    _make_data().make(root / "examples" / "data", quiet=True)
    return root


@pytest.mark.parametrize("name", sorted(MINE))
def test_example_jobs_run(examples, name):
    cfg = examples / "configs" / name
    scene, cls = MINE[name]
    r = CliRunner().invoke(cli, ["run", str(cfg), "--dry-run"])
    assert r.exit_code == 0, r.output
    assert "dry run: nothing was written" in r.output and "estimated GPU time" in r.output
    r = CliRunner().invoke(cli, ["-q", "run", str(cfg)])
    assert r.exit_code == 0, r.output
    lj = load_job(cfg)
    out = Path(lj.output)
    gdf = gpd.read_parquet(out) if out.suffix == ".parquet" else gpd.read_file(out)
    truths = sorted((examples / "examples" / "data").glob(f"{scene}*-truth.gpkg"))
    n_truth = sum(int((gpd.read_file(t)["class"] == cls).sum()) for t in truths)
    assert abs(len(gdf) - n_truth) <= max(2, 0.05 * n_truth), (len(gdf), n_truth)
    report = json.loads(Path(str(out) + ".report.json").read_text())
    assert report["failed"] == 0 and report["objects"] == len(gdf)
    # cron reruns the job: overwrite is set, every tile comes from the checkpoints
    r = CliRunner().invoke(cli, ["-q", "run", str(cfg)])
    assert r.exit_code == 0, r.output
    report = json.loads(Path(str(out) + ".report.json").read_text())
    assert report["done"] == 0 and report["resumed"] == report["tiles"] - report["skipped"]


def test_dry_run_prints_the_plan_and_writes_nothing(tmp_path):
    write_scene(tmp_path / "s.tif", 2200, 1800, seed=2)
    (tmp_path / "out").mkdir()
    (tmp_path / "job.yaml").write_text("inputs: ['*.tif']\nprompts: {text: [red, blue]}\n"
                                       "backend: {name: reference}\ntiling: {scale: 2}\n"
                                       "output: {path: out/o.gpkg}\n")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    r = CliRunner().invoke(cli, ["run", str(tmp_path / "job.yaml"), "--dry-run"])
    assert r.exit_code == 0, r.output
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    text = r.stdout
    assert "s.tif: 2200 x 1800 px, bands 1,2,3 uint8, EPSG:32633: 30 tile(s)" in text
    assert "prompts: 'red', 'blue'" in text and "backend: reference" in text
    assert "model calls: 30 encodes, 60 decodes" in text
    assert "estimated GPU time: ~0.2 min" in text  # 30 x 0.35 s + 60 x 0.07 s


@pytest.mark.parametrize("body, code, message", [
    ("inputs: [s.tif]\nprompts: {text: [bleu]}\nbackend: {name: reference}\noutput: {path: out/o.gpkg}\n", 2,
     "'bleu' is not one"),
    ("inputs: [s.tif]\nprompts: {text: [red]}\nbackend: {name: reference}\noutput: {path: nowhere/o.gpkg}\n", 2,
     "does not exist: create it first"),
    ("inputs: [s.tif]\nprompts: {text: [car]}\nbackend: {name: onnx, model: nomodel}\noutput: {path: out/o.gpkg}\n",
     4, "sam3tiles model fetch"),
    ("inputs: [s.tif]\nprompts: {text: [red]}\nbackend: {name: reference}\ntiling: {bands: [5, 3, 2]}\n"
     "output: {path: out/o.gpkg}\n", 3, "band 5 does not exist"),
    ("inputs: [s.tif]\nprompts: {boxes: ['1,1,2,2']}\nbackend: {name: reference}\noutput: {path: out/o.gpkg}\n", 2,
     "lies outside every input"),
])
def test_dry_run_fails_as_the_run_would(tmp_path, body, code, message):
    write_scene(tmp_path / "s.tif", 600, 500, seed=2)
    (tmp_path / "out").mkdir()
    (tmp_path / "job.yaml").write_text(body)
    for extra in (["--dry-run"], []):
        r = CliRunner().invoke(cli, ["-q", "run", str(tmp_path / "job.yaml"), *extra])
        assert r.exit_code == code, r.output
        assert r.stderr.startswith("Error: ") and message in r.stderr
    assert list((tmp_path / "out").iterdir()) == []


def test_run_strict_flag_and_exit_5(tmp_path):
    """A job whose tiles fail finishes with exit 5 (output written); --strict stops at the first failure."""
    import tifffile

    write_scene(tmp_path / "s.tif", 2200, 1000, seed=3)
    with tifffile.TiffFile(tmp_path / "s.tif") as tf:
        off, cnt = tf.pages[0].dataoffsets[5], tf.pages[0].databytecounts[5]
    with open(tmp_path / "s.tif", "r+b") as fh:
        fh.seek(off + 2)
        fh.write(b"\xff" * (cnt - 4))
    (tmp_path / "job.yaml").write_text("inputs: [s.tif]\nprompts: {text: blue}\nbackend: {name: reference}\n"
                                       "output: {path: o.gpkg}\nrun: {retries: 0}\n")
    r = CliRunner().invoke(cli, ["-q", "run", str(tmp_path / "job.yaml"), "--strict"])
    assert r.exit_code == 5 and "--strict stops the run" in r.stderr and not (tmp_path / "o.gpkg").exists()
    r = CliRunner().invoke(cli, ["-q", "run", str(tmp_path / "job.yaml")])
    assert r.exit_code == 5 and (tmp_path / "o.gpkg").exists()
    report = json.loads((tmp_path / "o.gpkg.report.json").read_text())
    assert report["failed"] == 2
    assert [t["tile"] for t in sorted(report["failed_tiles"], key=lambda t: t["tile"])] == [1, 2]
    assert report["resumed"] + report["done"] == 1  # (resumed when --strict's run had finished it)


def test_errors_name_the_job_keys_not_the_options(tmp_path):
    write_scene(tmp_path / "s.tif", 600, 500, seed=2)
    (tmp_path / "o.gpkg").write_text("precious")
    (tmp_path / "job.yaml").write_text("inputs: [s.tif]\nprompts: {text: [red]}\nbackend: {name: reference}\n"
                                       "output: {path: o.gpkg}\n")
    r = CliRunner().invoke(cli, ["-q", "run", str(tmp_path / "job.yaml")])
    assert r.exit_code == 2
    assert r.stderr == f"Error: output.path {tmp_path / 'o.gpkg'} exists: set output.overwrite: true to replace it, " \
                       "or choose another name\n"
    assert (tmp_path / "o.gpkg").read_text() == "precious"


def test_dry_run_checks_the_label_image(tmp_path):
    write_scene(tmp_path / "s.tif", 600, 500, seed=2)
    job = "inputs: [s.tif]\nprompts: {text: [red]}\nbackend: {name: reference}\noutput: {path: o.gpkg, labels: %s}\n"
    (tmp_path / "job.yaml").write_text(job % "o-labels.tif")
    r = CliRunner().invoke(cli, ["run", str(tmp_path / "job.yaml"), "--dry-run"])
    assert r.exit_code == 0, r.output
    assert f"{tmp_path / 'o-labels.tif'}  (label image, GeoTIFF, COG layout)" in r.stdout
    (tmp_path / "job.yaml").write_text(job % "o-labels.png")
    r = CliRunner().invoke(cli, ["run", str(tmp_path / "job.yaml"), "--dry-run"])
    assert r.exit_code == 2 and r.stderr.startswith("Error: output.labels ") and ".tif, .tiff" in r.stderr
    assert ".ome.zarr" in r.stderr
