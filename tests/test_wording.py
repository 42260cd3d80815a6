"""Each entry point names options in its own words (`sam3tiles.wording`): a Python caller sees the keyword
names of `sam3tiles.segment`, the command line its flags, a job file its key paths: the same errors, each
run three ways."""

from __future__ import annotations

import ast
import io
import pickle
import re
import tokenize
from pathlib import Path

import pytest
from click.testing import CliRunner

import sam3tiles
from sam3tiles.cli.main import cli
from sam3tiles.errors import JobFileError, OutputExistsError, UsageError, worded
from sam3tiles.jobs import load_job, run_job
from sam3tiles.options import ARGUMENTS, Options, fields
from sam3tiles.testing.demo import write_scene
from sam3tiles.wording import enable, opt, raw, render

PACKAGE = Path(sam3tiles.__file__).parent


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    path = tmp_path_factory.mktemp("wording") / "s.tif"
    write_scene(path, 600, 500, seed=2)
    return path


def _job(tmp_path, scene, extra: str = "", prompts: str = "{text: [red]}") -> Path:
    body = (f"inputs: [{scene}]\nprompts: {prompts}\nbackend: {{name: reference}}\n"
            f"output: {{path: {tmp_path / 'o.gpkg'}}}\n" + extra)
    (tmp_path / "job.yaml").write_text(body)
    return tmp_path / "job.yaml"


def _cli(*args) -> tuple[int, str]:
    r = CliRunner().invoke(cli, ["-q", *map(str, args)])
    return r.exit_code, r.stderr


# -- an existing output, overwrite not asked for -----------------------------------------------------

def test_an_existing_output_python(scene, tmp_path):
    (tmp_path / "o.gpkg").write_text("precious")
    with pytest.raises(OutputExistsError) as info:
        sam3tiles.segment(scene, "red", backend="reference", out=tmp_path / "o.gpkg")
    assert str(info.value) == (f"out={tmp_path / 'o.gpkg'} exists: pass overwrite=True to replace it, or choose "
                               "another name")
    assert (tmp_path / "o.gpkg").read_text() == "precious"


def test_an_existing_output_cli(scene, tmp_path):
    (tmp_path / "o.gpkg").write_text("precious")
    code, err = _cli("segment", scene, "--text", "red", "--backend", "reference", "--out", tmp_path / "o.gpkg")
    assert code == 2
    assert err == f"Error: --out {tmp_path / 'o.gpkg'} exists: pass --overwrite to replace it, or choose another name\n"


def test_an_existing_output_job(scene, tmp_path):
    (tmp_path / "o.gpkg").write_text("precious")
    job = _job(tmp_path, scene)
    code, err = _cli("run", job)
    assert code == 2
    assert err == (f"Error: output.path {tmp_path / 'o.gpkg'} exists: set output.overwrite: true to replace it, "
                   "or choose another name\n")
    with pytest.raises(OutputExistsError, match=r"^output\.path .* set output\.overwrite: true to replace it"):
        run_job(load_job(job))  # from Python too: the job's own words
    code, err = _cli("run", job, "--dry-run")
    assert code == 2 and err.startswith("Error: output.path ") and "set output.overwrite: true" in err


# -- a tile size the model cannot take -----------------------------------------------------------------

def test_a_bad_tile_size_python(scene):
    with pytest.raises(UsageError, match=r"^tile_size must be from 64 to 1008 \(got 2000\): .*use scale to zoom "
                                         r"out instead$"):
        sam3tiles.segment(scene, "red", backend="reference", tile_size=2000)


def test_a_bad_tile_size_cli_and_job(scene, tmp_path):
    code, err = _cli("segment", scene, "--text", "red", "--out", tmp_path / "x.gpkg", "--tile-size", 2000)
    assert code == 2 and "'--tile-size'" in err and "64<=x<=1008" in err
    with pytest.raises(UsageError) as info:
        Options(tile_size=2000)
    assert info.value.worded("cli").startswith("--tile-size must be from 64 to 1008 (got 2000)")
    assert info.value.worded("cli").endswith("use --scale to zoom out instead")
    code, err = _cli("run", _job(tmp_path, scene, "tiling: {tile_size: 2000}\n"))
    assert code == 2 and "tiling.tile_size: must be <= 1008 (got 2000): allowed from 64 to 1008 (a tile is read " \
                         "into SAM 3's 1008x1008 input, so it can be no larger; use tiling.scale to zoom out " \
                         "instead)" in err, err


# -- a box that is no box ------------------------------------------------------------------------------

def test_a_bad_box_python(scene):
    with pytest.raises(UsageError, match=r"^boxes='1,2,3': give MINX,MINY,MAXX,MAXY\[,neg\] in the raster's CRS$"):
        sam3tiles.segment(scene, "red", backend="reference", boxes=["1,2,3"])


def test_a_bad_box_cli_and_job(scene, tmp_path):
    code, err = _cli("segment", scene, "--box", "1,2,3", "--backend", "reference", "--out", tmp_path / "x.gpkg")
    assert code == 2 and err == "Error: --box '1,2,3': give MINX,MINY,MAXX,MAXY[,neg] in the raster's CRS\n"
    with pytest.raises(JobFileError, match=r"prompts\.boxes\[0\]: give MINX,MINY,MAXX,MAXY\[,neg\] in the "
                                           r"raster's CRS$"):
        load_job(_job(tmp_path, scene, prompts="{boxes: ['1,2,3']}"))


# -- the rule between two options: both named, three ways ------------------------------------------------

def test_the_overlap_rule_three_ways(scene, tmp_path):
    with pytest.raises(UsageError, match=r"^overlap: must be less than half of tile_size, at most 255 \(got 300\)$"):
        sam3tiles.segment(scene, "red", backend="reference", tile_size=512, overlap=300)
    code, err = _cli("segment", scene, "--text", "red", "--out", tmp_path / "x.gpkg", "--tile-size", 512,
                     "--overlap", 300)
    assert code == 2 and err == "Error: --overlap: must be less than half of --tile-size, at most 255 (got 300)\n"
    code, err = _cli("run", _job(tmp_path, scene, "tiling: {tile_size: 512, overlap: 300}\n"))
    assert code == 2 and "tiling.overlap: must be less than half of tiling.tile_size, at most 255 (got 300)" in err


SQUASH_SCALED = {"python": "squash: squash fits the whole image into one tile, so scale does not apply: remove "
                           "one of them",
                 "cli": "--squash: squash fits the whole image into one tile, so --scale does not apply: remove "
                        "one of them",
                 "job": "tiling.squash: squash fits the whole image into one tile, so tiling.scale does not apply: "
                        "remove one of them"}


@pytest.mark.parametrize("zoom", ["scale", "gsd"])
@pytest.mark.parametrize("door", ["python", "cli", "job"])
def test_squash_with_a_zoom_is_refused_at_every_door(door, zoom, scene, tmp_path):
    """Squash fits the whole image into one tile, so a scale, or a target sampling distance (a zoom too),
    would be ignored without a word: every door refuses the pair (exit 2, both named in its words, nothing
    written), not the job file alone."""
    out = tmp_path / "o.gpkg"
    value = {"scale": 2, "gsd": 0.5}[zoom]
    if door == "python":
        with pytest.raises(UsageError) as info:
            sam3tiles.segment(scene, "red", backend="reference", squash=True, out=out, **{zoom: value})
        code, err = info.value.exit_code, str(info.value)
    elif door == "cli":
        code, err = _cli("segment", scene, "--text", "red", "--backend", "reference", "--out", out, "--squash",
                         f"--{zoom}", value)
    else:
        code, err = _cli("run", _job(tmp_path, scene, f"tiling: {{squash: true, {zoom}: {value}}}\n"))
    names = {"python": ("squash", zoom), "cli": ("--squash", f"--{zoom}"), "job": ("tiling.squash", f"tiling.{zoom}")}
    assert code == 2 and all(n in err for n in names[door]) and "does not apply" in err, err
    if zoom == "scale":
        assert SQUASH_SCALED[door] in err, err
    assert not out.exists()

# -- the markers themselves ------------------------------------------------------------------------------

def test_each_vocabulary_spells_every_kind_of_marker():
    text = f"{opt('out', 'o.gpkg')} exists: {enable('overwrite')}; {opt('refine_depth', 3)}, {opt('strict')}"
    assert render(text) == "out=o.gpkg exists: pass overwrite=True; refine_depth=3, strict"
    assert render(text, "cli") == "--out o.gpkg exists: pass --overwrite; --refine-depth 3, --strict"
    # `sam3tiles run` takes --strict itself, so a job's error names the flag
    assert render(text, "job") == ("output.path o.gpkg exists: set output.overwrite: true; "
                                   "tiling.refine_depth 3, --strict")
    assert render("no marker here", "job") == "no marker here"


def test_an_error_keeps_its_words_through_pickling_and_a_wrapping_context():
    e = UsageError(f"{opt('tile_size')} is wrong")
    with pytest.raises(UsageError) as info, worded("job"):
        raise e
    assert info.value is e and str(e) == "tiling.tile_size is wrong" and e.words == "job"
    back = pickle.loads(pickle.dumps(e))  # Dask ships errors back from workers so
    assert type(back) is UsageError and str(back) == "tiling.tile_size is wrong" and raw(back) == raw(e)
    with pytest.raises(UsageError), worded("cli"):  # the first entry point to word an error keeps it
        raise e
    assert str(e) == "tiling.tile_size is wrong"
    assert repr(UsageError(f"{opt('tile_size')} is wrong")) == "UsageError('tile_size is wrong')"


def test_every_marked_name_is_an_option_or_an_argument_of_a_run():
    """A marker's name is a keyword of `sam3tiles.segment`: a typo would be spelled as a made-up flag."""
    known = {f.name for f, _ in fields()} | set(ARGUMENTS)
    seen = set()
    for path in PACKAGE.rglob("*.py"):
        for call in ast.walk(ast.parse(path.read_text())):
            if (isinstance(call, ast.Call) and getattr(call.func, "id", None) in ("opt", "enable", "mention")
                    and call.args and isinstance(call.args[0], ast.Constant) and path.name != "options.py"):
                seen.add(call.args[0].value)
    seen -= {"the work folder"}  # `mention` of a thing that is no option
    assert len(seen) > 20 and seen <= known, seen - known


def test_no_error_outside_the_cli_names_a_flag():
    """Errors name options by marker (`wording.opt`), never by a flag: else a Python caller or a job file
    would read a flag it cannot give."""
    flags = {fl for _, d in fields() for fl in d.flags} | {fl for fl, _ in ARGUMENTS.values() if fl.startswith("--")}
    pattern = re.compile(r"(?<![\w-])(" + "|".join(sorted(map(re.escape, flags), key=len, reverse=True))
                         + r")(?![\w-])")
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "cli" in path.relative_to(PACKAGE).parts or "qgis_plugin" in path.parts:
            continue
        toks = list(tokenize.generate_tokens(io.StringIO(path.read_text()).readline))
        depth_in_error: list[bool] = []
        prev = None
        for t in toks:
            if t.type == tokenize.OP and t.string in "([{":
                call = (t.string == "(" and prev is not None and prev.type == tokenize.NAME
                        and prev.string.endswith("Error"))
                depth_in_error.append(call or (depth_in_error[-1] if depth_in_error else False))
            elif t.type == tokenize.OP and t.string in ")]}":
                depth_in_error.pop() if depth_in_error else None
            elif t.type == tokenize.STRING and depth_in_error and depth_in_error[-1] and pattern.search(t.string):
                found.append(f"{path.relative_to(PACKAGE)}:{t.start[0]}: {pattern.search(t.string).group(1)}")
            if t.type not in (tokenize.NL, tokenize.COMMENT):
                prev = t
    assert not found, found


def _strings_naming_flags(path: Path, pattern: re.Pattern) -> list[str]:
    """Every string of `path` (docstrings left out) that names a flag, but a shell command in backticks."""
    docs = {n.body[0].value.lineno for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    found = []
    for t in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if t.type != tokenize.STRING or t.start[0] in docs:
            continue
        text = re.sub(r"`sam3tiles [^`]*`", "", t.string)  # a command to run names its flags
        if (m := pattern.search(text)):
            found.append(f"{path.relative_to(PACKAGE)}:{t.start[0]}: {m.group(1)}")
    return found


def test_no_log_line_or_advice_outside_the_cli_names_a_flag():
    """Log warnings, advice and report notes name options by marker too, spelled when written
    (`wording.spoken`) in the running entry point's words."""
    flags = {fl for _, d in fields() for fl in d.flags} | {fl for fl, _ in ARGUMENTS.values() if fl.startswith("--")}
    pattern = re.compile(r"(?<![\w-])(" + "|".join(sorted(map(re.escape, flags), key=len, reverse=True))
                         + r")(?![\w-])")
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if "cli" in rel.parts or "qgis_plugin" in rel.parts or path.name in ("options.py", "wording.py"):
            continue  # the CLI, the QGIS plugin's command line, and the flags' declarations
        found += _strings_naming_flags(path, pattern)
    assert not found, found


def test_a_log_line_is_spoken_in_the_entry_points_words():
    from sam3tiles.wording import speaking, spoken

    line = f"rerun with {opt('refine', 'auto')} or {opt('scale')}"
    assert spoken(line) == "rerun with refine=auto or scale"
    with speaking("cli"):
        assert spoken(line) == "rerun with --refine auto or --scale"
        with worded("job"):
            assert spoken(line) == "rerun with tiling.refine auto or tiling.scale"
        assert spoken(line) == "rerun with --refine auto or --scale"
    assert spoken(line) == "rerun with refine=auto or scale"

