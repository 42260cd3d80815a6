"""Prompts: text and example boxes for a job, and the boxes each tile receives in its own model frame."""

from __future__ import annotations

import math
import numbers
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from affine import Affine

from ..errors import PromptError, UsageError
from ..model.runtime import MODEL_SIZE, VISUAL_PROMPT, ExampleBox
from ..tiling.grid import Tile
from ..tiling.piecekey import PASSES_PER_TILE
from ..wording import opt

#: A box cut by a tile edge is given to that tile when at least this share of it lies inside, or when
#: the part inside is at least MIN_CLIPPED_PX on both sides (boxes larger than a tile).
MIN_BOX_SHARE = 0.5
MIN_CLIPPED_PX = 64


def parse_numbers(text: str, option: str, form: str) -> tuple[tuple[float, ...], bool]:
    """'N1,...,Nk[,neg]' as given to --box / --point (`form` names the k numbers, e.g. 'X,Y'): the numbers
    and whether the prompt is positive; anything else a UsageError naming the form."""
    parts = [p.strip() for p in text.split(",")]
    k = form.count(",") + 1
    positive = True
    if len(parts) == k + 1:
        tag = parts.pop().strip().lower()
        if tag not in LABELS:
            raise UsageError(f"{opt(option, repr(text))}: the last value must be 'neg' or 'pos' ({accepted_labels()})")
        positive = LABELS[tag]
    if len(parts) != k:
        raise UsageError(f"{opt(option, repr(text))}: give {form}[,neg] in the raster's CRS")
    try:
        return tuple(float(p) for p in parts), positive
    except ValueError:
        raise UsageError(f"{opt(option, repr(text))}: the coordinates must be numbers") from None


@dataclass(frozen=True)
class GeoBox:
    """An example box in the raster's CRS (or source pixels when the raster has none)."""

    minx: float
    miny: float
    maxx: float
    maxy: float
    positive: bool = True

    @classmethod
    def parse(cls, text: str) -> "GeoBox":
        """'MINX,MINY,MAXX,MAXY[,neg]' as given to --box."""
        (x0, y0, x1, y1), label = parse_numbers(text, "boxes", "MINX,MINY,MAXX,MAXY")
        if not all(math.isfinite(v) for v in (x0, y0, x1, y1)) or x1 <= x0 or y1 <= y0:
            raise UsageError(f"{opt('boxes', repr(text))}: needs MINX < MAXX and MINY < MAXY")
        return cls(x0, y0, x1, y1, label)

    @classmethod
    def coerce(cls, value) -> "GeoBox":
        """An example box from what `boxes=` takes: a GeoBox; text 'MINX,MINY,MAXX,MAXY[,neg]'; a tuple
        (minx, miny, maxx, maxy[, positive]); a shapely geometry (its bounds, positive). Anything else is a
        UsageError naming the forms."""
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            return cls.parse(value)
        forms = ("give boxes as (minx, miny, maxx, maxy) tuples, 'MINX,MINY,MAXX,MAXY[,neg]' text, shapely "
                 "geometries (their bounds) or sam3tiles.GeoBox, in the raster's CRS")
        if hasattr(value, "geom_type") and hasattr(value, "bounds"):  # shapely: its bounding box
            b = tuple(value.bounds) if not value.is_empty else ()
            if len(b) != 4 or not (b[2] > b[0] and b[3] > b[1]):
                raise UsageError(f"example box {value.wkt[:60]}: a {value.geom_type} without area is no box: {forms}")
            return cls(*(float(v) for v in b))
        if isinstance(value, (tuple, list)) and len(value) in (4, 5):
            label = value[4] if len(value) == 5 else True
            if isinstance(label, str):
                return cls.parse(",".join(map(str, value)))
            try:
                x0, y0, x1, y1 = (float(v) for v in value[:4])
            except (TypeError, ValueError):
                raise UsageError(f"example box {value!r}: the coordinates must be numbers: {forms}") from None
            if not all(math.isfinite(v) for v in (x0, y0, x1, y1)) or x1 <= x0 or y1 <= y0:
                raise UsageError(f"example box {value!r}: needs minx < maxx and miny < maxy: {forms}")
            return cls(x0, y0, x1, y1, bool(label))
        raise UsageError(f"example box {value!r:.80}: not a box: {forms}")


@dataclass(frozen=True)
class ExampleImage:
    """An example from another image (`--example-image`): the chip's whole extent is one exemplar. `digest`:
    a hash of the file's bytes (checkpoint keys: a changed chip invalidates the tiles it reached)."""

    path: str
    positive: bool = True
    digest: str = ""


@dataclass(frozen=True)
class Prompt:
    """One thing to find: a text, example boxes or example images, or both. Prompts without text send
    SAM 3 the text 'visual'."""

    text: str | None
    boxes: tuple[GeoBox, ...] = field(default=())
    images: tuple[ExampleImage, ...] = field(default=())

    @property
    def examples(self) -> tuple:
        """Every exemplar of the prompt: its boxes, then its example images."""
        return self.boxes + self.images

    def __post_init__(self) -> None:
        if self.text is not None:
            t = " ".join(self.text.split())
            if not t:
                raise PromptError(f"{opt('prompts')}: a prompt is empty: give words such as "
                                  f"{opt('prompts', 'building')}")
            if len(t) > 300:
                raise PromptError(f"{opt('prompts')}: a prompt is {len(t)} characters long: SAM 3 reads at most "
                                  "30 word tokens; shorten it")
            object.__setattr__(self, "text", t)
        elif not self.boxes and not self.images:
            raise PromptError("a prompt needs a text, an example box or an example image")
        if self.text is None and not any(e.positive for e in self.examples):
            # negatives only tell SAM 3 what not to find: alone they find nothing, at the full cost of a run
            raise PromptError(f"a negative example needs a text or a positive example beside it: the examples given "
                              f"({len(self.examples)}) are all negative: add {opt('prompts')} (e.g. "
                              f"{opt('prompts', 'building')}) or a positive example ({opt('boxes')} without ',neg', "
                              f"a box of label 1 in {opt('box_file')}, {opt('example_images')} without ',neg')")

    @property
    def model_text(self) -> str:
        return self.text if self.text is not None else VISUAL_PROMPT

    @property
    def label(self) -> str:
        """The value of the output's `prompt` column."""
        if self.text is None:
            return "visual"
        return self.text


#: What each prompt keyword takes, as its refusal says (after the keyword, named by `wording.opt`).
TAKES = {
    "prompts": "give a text ('building') or a list of texts (['building', 'car'])",
    "boxes": "give one box or a list of boxes: (minx, miny, maxx, maxy[, positive]) tuples, "
             "'MINX,MINY,MAXX,MAXY[,neg]' text, shapely geometries or sam3tiles.GeoBox, in the raster's CRS",
    "example_images": "give a path ('chip.png', a folder, 'chip.png,neg'), a pathlib.Path or a list of them",
}


def prompt_arguments(text: Any, boxes: Any, example_images: Any) -> tuple[list[str], list[GeoBox], list[str]]:
    """A run's texts, example boxes and example image specs (`chips.parse_example_images`), however a caller
    gave them: the one place they are normalised. One text, box or path given alone is one item (a string
    is never split into its characters), a list or other iterable its items; anything else is a
    UsageError naming the keyword and what it takes."""
    texts = _items("prompts", text, lambda v: isinstance(v, str), str)
    images = _items("example_images", example_images, _is_path, lambda v: str(os.fspath(v)))
    return texts, _items("boxes", boxes, _is_one_box, GeoBox.coerce, each=GeoBox.coerce), images


def _items(keyword: str, value: Any, is_one: Callable[[Any], bool], make: Callable[[Any], Any],
           each: Callable[[Any], Any] | None = None) -> list:
    """`value` as a list: [make(value)] for one item, its items otherwise, each checked by `is_one` (or
    made by `each`, which says itself what is wrong)."""
    if value is None:
        return []
    if is_one(value):
        return [make(value)]
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise UsageError(f"{opt(keyword)}: {TAKES[keyword]}, not {type(value).__name__}")
    items = list(value)
    if each is not None:
        return [each(v) for v in items]
    for v in items:
        if not is_one(v):
            raise UsageError(f"{opt(keyword)}: {TAKES[keyword]}, not a {type(value).__name__} holding "
                             f"{type(v).__name__}")
    return [make(v) for v in items]


def _is_path(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, os.PathLike) and isinstance(os.fspath(value), str))


def _is_one_box(value: Any) -> bool:
    """One box rather than a list of them: a GeoBox, its text, a shapely geometry, or a tuple or list of 4 or
    5 values whose first four are numbers (a list of boxes holds tuples, texts or geometries)."""
    if isinstance(value, (GeoBox, str)) or (hasattr(value, "geom_type") and hasattr(value, "bounds")):
        return True
    return (isinstance(value, (tuple, list)) and len(value) in (4, 5)
            and all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in value[:4]))


def build_prompts(texts: Sequence[str], boxes: Sequence[GeoBox], images: Sequence[ExampleImage] = ()) -> list[Prompt]:
    """Boxes and example images go with every text prompt; without texts they form one prompt."""
    if not texts and not boxes and not images:
        raise PromptError(f"nothing to find: give {opt('prompts')} (e.g. {opt('prompts', 'building')}), example "
                          f"boxes ({opt('boxes')}/{opt('box_file')}) or example images ({opt('example_images')})")
    seen: dict[str, Prompt] = {}
    for t in texts:
        p = Prompt(t, tuple(boxes), tuple(images))
        seen.setdefault(p.text.lower(), p)  # type: ignore[union-attr]
    if not texts:
        return [Prompt(None, tuple(boxes), tuple(images))]
    return list(seen.values())


def tile_boxes(boxes: Sequence[GeoBox], tile: Tile) -> list[ExampleBox]:
    """The boxes that lie in `tile`, clipped to its content, as normalised (cx, cy, w, h) of its 1008 input."""
    inv = ~tile.transform
    vw, vh = tile.valid_wh
    out = []
    for b in boxes:
        xs, ys = zip(*(inv @ (x, y)
                       for x, y in ((b.minx, b.miny), (b.maxx, b.maxy), (b.minx, b.maxy), (b.maxx, b.miny))))
        x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
        cx0, cy0, cx1, cy1 = max(x0, 0.0), max(y0, 0.0), min(x1, float(vw)), min(y1, float(vh))
        if cx1 <= cx0 or cy1 <= cy0:
            continue
        share = (cx1 - cx0) * (cy1 - cy0) / max((x1 - x0) * (y1 - y0), 1e-12)
        if share < MIN_BOX_SHARE and min(cx1 - cx0, cy1 - cy0) < MIN_CLIPPED_PX:
            continue
        out.append(ExampleBox(((cx0 + cx1) / 2 / MODEL_SIZE, (cy0 + cy1) / 2 / MODEL_SIZE,
                               (cx1 - cx0) / MODEL_SIZE, (cy1 - cy0) / MODEL_SIZE), b.positive))
    return out


def box_passes(boxes: Sequence[ExampleBox], slots: int, where: str = "") -> list[list[ExampleBox]]:
    """Split a tile's boxes into decoder passes of at most `slots`: the positives in chunks, every negative
    in every pass (the passes' answers are joined, so a negative missing from one pass would act in none).
    A PromptError (prefixed by `where`) when the negatives leave no room for that."""
    if len(boxes) <= slots:
        return [list(boxes)]
    pos = [b for b in boxes if b.positive]
    neg = [b for b in boxes if not b.positive]
    room = slots - len(neg)
    if room > 0 and pos:
        return [pos[i:i + room] + neg for i in range(0, len(pos), room)]
    n = slots - 1 if pos else slots
    fits = (f"at most {n} fit{'s' if n == 1 else ''}: give at most {n} negative examples" if n > 0 else
            "no negative fits: leave the negative examples out")
    raise PromptError(f"{where}{len(neg)} negative and {len(pos)} positive examples in one tile, and this model's "
                      f"decoder takes {slots} example box{'es' if slots > 1 else ''} a pass: every pass must hold all "
                      f"the negatives{' beside a positive' if pos else ''}, so {fits}, or export a decoder of more box "
                      "slots (the 16-slot layout of sam3-onnx v0.6.0)")


def where_words(crs, bounds: Sequence) -> tuple[str, str]:
    """(the coordinates a prompt is given in, the inputs' bounds) in the words of a message about a prompt
    that lies outside every input: the raster's CRS, or pixel coordinates; at most three inputs' bounds."""
    where = (f"the raster's CRS ({crs.to_string()})" if crs is not None
             else "pixel coordinates (the raster has no CRS: x right, y down)")
    extent = "; ".join(",".join(f"{v:.10g}" for v in b) for b in bounds[:3]) + ("; ..." if len(bounds) > 3 else "")
    return where, extent


def boxes_outside(boxes: Sequence[GeoBox], bounds: tuple[float, float, float, float]) -> list[GeoBox]:
    """Boxes that miss the raster's bounds entirely."""
    minx, miny, maxx, maxy = bounds
    return [b for b in boxes if b.maxx <= minx or b.minx >= maxx or b.maxy <= miny or b.miny >= maxy]


def raster_bounds(transform: Affine, width: int, height: int) -> tuple[float, float, float, float]:
    xs, ys = zip(*(transform @ (x, y) for x, y in ((0, 0), (width, 0), (0, height), (width, height))))
    return (min(xs), min(ys), max(xs), max(ys))


def read_vector(path: str, raster_crs, what: str, reproject: bool = True):
    """A vector file GDAL reads, as a GeoDataFrame in the raster's CRS (`what`: the argument naming it, for
    messages: box_file, point_file). A missing, unreadable or empty file is exit 3; so is one without a CRS on
    a georeferenced raster, or whose coordinates cannot be in its CRS. `reproject` False: checked the same,
    but left in its own CRS (points placed map by map: `points.plan_points`)."""
    import geopandas as gpd
    import numpy as np
    import pyogrio.errors

    from ..errors import CRSError, InputDataError

    if not os.path.exists(path):
        raise InputDataError(f"{opt(what, path)}: no such file: check the path")
    try:
        gdf = gpd.read_file(path)
    except (pyogrio.errors.DataSourceError, pyogrio.errors.DataLayerError, ValueError) as e:
        raise InputDataError(f"{opt(what, path)} is not a vector file GDAL can read ({str(e).splitlines()[0]}): "
                             "give a GeoPackage, GeoJSON, Shapefile or similar") from None
    if gdf.empty:
        raise InputDataError(f"{opt(what, path)} has no features: draw at least one")
    if raster_crs is None:
        return gdf
    if gdf.crs is None:
        raise CRSError(f"{opt(what, path)} has no CRS but the raster has one ({raster_crs.to_string()}): "
                       "set the file's CRS (e.g. ogr2ogr -a_srs) so its features can be placed")
    if gdf.crs.is_geographic:
        x0, y0, x1, y1 = gdf.total_bounds
        if min(x0, y0) < -360 or max(x1, y1) > 360:
            raise CRSError(f"{opt(what, path)}: its CRS ({gdf.crs.to_string()}) is longitude/latitude but its "
                           f"coordinates ({x0:.6g}, {y0:.6g}, ...) are not: set the CRS they are in (a GeoJSON "
                           "file is always WGS84; write projected coordinates as GeoPackage)")
    if not reproject:
        return gdf
    gdf = gdf.to_crs(raster_crs.to_wkt())
    if not np.isfinite(gdf.total_bounds).all():
        raise CRSError(f"{opt(what, path)}: its features cannot be placed in the raster's CRS "
                       f"({raster_crs.to_string()}): check the file's CRS")
    return gdf


#: The values a `label` column (--box-file, --point-file) and the last part of --box / --point take, ignoring
#: case and spaces; numbers 1/0 (1.0, 0.0) and booleans too. One rule for every prompt that has a sign.
LABELS = {**dict.fromkeys(("1", "true", "pos", "positive", "fg", "foreground", "yes", "+"), True),
          **dict.fromkeys(("0", "false", "neg", "negative", "bg", "background", "no", "-"), False)}


def label_value(value) -> bool | None:
    """A label as True (positive), False (negative) or None (not a label: `LABELS` says what is). Missing
    values (None, NaN, NA, empty text) are positive, as features without a `label` column are."""
    import numpy as np
    import pandas as pd

    if value is None or value is pd.NA or value is pd.NaT:
        return True
    if isinstance(value, str):
        text = value.strip().lower()
        if not text or text in LABELS:
            return LABELS.get(text, True)
        try:
            value = float(text)  # '1.0', '0.0'
        except ValueError:
            return None
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, numbers.Real):
        return True if math.isnan(value) else {1.0: True, 0.0: False}.get(float(value))
    return None


def accepted_labels() -> str:
    """The accepted label spellings, for messages."""
    pos = "/".join(k for k, v in LABELS.items() if v)
    neg = "/".join(k for k, v in LABELS.items() if not v)
    return f"positive {pos}, negative {neg} (any case; also booleans and 1.0/0.0; empty: positive)"


def read_labels(gdf, what: str, path: str) -> list[bool]:
    """Per feature of a prompt file, whether it is positive: its `label` column by `label_value`, positive
    without the column. A value that is no label is refused (InputDataError) naming the values found, since
    taking it either way would silently turn clicks or examples around."""
    from ..errors import InputDataError

    if "label" not in gdf.columns:
        return [True] * len(gdf)
    signs = [label_value(v) for v in gdf["label"]]
    bad = [i for i, s in enumerate(signs) if s is None]
    if bad:
        found = list(dict.fromkeys(repr(_plain_label(gdf["label"].iloc[i])) for i in bad))
        raise InputDataError(f"{opt(what, path)}: its 'label' column holds {', '.join(found[:5])}"
                             f"{', ...' if len(found) > 5 else ''} ({len(bad)} feature(s), the first feature "
                             f"{bad[0] + 1}), which is no label: write {accepted_labels()}")
    return [bool(s) for s in signs]


def _plain_label(value):
    return value.item() if hasattr(value, "item") and getattr(value, "ndim", None) == 0 else value


def read_box_file(path: str, raster_crs) -> list[GeoBox]:
    """Example boxes from any vector file GDAL reads, reprojected to the raster's CRS.

    Each feature's bounding box is one example; a `label` column marks negatives (`read_labels`: 1/0,
    pos/neg, yes/no, ...), default positive.
    """
    from ..errors import InputDataError

    gdf = read_vector(path, raster_crs, "box_file")
    out = []
    for geom, positive in zip(gdf.geometry, read_labels(gdf, "box_file", path)):
        if geom is None or geom.is_empty:
            continue
        x0, y0, x1, y1 = geom.bounds
        if x1 <= x0 or y1 <= y0:
            raise InputDataError(f"{opt('box_file', path)}: a feature has no area (a point or line): draw boxes")
        out.append(GeoBox(x0, y0, x1, y1, positive))
    return out


# -- the prompts as one tile sees them ---------------------------------------------------------------------

@dataclass(frozen=True)
class TilePrompt:
    """One prompt as one tile sees it: the model text, and the decoder passes' boxes (tile frame)."""

    index: int
    text: str
    passes: tuple[tuple[ExampleBox, ...], ...] = ((),)


def prompts_for_tile(prompts: Sequence[Prompt], tile: Tile, slots: int,
                     pasted: dict[int, list[ExampleBox]] | None = None) -> list[TilePrompt]:
    """The prompts as `tile` sees them: its example boxes in tile frame, split into decoder passes of
    `slots` boxes; a box-only prompt without a positive box in the tile is left out. `pasted`: prompt
    index -> the boxes of its exemplars pasted into this tile (`--box-scope image`:
    `exemplars.TileExemplars.pasted`). A tile takes at most `piecekey.PASSES_PER_TILE` passes; their
    answers become one in the tile (`vectorize.merge_passes`)."""
    out = []
    for i, p in enumerate(prompts):
        boxes = tile_boxes(p.boxes, tile) if p.boxes else []
        if pasted is not None and p.examples:
            boxes += pasted.get(i, [])
        if p.text is None and not any(b.positive for b in boxes):
            continue  # a box-only prompt finds nothing where it has no example
        where = f"tile {tile.index} (row {tile.row}, col {tile.col}), prompt {p.label!r}: "
        passes = tuple(tuple(c) for c in box_passes(boxes, slots, where)) if boxes else ((),)
        if len(passes) > PASSES_PER_TILE:
            raise PromptError(f"tile {tile.index} (row {tile.row}, col {tile.col}) holds {len(boxes)} example boxes of "
                              f"prompt {p.label!r}: {len(passes)} decoder passes of {slots}, more than the "
                              f"{PASSES_PER_TILE} one tile can take: give fewer example boxes (a few per kind of "
                              f"object is enough) or use {opt('scale')} below 1")
        out.append(TilePrompt(i, p.model_text, passes))
    return out
