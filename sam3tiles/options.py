"""The options registry: every option of a run declared once, as a field of `Options`.

Each field carries its declaration (`Opt`: help text, job-file key, command-line flags, the commands that
take it, allowed range or choices, a parser for text values). Everything else is derived from it:

* `Options(...)` checks ranges, choices and the rules between options when it is built (UsageError,
  exit 2), so a value the model cannot take is refused before any work, whatever the door (API, CLI,
  job file);
* `cli.options.registry_options(command)` adds the click options of `segment`, `plan` and `run`;
* `jobs.py` builds the job-file sections (`backend`, `tiling`, `postprocess`, `run`) as pydantic models;
* error messages name options by marker (`wording.opt`); the flags and job keys here spell them for the
  CLI and job files (`spell`, with `ARGUMENTS` for the arguments of a run that are no option);
* `api.segment` has one keyword per field; a test checks that it matches this registry.

To add an option: add one field below, `name: type = opt(default, "help", job=..., flags=..., ...)`.
That is all for the CLI, the job file, `Options` and the checks; then give `api.segment` the keyword
(tests/test_options.py says which line to add) and use `opts.name` where the option acts.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

from . import wording
from .errors import UsageError
from .model.providers import DEVICES, PRECISIONS, precision_problem
from .model.registry import RuntimeSpec, available_backends
from .model.runtime import MODEL_SIZE
from .readers.base import parse_bands
from .tiling.grid import DEFAULT_OVERLAP, MIN_TILE, TILE_SIZE, max_overlap
from .tiling.refine import DEFAULT_DEPTH, MAX_DEPTH, MODES as REFINE_MODES
from .vectorize.pieces import EDGE_MARGIN

__all__ = ["Opt", "opt", "Options", "declarations", "DEVICES", "ARGUMENTS"]

#: Commands that take registry options on the command line.
COMMANDS = ("segment", "plan", "run")
#: Values of `progress_format` (`run.recording.progress.progress_bar` draws each).
PROGRESS_FORMATS = ("bar", "json")


@dataclass(frozen=True)
class Opt:
    """The declaration of one option (kept in the field's metadata).

    `job`: "section.key" in a job file (None: not in job files). `flags`: command-line spellings, the first
    one named in messages (empty: API only). `commands`: which CLI commands take it; on `run` a flag
    overrides the job file's value. `ge`/`gt`/`le`: the allowed range. `choices`: allowed values, or a
    function returning them (for lists known only at run time, such as installed backends). `parse`:
    turns a command-line or job-file value into the field's value, raising ValueError or a sam3tiles
    error. `note`: why the range is what it is, appended to a refusal (options named by `wording.opt`).
    """

    help: str
    job: str | None = None
    flags: tuple[str, ...] = ()
    commands: tuple[str, ...] = ("segment",)
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    choices: tuple | Callable[[], Sequence[str]] | None = None
    parse: Callable[[Any], Any] | None = None
    envvar: str | None = None
    metavar: str | None = None
    note: str = ""

    @property
    def flag(self) -> str | None:
        return self.flags[0] if self.flags else None

    def allowed(self) -> tuple | None:
        c = self.choices
        return tuple(c()) if callable(c) else c

    def range_text(self) -> str:
        lo = f">= {self.ge:g}" if self.ge is not None else f"> {self.gt:g}" if self.gt is not None else ""
        hi = f"<= {self.le:g}" if self.le is not None else ""
        if self.ge is not None and hi:
            return f"from {self.ge:g} to {self.le:g}"
        return " and ".join(x for x in (lo, hi) if x)

    def in_range(self, v: float) -> bool:
        return ((self.ge is None or v >= self.ge) and (self.gt is None or v > self.gt)
                and (self.le is None or v <= self.le) and not (isinstance(v, float) and not math.isfinite(v)))


def opt(default: Any, help: str, **decl: Any) -> Any:
    """A field of `Options` with its declaration (see `Opt`)."""
    return field(default=default, metadata={"opt": Opt(help, **decl)})


def _bands(v: Any) -> tuple[int, ...] | None:
    bands = parse_bands(v)  # BandError names --bands and the fix
    if bands is not None and any(b < 1 for b in bands):
        raise UsageError(f"{wording.opt('bands')}: band numbers start at 1 (got {','.join(map(str, bands))})")
    return bands


def _crs(v: Any) -> str | None:
    """--crs as the text of a CRS rasterio knows (EPSG:32633; a WKT or PROJ string as given)."""
    if v is None:
        return None
    from rasterio.crs import CRS
    from rasterio.errors import CRSError

    try:
        crs = CRS.from_user_input(v)
    except (CRSError, ValueError, TypeError) as e:
        raise UsageError(f"takes a CRS GDAL knows: EPSG:NNNN, a WKT or a PROJ string (got {v!r}: "
                         f"{str(e).splitlines()[0] if str(e) else 'unknown'})") from None
    return crs.to_string()


def _overlap(v: Any) -> int | float:
    """--overlap as given: whole pixels, or a fraction of the tile below 1 (made pixels by `Options`)."""
    if isinstance(v, str):
        try:
            v = float(v)
        except ValueError:
            raise UsageError(f"{v!r} is not a number: give pixels (256) or a fraction of the tile (0.2)") from None
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


def _aoi(v: Any) -> str:
    """--aoi as text: a path (pathlib too), `PATH:LAYER`, or a box (four numbers, or their text)."""
    import os

    if isinstance(v, (tuple, list)):
        if len(v) != 4 or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
            raise UsageError(f"takes a file or a box of 4 numbers (MINX, MINY, MAXX, MAXY), got {list(v)!r}")
        return ",".join(repr(float(x)) for x in v)
    if isinstance(v, os.PathLike):
        v = os.fspath(v)
    if not isinstance(v, str) or not v.strip():
        raise UsageError(f"takes a vector file or MINX,MINY,MAXX,MAXY, got {v!r}")
    return v.strip()


def _fraction_overlap(o: "Options") -> None:
    """An overlap below 1 is a fraction of the tile side: pixels, rounded (0.2 of 1008 -> 202)."""
    v = o.overlap
    if isinstance(v, float) and 0 < v < 1 and isinstance(o.tile_size, (int, float)):
        object.__setattr__(o, "overlap", round(v * o.tile_size))


def _follow_threshold(o: "Options") -> None:
    """min_score at its default follows a lower score_threshold: what the model now keeps is not dropped again."""
    if o.min_score == 0.5 and isinstance(o.score_threshold, (int, float)) and 0 <= o.score_threshold < 0.5:
        object.__setattr__(o, "min_score", o.score_threshold)


def _backends() -> tuple[str, ...]:
    """Built-ins, then backends installed under the entry-point group sam3tiles.backends."""
    return available_backends()


@dataclass(frozen=True)
class Options:
    """Everything that shapes a run besides inputs, prompts and outputs. Immutable: change a copy
    with `dataclasses.replace`. Built values are checked (ranges, choices, rules between options)."""

    backend: str | object = opt(
        "onnx", "onnx: the SAM 3 model files; reference: a colour-matching stand-in (no weights, for tests "
                "and dry runs); simulated: sleeps like a GPU (benchmarks); others: installed under the entry-point "
                "group sam3tiles.backends (docs/backends.md).",
        job="backend.name", flags=("--backend",), choices=_backends)
    model: str | None = opt(
        None, "Folder of the SAM 3 ONNX files (default: $SAM3TILES_MODEL_DIR or the user cache; see "
              "`sam3tiles model fetch`).", job="backend.model", flags=("--model",))
    # -- GPU options (issue 21): the execution provider and its precision (model.providers) -----------
    device: str = opt("auto", "Where the model runs: auto (CUDA when there), cpu, cuda, tensorrt (TensorRT "
                              "with an engine cache beside the model; fp16 unless --precision says otherwise), "
                              "coreml (Apple; onnxruntime's macOS wheel) or dml (DirectML on Windows; "
                              "onnxruntime-directml, its first tile checked against the CPU).",
                      job="backend.device", flags=("--device",), choices=DEVICES)
    precision: str = opt("auto", "GPU arithmetic: fp32 (CUDA with TF32 off), tf32 (CUDA with TF32 on: "
                                 "onnxruntime's default), fp16 (TensorRT only); auto: the provider's default.",
                         job="backend.precision", flags=("--precision",), choices=PRECISIONS)
    score_threshold: float = opt(
        0.5, "Keep the model's queries scored above this. 0.5 is the published cut, baked into the seed's decoder; "
             "a decoder with raw scores (samexporter 0.5.0's) keeps lower ones too (docs/backends.md: layouts).",
        job="backend.score_threshold", flags=("--score-threshold",), ge=0, le=1)
    threads: int = opt(0, "onnxruntime threads per session (0: its default).", job="backend.threads",
                       flags=("--threads",), ge=0)
    workers: int | None = opt(None, "CPU threads for reading and vectorizing (local runs).", job="run.workers",
                              flags=("--workers",), ge=1)
    scheduler: str | None = opt(None, "Address of a dask.distributed scheduler (or $SAM3TILES_SCHEDULER).",
                                job="run.scheduler", flags=("--scheduler",), envvar="SAM3TILES_SCHEDULER")
    worker_timeout: float = opt(180.0, "Seconds a run on a Dask scheduler waits for a model worker when none is "
                                       "left (a worker killed or lost): then it stops with exit 4, the finished "
                                       "tiles checkpointed.", job="run.worker_timeout", flags=("--worker-timeout",),
                                gt=0, le=86400)
    tile_size: int = opt(TILE_SIZE, f"Tile side in pixels, at most the model's input side ({MODEL_SIZE}; "
                                    "an export of another side sets it).", job="tiling.tile_size",
                         flags=("--tile-size",), commands=("segment", "plan"), ge=MIN_TILE, le=MODEL_SIZE,
                         note=f"a tile is read into SAM 3's {MODEL_SIZE}x{MODEL_SIZE} input, so it can be no "
                              f"larger; use {wording.opt('scale')} to zoom out instead")
    overlap: int = opt(DEFAULT_OVERLAP, "Overlap between tiles in (scaled) pixels, or below 1 a fraction of "
                                        "--tile-size (0.2: 202 px of 1008, as SAHI's overlap ratio). Objects "
                                        "up to this size are kept once by ownership; larger ones are stitched "
                                        "across seams.",
                       job="tiling.overlap", flags=("--overlap",), commands=("segment", "plan"), ge=0,
                       parse=lambda v: _overlap(v), metavar="PX|FRACTION")
    scale: float = opt(1.0, "Uniform zoom: 2 for tiny objects, 0.5 for big ones (resampled on read).",
                       job="tiling.scale", flags=("--scale",), commands=("segment", "plan"), gt=0, le=64)
    gsd: float | None = opt(None, "Target sampling distance per pixel (overrides --scale): metres on a lon/lat CRS, "
                                  "CRS units on a projected one, microns on a slide of known pixel size.",
                            job="tiling.gsd", flags=("--gsd",), commands=("segment", "plan"), gt=0)
    crs: str | None = opt(None, "The map's CRS (EPSG:32633, WKT, PROJ): files in other CRSs or pixel sizes are read "
                                "warped onto the map's lattice (bilinear); default: the CRS covering most of the "
                                "area (docs/many-files.md).", job="grid.crs", flags=("--crs",),
                          commands=("segment", "plan"), parse=lambda v: _crs(v), metavar="CRS")
    bands: tuple[int, ...] | None = opt(
        None, "Bands as R,G,B (e.g. 4,3,2) or one band for grey; --channels for slides (1-based).",
        job="tiling.bands", flags=("--bands", "--channels"), commands=("segment", "plan"), parse=_bands)
    squash: bool = opt(False, f"Baseline: the whole image stretched to one model input ({MODEL_SIZE} px square), as "
                              "the published callers do.", job="tiling.squash", flags=("--squash",),
                       commands=("segment", "plan"))
    anchor: str = opt("auto", "Where the tile grid starts: auto = a map of several files on its CRS lattice (files "
                              "added later keep its tiles), one file at its own corner; lattice = one file on the "
                              "lattice too, so the tiles of a file that will grow into a mosaic are reused then "
                              "(docs/growing-archives.md).", job="grid.anchor", flags=("--anchor-grid",),
                      commands=("segment", "plan"), choices=("auto", "lattice"))
    refine: str = opt(REFINE_MODES[0], "auto: a tile where a prompt hits SAM 3's 200-object cap is re-run as "
                                       "4 sub-tiles at twice the zoom, for that prompt only, recursively where still "
                                       "saturated "
                                       "(see sam3tiles.tiling.refine); off: such tiles are only reported.",
                      job="tiling.refine", flags=("--refine",), commands=("segment", "plan"), choices=REFINE_MODES)
    refine_depth: int = opt(DEFAULT_DEPTH, "Zoom doublings refinement may apply at most.", job="tiling.refine_depth",
                            flags=("--refine-depth",), commands=("segment", "plan"), ge=0, le=MAX_DEPTH,
                            note=f"each level doubles the zoom of saturated tiles; {MAX_DEPTH} is 16x")
    # -- only where there is something to find (issue 39): run.planning.area, tiling.selection ---------------------
    aoi: str | None = opt(None, "Area of interest: a vector file (any CRS, all its polygons; PATH:LAYER for one "
                                "layer) or MINX,MINY,MAXX,MAXY in the raster's CRS; on a slide level-0 pixels (a "
                                "QuPath GeoJSON export). Only tiles that can see an object reaching into it are "
                                "encoded; objects that intersect it are written whole.",
                          job="tiling.aoi", flags=("--aoi",), commands=("segment", "plan"), parse=_aoi,
                          metavar="FILE[:LAYER]|MINX,MINY,MAXX,MAXY")
    aoi_clip: bool = opt(False, "Clip the objects to --aoi (their area columns follow) instead of writing them "
                                "whole.", job="postprocess.aoi_clip", flags=("--aoi-clip",))
    tissue: str = opt("auto", "Slides: auto skips the tiles with no tissue (a mask from a low-resolution level: "
                              "docs/area-of-interest.md); off encodes every tile. Rasters: nodata tiles are "
                              "skipped either way.", job="tiling.tissue", flags=("--tissue",),
                      commands=("segment", "plan"), choices=("auto", "off"))
    min_area: float = opt(0.0, "Drop objects smaller than this area, in the unit of the output's area column: "
                               "area_m2 on a lon/lat or metre CRS, area_ft2/area_us_ft2/... (CRS units²) "
                               "on others, area_px (pixels) without a CRS.",
                          job="postprocess.min_area", flags=("--min-area",), ge=0)
    max_area: float | None = opt(None, "Drop objects larger than this (units of --min-area).",
                                 job="postprocess.max_area", flags=("--max-area",), gt=0)
    min_score: float = opt(0.5, "Drop objects scored below this.", job="postprocess.min_score",
                           flags=("--min-score",), ge=0, le=1)
    simplify: float = opt(0.0, "Simplify polygons with this tolerance: metres on a lon/lat CRS, else CRS units "
                               "(pixels without a CRS).", job="postprocess.simplify", flags=("--simplify",), ge=0)
    layer: str | None = opt(None, "GeoPackage layer to write (default: the output's stem); other layers of an "
                                  "existing .gpkg are kept, --overwrite replaces only this one.",
                            job="output.layer", flags=("--layer",), metavar="NAME")
    geojson_crs: str = opt("wgs84", "GeoJSON of a georeferenced input: wgs84 = RFC 7946 lon/lat; native = the "
                                    "source CRS.", job="output.geojson_crs", flags=("--geojson-crs",),
                           choices=("wgs84", "native"))
    qupath_type: str = opt("detection", "QuPath GeoJSON (pixel space): detection = fixed objects (light, for many "
                                        "cells); annotation = editable objects, to correct by hand in QuPath.",
                           job="output.qupath_type", flags=("--qupath-type",), choices=("detection", "annotation"))
    no_preview: bool = opt(False, "Do not write the quicklook OUT.preview.png (the image, objects outlined per "
                                  "prompt, failed tiles marked).", job="output.no_preview", flags=("--no-preview",))
    clean: bool = opt(False, "Delete the work folder (the checkpoints, OUT.sam3tiles-work) after a run with no "
                             "failed tile; by default it is kept, so that a rerun resumes.", job="output.clean",
                      flags=("--clean",))
    retries: int = opt(2, "Retries of a failed tile task before the tile counts as failed.", job="run.retries",
                       ge=0, le=20)
    strict: bool = opt(False, "Exit with an error (5) when any tile failed or still hit SAM 3's 200-object cap.",
                       job="run.strict", flags=("--strict",), commands=("segment", "run"))
    progress: bool = opt(False, "Show a progress bar (a widget in notebooks with ipywidgets, else text).")
    max_in_flight: int | None = opt(None, "Tiles in flight at once (default: from the engine's threads).", ge=1)
    tiles_per_task: int | None = opt(None, "Tiles per Dask task on a cluster (default: up to 64, fewer as the tiles "
                                           "left run out; 1: a task a tile).", job="run.tiles_per_task",
                                     flags=("--tiles-per-task",), ge=1)
    edge_margin: int = opt(EDGE_MARGIN, "Mask pixels at a tile's inner edge treated as cut by the edge.", ge=0)
    encode_seconds: float = opt(0.1, "Simulated backend: seconds per encode.", job="backend.encode_seconds", ge=0)
    decode_seconds: float = opt(0.01, "Simulated backend: seconds per decode.", ge=0)
    merge_block: int = opt(8, "Tiles per side of a merge block (blocks merge in parallel; 0: one merge).", ge=0)
    box_scope: str = opt("image", "image: every example box acts in every tile (its pixels are pasted into each "
                                  "tile's free margin); tile: a box acts only in the tiles it lies in.",
                         job="prompts.box_scope", flags=("--box-scope",), choices=("image", "tile"))
    verify_inputs: bool = opt(False, "Tell changed inputs by a hash of their content, not by size, time or ETag "
                                     "(reads every input once more).", job="run.verify_inputs",
                              flags=("--verify-inputs",), commands=("segment",))
    asset: str | None = opt(None, "STAC inputs (item JSON files or URLs, or a saved search): the key of the "
                                  "asset to segment (job files: the top-level key `asset`).",
                            flags=("--asset",), commands=("segment", "plan"))
    no_mosaic: bool = opt(False, "Segment each input on its own. By default inputs that form one map (adjacent "
                                 "or overlapping files of one CRS, pixel size and bands) are read as one image, so "
                                 "objects come out once and whole across file edges (docs/many-files.md).",
                          job="run.no_mosaic", flags=("--no-mosaic",), commands=("segment", "plan"))
    # -- where GIS tools drive the run (issue 23) ------------------------------------------------------
    progress_format: str = opt("bar", "bar: a progress bar (none with -q); json: one JSON line per update on "
                                      "stderr, even with -q, for programs driving the command line (the QGIS "
                                      "provider; see sam3tiles.run.recording.progress).",
                               flags=("--progress",), commands=("segment",), choices=PROGRESS_FORMATS)

    def __post_init__(self) -> None:
        for f, d in fields(type(self)):
            v = getattr(self, f.name)
            if d.parse is not None and v is not None:  # parsers are idempotent: a parsed value passes
                try:
                    object.__setattr__(self, f.name, d.parse(v))
                except UsageError as e:  # the parser says what is wrong; the message names the option
                    raise UsageError(f"{named(f.name)} {wording.raw(e)}") from None
            elif isinstance(v, float) and v.is_integer() and value_type(f.name, type(self)) is int:
                object.__setattr__(self, f.name, int(v))  # 512.0 from a YAML or JSON number
        _fraction_overlap(self)
        _follow_threshold(self)
        check(self)

    def runtime_spec(self) -> RuntimeSpec:
        """The one place a backend (name, object or factory) becomes a RuntimeSpec."""
        return RuntimeSpec.of(self.backend, model_dir=self.model, device=self.device, precision=self.precision,
                              score_threshold=float(self.score_threshold),
                              intra_op_threads=self.threads, encode_seconds=self.encode_seconds,
                              decode_seconds=self.decode_seconds)

    @classmethod
    def from_params(cls, params: dict, **extra: Any) -> "Options":
        """Options from a mapping that may hold other keys too (click's parameters), plus `extra`."""
        names = {f.name for f, _ in fields(cls)}
        given = {k: v for k, v in params.items() if k in names}
        return cls(**{**given, **extra})


def fields(cls: type | None = None) -> Iterator[tuple[dataclasses.Field, Opt]]:
    """(field, declaration) of every option of `cls` (default `Options`), in declaration order."""
    for f in dataclasses.fields(cls or Options):
        yield f, f.metadata["opt"]


def declarations(cls: type | None = None) -> dict[str, Opt]:
    """Option name -> its declaration."""
    return {f.name: d for f, d in fields(cls)}


#: The arguments of a run that are no `Options` field, by their `sam3tiles.segment` keyword: (flag, job key).
ARGUMENTS: dict[str, tuple[str, str]] = {
    "inputs": ("INPUT", "inputs"), "prompts": ("--text", "prompts.text"), "boxes": ("--box", "prompts.boxes"),
    "box_file": ("--box-file", "prompts.box_file"), "example_images": ("--example-image", "prompts.example_images"),
    "points": ("--point", "prompts.points"), "point_file": ("--point-file", "prompts.point_file"),
    "out": ("--out", "output.path"), "overwrite": ("--overwrite", "output.overwrite"),
    "labels": ("--labels", "output.labels"), "work_dir": ("--work-dir", "output.work_dir"),
    "report_path": ("the report", "output.report"), "fresh": ("--fresh", "--fresh")}


def spelling(name: str, words: str) -> str:
    """An option's name in a vocabulary (`wording.WORDS`): its keyword, its first flag or its job key (the
    flag where the job file has no key, or `sam3tiles run` takes the flag itself)."""
    if words == "python":
        return name
    d = declarations().get(name)
    if d is None:
        flag, key = ARGUMENTS.get(name, ("--" + name.replace("_", "-"), None))
    else:
        flag, key = d.flag or name, None if "run" in d.commands else d.job
    return key or flag if words == "job" else flag


def _spell_cli(name: str, value: str | None, on: bool) -> str:
    flag = spelling(name, "cli")
    return f"pass {flag}" if on else flag if value is None else f"{flag} {value}"


def _spell_job(name: str, value: str | None, on: bool) -> str:
    key = spelling(name, "job")
    if on:
        return f"set {key}: true" if not key.startswith("-") else f"pass {key}"
    return key if value is None else f"{key} {value}"


wording.SPELLERS.update(cli=_spell_cli, job=_spell_job)


def named(name: str, cls: type | None = None) -> str:
    """How messages name an option: its marker (`wording.opt`), spelled by the entry point."""
    return wording.opt(name)


def value_type(name: str, cls: type | None = None) -> type | None:
    """The plain type of an option's values (int, float, bool, str; None for others), None allowed aside."""
    hint = type_hints(cls or Options)[name]
    args = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
    return args[0] if len(args) == 1 and args[0] in (int, float, bool, str) else None


@functools.cache
def type_hints(cls: type) -> dict[str, Any]:
    """`typing.get_type_hints` of an options class (the registry's and the job file's field types), once."""
    return typing.get_type_hints(cls)


def check(o: Options) -> None:
    """Types, ranges and choices of each option, then the rules between options; UsageError names the
    first problem and the allowed values."""
    cls = type(o)
    for f, d in fields(cls):
        v, name, kind = getattr(o, f.name), named(f.name, cls), value_type(f.name, cls)
        if v is None:
            continue
        if kind in (int, float) and (isinstance(v, bool) or not isinstance(v, (int, float))
                                     or (kind is int and not float(v).is_integer())):
            raise UsageError(f"{name} must be a {'whole ' if kind is int else ''}number (got {v!r})")
        if kind is bool and not isinstance(v, bool):
            raise UsageError(f"{name} must be True or False (got {v!r})")
        if isinstance(v, (int, float)) and not isinstance(v, bool) and not d.in_range(v):
            finite = " (a finite number)" if isinstance(v, float) and math.isinf(v) else ""
            raise UsageError(f"{name} must be {d.range_text()}{finite} (got {v:g})" + (f": {d.note}" if d.note else ""))
        allowed = d.allowed()
        if allowed is not None and isinstance(v, str) and v not in allowed:
            raise UsageError(f"{name} {v!r} is not one of {', '.join(allowed)}: choose one of them")
    if o.max_area is not None and not o.max_area > o.min_area:
        raise UsageError(f"{wording.opt('max_area', f'{o.max_area:g}')} must be larger than "
                         f"{wording.opt('min_area', f'{o.min_area:g}')} (both in the "
                         "area column's units: area_m2, area_px, ...)")
    for problem in cross_problems(o.tile_size, o.overlap, o.squash, o.scale, o.gsd):
        raise UsageError(problem)
    problem = precision_problem(o.device, o.precision) or device_problem(o.backend, o.device, o.precision)
    if problem is not None:
        raise UsageError(problem)
    if o.score_threshold < 0.5 and isinstance(o.backend, str) and o.backend in DEVICELESS:
        raise UsageError(f"{wording.opt('score_threshold', f'{o.score_threshold:g}')}: the {o.backend} backend answers "
                         "as the published decoder does, only scores over 0.5: leave it at 0.5, or use the onnx "
                         "backend with a decoder that has raw scores")
    if o.min_score < o.score_threshold:
        raise UsageError(f"{wording.opt('min_score', f'{o.min_score:g}')}: the model already drops detections below "
                         f"{o.score_threshold:g} ({wording.opt('score_threshold')}), so a lower threshold would keep "
                         f"nothing more; lower {wording.opt('score_threshold')} with a decoder that has raw scores")


#: Built-in backends that run where they are (numpy, sleeps): a device or precision would be ignored.
DEVICELESS = ("reference", "simulated")


def device_problem(backend: str | object, device: str, precision: str) -> str | None:
    """Why a device or precision other than `auto` cannot be given to `backend` (a usage error's message), or
    None: the reference and simulated backends take none, nor does a backend handed over as an object or
    callable (its caller built it); onnx and installed backends read them (`RuntimeSpec.device`)."""
    given = [(n, v) for n, v in (("device", device), ("precision", precision)) if v != "auto"]
    if not given or (isinstance(backend, str) and backend not in DEVICELESS):
        return None
    name, value = given[0]
    if isinstance(backend, str):
        return (f"{wording.opt(name, value)}: the {backend} backend takes no device or precision (it would be "
                f"ignored): leave {wording.opt(name)} out, or give {wording.opt('backend', 'onnx')}")
    return (f"{wording.opt(name, value)}: a backend handed over as an object or callable takes no device or "
            f"precision (its caller builds it): set them where it is built, and leave {wording.opt(name)} out")


def cross_problems(tile_size: int, overlap: int, squash: bool, scale: float, gsd: float | None = None) -> list[str]:
    """The rules between the tiling options, as messages that name the options by marker (`wording.opt`),
    spelled by the door that reports them: `check` raises the first, a job file lists them all
    (`jobs.py`). The overlap's bound is the grid's invariant (`tiling.grid.max_overlap`)."""
    if squash and scale != 1:
        return [f"{wording.opt('squash')}: squash fits the whole image into one tile, so {wording.opt('scale')} "
                "does not apply: remove one of them"]
    if squash and gsd is not None:
        return [f"{wording.opt('squash')}: squash fits the whole image into one tile, so {wording.opt('gsd')} "
                "does not apply: remove one of them"]
    if not squash and overlap > max_overlap(tile_size):
        return [f"{wording.opt('overlap')}: must be less than half of {wording.opt('tile_size')}, at most "
                f"{max_overlap(tile_size)} (got {overlap})"]
    return []
