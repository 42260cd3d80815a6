"""The options registry (sam3tiles/options.py) and the typed API built on it.

One declaration per option drives `Options`, the click options, the job-file sections and the API's
keywords; ranges are refused when options are parsed, whatever the door (API, CLI, job file, dry run).
"""

from __future__ import annotations

import dataclasses
import inspect
import typing

import click
import numpy as np
import pytest
import rasterio
from click.testing import CliRunner

import sam3tiles
from sam3tiles import api
from sam3tiles.cli.main import cli
from sam3tiles.cli.options import registry_options
from sam3tiles.errors import JobFileError, UsageError
from sam3tiles.jobs import job_section, parse_job
from sam3tiles.options import Options, declarations, fields, opt
from sam3tiles.prompts.prompt import GeoBox
from sam3tiles.run.pipeline import segment_job
from sam3tiles.testing.demo import write_scene

MINIMAL = "inputs: [a.tif]\nprompts: {text: [blue]}\noutput: {path: o.gpkg}\n"


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    path = tmp_path_factory.mktemp("opts") / "small.tif"
    write_scene(path, 1100, 900, seed=4)
    return path


def _extended():
    """Options plus one new declaration, as a helper adding an option would write it."""
    return dataclasses.make_dataclass(
        "Extended", [("foo_level", int, opt(3, "A new knob.", job="tiling.foo_level", flags=("--foo-level",),
                                            commands=("segment", "plan"), ge=1, le=5))],
        bases=(Options,), frozen=True)


def test_a_new_declaration_appears_in_click_the_job_schema_and_options():
    ext = _extended()

    @click.command()
    @registry_options("segment", cls=ext)
    def cmd(**kw):
        click.echo(repr(ext.from_params(kw).foo_level))

    r = CliRunner().invoke(cmd, ["--foo-level", "4"])
    assert r.exit_code == 0 and r.output.strip() == "4", r.output
    assert "--foo-level" in CliRunner().invoke(cmd, ["--help"]).output
    r = CliRunner().invoke(cmd, ["--foo-level", "9"])
    assert r.exit_code == 2 and "1<=x<=5" in r.output
    tiling = job_section("tiling", ext)
    assert tiling().foo_level == 3 and tiling(foo_level=5).foo_level == 5
    with pytest.raises(Exception, match="less than or equal to 5"):
        tiling(foo_level=6)
    with pytest.raises(UsageError, match=r"^foo_level must be from 1 to 5 \(got 0\)"):
        ext(foo_level=0)


def test_every_declaration_reaches_click_and_the_job_file():
    from sam3tiles import jobs

    params = {cmd: {p.name: p for p in cli.commands[cmd].params} for cmd in ("segment", "plan", "run")}
    for f, d in fields():
        for cmd in ("segment", "plan", "run"):
            assert (f.name in params[cmd]) == (bool(d.flags) and cmd in d.commands), (f.name, cmd)
        p = params["segment"].get(f.name)
        if p is not None and p.default is not None and not p.is_flag:
            assert p.default == f.default
        if d.job:
            section, key = d.job.split(".")
            model = jobs.SECTIONS[section]
            assert model.model_fields[key].default == f.default, f.name


def test_api_keywords_match_the_registry():
    sig = inspect.signature(api.segment)
    hints = typing.get_type_hints(api.segment)
    opt_hints = typing.get_type_hints(Options)
    for f, d in fields():
        assert f.name in sig.parameters, f"add to api.segment: {f.name}: {f.type} = _D.{f.name}"
        p = sig.parameters[f.name]
        assert p.kind is inspect.Parameter.KEYWORD_ONLY and p.default == f.default, f.name
        # an option with a parser may take more than its stored type (bands "4,3,2", overlap 0.2 of a tile)
        assert opt_hints[f.name] == hints[f.name] or d.parse is not None, (f.name, hints[f.name])
        assert f.name in api.segment.__doc__, f"document {f.name} in api.segment"
    assert sam3tiles.segment is api.segment


@pytest.mark.parametrize("value", [2000, 1009, 4096, 63])
def test_tile_sizes_the_model_cannot_take_are_refused_when_parsed(value, tmp_path):
    with pytest.raises(UsageError, match=r"^tile_size must be from 64 to 1008 \(got \d+\): a tile is read into"):
        Options(tile_size=value)
    r = CliRunner().invoke(cli, ["segment", "x.tif", "--text", "a", "--out", "o.gpkg", "--tile-size", str(value)])
    assert r.exit_code == 2 and "64<=x<=1008" in r.output, r.output
    r = CliRunner().invoke(cli, ["plan", "x.tif", "--tile-size", str(value)])
    assert r.exit_code == 2 and "64<=x<=1008" in r.output, r.output
    with pytest.raises(JobFileError, match=rf"tiling.tile_size: must be [<>]= (1008|64) \(got {value}\): allowed "
                                           r"from 64 to 1008"):
        parse_job(MINIMAL + f"tiling: {{tile_size: {value}}}\n", ".", "job.yaml", check_files=False)


def test_dry_run_refuses_a_tile_size_too(small, tmp_path):
    (tmp_path / "job.yaml").write_text(f"inputs: [{small}]\nprompts: {{text: red}}\nbackend: {{name: reference}}\n"
                                       "tiling: {tile_size: 2000}\noutput: {path: o.gpkg}\n")
    r = CliRunner().invoke(cli, ["run", str(tmp_path / "job.yaml"), "--dry-run"])
    assert r.exit_code == 2 and "tiling.tile_size: must be <= 1008 (got 2000)" in r.output, r.output
    assert not (tmp_path / "o.gpkg").exists()


def test_the_rules_between_options_name_both():
    with pytest.raises(UsageError, match=r"^overlap: must be less than half of tile_size, at most 255 \(got 300\)"):
        Options(tile_size=512, overlap=300)
    assert Options(tile_size=512, overlap=300, squash=True).overlap == 300  # squashed: no overlap used
    with pytest.raises(UsageError, match="^device 'tpu' is not one of auto, cpu, cuda, tensorrt"):
        Options(device="tpu")
    assert Options(bands="4,3,2").bands == (4, 3, 2) == Options(bands=[4, 3, 2]).bands


@pytest.mark.parametrize("kw, message", [
    (dict(tile_size="512"), r"^tile_size must be a whole number \(got '512'\)"),
    (dict(tile_size=512.5), r"^tile_size must be a whole number"),
    (dict(scale=float("nan")), r"^scale must be > 0 and <= 64 \(got nan\)"),
    (dict(squash="yes"), r"^squash must be True or False"),
    (dict(retries=21), r"retries must be from 0 to 20 \(got 21\)"),
])
def test_values_of_the_wrong_type_or_range_are_refused(kw, message):
    with pytest.raises(UsageError, match=message):
        Options(**kw)
    assert Options(tile_size=512.0, overlap=100).tile_size == 512  # a whole float from YAML/JSON


@pytest.mark.parametrize("name, value", [
    ("scale", float("inf")), ("scale", 0.0), ("gsd", float("inf")), ("gsd", -1.0), ("min_area", float("inf")),
    ("min_area", -1.0), ("simplify", float("nan")), ("simplify", -0.5), ("workers", 0), ("workers", True),
    ("threads", -1), ("retries", -1), ("merge_block", -1), ("tile_size", 63), ("overlap", -1),
])
def test_each_option_s_own_range_is_checked_once_when_built(name, value):
    # the only check of these ranges (checks.check_options repeated them; TileGrid keeps its own invariant)
    with pytest.raises(UsageError, match=rf"^{name} must be "):
        Options(**{name: value})


def test_one_statement_of_the_overlap_rule_and_the_devices():
    from sam3tiles.model.providers import DEVICES
    from sam3tiles.model.registry import RuntimeSpec
    from sam3tiles.options import declarations
    from sam3tiles.tiling.grid import TileGrid, max_overlap

    for tile_size in (64, 512, 513, 1008):
        most = max_overlap(tile_size)
        assert Options(tile_size=tile_size, overlap=most).overlap == most
        assert TileGrid(3000, 2000, tile_size=tile_size, overlap=most).overlap == most
        with pytest.raises(UsageError, match=f"at most {most} "):
            Options(tile_size=tile_size, overlap=most + 1)
        with pytest.raises(UsageError, match=f"between 0 and {most} pixels"):
            TileGrid(3000, 2000, tile_size=tile_size, overlap=most + 1)
    assert declarations()["device"].allowed() == DEVICES
    with pytest.raises(UsageError, match="choose auto, cpu, cuda, tensorrt, coreml or dml"):
        RuntimeSpec(backend="reference", device="tpu")


def test_a_single_string_is_one_prompt(small):
    gdf = sam3tiles.segment(small, "red", backend="reference", checkpoint=False)
    assert len(gdf) > 0 and set(gdf["prompt"]) == {"red"}
    assert gdf.attrs["sam3tiles_report"]["parameters"]["prompts"] == ["red"]


def test_an_open_rasterio_dataset_is_an_input(small):
    by_path = sam3tiles.segment(str(small), ["blue"], backend="reference", checkpoint=False)
    with rasterio.open(small) as ds:
        by_dataset = sam3tiles.segment(ds, ["blue"], backend="reference", checkpoint=False)
    assert len(by_dataset) == len(by_path) > 0
    assert sorted(by_dataset.geometry.area.round(3)) == sorted(by_path.geometry.area.round(3))


def test_a_numpy_array_is_refused_with_what_to_do():
    with pytest.raises(UsageError, match=r"an array \(3x64x64 uint8\) is not an input.*GeoTIFF with rasterio"):
        sam3tiles.segment(np.zeros((3, 64, 64), np.uint8), "red", backend="reference")
    with pytest.raises(UsageError, match="is not an input"):
        sam3tiles.segment([np.zeros((8, 8))], "red", backend="reference")


def test_the_callers_options_are_not_changed(small):
    opts = Options(backend="reference", scale=1.0)
    before = dataclasses.asdict(opts)
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.scale = 2.0  # type: ignore[misc]
    gdf, rep = segment_job(str(small), ["red"], options=opts, scale=0.5, checkpoint=False)
    assert rep.parameters["scale"] == 0.5 and rep.tiles == 1  # 550 x 450 grid pixels
    assert dataclasses.asdict(opts) == before
    with pytest.raises(TypeError, match="unexpected keyword argument 'scael'"):
        segment_job(str(small), ["red"], options=opts, scael=2)


def test_help_texts_come_from_the_registry():
    out = CliRunner().invoke(cli, ["segment", "--help"]).output
    for name, d in declarations().items():
        if d.flags and "segment" in d.commands:
            assert d.flags[0] in out, name


def test_the_onnx_model_folder_is_resolved_on_a_copy(small, tmp_path, monkeypatch):
    from onnx_graphs import build_contract_models

    from sam3tiles.run.planning.plan import plan_run

    models = build_contract_models(tmp_path / "model", decoder="colour", grid=1)
    monkeypatch.setenv("SAM3TILES_MODEL_DIR", str(models))
    opts = Options(backend="onnx")
    plan = plan_run(str(small), "red", options=opts)
    assert opts.model is None and plan.options.model == str(models)
    assert plan.model_identity.startswith("onnx:") and plan.model_identity != "onnx:unknown"


# -- issue 36 (10): one path or one box is one item; anything else names the keyword and what it takes -----

@pytest.fixture(scope="module")
def chip(tmp_path_factory):
    from PIL import Image

    img = np.full((48, 48, 3), 90, np.uint8)
    img[8:40, 8:40] = (18, 22, 232)
    path = tmp_path_factory.mktemp("chip") / "chip.png"
    Image.fromarray(img).save(path)
    return path


def _a_box_inside(path):
    with rasterio.open(path) as ds:
        b = ds.bounds
    w, h = b.right - b.left, b.top - b.bottom
    return b.left + 0.4 * w, b.bottom + 0.4 * h, b.left + 0.5 * w, b.bottom + 0.5 * h


def test_one_example_image_or_one_box_is_one_item(small, chip, monkeypatch):
    """A string was split into characters ("c", "h", ...: 'no such file'); a Path, a GeoBox, a text box were
    a raw TypeError or one box per character. One path or box, given alone, is one."""
    monkeypatch.chdir(chip.parent)
    for given in ("chip.png", chip, str(chip), [chip]):
        rep = sam3tiles.segment(small, [], example_images=given, backend="reference", checkpoint=False).attrs[
            "sam3tiles_report"]
        assert rep["parameters"]["example_images"] == [str(given if isinstance(given, str) else chip)], given
    x0, y0, x1, y1 = _a_box_inside(small)
    assert sam3tiles.GeoBox is GeoBox  # the package exports what its errors name
    for given in (sam3tiles.GeoBox(x0, y0, x1, y1), f"{x0},{y0},{x1},{y1}", (x0, y0, x1, y1),
                  (x0, y0, x1, y1, False), [(x0, y0, x1, y1)]):
        rep = sam3tiles.segment(small, "blue", boxes=given, backend="reference", checkpoint=False).attrs[
            "sam3tiles_report"]
        assert rep["parameters"]["boxes"] == 1, given


@pytest.mark.parametrize("kw, message", [
    (dict(prompts=5), r"^prompts: give a text \('building'\) or a list of texts \(\['building', 'car'\]\), "
                      r"not int"),
    (dict(prompts=["red", 5]), r"^prompts: give a text .* or a list of texts .*, not a list holding int"),
    (dict(prompts=b"red"), r"^prompts: give a text .*, not bytes"),
    (dict(boxes=5), r"^boxes: give one box or a list of boxes: .*sam3tiles\.GeoBox.*, not int"),
    (dict(example_images=5), r"^example_images: give a path \('chip\.png', a folder, 'chip\.png,neg'\), a "
                             r"pathlib\.Path or a list of them, not int"),
    (dict(example_images=[b"chip.png"]), r"^example_images: give a path .*, not a list holding bytes"),
])
def test_prompts_boxes_and_example_images_of_another_type_are_refused(small, tmp_path, kw, message):
    out = tmp_path / "o.gpkg"
    with pytest.raises(UsageError, match=message):
        sam3tiles.segment(small, **{"prompts": "red", **kw}, backend="reference", out=out)
    assert list(tmp_path.iterdir()) == []
