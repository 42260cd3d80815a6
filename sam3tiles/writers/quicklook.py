"""The quicklook `OUT.preview.png`: the image overview, each object outlined in its prompt's colour,
failed tiles (red, crossed) and saturated tiles (orange) marked, the tiles the run skipped (outside the area
of interest, no tissue: `tiling.selection`) darkened, and a legend that counts them by reason.

Bounded in size and time whatever the image size: the picture is at most `MAX_SIDE` pixels a side. It
comes from the run's own tiles (`thumbs.Picture`, no second decode of the image); where they did not all
come back in this run (resumed, failed) it is read from a pyramid level or GDAL overview at most
`READ_BUDGET` pixels large, or, without one, by GDAL's decimated read of the image itself when it is no
larger than that (measured: a 5000x4000 GeoTIFF without overviews, the demo's size, in 0.7 s and 131 MB
resident; docs/outputs.md). A larger image without such a level is then not drawn (a grey background,
said in the legend: `gdaladdo` builds overviews), since decimating it would decode it whole. Several
inputs in one output get one panel each (the first `MAX_PANELS`).

A run draws it from the chunks its output is written from (`Beside`: one read of the objects) and
encodes its PNG on a thread while the output file is written.

Outlines contrast with any background: each is drawn in its prompt's colour over a 3 px halo, dark for a
light colour and light for a dark one, so a blue outline on blue roofs or a red one on red cars shows.
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path
from typing import Sequence

import numpy as np
import shapely
from PIL import Image, ImageDraw, ImageFont
from rasterio.windows import Window

from ..errors import RasterReadError
from ..readers import open_source
from ..readers.mosaic import SEPARATOR, layout_of
from ..readers.remote import input_name, source_name
from ..units import to_pixels
from .atomic import atomic_path
from .png import png_bytes
from .qupath import class_colour
from .thumbs import MAX_SIDE, panel_wh

log = logging.getLogger(__name__)

READ_BUDGET = 32_000_000  # pixels decoded for the picture: a level, an overview, or the image itself
MAX_PANELS = 16
FAILED = (230, 20, 20)
SATURATED = (255, 150, 0)
NO_IMAGE = (70, 70, 70)
DIM = [v * 3 // 4 for v in range(256)]  # the picture under the outlines: each level at 3/4
SKIPPED = (40, 40, 40)  # the legend's swatch for skipped tiles, drawn at a third of the picture's levels
AREA = (0, 200, 255)  # the area of interest's outline


def panel_side(n_panels: int) -> int:
    return MAX_SIDE // max(1, math.ceil(math.sqrt(min(n_panels, MAX_PANELS))))


def overview(path: str, bands, out_wh: tuple[int, int], origin=(0, 0)) -> np.ndarray | None:
    """RGB uint8 [h, w, 3] of the whole image at `out_wh`, or None when no level is small enough (read
    only where the run's tiles did not bring the picture: `thumbs.Picture`)."""
    try:
        with open_source(path, bands=bands) as src:
            if src.read_cost(out_wh) > READ_BUDGET:
                log.info("%s: no pyramid level or overview near %dx%d px and too large to decimate: the preview "
                         "shows outlines only (gdaladdo builds overviews)", path, *out_wh)
                return None
            ox, oy = origin  # the frame's first pixel (an anchored map's margin before it: `run.planning.anchor`)
            rgb, valid = src.read_window(Window(ox, oy, src.width - ox, src.height - oy), out_wh)
    except RasterReadError as e:  # a damaged block (its tiles failed too): the outlines are still worth seeing
        log.warning("the preview of %s is drawn without the image: %s", path, e)
        return None
    return np.ascontiguousarray(np.moveaxis(rgb, 0, -1))


def _panel(res, side: int, bands) -> tuple[Image.Image, bool]:
    """The panel of one input: its overview (dimmed) or grey, failed and saturated tiles marked."""
    f = res.frame
    pw, ph = panel_wh(f.width, f.height, side)
    rgb = res.picture  # from the run's tiles (`thumbs.Picture`), when they covered it
    if rgb is not None and rgb.shape[:2] != (ph, pw):
        rgb = np.asarray(Image.fromarray(rgb).resize((pw, ph), Image.Resampling.BOX))
    if rgb is None:
        rgb = overview(res.source, bands, (pw, ph), getattr(res, "origin", (0, 0)))
    if rgb is None:
        img = Image.new("RGB", (pw, ph), NO_IMAGE)
    else:  # dimmed to 3/4, so that outlines stand out on any image (a lookup table: numpy's integer
        # division of a 1024 px picture took 10 ms)
        img = Image.fromarray(np.ascontiguousarray(rgb, dtype=np.uint8)).point(DIM * 3)
    sx, sy = pw / f.width, ph / f.height
    ox, oy = getattr(res, "origin", (0, 0))  # the grid's pixels of the frame's first one (an anchor's margin)
    img = _darken_skipped(img, getattr(res, "selection", None), sx, sy, (ox, oy))
    draw = ImageDraw.Draw(img)
    for kind, win in res.marks:
        x0, y0 = win.col_off - ox, win.row_off - oy
        box = [x0 * sx, y0 * sy, (x0 + win.width) * sx, (y0 + win.height) * sy]
        colour = FAILED if kind == "failed" else SATURATED
        draw.rectangle(box, outline=colour, width=2)
        if kind == "failed":
            draw.line(box, fill=colour, width=1)
            draw.line([box[0], box[3], box[2], box[1]], fill=colour, width=1)
    return img, rgb is not None


def _darken_skipped(img: Image.Image, selection, sx: float, sy: float, origin=(0, 0)) -> Image.Image:
    """The picture with the tiles the run skipped (their cores) at a third of its levels (`origin`: the grid's
    pixel at the picture's corner)."""
    if selection is None or not selection.codes.any():
        return img
    xs = (np.arange(img.width) + 0.5) / sx + origin[0]
    ys = (np.arange(img.height) + 0.5) / sy + origin[1]
    skipped = selection.codes_at(xs, ys) != 0
    a = np.asarray(img).copy()
    a[skipped] = a[skipped] // 3
    img = Image.fromarray(a)
    draw = ImageDraw.Draw(img)
    for rule in selection.rules:  # the area of interest (source pixels), outlined
        area = getattr(rule, "area", None)
        if area is None:
            continue
        rings = shapely.get_exterior_ring(shapely.get_parts(np.asarray([area], dtype=object)))
        for ring in rings:
            xy = ((shapely.get_coordinates(ring) - origin) * (sx, sy)).ravel().tolist()
            draw.line(xy, fill=AREA, width=2)
    return img


def halo(colour: tuple) -> tuple:
    """The stroke under an outline of `colour`: near-black for a light colour, white for a dark one."""
    r, g, b = colour[:3]
    return (20, 20, 20) if 0.2126 * r + 0.7152 * g + 0.0722 * b > 110 else (255, 255, 255)


#: Objects outlined at a time: the memory of an outline pass follows this many objects' vertices, not a chunk's.
OUTLINE_BATCH = 1_000


def _outline(draw, objs, f, sx: float, sy: float, colours: dict[str, tuple]) -> None:
    """Outline `objs` (in frame `f`) at `sx`, `sy` panel pixels per source pixel, in their prompts' colours
    over a contrasting halo (`halo`), `OUTLINE_BATCH` objects at a time."""
    for lo in range(0, len(objs), OUTLINE_BATCH):
        _outline_batch(draw, objs.iloc[lo:lo + OUTLINE_BATCH], f, sx, sy, colours)


def _outline_batch(draw, objs, f, sx: float, sy: float, colours: dict[str, tuple]) -> None:
    """`_outline` of a few objects. Each polygon's exterior ring is drawn; one smaller than 1.5 px either way
    is a dot. Coordinates are gathered for all rings at once, and only a ring's points in distinct quarter
    pixels of the panel are drawn (a panel pixel holds hundreds of a large image's vertices); the loop only
    draws."""
    if not len(objs):
        return
    geoms = to_pixels(np.asarray(objs.geometry.values, dtype=object), f)
    parts, owner = shapely.get_parts(geoms, return_index=True)  # a collection's members, one level down
    keep = (shapely.get_type_id(parts) == 3) & ~shapely.is_empty(parts)
    parts, owner = parts[keep], owner[keep]
    if not len(parts):
        return
    xy, ring = shapely.get_coordinates(shapely.get_exterior_ring(parts), return_index=True)
    del geoms, parts
    xy = xy * (sx, sy)
    starts = np.flatnonzero(np.r_[True, ring[1:] != ring[:-1]])
    ends = np.r_[starts[1:], len(ring)]
    small = ((np.maximum.reduceat(xy[:, 0], starts) - np.minimum.reduceat(xy[:, 0], starts) < 1.5)
             & (np.maximum.reduceat(xy[:, 1], starts) - np.minimum.reduceat(xy[:, 1], starts) < 1.5))
    centre = np.add.reduceat(xy, starts, axis=0) / (ends - starts)[:, None]
    prompts = objs["prompt"].to_numpy()[owner[ring[starts]]]
    # the rings drawn as lines: their points, less those in the quarter pixel of the point before
    line_ring = np.repeat(~small, ends - starts)
    q = np.round(xy * 4)
    first = np.zeros(len(xy), dtype=bool)
    first[starts] = True
    drawn = line_ring & (first | np.r_[True, (q[1:] != q[:-1]).any(axis=1)])
    flat = xy[drawn].ravel().tolist()  # x0, y0, x1, y1, ...: what Pillow takes, without tuples
    pos = np.r_[0, np.cumsum(np.add.reduceat(drawn.astype(np.int64), starts))].tolist()  # rings in `flat`
    del xy, q, ring
    for k in range(len(starts)):
        colour = colours[str(prompts[k])]
        under = halo(colour)
        if small[k]:
            x, y = centre[k].tolist()
            draw.rectangle([x - 1, y - 1, x + 1, y + 1], fill=under)
            draw.point((x, y), fill=colour)
        else:
            line = flat[2 * pos[k]: 2 * pos[k + 1]]
            draw.line(line, fill=under, width=3, joint="curve")
            draw.line(line, fill=colour, width=1)


def write_quicklook(path: str | os.PathLike, objects, results: Sequence, prompts: Sequence[str], bands=None) -> Path:
    """Write the quicklook of `objects` (the objects of `results`, the inputs' `InputResult`s) to `path`.

    `objects`: a GeoDataFrame, or a callable returning its chunks (GeoDataFrames, e.g. from
    `writers.stream.ObjectSpool.frames`): they are drawn a chunk at a time, never all in memory."""
    q = Quicklook(results, prompts, bands)
    for gdf in (objects() if callable(objects) else [objects]):
        q.draw(gdf)
    return _save(path, q.png())


def _save(path: str | os.PathLike, data: bytes) -> Path:
    p = Path(path)
    with atomic_path(p) as tmp:
        tmp.write_bytes(data)
    return p


class Quicklook:
    """One quicklook being drawn: the inputs' panels (`results`: their `InputResult`s, the first
    `MAX_PANELS`), outlines added a chunk of objects at a time (`draw`), then the legend and the PNG file's
    bytes (`png`)."""

    def __init__(self, results: Sequence, prompts: Sequence[str], bands=None):
        self.results = results
        self.panels = [r for r in results if r.frame is not None][:MAX_PANELS]
        self.colours = {str(p): tuple(class_colour(p)) for p in prompts}
        self.counts: dict[str, int] = {}
        self.images, self.drawn, self.draws = [], [], {}
        side = panel_side(len(self.panels))
        self.panel_of: dict[str, str] = {}  # an object's (first) source file -> its panel: a mosaic's files too
        for r in self.panels:
            img, ok = _panel(r, side, bands)
            name = source_name(r.source)
            self.draws[name] = (ImageDraw.Draw(img), r.frame, img.width / r.frame.width, img.height / r.frame.height)
            lay = layout_of(r.source)
            self.panel_of.update({source_name(p): name for p in (lay.paths if lay is not None else ())})
            self.panel_of[name] = name
            self.images.append(img)
            self.drawn.append(ok)

    def draw(self, gdf) -> None:
        """Outline one chunk of the objects (a GeoDataFrame with `prompt` and `source` columns; rows without a
        geometry, points where nothing was found, are no objects)."""
        gdf = gdf[gdf.geometry.notna()]
        for p, n in (gdf["prompt"].value_counts().items() if "prompt" in gdf.columns else []):
            self.colours.setdefault(str(p), tuple(class_colour(p)))
            self.counts[str(p)] = self.counts.get(str(p), 0) + int(n)
        one = len(self.results) == 1 or "source" not in gdf.columns  # one input: every object of the output is its
        panel = None if one else gdf["source"].astype(str).str.split(SEPARATOR, n=1).str[0].map(self.panel_of)
        for name, (draw, frame, sx, sy) in self.draws.items():
            _outline(draw, gdf if one else gdf[panel == name], frame, sx, sy, self.colours)

    def png(self) -> bytes:
        """The panels side by side (one per input), the legend below: the PNG file's bytes."""
        panels, images = self.panels, self.images
        cols = max(1, math.ceil(math.sqrt(len(panels))))
        rows = max(1, math.ceil(len(panels) / cols))
        side = panel_side(len(panels))
        font = ImageFont.load_default()
        if len(panels) > 1:
            for img, r in zip(images, panels):
                ImageDraw.Draw(img).text((4, 4), input_name(r.source), fill=(255, 255, 255), font=font)
        legend = _legend_lines(self.counts, self.colours, self.results, panels, self.drawn)
        width = max([cols * side] + [0]) if len(panels) > 1 else (images[0].width if images else MAX_SIDE // 2)
        height = (rows * side if len(panels) > 1 else (images[0].height if images else 0)) + 16 * len(legend) + 8
        canvas = Image.new("RGB", (max(width, 320), height), (255, 255, 255))
        for i, img in enumerate(images):
            canvas.paste(img, ((i % cols) * side, (i // cols) * side) if len(panels) > 1 else (0, 0))
        draw = ImageDraw.Draw(canvas)
        y = height - 16 * len(legend) - 4
        for colour, text in legend:
            if colour is not None:
                draw.rectangle([6, y + 2, 18, y + 12], outline=colour, width=2)
            draw.text((24, y), text, fill=(0, 0, 0), font=font)
            y += 16
        return png_bytes(np.asarray(canvas))  # a third of Pillow's encoding time (writers/png.py)


class Beside:
    """A quicklook drawn from the chunks an output's writer reads (`passing`), its PNG encoded on a thread
    of its own while the writer writes the output file (zlib frees the GIL: the two overlap on two
    cores); `write` saves it. One read of the objects serves both. `close` waits for the thread (call
    it on every path, as a context manager does)."""

    def __init__(self, path: str | os.PathLike, results: Sequence, prompts: Sequence[str], bands=None):
        from concurrent.futures import ThreadPoolExecutor

        self.path = path
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="sam3tiles-quicklook")
        self.panels = self.pool.submit(Quicklook, results, prompts, bands)  # while the first chunk is read
        self.bytes = None

    def passing(self, chunks, total: int):
        """Yield `chunks` (the output's objects, `total` rows in all), each outlined as it passes; once the
        last is outlined, its PNG is encoded on the thread while the writer writes that chunk."""
        seen = 0
        for gdf in chunks:
            self.panels.result().draw(gdf)
            seen += len(gdf)
            if seen >= total and self.bytes is None:
                self.bytes = self.pool.submit(_png, self.panels)
            yield gdf

    def write(self) -> Path:
        if self.bytes is None:  # the writer read no chunk, or fewer rows than said
            self.bytes = self.pool.submit(_png, self.panels)
        return _save(self.path, self.bytes.result())

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> "Beside":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _png(made) -> bytes:
    return made.result().png()


def _legend_lines(counts: dict, colours: dict, results, panels, drawn) -> list[tuple]:
    lines = [(colour, f"{name}: {int(counts.get(name, 0))} object(s)") for name, colour in colours.items()]
    failed = sum(k == "failed" for r in results for k, _ in r.marks)
    saturated = sum(k == "saturated" for r in results for k, _ in r.marks)
    if failed:
        lines.append((FAILED, f"failed tile(s): {failed} (crossed)"))
    if saturated:
        lines.append((SATURATED, f"saturated tile(s): {saturated} (may miss objects)"))
    skipped: dict[str, int] = {}
    for r in results:
        for reason, n in (r.selection.counts().items() if getattr(r, "selection", None) is not None else ()):
            skipped[reason] = skipped.get(reason, 0) + n
    if skipped:
        lines.append((SKIPPED, "skipped tile(s), darker: " + ", ".join(f"{n} {k}" for k, n in skipped.items())))
    if any(getattr(rule, "area", None) is not None for r in results if getattr(r, "selection", None) is not None
           for rule in r.selection.rules):
        lines.append((AREA, "the area of interest"))
    if not all(drawn):
        lines.append((NO_IMAGE, "grey: the image is too large to draw without overviews (gdaladdo builds them)"))
    if len(results) > len(panels):
        lines.append((None, f"{len(results) - len(panels)} more input(s) not drawn"))
    return lines
