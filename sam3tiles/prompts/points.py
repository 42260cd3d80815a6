"""Points as prompts: clicks in map coordinates (source pixels for inputs without a CRS), one object each.

`--point X,Y[,neg]` (repeatable), `--point-file` (any vector layer of points GDAL reads, any CRS: reprojected
to the raster's; a `label` column 1/0 as in box files; every other column is carried to the point's output
row), job keys `prompts.points` / `prompts.point_file`, API keywords `points=` / `point_file=`.

Each positive point asks for the one object under it: the output holds one row per positive point, in the
order given (command-line points first, then the file's features), with `found`, `status` and the point's
columns. A negative point is no object: it acts on the positives near it (the clicks of a window hold every
negative point in that window). Where each point runs, and how its object comes out whole:
`sam3tiles.run.points`; the guide: docs/points.md.
"""

from __future__ import annotations

import math
import numbers
import os
from dataclasses import dataclass
from typing import Any, Sequence

from ..errors import InputDataError, PromptError, UsageError
from ..wording import opt
from .prompt import is_negative, read_vector, where_words

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
        parts = [p.strip() for p in text.split(",")]
        positive = True
        if len(parts) == 3:
            tag = parts.pop().lower()
            if tag in ("neg", "negative", "0", "-"):
                positive = False
            elif tag not in ("pos", "positive", "1", "+"):
                raise UsageError(f"{opt('points', repr(text))}: the third value must be 'neg' or 'pos'")
        if len(parts) != 2:
            raise UsageError(f"{opt('points', repr(text))}: give X,Y[,neg] in the raster's CRS")
        try:
            x, y = (float(p) for p in parts)
        except ValueError:
            raise UsageError(f"{opt('points', repr(text))}: the coordinates must be numbers") from None
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


def read_point_file(path: str, raster_crs) -> list[GeoPoint]:
    """The points of any vector layer GDAL reads, in the raster's CRS: a `label` column (1/0, pos/neg) marks
    negatives; every other column is carried (`GeoPoint.attrs`). A feature that is no point is exit 3."""
    gdf = read_vector(path, raster_crs, "point_file")
    kinds = gdf.geometry.geom_type
    bad = [i for i, (g, k) in enumerate(zip(gdf.geometry, kinds)) if g is None or g.is_empty or k != "Point"]
    if bad:
        g = gdf.geometry.iloc[bad[0]]
        what = "an empty geometry" if g is None or g.is_empty else f"a {kinds.iloc[bad[0]]}"
        raise InputDataError(f"{opt('point_file', path)}: feature {bad[0] + 1}"
                             f"{f' (and {len(bad) - 1} more)' if len(bad) > 1 else ''} is {what}, not a point: give a "
                             "layer of points (a polygon layer's points: its centroids or representative points, e.g. "
                             "geopandas' representative_point())")
    labels = gdf["label"] if "label" in gdf.columns else [1] * len(gdf)
    columns = [c for c in gdf.columns if c not in ("label", gdf.geometry.name)]
    rows = gdf[columns].itertuples(index=False, name=None) if columns else ([()] * len(gdf))
    return [GeoPoint(float(g.x), float(g.y), not is_negative(lab), tuple(zip(columns, (_plain(v) for v in row))))
            for g, lab, row in zip(gdf.geometry, labels, rows)]


def _plain(value: Any) -> Any:
    """numpy scalars as Python values (the spool pickles them; dtypes are restored from the first rows)."""
    return value.item() if hasattr(value, "item") and not isinstance(value, (str, bytes)) else value


def check_points_inside(points: Sequence[GeoPoint], n_given: int, bounds: list, crs, point_file: str | None) -> None:
    """A given point that misses every input is an error (usually coordinates in another CRS); so is a point
    file whose points all miss (some missing are counted in the report)."""
    outside = [i for i, p in enumerate(points) if not any(_inside(p, b) for b in bounds)]
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
                             f"every input (bounds {extent}): give points over the raster, in any CRS the file "
                             "states")


def _inside(p: GeoPoint, bounds) -> bool:
    minx, miny, maxx, maxy = bounds
    return minx <= p.x < maxx and miny <= p.y < maxy


def owners(points: Sequence[GeoPoint], bounds: list) -> tuple[int, ...]:
    """Per point, the first input (index) whose extent holds it; -1 for none. A point on overlapping inputs
    runs once, in the first."""
    return tuple(next((k for k, b in enumerate(bounds) if _inside(p, b)), -1) for p in points)


@dataclass(frozen=True)
class PointPrompts:
    """A run's points: all of them (in the order given), the input each runs in (`owners`), and the carried
    columns (the point file's, in its order)."""

    points: tuple[GeoPoint, ...]
    owner: tuple[int, ...]
    columns: tuple[str, ...] = ()

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
                + (f"; columns carried: {', '.join(self.columns)}" if self.columns else ""))


def build_points(given: Sequence[GeoPoint], from_file: Sequence[GeoPoint], bounds: list) -> PointPrompts:
    """The run's `PointPrompts`; a run of negative points only is refused (a negative says where no object is)."""
    points = (*given, *from_file)
    if points and not any(p.positive for p in points):
        raise PromptError(f"the points given ({len(points)}) are all negative: a negative point says what is not the "
                          f"object near a positive one: add a positive point ({opt('points')} without ',neg', or a "
                          f"feature of label 1 in {opt('point_file')})")
    columns = tuple(dict.fromkeys(name for p in from_file for name, _ in p.attrs))
    return PointPrompts(points, owners(points, bounds), columns)


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


def plan_points(given: Sequence[GeoPoint], point_file: str | None, crs, bounds: list) -> PointPrompts | None:
    """The run's points: the given ones and the file's (read in the first input's CRS), checked to lie on
    some input (`check_points_inside`); None for a run without points."""
    if not given and not point_file:
        return None
    from_file = read_point_file(point_file, crs) if point_file else []
    check_points_inside([*given, *from_file], len(given), bounds, crs, point_file)
    return build_points(given, from_file, bounds)


def home_tiles(points: PointPrompts, inputs: Sequence) -> int:
    """The tiles holding positive points (the encodes of a point run before objects are followed), over the
    planned inputs (`run.plan.InputPlan`: transform and grid)."""
    seen = set()
    for p, owner in zip(points.points, points.owner):
        if p.positive and owner >= 0 and inputs[owner].grid is not None:
            inp = inputs[owner]
            x, y = ~inp.transform @ (p.x, p.y)
            seen.add((owner, inp.grid.tile_at(x, y).index))
    return len(seen)
