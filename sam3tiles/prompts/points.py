"""Points as prompts: clicks in map coordinates (source pixels for inputs without a CRS), one object each.

`--point X,Y[,neg]` (repeatable, in the first input's CRS), `--point-file` (any vector layer of points GDAL
reads, any CRS: each point reprojected to the CRS of the input that holds it; a `label` column as in box
files, `prompt.read_labels`; every other column is carried to the point's output row, under `USER_PREFIX`
where the output has a column of its name), job keys `prompts.points` / `prompts.point_file`, API keywords
`points=` / `point_file=`.

Each positive point asks for the one object under it: the output holds one row per positive point, in the
order given (command-line points first, then the file's features), with `found`, `status` and the point's
columns. A negative point is no object: it acts on the positives near it (the clicks of a window hold every
negative point in that window). Where each point runs, and how its object comes out whole:
`sam3tiles.run.executing.points`; the guide: docs/points.md.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import numbers
import os
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..errors import InputDataError, PromptError, UsageError
from ..wording import opt, spoken
from .prompt import parse_numbers, read_labels, read_vector, where_words

log = logging.getLogger(__name__)

#: The form `--point` takes and `points=` accepts, for messages.
FORMS = ("give points as 'X,Y[,neg]' text, (x, y[, positive]) tuples, shapely Points or sam3tiles.GeoPoint, in "
         "the raster's CRS (pixels, x right and y down, for an image without one)")


@dataclass(frozen=True)
class GeoPoint:
    """A click in the raster's CRS (source pixels when it has none); `attrs`: the point file's other columns,
    (name, value) pairs, carried to the point's output row."""

    x: float
    y: float
    positive: bool = True
    attrs: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def parse(cls, text: str) -> "GeoPoint":
        """'X,Y[,neg]' as given to --point."""
        (x, y), positive = parse_numbers(text, "points", "X,Y")
        if not (math.isfinite(x) and math.isfinite(y)):
            raise UsageError(f"{opt('points', repr(text))}: the coordinates must be finite numbers")
        return cls(x, y, positive)

    @classmethod
    def coerce(cls, value: Any) -> "GeoPoint":
        """A point from what `points=` takes (`FORMS`); anything else is a UsageError naming the forms."""
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            return cls.parse(value)
        if getattr(value, "geom_type", None) == "Point":
            if value.is_empty:
                raise UsageError(f"{opt('points')}: an empty Point is no click: {FORMS}")
            return cls(float(value.x), float(value.y))
        if isinstance(value, (tuple, list)) and len(value) in (2, 3):
            label = value[2] if len(value) == 3 else True
            if isinstance(label, str):
                return cls.parse(",".join(map(str, value)))
            if not all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in value[:2]) or not all(
                    math.isfinite(float(v)) for v in value[:2]):
                raise UsageError(f"{opt('points')} {value!r}: the coordinates must be finite numbers: {FORMS}")
            return cls(float(value[0]), float(value[1]), bool(label))
        raise UsageError(f"{opt('points')} {value!r:.80}: not a point: {FORMS}")


def _is_one_point(value: Any) -> bool:
    if isinstance(value, (GeoPoint, str)) or getattr(value, "geom_type", None) == "Point":
        return True
    return (isinstance(value, (tuple, list)) and len(value) in (2, 3)
            and all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in value[:2]))


def point_arguments(points: Any) -> list[GeoPoint]:
    """A run's points however a caller gave them: one point (text, tuple, shapely Point, GeoPoint) or a list of
    them; anything else a UsageError naming the keyword and the forms."""
    if points is None:
        return []
    if _is_one_point(points):
        return [GeoPoint.coerce(points)]
    if isinstance(points, (bytes, dict)) or not hasattr(points, "__iter__"):
        raise UsageError(f"{opt('points')}: {FORMS}, not {type(points).__name__}")
    return [GeoPoint.coerce(p) for p in points]


#: The columns of a point's output row besides the standard ones (`run.planning.outputs.COLUMNS`, the area column).
ROW_COLUMNS = ("found", "status", "point_id")
#: Names no carried column may take either: the row's geometry, the spool's order key, GeoPackage's feature id
#: column (GDAL refuses a field of that name that is not an integer).
RESERVED = ("geometry", "_order", "fid")
#: A point file's column whose name the output has (compared ignoring case: GeoPackage and GDAL do) is carried
#: under this prefix, repeated until the name is free: `id` as `user_id`, and as `user_user_id` when the file
#: has a `user_id` too. The output's own columns keep their names and values.
USER_PREFIX = "user_"


def carried_names(columns: Sequence[str], taken: Sequence[str]) -> dict[str, str]:
    """Each carried column's name in the output (`USER_PREFIX`): a name of `taken` (the output's own) or one
    another of the file's columns has already (ignoring case) gets the prefix until no name has it."""
    used = {t.lower() for t in taken}
    keep = []
    for c in columns:
        if c.lower() not in used:
            used.add(c.lower())
            keep.append(c)
    out = {}
    for c in columns:
        name = c
        if c not in keep:
            while name.lower() in used:
                name = USER_PREFIX + name
            used.add(name.lower())
        out[c] = name
    return out


def read_point_file(path: str, raster_crs, taken: Sequence[str] = ()) -> tuple[list[GeoPoint], Any, dict]:
    """(the points of any vector layer GDAL reads, in the file's own CRS; that CRS; each carried column's name
    in the output, by its name in the file). A `label` column marks
    negatives (`prompt.read_labels`: 1/0, pos/neg, yes/no, ...); every other column is carried
    (`GeoPoint.attrs`, under the names of `carried_names`: `taken` are the output's own columns, values as
    `_carried` makes them). A feature that is no point is exit 3."""
    gdf = read_vector(path, raster_crs, "point_file", reproject=False)
    kinds = gdf.geometry.geom_type
    bad = [i for i, (g, k) in enumerate(zip(gdf.geometry, kinds)) if g is None or g.is_empty or k != "Point"]
    if bad:
        g = gdf.geometry.iloc[bad[0]]
        what = "an empty geometry" if g is None or g.is_empty else f"a {kinds.iloc[bad[0]]}"
        raise InputDataError(f"{opt('point_file', path)}: feature {bad[0] + 1}"
                             f"{f' (and {len(bad) - 1} more)' if len(bad) > 1 else ''} is {what}, not a point: give a "
                             "layer of points (a polygon layer's points: its centroids or representative points, e.g. "
                             "geopandas' representative_point())")
    signs = read_labels(gdf, "point_file", path)
    columns = [str(c) for c in gdf.columns if c not in ("label", gdf.geometry.name)]
    names = carried_names(columns, (*taken, *RESERVED))
    values = [_carried(gdf[c]) for c in columns]
    rows = zip(*values) if columns else ([()] * len(gdf))
    points = [GeoPoint(float(g.x), float(g.y), positive, tuple(zip((names[c] for c in columns), row)))
              for g, positive, row in zip(gdf.geometry, signs, rows)]
    return points, gdf.crs, names


def _carried(column) -> list:
    """A point file column's values as output rows take them: numpy scalars as Python values (the spool
    pickles them; dtypes are restored from the first rows); lists, arrays and mappings (GeoJSON arrays and
    objects, GDAL's list fields) as JSON text, which every output format holds; in a column of such values
    (dtype object) a missing value as None, not NaN."""
    out = [_plain(v) for v in column]
    if column.dtype == object:
        out = [None if isinstance(v, float) and math.isnan(v) else v for v in out]
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple, dict, set, np.ndarray)):
        return json.dumps(value.tolist() if isinstance(value, np.ndarray) else value, default=_json_default,
                          ensure_ascii=False)
    return value.item() if isinstance(value, np.generic) else value


def _json_default(value: Any) -> Any:
    """What json.dumps cannot write itself: numpy values, arrays, sets, dates and times, bytes (as hex)."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (np.ndarray, set, frozenset)):
        return value.tolist() if isinstance(value, np.ndarray) else sorted(value, key=str)
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value.hex() if isinstance(value, bytes) else str(value)


def check_points_inside(points: Sequence[GeoPoint], owner: Sequence[int], n_given: int, crs, bounds: list,
                        point_file: str | None) -> None:
    """A given point that misses every input is an error (usually coordinates in another CRS); so is a point
    file whose points all miss (some missing are counted in the report). `crs`, `bounds`: the first input's
    CRS (given points are in it) and every input's extent in that CRS, for the message."""
    outside = [i for i, o in enumerate(owner) if o < 0]
    if not outside:
        return
    where, extent = where_words(crs, bounds)
    given = [i for i in outside if i < n_given]
    if given:
        p = points[given[0]]
        raise PromptError(f"{opt('points', format(p.x, '.10g'))},{p.y:.10g} lies outside every input "
                          f"(bounds {extent}): give X,Y in {where}")
    if len(outside) == len(points) - n_given:
        raise InputDataError(f"{opt('point_file', point_file)}: all its {len(outside)} point(s) lie outside "
                             f"every input (bounds {extent}{'' if crs is None else f' in {crs.to_string()}'}): give "
                             "points over the raster, in any CRS the file states")


def _inside(x: float, y: float, bounds) -> bool:
    minx, miny, maxx, maxy = bounds
    return minx <= x < maxx and miny <= y < maxy


def _transformer(src, dst):
    """pyproj's transformer from `src` to `dst` (pyproj or rasterio CRSs), or None where the coordinates stay
    as they are: the same CRS, or either side without one (pixel space)."""
    from pyproj import CRS, Transformer

    if src is None or dst is None:
        return None
    a, b = CRS.from_user_input(src), CRS.from_user_input(dst)
    return None if a == b else Transformer.from_crs(a, b, always_xy=True)


def place(points: Sequence[GeoPoint], crs, maps: Sequence[tuple]) -> tuple[list[GeoPoint], list[int]]:
    """Each point (in `crs`) in the CRS of the first map (`maps`: (CRS, bounds) each) whose extent holds it,
    and that map's index; a point no map holds stays as given, with -1. Each map is asked in its own CRS, so
    inputs in different CRSs (UTM zones, a lon/lat one) each get their points. A point on overlapping maps runs
    once, in the first."""
    out, owner = list(points), [-1] * len(points)
    if not points:
        return out, owner
    xs, ys = np.asarray([p.x for p in points], float), np.asarray([p.y for p in points], float)
    for k, (map_crs, bounds) in enumerate(maps):
        free = [i for i, o in enumerate(owner) if o < 0]
        if not free:
            break
        t = _transformer(crs, map_crs)
        with np.errstate(invalid="ignore"):
            mx, my = (xs[free], ys[free]) if t is None else t.transform(xs[free], ys[free], errcheck=False)
        for i, x, y in zip(free, np.asarray(mx, float), np.asarray(my, float)):
            if np.isfinite(x) and np.isfinite(y) and _inside(x, y, bounds):
                owner[i] = k
                out[i] = dataclasses.replace(points[i], x=float(x), y=float(y))
    return out, owner


def bounds_in(crs, maps: Sequence[tuple]) -> list:
    """Every map's extent in `crs` (the first map's: where given points are), for messages."""
    out = []
    for map_crs, b in maps:
        t = _transformer(map_crs, crs)
        out.append(list(b) if t is None else list(t.transform_bounds(*b)))
    return out


@dataclass(frozen=True)
class PointPrompts:
    """A run's points: all of them (in the order given, each in the CRS of the input it runs in), that input
    (`place`; -1: none), the carried columns (the point file's, in its order, as the output names them) and
    those carried under another name than the file's (`carried_names`: (file's name, output's name))."""

    points: tuple[GeoPoint, ...]
    owner: tuple[int, ...]
    columns: tuple[str, ...] = ()
    renamed: tuple[tuple[str, str], ...] = ()

    @property
    def positives(self) -> int:
        return sum(p.positive for p in self.points)

    @property
    def outside(self) -> int:
        """Points in no input: in no output, counted in the report."""
        return sum(o < 0 for o in self.owner)

    def describe(self) -> str:
        n = len(self.points)
        return (f"points: {self.positives} positive (one object each, one row each), {n - self.positives} negative"
                + (f"; {self.outside} outside every input" if self.outside else "")
                + (f"; columns carried: {', '.join(self.columns)}" if self.columns else "")
                + (f" ({_renames(self.renamed)}: the output has columns of those names)" if self.renamed else ""))


def _renames(renamed: Sequence[tuple[str, str]]) -> str:
    return ", ".join(f"{a} as {b}" for a, b in renamed)


def build_points(points: Sequence[GeoPoint], owner: Sequence[int], n_given: int,
                 renamed: dict[str, str] | None = None) -> PointPrompts:
    """The run's `PointPrompts` (the points placed: `place`); a run of negative points only is refused (a
    negative says where no object is)."""
    if points and not any(p.positive for p in points):
        raise PromptError(f"the points given ({len(points)}) are all negative: a negative point says what is not the "
                          f"object near a positive one: add a positive point ({opt('points')} without ',neg', or a "
                          f"feature of label 1 in {opt('point_file')})")
    columns = tuple(dict.fromkeys(name for p in points[n_given:] for name, _ in p.attrs))
    renamed = tuple((k, v) for k, v in (renamed or {}).items() if k != v)
    return PointPrompts(tuple(points), tuple(owner), columns, renamed)


def check_point_run(points: list[GeoPoint], point_file, texts, boxes, box_file, images, squash: bool,
                    aoi=None) -> tuple[list[GeoPoint], str | None]:
    """(points, the point file's path as text), once checked: points are prompts of their own, refused beside
    texts, example boxes or example images (each point is one object and one row carrying its columns; those
    find every object of a kind), with a squashed image (points run on the tile grid) and with an area of
    interest (`aoi`: the points already choose the tiles)."""
    point_file = None if point_file is None else os.fspath(point_file)
    if not points and not point_file:
        return points, point_file
    if texts or boxes or box_file or images:
        given = [opt(k) for k, v in (("prompts", texts), ("boxes", boxes), ("box_file", box_file),
                                      ("example_images", images)) if v]
        raise UsageError(f"points ({opt('points')}, {opt('point_file')}) are prompts of their own, not beside "
                         f"{', '.join(given)}: each positive point is one object and one row carrying the point's "
                         "columns, where texts and examples find every object of a kind: run them separately")
    if squash:
        raise UsageError(f"{opt('squash')}: points run on the tile grid (each in the tile whose core holds it): leave "
                         f"{opt('squash')} out")
    if aoi is not None:
        raise UsageError(f"{opt('aoi')}: a point run encodes only the tiles under its points (and those their objects "
                         f"reach into), so an area of interest selects nothing more: give only the points inside the "
                         f"area, and leave {opt('aoi')} out")
    return points, point_file


def plan_points(given: Sequence[GeoPoint], point_file: str | None, maps: Sequence[tuple],
                taken: Sequence[str] = ()) -> PointPrompts | None:
    """The run's points: the given ones (in the first map's CRS) and the file's (in its own), each placed in
    the first map that holds it, in that map's CRS (`place`; `maps`: (CRS, bounds) per map), and checked to lie
    on some map (`check_points_inside`); `taken`: the output's own column names (`carried_names`). None for a
    run without points."""
    if not given and not point_file:
        return None
    crs0 = maps[0][0]
    from_file, file_crs, names = (read_point_file(point_file, crs0, (*taken, *ROW_COLUMNS)) if point_file
                                  else ([], None, {}))
    placed, owner = place(given, crs0, maps)
    more, more_owner = place(from_file, file_crs if crs0 is not None else None, maps)
    placed, owner = placed + more, owner + more_owner
    check_points_inside(placed, owner, len(given), crs0, bounds_in(crs0, maps), point_file)
    points = build_points(placed, owner, len(given), names)
    if points.renamed:
        log.warning("%s", spoken(f"{opt('point_file', point_file)}: its column(s) carried {_renames(points.renamed)}: "
                                 f"the output has columns of those names (compared ignoring case), which keep theirs "
                                 f"(the prefix {USER_PREFIX} is added until the name is free)"))
    return points


#: Zoom-outs a point whose home answer fills its window is asked again at (`run.executing.points`): half the
#: zoom, then a quarter, one encode each.
ZOOM_OUT_DEPTH = 2


def home_tiles(points: PointPrompts, inputs: Sequence) -> int:
    """The tiles holding positive points (the encodes of a point run before objects are followed), over the
    planned inputs (`run.planning.plan.InputPlan`: transform and grid)."""
    seen = set()
    for p, owner in zip(points.points, points.owner):
        if p.positive and owner >= 0 and inputs[owner].grid is not None:
            inp = inputs[owner]
            x, y = ~inp.transform @ (p.x, p.y)
            seen.add((owner, inp.grid.tile_at(x, y).index))
    return len(seen)
