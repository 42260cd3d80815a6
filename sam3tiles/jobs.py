"""Job files: one YAML file names a whole run (inputs, prompts, backend and model, tiling, output,
scheduler), is validated before any work, and becomes one `segment_job(...)` call.

    inputs: [ortho/*.tif]              # paths or globs, relative to this file's folder
    prompts: {text: [building]}        # and/or boxes: ["MINX,MINY,MAXX,MAXY[,neg]"], box_file: boxes.gpkg
    backend: {name: onnx, model: ~/models/sam3, device: auto}
    tiling: {scale: 1.0, overlap: 256}
    output: {path: out/buildings.gpkg}
    run: {workers: 4, retries: 2, strict: false}

Every mapping refuses unknown keys; every problem is reported at once, one line each, naming the key path
and the fix (`tiling.scale: must be > 0 (got -1)`). The format is documented in docs/jobs.md.
"""

from __future__ import annotations

import difflib
import glob
import inspect
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .errors import BandError, JobFileError
from .grid import DEFAULT_OVERLAP, TILE_SIZE

__all__ = ["Job", "LoadedJob", "load_job", "parse_job", "job_options", "job_call", "run_job", "job_words"]


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

    _lists = field_validator("text", "boxes", mode="before")(_as_list)


class Backend(_Section):
    name: Literal["onnx", "reference", "simulated"] = "onnx"
    model: str | None = None  # folder of the SAM 3 ONNX files (onnx only)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    threads: int = Field(0, ge=0)  # onnxruntime intra-op threads per session; 0: its default


class Tiling(_Section):
    tile_size: int = Field(TILE_SIZE, ge=64, le=4096)
    overlap: int = Field(DEFAULT_OVERLAP, ge=0, le=2047)
    scale: float = Field(1.0, gt=0, le=64)
    gsd: float | None = Field(None, gt=0)
    bands: list[int] | None = None
    squash: bool = False
    refine: Literal["auto", "off"] = "auto"  # re-run tiles that hit SAM 3's 200-object cap zoomed in
    refine_depth: int = Field(2, ge=0, le=4)  # zoom doublings at most

    @field_validator("bands", mode="before")
    @classmethod
    def _bands(cls, v: Any) -> Any:
        from .readers import parse_bands

        if v is None or v == "":
            return None
        if isinstance(v, int) and not isinstance(v, bool):
            v = [v]
        if isinstance(v, str):
            try:
                return list(parse_bands(v) or ())
            except BandError:
                raise ValueError(f"give 1 band (grey) or 3 bands (R,G,B), e.g. [4, 3, 2] (got {v!r})") from None
        if isinstance(v, list) and len(v) not in (1, 3):
            raise ValueError(f"give 1 band (grey) or 3 bands (R,G,B), e.g. [4, 3, 2] (got {len(v)} bands)")
        return v

    @field_validator("bands")
    @classmethod
    def _bands_positive(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and any(b < 1 for b in v):
            raise ValueError(f"band numbers start at 1 (got {v})")
        return v


class Postprocess(_Section):
    min_area: float = Field(0.0, ge=0)  # CRS units (square metres in a metric CRS)
    simplify: float = Field(0.0, ge=0)  # CRS units


class Output(_Section):
    path: str
    overwrite: bool = False
    work_dir: str | None = None  # checkpoints (default: beside the output)
    report: str | None = None  # run report JSON (default: <output>.report.json)
    labels: str | None = None  # label image of the objects (microscopy), where supported


class RunSection(_Section):
    scheduler: str | None = None  # dask.distributed scheduler address; default: this process
    workers: int | None = Field(None, ge=1)
    retries: int = Field(2, ge=0, le=20)
    strict: bool = False


class Job(_Section):
    """A job file, as validated (paths not yet resolved)."""

    description: str | None = None
    inputs: list[str] = Field(min_length=1)
    prompts: Prompts
    backend: Backend = Field(default_factory=Backend)
    tiling: Tiling = Field(default_factory=Tiling)
    postprocess: Postprocess = Field(default_factory=Postprocess)
    output: Output
    run: RunSection = Field(default_factory=RunSection)

    _lists = field_validator("inputs", mode="before")(_as_list)


SECTIONS: dict[str, type[BaseModel]] = {"": Job, "prompts": Prompts, "backend": Backend, "tiling": Tiling,
                                        "postprocess": Postprocess, "output": Output, "run": RunSection}


# -- YAML -----------------------------------------------------------------------------------------------

class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (PyYAML silently keeps the last)."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False):
    seen: dict[Any, Any] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                "while reading a mapping", node.start_mark, f"found the key {key!r} twice", key_node.start_mark)
        seen[key] = True
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _read_yaml(text: str, name: str) -> Any:
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
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
        return f"must be {bounds[kind]} {limit} (got {shown})"
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
    model: str | None = None
    output: str = ""
    work_dir: str | None = None
    report: str | None = None
    labels: str | None = None


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


def _resolve(job: Job, base: Path, name: str, check_files: bool = True) -> LoadedJob:
    problems: list[str] = []
    inputs: list[str] = []
    for i, item in enumerate(job.inputs):
        if not item.strip():
            problems.append(f"inputs[{i}]: is empty: give a path or a glob")
            continue
        path = _abs(base, item)
        if not check_files:
            inputs.append(path)
        elif any(ch in item for ch in "*?["):
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
    box_file = None
    if job.prompts.box_file is not None:
        box_file = _abs(base, job.prompts.box_file)
        if check_files and not os.path.isfile(box_file):
            problems.append(f"prompts.box_file: no such file: {box_file}")
    if not job.prompts.text and not job.prompts.boxes and job.prompts.box_file is None:
        problems.append("prompts: nothing to find: give text (e.g. text: [building]), boxes or box_file")
    for i, t in enumerate(job.prompts.text):
        if not t.strip():
            problems.append(f"prompts.text[{i}]: is empty: give words such as 'building'")
    from .prompts import GeoBox

    for i, b in enumerate(job.prompts.boxes):
        try:
            GeoBox.parse(b)
        except ValueError as e:  # the parser's own message, under the key's name
            problems.append(f"prompts.boxes[{i}]: {str(e).split(': ', 1)[-1]}")
    model = None
    if job.backend.model is not None:
        model = _abs(base, job.backend.model)
        if job.backend.name != "onnx":
            problems.append(f"backend.model: only the onnx backend reads model files (backend.name is "
                            f"{job.backend.name!r}): remove backend.model or set backend.name: onnx")
    if job.tiling.squash and job.tiling.scale != 1.0:
        problems.append("tiling.squash: squash fits the whole image into one tile, so tiling.scale does not "
                        "apply: remove one of them")
    if not job.tiling.squash and job.tiling.overlap > job.tiling.tile_size // 2 - 1:
        problems.append(f"tiling.overlap: must be less than half of tiling.tile_size, at most "
                        f"{job.tiling.tile_size // 2 - 1} (got {job.tiling.overlap})")
    out = job.output
    if not out.path.strip():
        problems.append("output.path: is empty: name the output file, e.g. out/objects.gpkg")
    if problems:
        raise _fail(name, problems)
    return LoadedJob(job=job, source=name, base=base, inputs=list(dict.fromkeys(inputs)), box_file=box_file,
                     model=model, output=_abs(base, out.path),
                     work_dir=_abs(base, out.work_dir) if out.work_dir else None,
                     report=_abs(base, out.report) if out.report else None,
                     labels=_abs(base, out.labels) if out.labels else None)


# -- running ---------------------------------------------------------------------------------------------

def job_options(lj: LoadedJob, *, strict: bool | None = None, progress: bool = False):
    """The `pipeline.Options` a job asks for."""
    from .pipeline import Options

    j = lj.job
    return Options(backend=j.backend.name, model=lj.model, device=j.backend.device, threads=j.backend.threads,
                   tile_size=j.tiling.tile_size, overlap=j.tiling.overlap, scale=j.tiling.scale, gsd=j.tiling.gsd,
                   bands=tuple(j.tiling.bands) if j.tiling.bands else None, squash=j.tiling.squash,
                   refine=j.tiling.refine, refine_depth=j.tiling.refine_depth,
                   min_area=j.postprocess.min_area, simplify=j.postprocess.simplify, workers=j.run.workers,
                   scheduler=j.run.scheduler, retries=j.run.retries,
                   strict=j.run.strict if strict is None else strict, progress=progress)


def job_call(lj: LoadedJob, *, fresh: bool = False, strict: bool | None = None, progress: bool = False) -> dict:
    """The keyword arguments of the `segment_job(...)` call that runs `lj`."""
    from .pipeline import segment_job

    j = lj.job
    kwargs: dict[str, Any] = dict(inputs=lj.inputs, text=list(j.prompts.text), boxes=list(j.prompts.boxes),
                                  box_file=lj.box_file, out=lj.output, overwrite=j.output.overwrite,
                                  options=job_options(lj, strict=strict, progress=progress),
                                  work_dir=lj.work_dir, fresh=fresh, report_path=lj.report)
    if lj.labels is not None:
        if "labels" not in inspect.signature(segment_job).parameters:
            raise JobFileError(f"{lj.source}: output.labels: this version of sam3tiles cannot write label "
                               "images: remove output.labels")
        kwargs["labels"] = lj.labels
    return kwargs


def run_job(lj: LoadedJob, *, fresh: bool = False, strict: bool | None = None, progress: bool = False):
    """Run a loaded job: (GeoDataFrame, RunReport), as `segment_job` returns them."""
    from .pipeline import segment_job

    with job_words(lj):
        return segment_job(**job_call(lj, fresh=fresh, strict=strict, progress=progress))


#: Command-line options in error messages, and the job keys that set them.
_OPTION_KEYS = [("pass --overwrite", "set output.overwrite: true"), ("--overwrite", "output.overwrite"),
                ("--out ", "output.path "), ("--box-file ", "prompts.box_file "), ("--box ", "prompts.boxes "),
                ("--text ", "prompts.text "), ("--text prompt", "prompts.text entry"),
                ("--bands", "tiling.bands"), ("--scale", "tiling.scale"), ("--gsd", "tiling.gsd"),
                ("--overlap", "tiling.overlap"), ("--refine-depth", "tiling.refine_depth"),
                ("--refine", "tiling.refine"), ("--model", "backend.model"), ("--work-dir", "output.work_dir"),
                ("--scheduler", "run.scheduler"), ("--workers", "run.workers"), ("--labels", "output.labels")]  # run has --strict, --fresh too


class job_words:
    """Context manager: a sam3tiles error raised inside names the job's keys instead of the command
    line's options (`output.path ... exists: set output.overwrite: true`), keeping its type and exit code."""

    def __init__(self, lj: LoadedJob | None = None):
        self.lj = lj

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        from .errors import Sam3TilesError

        if exc is None or not isinstance(exc, Sam3TilesError) or isinstance(exc, JobFileError):
            return False
        text = str(exc)
        for option, key in _OPTION_KEYS:
            text = text.replace(option, key)
        if text == str(exc):
            return False
        try:
            new = type(exc)(text)
        except Exception:  # noqa: BLE001 - an error class with another signature: keep the original
            return False
        raise new from None
