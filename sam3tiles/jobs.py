"""Job files: one YAML file names a whole run (inputs, prompts, backend and model, tiling, output,
scheduler), is validated before any work, and becomes one run: `plan_job` (the pre-flight, also for
`run --dry-run`) then `pipeline.execute`, the same two steps as a `segment_job(...)` call.

    inputs: [ortho/*.tif]              # paths or globs, relative to this file's folder
    prompts: {text: [building]}        # and/or boxes: ["MINX,MINY,MAXX,MAXY[,neg]"], box_file: boxes.gpkg
    backend: {name: onnx, model: ~/models/sam3, device: auto}
    tiling: {scale: 1.0, overlap: 256}
    output: {path: out/buildings.gpkg}
    run: {workers: 4, retries: 2, strict: false}
    grid: {crs: EPSG:32633}             # the map's CRS: files in others are read warped onto it

Every mapping refuses unknown keys; every problem is reported at once, one line each, naming the key path
and the fix (`tiling.scale: must be > 0 (got -1)`). The sections backend, tiling, postprocess, run and grid are
built from the options registry (`options.py`). The format is documented in docs/jobs.md.
"""

from __future__ import annotations

import difflib
import glob
import os
import time
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator

from .errors import JobFileError, Sam3TilesError, worded
from .options import Opt, Options, cross_problems, type_hints
from .options import fields as registry_fields
from .prompts.prompt import GeoBox
from .readers.remote import is_remote
from .run.pipeline import execute
from .run.planning.plan import RunPlan, plan_run
from .run.planning.targets import Targets
from .wording import raw, render

__all__ = ["Job", "LoadedJob", "load_job", "parse_job", "job_options", "job_call", "plan_job", "run_job"]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _as_list(v: Any) -> Any:
    """A single value where a list is expected is a list of one (`text: building`)."""
    if v is None:
        return []
    if isinstance(v, (str, int, float)):
        return [v]
    return v


class Prompts(_Section):
    """What to find: text prompts, example boxes, or both (boxes go with every text)."""

    text: list[str] = Field(default_factory=list)
    boxes: list[str] = Field(default_factory=list)
    box_file: str | None = None
    box_scope: Literal["image", "tile"] = "image"  # image: boxes act in every tile; tile: where they lie
    # "PATH[,neg]", a folder or a glob (sam3tiles.prompts.chips)
    example_images: list[str] = Field(default_factory=list)
    # point prompts, a run of their own (sam3tiles.prompts.points): "X,Y[,neg]", and a vector layer of points
    points: list[str] = Field(default_factory=list)
    point_file: str | None = None

    _lists = field_validator("text", "boxes", "example_images", "points", mode="before")(_as_list)


def _job_type(f, d: Opt, cls: type) -> Any:
    """A field's type in a job file: its choices as a Literal, lists for tuples, else its annotation."""
    allowed = d.allowed()
    if allowed is not None:
        return Literal[allowed]  # type: ignore[valid-type]
    hint = type_hints(cls)[f.name]
    args = typing.get_args(hint)
    if any(typing.get_origin(a) is tuple for a in args):  # tuple[int, ...] | None: a YAML list
        return list[typing.get_args(next(a for a in args if typing.get_origin(a) is tuple))[0]] | None
    return hint


def _job_parse(name: str, parse):
    """A before-validator from an option's parser: its message, in job-file words."""

    def validate(v: Any) -> Any:
        if v is None or v == "":
            return None
        try:
            out = parse(v if not isinstance(v, list) else tuple(v))
        except (ValueError, Sam3TilesError) as e:
            raise ValueError(_job_parse_message(name, v, e)) from None
        return list(out) if isinstance(out, tuple) else out

    return validate


def _job_parse_message(name: str, v: Any, e: Exception) -> str:
    if name == "bands":
        if "start at 1" in raw(e):
            return f"band numbers start at 1 (got {list(v) if not isinstance(v, str) else v})"
        numbers = isinstance(v, (list, tuple)) and all(isinstance(b, int) and not isinstance(b, bool) for b in v)
        got = f"{len(v)} bands" if numbers else repr(v)
        return f"give 1 band (grey) or 3 bands (R,G,B), e.g. [4, 3, 2] (got {got})"
    return render(raw(e), "job")


def job_section(section: str, cls: type = Options) -> type[BaseModel]:
    """The pydantic model of one job-file section, from the options registry: every option whose job key
    starts with `section.`, with its type, default, range and parser (`cls`: another Options class)."""
    fields_: dict[str, Any] = {}
    validators: dict[str, Any] = {}
    for f, d in registry_fields(cls):
        if not d.job or d.job.split(".")[0] != section:
            continue
        key = d.job.split(".", 1)[1]
        fields_[key] = (_job_type(f, d, cls), Field(f.default, ge=d.ge, gt=d.gt, le=d.le, description=d.help))
        if d.parse is not None:
            validators[f"_parse_{key}"] = field_validator(key, mode="before")(_job_parse(f.name, d.parse))
    return create_model(section.title().replace("_", "") + "Section", __base__=_Section, __validators__=validators,
                        **fields_)


Backend = job_section("backend")
Tiling = job_section("tiling")
Postprocess = job_section("postprocess")
RunSection = job_section("run")
Grid = job_section("grid")


class Output(job_section("output")):
    path: str
    overwrite: bool = False
    work_dir: str | None = None  # checkpoints (default: beside the output)
    report: str | None = None  # run report JSON (default: <output>.report.json)
    labels: str | None = None  # label image of the objects (microscopy), where supported


class Job(_Section):
    """A job file, as validated (paths not yet resolved)."""

    description: str | None = None
    inputs: list[str] = Field(min_length=1)
    asset: str | None = None  # STAC inputs: the key of the asset to segment
    prompts: Prompts
    backend: Backend = Field(default_factory=Backend)
    tiling: Tiling = Field(default_factory=Tiling)
    postprocess: Postprocess = Field(default_factory=Postprocess)
    output: Output
    run: RunSection = Field(default_factory=RunSection)
    grid: Grid = Field(default_factory=Grid)

    _lists = field_validator("inputs", mode="before")(_as_list)


SECTIONS: dict[str, type[BaseModel]] = {"": Job, "prompts": Prompts, "backend": Backend, "tiling": Tiling,
                                        "postprocess": Postprocess, "output": Output, "run": RunSection,
                                        "grid": Grid}


# -- YAML -----------------------------------------------------------------------------------------------

class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (PyYAML silently keeps the last)."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False):
    seen: dict[Any, Any] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                "while reading a mapping", node.start_mark, f"a key must be a name, not a {type(key).__name__}",
                key_node.start_mark) from None
        if key in seen:
            raise yaml.constructor.ConstructorError(
                "while reading a mapping", node.start_mark, f"found the key {key!r} twice", key_node.start_mark)
        seen[key] = True
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


#: Deepest nesting a job file may have (a real one has 3 levels; PyYAML recurses once per level).
MAX_DEPTH = 50


def _depth(text: str) -> int:
    """The deepest nesting of flow brackets or indentation, counted without parsing (parsing recurses)."""
    deepest = level = 0
    for ch in text:
        if ch in "[{":
            level += 1
            deepest = max(deepest, level)
        elif ch in "]}":
            level = max(0, level - 1)
    indents = {len(line) - len(line.lstrip(" -")) for line in text.splitlines()
               if line.strip() and not line.lstrip(" -").startswith("#")}
    return max(deepest, len(indents))


def _read_yaml(text: str, name: str) -> Any:
    if _depth(text) > MAX_DEPTH:
        raise JobFileError(f"{name}: nested more than {MAX_DEPTH} levels deep: a job file has a few sections of "
                           "keys (see docs/jobs.md)")
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except RecursionError:
        raise JobFileError(f"{name}: nested too deeply to read: a job file has a few sections of keys "
                           "(see docs/jobs.md)") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise JobFileError(f"{name}{where}: not valid YAML ({problem}): check the indentation, colons and "
                           "quoting there") from None


# -- validation messages --------------------------------------------------------------------------------

def _path_of(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _section_of(loc: tuple) -> type[BaseModel] | None:
    names = [p for p in loc[:-1] if isinstance(p, str)]
    return SECTIONS.get(".".join(names[-1:])) if names else Job


def _describe(err: dict) -> str:
    kind, ctx, got = err["type"], err.get("ctx") or {}, err.get("input")
    shown = repr(got) if not isinstance(got, (dict, list)) else type(got).__name__
    if kind == "extra_forbidden":
        model = _section_of(err["loc"])
        known = sorted(model.model_fields) if model is not None else []
        close = difflib.get_close_matches(str(err["loc"][-1]), known, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        return f"unknown key: {hint}remove it or use one of {', '.join(known)}"
    if kind == "missing":
        return "required: add it"
    bounds = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}
    if kind in bounds:
        limit = next(iter(ctx.values()), "?")
        return f"must be {bounds[kind]} {limit} (got {shown})" + _allowed(err["loc"])
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"must be a whole number (got {shown})"
    if kind in ("float_type", "float_parsing"):
        return f"must be a number (got {shown})"
    if kind in ("bool_type", "bool_parsing"):
        return f"must be true or false (got {shown})"
    if kind == "string_type":
        return f"must be a text (got {shown}): quote it"
    if kind == "list_type":
        return f"must be a list (got {shown})"
    if kind == "too_short":
        return "must not be empty: name at least one"
    if kind in ("model_type", "dict_type", "model_attributes_type"):
        return f"must be a mapping of keys (got {shown})"
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected', '?')} (got {shown})"
    if kind == "value_error":
        return str(ctx.get("error") or err["msg"]).removeprefix("Value error, ")
    return f"{err['msg']} (got {shown})"


def _allowed(loc: tuple) -> str:
    """The allowed range of a registry option with both bounds, and why it is what it is."""
    key = ".".join(str(p) for p in loc)
    d = next((d for _, d in registry_fields() if d.job == key), None)
    if d is None:
        return ""
    both = d.le is not None and (d.ge is not None or d.gt is not None)
    return (f": allowed {d.range_text()}" if both else "") + (f" ({render(d.note, 'job')})" if d.note else "")


def _problems(e: ValidationError) -> list[str]:
    return [f"{_path_of(err['loc'])}: {_describe(err)}" for err in e.errors()]


def _fail(name: str, problems: list[str]) -> JobFileError:
    head = f"{name}: {len(problems)} problem(s):" if len(problems) > 1 else f"{name}:"
    return JobFileError(head + "".join(f"\n  {p}" for p in problems) if len(problems) > 1
                        else f"{name}: {problems[0]}")


# -- loading ---------------------------------------------------------------------------------------------

@dataclass
class LoadedJob:
    """A validated job with every path resolved against the job file's folder and globs expanded."""

    job: Job
    source: str  # the job file (or '<string>')
    base: Path  # the folder relative paths are resolved against
    inputs: list[str] = field(default_factory=list)
    box_file: str | None = None
    example_images: list[str] = field(default_factory=list)  # resolved against the job file's folder
    point_file: str | None = None  # resolved against the job file's folder
    model: str | None = None
    output: str = ""
    work_dir: str | None = None
    report: str | None = None
    labels: str | None = None
    aoi: str | None = None  # tiling.aoi, a file's path resolved against the job file's folder


def parse_job(text: str, base: str | os.PathLike = ".", name: str = "<job>", check_files: bool = True) -> LoadedJob:
    """Validate a job given as YAML text; relative paths are resolved against `base`. With
    `check_files=False` only the format is checked (inputs and box files need not exist yet)."""
    data = _read_yaml(text, name)
    if data is None:
        raise JobFileError(f"{name} is empty: give at least inputs, prompts and output (see docs/jobs.md)")
    if not isinstance(data, dict):
        raise JobFileError(f"{name}: the job must be a mapping with keys inputs, prompts, output, ... "
                           f"(got a {type(data).__name__}); see docs/jobs.md")
    bad_keys = [k for k in data if not isinstance(k, str)]
    if bad_keys:
        raise JobFileError(f"{name}: keys must be names, got {bad_keys[0]!r}")
    try:
        job = Job.model_validate(data)
    except ValidationError as e:
        raise _fail(name, _problems(e)) from None
    return _resolve(job, Path(base), name, check_files)


def load_job(path: str | os.PathLike, check_files: bool = True) -> LoadedJob:
    """Read and validate a job file; every problem is reported before any work (JobFileError, exit 2)."""
    p = Path(path)
    if not p.exists():
        raise JobFileError(f"{p}: no such job file: check the path")
    if p.is_dir():
        raise JobFileError(f"{p} is a folder: give a job file (YAML)")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise JobFileError(f"{p} is not a text file: give a YAML job file") from None
    except OSError as e:
        raise JobFileError(f"{p}: cannot read it ({e.strerror})") from None
    return parse_job(text, p.resolve().parent, str(p), check_files)


def _abs(base: Path, value: str) -> str:
    return os.path.normpath(base / Path(os.path.expanduser(value)))


def _resolve_inputs(job: Job, base: Path, check_files: bool, problems: list[str]) -> list[str]:
    """The job's inputs resolved against `base`, globs expanded; what is wrong with each goes to `problems`."""
    inputs: list[str] = []
    for i, item in enumerate(job.inputs):
        if not item.strip():
            problems.append(f"inputs[{i}]: is empty: give a path or a glob")
            continue
        if is_remote(item):  # a URL (never a glob) or a GDAL /vsi path: GDAL opens it
            inputs.append(item)
            continue
        path = _abs(base, item)
        if not check_files:
            inputs.append(path)
        elif any(ch in item for ch in "*?[") and not os.path.exists(path):  # an existing file: literal
            hits = sorted(glob.glob(path, recursive=True))
            if not hits:
                problems.append(f"inputs[{i}]: the pattern {item!r} matches no file (looked in {base}): check it")
            inputs.extend(hits)
        elif not os.path.exists(path):
            problems.append(f"inputs[{i}]: no such file: {path}" + (" (relative paths are resolved against the "
                                                                     "job file's folder)" if not
                                                                     os.path.isabs(item) else ""))
        elif os.path.isdir(path):
            problems.append(f"inputs[{i}]: {path} is a folder: give files or a glob such as '{item.rstrip('/')}/*.tif'")
        else:
            inputs.append(path)
    return inputs


def _point_file(job: Job, base: Path, check_files: bool, problems: list[str]) -> str | None:
    """`prompts.point_file` resolved against the job file's folder; its points parsed (`prompts.points`)."""
    from .prompts.points import GeoPoint

    for i, p in enumerate(job.prompts.points):
        try:
            GeoPoint.parse(p)
        except ValueError as e:  # the parser's own message, under the key's name
            problems.append(f"prompts.points[{i}]: {render(raw(e), 'job').split(': ', 1)[-1]}")
    if job.prompts.point_file is None:
        return None
    path = _abs(base, job.prompts.point_file)
    if check_files and not os.path.isfile(path):
        problems.append(f"prompts.point_file: no such file: {path}")
    return path


def _resolve(job: Job, base: Path, name: str, check_files: bool = True) -> LoadedJob:
    """The job with its paths resolved against `base`; every problem found is reported at once (`_fail`)."""
    problems: list[str] = []
    inputs = _resolve_inputs(job, base, check_files, problems)
    box_file = None
    if job.prompts.box_file is not None:
        box_file = _abs(base, job.prompts.box_file)
        if check_files and not os.path.isfile(box_file):
            problems.append(f"prompts.box_file: no such file: {box_file}")
    pr = job.prompts
    point_file = _point_file(job, base, check_files, problems)
    if not pr.text and not pr.boxes and pr.box_file is None and not pr.example_images and not pr.points \
            and point_file is None:
        problems.append("prompts: nothing to find: give text (e.g. text: [building]), boxes or box_file "
                        "(or example_images, points, point_file)")
    example_images = [_abs(base, e) for e in job.prompts.example_images]
    for i, t in enumerate(job.prompts.text):
        if not t.strip():
            problems.append(f"prompts.text[{i}]: is empty: give words such as 'building'")
    for i, b in enumerate(job.prompts.boxes):
        try:
            GeoBox.parse(b)
        except ValueError as e:  # the parser's own message, under the key's name
            problems.append(f"prompts.boxes[{i}]: {render(raw(e), 'job').split(': ', 1)[-1]}")
    aoi = _resolve_aoi(job.tiling.aoi, base, check_files, problems)
    model = None
    if job.backend.model is not None:
        model = _abs(base, job.backend.model)
        if job.backend.name in ("reference", "simulated"):
            problems.append(f"backend.model: only the onnx backend reads model files (backend.name is "
                            f"{job.backend.name!r}): remove backend.model or set backend.name: onnx")
    tiling = job.tiling  # the rules between its options, named in the job's keys
    problems += [render(p, "job") for p in cross_problems(tiling.tile_size, tiling.overlap, tiling.squash,
                                                          tiling.scale, tiling.gsd)]
    out = job.output
    if not out.path.strip():
        problems.append("output.path: is empty: name the output file, e.g. out/objects.gpkg")
    if out.work_dir is not None and not out.work_dir.strip():
        problems.append("output.work_dir: is empty: name a folder for the checkpoints, or remove the key to use "
                        "<output>.sam3tiles-work")
    if problems:
        raise _fail(name, problems)
    return LoadedJob(job=job, source=name, base=base, inputs=list(dict.fromkeys(inputs)), box_file=box_file,
                     example_images=example_images, point_file=point_file, model=model,
                     output=_abs(base, out.path) + ("/" if out.path.endswith("/") else ""),
                     work_dir=_abs(base, out.work_dir) if out.work_dir else None,
                     report=_abs(base, out.report) if out.report else None,
                     labels=_abs(base, out.labels) if out.labels else None, aoi=aoi)


def _resolve_aoi(aoi: str | None, base: Path, check_files: bool, problems: list[str]) -> str | None:
    """tiling.aoi: a box as it is; a file (`PATH[:LAYER]`) resolved against `base`, and it must exist."""
    from .readers.area import is_box, split_layer

    if aoi is None or is_box(aoi) or is_remote(aoi):
        return aoi
    path, layer = split_layer(_abs(base, aoi) if os.path.exists(_abs(base, aoi)) else aoi)
    path = _abs(base, path)
    if check_files and not os.path.exists(path):
        problems.append(f"tiling.aoi: no such file: {path} (relative paths are resolved against the job file's folder; "
                        "a box is MINX,MINY,MAXX,MAXY)")
    return path if layer is None else f"{path}:{layer}"


# -- running ---------------------------------------------------------------------------------------------

def job_options(lj: LoadedJob, *, strict: bool | None = None, progress: bool = False) -> Options:
    """The `Options` a job asks for: every registry option with a job key, read from its section."""
    given: dict[str, Any] = {}
    for f, d in registry_fields():
        if d.job:
            section, key = d.job.split(".", 1)
            given[f.name] = getattr(getattr(lj.job, section), key)
    given["model"] = lj.model  # resolved against the job file's folder
    given["aoi"] = lj.aoi
    given["asset"] = lj.job.asset
    if strict is not None:
        given["strict"] = strict
    return Options(**given, progress=progress)


def job_call(lj: LoadedJob, *, fresh: bool = False, strict: bool | None = None, progress: bool = False) -> dict:
    """The keyword arguments of the `segment_job(...)` call that runs `lj`."""
    j = lj.job
    return dict(inputs=lj.inputs, text=list(j.prompts.text), boxes=list(j.prompts.boxes), box_file=lj.box_file,
                example_images=list(lj.example_images), points=list(j.prompts.points), point_file=lj.point_file,
                out=lj.output, overwrite=j.output.overwrite, options=job_options(lj, strict=strict, progress=progress),
                work_dir=lj.work_dir, fresh=fresh, report_path=lj.report, labels=lj.labels)


def plan_job(lj: LoadedJob, *, strict: bool | None = None, progress: bool = False,
             check_prompts: bool = False) -> RunPlan:
    """The pre-flight of a job (`plan.plan_run`, the same for the run and its dry run); its errors name the
    job's keys (`wording`)."""
    with worded("job"):
        kw = job_call(lj, strict=strict, progress=progress)
        del kw["fresh"]
        targets, kw = Targets.split(kw)
        return plan_run(kw.pop("inputs"), kw.pop("text"), targets=targets, check_prompts=check_prompts, **kw)


def run_job(lj: LoadedJob, *, fresh: bool = False, strict: bool | None = None, progress: bool = False,
            return_objects: bool = True):
    """Run a loaded job: (GeoDataFrame, RunReport), as `segment_job` returns them (None instead of the
    objects with `return_objects=False`: they are in the output)."""
    t_start = time.perf_counter()
    with worded("job"):
        return execute(plan_job(lj, strict=strict, progress=progress), fresh=fresh, t_start=t_start,
                       return_objects=return_objects)
