"""The output formats: one table, and every rule about a format read from it.

Each format is a `Format` (frozen): the name endings that ask for it, its GDAL driver, how its rows are
written (chunk by chunk, or as a partitioned dataset folder), which coordinates it can hold (a map CRS,
pixels, or both), its writer, whether the napari reader opens it, how the command line takes it as its
last argument, and a line for help texts. `format_for(path)` finds a path's format by its name (the
longest ending that matches: `x.qupath.geojson` is QuPath's GeoJSON, not plain GeoJSON).

Who reads the table: `writers.vector.write_vector` (the writer, the chunks joined or not, a dataset's
parts), `writers.atomic.check_output` (an unknown ending: the message lists the table), `check_space` (a
pixel-space output refused where readers take coordinates for lon/lat, a map CRS refused where a format is
in pixels), `writers.vector.check_layer` (which formats hold layers), `writers.stream.is_dataset` (a
`NAME.parquet/` folder), the CLI's `--out` help and its last-argument rule (`cli.segment`), the napari
reader (`integrations.napari`), the run report's note on who opens a format, and the messages that list
formats (`run.planning.plan`, `cli.evaluate`).

Adding a format: one `Format` in `FORMATS` below (a GDAL format: `writer="vector:write_ogr"` and its
`driver`; else a writer function, `writer(rows, tmp, target)`, in a module of `sam3tiles.writers`).
`register` adds one at run time (tests/test_formats.py registers a throwaway format that way).

This module imports no geopandas (the writers are named, and loaded when a file is written), so the command
line's help and the napari reader read the table cheaply.
"""

from __future__ import annotations

import importlib
import os
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..wording import opt, render

#: Which coordinates a format can hold (`Format.space`).
ANY, MAP, PIXELS = "any", "map", "pixels"
#: What help texts add to a format's line for its `space`.
SPACE_NOTE = {ANY: "", MAP: "; georeferenced inputs only", PIXELS: "; inputs without a CRS only"}
#: How the CLI takes a last argument with the format's ending (`Format.last`): always as the output;
#: "alone": only when --out is not given (an input, a STAC item, may end so too); never.
ALWAYS, ALONE, NEVER = "always", "alone", "never"


@dataclass(frozen=True)
class Target:
    """What a writer is told besides the rows: the format, the output's final path (the writer writes a
    temporary file beside it, and may read an existing output, as GeoPackage does to keep its other
    layers), the layer name, the run metadata (JSON-safe; empty: no sam3tiles mark), the layer description,
    each input's `units.Frame` by source name, and the options only some formats read."""

    format: Format
    path: Path
    layer: str
    metadata: dict
    description: str
    frames: dict = field(default_factory=dict)
    geojson_crs: str = "wgs84"
    prompts: list | None = None
    qupath_type: str = "detection"


@dataclass(frozen=True, eq=False)
class Format:
    """One output format (compared by identity: the table holds each once).

    `writer`: "module:function" of `sam3tiles.writers` (loaded when a file is written) or the function;
    called as `writer(rows, tmp, target)`, `rows` being an iterator of GeoDataFrames when `chunked`, else
    one GeoDataFrame (the chunks joined in memory). `suffixes`: lower case; the first is the one help texts
    and messages suggest. `driver`: GDAL's name for it, None when written without GDAL. `dataset`:
    `NAME.SUFFIX/` is a partitioned dataset, a folder of parts `part-00000SUFFIX`, ..., each written by
    `writer` from one chunk. `space`: ANY, MAP (pixel space refused: its readers take coordinates for
    lon/lat) or PIXELS (a map CRS refused); `why`: why, said in the message. `layers`: holds several
    layers (`layer`); `napari`: the napari reader opens it; `last`: how the CLI takes a last argument so
    named (ALWAYS, ALONE, NEVER), `never_last`: endings of it never taken so (a STAC item's usual `.json`);
    `options`: GDAL layer creation options (`{layer}`, `{description}` filled in) for `vector:write_ogr`;
    `help`: one line for help texts (option markers allowed); `readers`: the run report's note on who
    opens it (`{path}` filled in), where common tools cannot."""

    name: str
    suffixes: tuple[str, ...]
    writer: str | Callable[..., Any]
    driver: str | None = None
    chunked: bool = False
    dataset: bool = False
    space: str = ANY
    why: str = ""
    layers: bool = False
    napari: bool = False
    last: str = ALWAYS
    never_last: tuple[str, ...] = ()
    options: Mapping[str, str] = field(default_factory=dict)
    help: str = ""
    readers: str | None = None

    @property
    def suffix(self) -> str:
        """The ending help texts and messages suggest."""
        return self.suffixes[0]

    def write(self) -> Callable[..., Any]:
        """The writer function (`writer` loaded)."""
        if callable(self.writer):
            return self.writer
        module, _, name = self.writer.partition(":")
        return getattr(importlib.import_module(f"{__package__}.{module}"), name)

    def stem(self, path: str | os.PathLike) -> str:
        """The name of `path` without this format's ending (`x.qupath.geojson`: x)."""
        name = Path(str(path).rstrip("/" + os.sep)).name
        end = next((s for s in sorted(self.suffixes, key=len, reverse=True) if name.lower().endswith(s)), "")
        return name[: len(name) - len(end)] if end else Path(name).stem


#: Who opens a GeoParquet output (docs/outputs.md): said in the run report, since LTS GIS stacks do not.
PARQUET_READERS = ("{path}: GeoParquet 1.1 opens in geopandas, pyarrow, DuckDB, GDAL >= 3.5 built with its "
                   "Parquet driver (ogrinfo --formats | grep Parquet) and the QGIS builds on such a GDAL "
                   "(conda-forge, OSGeo4W); not in Debian/Ubuntu's GDAL or QGIS packages (no Parquet driver): "
                   "write a .gpkg for those")

GPKG = Format("GeoPackage", (".gpkg",), "vector:write_gpkg", driver="GPKG", chunked=True, layers=True, napari=True,
              help=f"GeoPackage; {opt('layer')} names the layer, the file's other layers are kept")
PARQUET = Format("GeoParquet", (".parquet", ".geoparquet"), "vector:write_parquet", driver="Parquet", chunked=True,
                 dataset=True, napari=True, readers=PARQUET_READERS,
                 help="GeoParquet 1.1 with a bbox column; NAME.parquet/ is a partitioned dataset, a folder of parts")
FGB = Format("FlatGeobuf", (".fgb",), "vector:write_ogr", driver="FlatGeobuf", napari=True,
             options={"TITLE": "{layer}", "DESCRIPTION": "{description}"}, help="FlatGeobuf, with a spatial index")
GEOJSON = Format("GeoJSON", (".geojson", ".json"), "vector:write_geojson", driver="GeoJSON", space=MAP,
                 why="GIS tools read a plain GeoJSON as WGS84 lon/lat, so the objects would be drawn at wrong places "
                     "without a warning", napari=True, last=ALONE, never_last=(".json",),
                 help=f"RFC 7946 GeoJSON in WGS84 lon/lat, or in the input's CRS with {opt('geojson_crs', 'native')}")
QUPATH = Format("QuPath GeoJSON", (".qupath.geojson",), "vector:write_qupath", driver="GeoJSON", space=PIXELS,
                why="QuPath's GeoJSON is in slide pixels", napari=True, last=ALONE,
                help=f"QuPath's GeoJSON in slide pixels, detections or annotations by {opt('qupath_type')}")
COCO = Format("COCO", (".coco.json",), "vector:write_coco",
              help="COCO instance annotations in each input image's pixels (SAHI, Detectron2, pycocotools)")

#: Every format, in the order help texts and messages list them.
FORMATS: list[Format] = [GPKG, PARQUET, FGB, GEOJSON, QUPATH, COCO]
#: The format of the one output per input written into a folder (`--out folder/`).
PER_INPUT = GPKG


def register(fmt: Format) -> Format:
    """Add a format to the table (at the end); an ending another format has already is refused."""
    taken = {s for f in FORMATS for s in f.suffixes}
    clash = [s for s in fmt.suffixes if s in taken]
    if clash or not fmt.suffixes or any(s != s.lower() or not s.startswith(".") for s in fmt.suffixes):
        raise ValueError(f"{fmt.name}: its endings {fmt.suffixes} must be new, lower case, starting with '.'")
    FORMATS.append(fmt)
    return fmt


def unregister(fmt: Format) -> None:
    """Remove a format `register` added."""
    FORMATS.remove(fmt)


def format_for(path: str | os.PathLike | None) -> Format | None:
    """The format a path's name asks for (the longest ending that matches, ignoring case; a dataset folder's
    trailing '/' ignored), or None. A name that is nothing but the ending (`.gpkg`) asks for none."""
    if path is None:
        return None
    name = Path(os.fspath(path).rstrip("/" + os.sep)).name.lower()
    best = None
    for f in FORMATS:
        for s in f.suffixes:
            if len(name) > len(s) and name.endswith(s) and (best is None or len(s) > len(best[1])):
                best = (f, s)
    return best[0] if best else None


def endings(formats: list[Format] | None = None, every: bool = True, last: str = ", ", prefix: str = "") -> str:
    """The endings of `formats` (default: all) as a list for a message: `every` ending, or the first of
    each, after `prefix` (a name's stem); `last`: the words before the last one (", " or " or ")."""
    names = [prefix + s for f in (FORMATS if formats is None else formats)
             for s in (f.suffixes if every else f.suffixes[:1])]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + last + names[-1]


def unknown(path: str | os.PathLike, what: str = "out") -> UsageError:
    """The error for a name no format ends in: it lists the table's endings."""
    p = Path(path)
    return UsageError(f"{opt(what, p)}: unknown format {p.suffix or '(no extension)'}: end the name with {endings()}")


def check_space(path: str | os.PathLike, crs) -> None:
    """An output must be able to hold the input's coordinates: pixel space (`crs` None) is refused for a MAP
    format (its readers take coordinates for WGS84 lon/lat: a silently wrong place on the map), a map CRS
    for a PIXELS format. The message names the formats that fit, as names of this output."""
    fmt = format_for(path)
    if fmt is None or fmt.space == ANY or (crs is None) == (fmt.space == PIXELS):
        return
    base = fmt.stem(path)
    wanted = PIXELS if crs is None else MAP
    same = [f for f in FORMATS if f.space == wanted]
    other = [f for f in FORMATS if f.space == ANY and f.driver]
    names = "; ".join(f"{base}{f.suffix} ({f.help})" for f in same)
    fix = (f"name it {names}, or " if names else "") + "write " + endings(other, every=False, last=" or ",
                                                                          prefix=base)
    if crs is None:
        raise UsageError(f"{opt('out', path)}: the input has no CRS (pixel coordinates), and {fmt.why}: {fix} "
                         f"(they say 'no CRS')")
    raise UsageError(f"{opt('out', path)}: {fmt.why}, but the input has a CRS: {fix}")


def is_dataset(out: str | os.PathLike | None) -> bool:
    """Whether `out` names a partitioned dataset: a format that has one, and a name ending in '/' (or an
    existing folder)."""
    fmt = format_for(out)
    if fmt is None or not fmt.dataset:
        return False
    s = os.fspath(out)
    return s.endswith(("/", os.sep)) or Path(s).is_dir()


def last_argument(name: str, out_given: bool) -> bool:
    """Whether the CLI takes `name`, its last argument, as the output (rio style: `segment IN OUT`): a name
    only an output has; without --out also one an input may have too (ALONE) and a folder ('/')."""
    if not out_given and name.endswith(("/", "\\")):
        return True
    fmt = format_for(name.rstrip("/\\"))
    if fmt is None or name.lower().endswith(fmt.never_last) or fmt.last == NEVER:
        return False
    if name.endswith(("/", "\\")) and not fmt.dataset:
        return False
    return fmt.last == ALWAYS or not out_given


def help_text(words: str | None = None, width: int = 78) -> str:
    """The formats, an entry each, for a command's help (click: kept as written, wrapped to `width`);
    option markers spelled in `words` (`wording.render`)."""
    col = max(len(", ".join(f.suffixes)) for f in FORMATS) + 4
    lines = ["\b", "Output formats, by the name's ending:"]
    for f in FORMATS:
        text = textwrap.wrap(render(f.help + SPACE_NOTE[f.space], words), max(width - col, 30))
        lines += [f"  {', '.join(f.suffixes):<{col - 2}}{text[0]}"] + [" " * col + t for t in text[1:]]
    return "\n".join(lines)
