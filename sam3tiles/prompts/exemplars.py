"""Exemplar transfer (`--box-scope image`): one example box acts in every tile, not only where it lies.

The published decoder reads a box against the embedding of the image it encoded, so an exemplar's
features cannot be handed from one tile to another: its pixels must be in each tile's own input. So:

1. *Patches.* Each example box is read once per input from the source, at the run's scale, on the same
   pixel lattice as the tiles, with `MARGIN` grid pixels of context around it (`read_exemplars`). The
   model sees the copy exactly as it sees the original in the tile where it lies.
2. *Placement* (`plan_tile`). A tile whose own content holds a box (the `prompts.tile_boxes` rule) uses it
   in place. The others are pasted into the tile's 1008x1008 input where the tile owns nothing: its
   padding, or its context margin outside the core (overlap/2 on interior sides, content that a
   neighbour owns and sees). A paste keeps `GUARD` pixels from the core (grown by the merge's one pixel)
   and from other pastes, so no mask cell of the pasted copy can touch the core. Among the free
   positions each paste takes one hiding no content (padding, or the exemplar strip) when there is one,
   then the one farthest from the core (the tile's corners first, then flush against an outer edge),
   then the one hiding the fewest content pixels, then the bottom-right one (the same corner in every
   tile: an object crossing a seam is then never hidden from both sides). A paste over content clips the
   real objects it hides (rule 4), so padding always wins. Exemplars too large for any margin get a strip:
   `sam3tiles.strip`.
   Patches are laid out largest first (`layout`), so a small one never takes the room a large one needs.
3. *Bound and choice.* At most `MAX_PASTES` exemplars are pasted per tile: every paste hides up to a
   ~110 px square of context margin, and on the 1-slot decoder (v0.3.0) every exemplar is one more
   decoder pass per prompt. Order: for each prompt whose tile holds no positive example, its nearest
   positive (a box-only prompt finds nothing without one); then for each prompt holding no negative,
   its nearest negative; then the rest nearest first (appearance drifts across an image: light, season,
   view angle, mosaic seams, so the nearest examples describe a tile best). One that does not fit is
   skipped for the next. Distances run between box centres and the tile's centre.
4. *Screening* (`PasteScreen`, in `tasks.infer_task`, every prompt and pass). A detection whose mask
   (> 0.5 on the 288 grid) touches a paste (grown by one mask cell) and does not reach the tile's core
   is dropped: it is the pasted copy, or content of the margin that a neighbour owns. One that reaches
   the core is a real object partly hidden by the paste: it is kept without the pasted pixels (and their
   one-cell rim) and, when the paste hides tile content, marked cut, so the merge links or stitches it
   with the neighbour that sees the hidden part, as at a tile edge. Pasted pixels never reach a polygon.

Boxes lying outside an input are not transferred to it (several inputs: each input pastes its own).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
from rasterio.windows import Window

from ..model.runtime import MASK_SIZE, MODEL_SIZE, Detections, ExampleBox, TileImage
from ..tiling.grid import Tile
from ..vectorize.pieces import InstanceCrop, crop_detections
from ..wording import opt
from .prompt import ExampleImage, GeoBox, Prompt, tile_boxes

#: Grid pixels of context read around an example box.
MARGIN = 8
#: Pixels kept free between a paste and the tile's core (grown by 1 px) and between two pastes: more than
#: one 288-grid cell (3.5 px) of rim plus the cells either side, so the copy's cells never touch the core.
GUARD = 16
#: Exemplars pasted into one tile at most (see the module notes).
MAX_PASTES = 4
#: The largest exemplar (its smaller side, grid pixels at the run's scale) a tile input takes: a third of
#: it, so the exemplar strip (`sam3tiles.strip`) leaves the tile two thirds of its input.
LIMIT = MODEL_SIZE // 3
_CELL = MODEL_SIZE / MASK_SIZE
_RIM = 4  # one mask cell, rounded up: bilinear upsampling reads one cell either side


@dataclass(frozen=True, eq=False)
class Exemplar:
    """One exemplar's patch: `rgb` uint8 [3,h,w], `valid` bool [h,w], `box_px` the box inside the patch
    (x0, y0, x1, y1, patch pixels; an example image's whole extent), `centre` the box centre and
    `grid_xyxy` the box in grid pixels."""

    index: int
    box: GeoBox | ExampleImage
    rgb: np.ndarray
    valid: np.ndarray
    box_px: tuple[float, float, float, float]
    centre: tuple[float, float] | None  # None: an example image (it lies nowhere in the input)
    grid_xyxy: tuple[float, float, float, float] = (-math.inf, -math.inf, math.inf, math.inf)

    @property
    def wh(self) -> tuple[int, int]:
        return int(self.rgb.shape[2]), int(self.rgb.shape[1])


@dataclass(frozen=True)
class Paste:
    """One exemplar pasted into one tile: its patch's top-left in tile pixels and its box there."""

    exemplar: int
    x0: int
    y0: int
    w: int
    h: int
    box: ExampleBox
    where: str = "margin"  # "margin" (hides context a neighbour owns), "padding" or "strip" (see `paste_area`)

    @property
    def xyxy(self) -> tuple[int, int, int, int]:
        return (self.x0, self.y0, self.x0 + self.w, self.y0 + self.h)


def distinct_boxes(prompts: Sequence[Prompt]) -> list:
    """Every prompt's exemplars (example boxes, then example images), each once, in order of appearance."""
    return list(dict.fromkeys(b for p in prompts for b in p.examples))


def patch_window(src_transform, width: int, height: int, b: GeoBox, scale_xy: tuple[float, float]):
    """Where box `b`'s patch lies in grid pixels: ((bx0, by0, bx1, by1) the box clipped to the image,
    (gx0, gy0, gx1, gy1) the patch: the box plus `MARGIN` of context, whole pixels), or None when the box
    misses the image (`width` x `height` source pixels)."""
    sx, sy = scale_xy
    inv = ~src_transform
    gw, gh = math.ceil(width * sx - 1e-9), math.ceil(height * sy - 1e-9)
    xs, ys = zip(*(inv @ (x, y) for x, y in ((b.minx, b.miny), (b.maxx, b.maxy), (b.minx, b.maxy), (b.maxx, b.miny))))
    bx0, bx1 = max(min(xs) * sx, 0.0), min(max(xs) * sx, float(gw))
    by0, by1 = max(min(ys) * sy, 0.0), min(max(ys) * sy, float(gh))
    if bx1 - bx0 < 1 or by1 - by0 < 1:
        return None
    gx0, gy0 = max(0, math.floor(bx0) - MARGIN), max(0, math.floor(by0) - MARGIN)
    gx1, gy1 = min(gw, math.ceil(bx1) + MARGIN), min(gh, math.ceil(by1) + MARGIN)
    return (bx0, by0, bx1, by1), (gx0, gy0, gx1, gy1)


def read_exemplars(src, boxes: Sequence, scale_xy: tuple[float, float],
                   chips: dict | None = None) -> list[Exemplar | None]:
    """Each exemplar's patch at `scale_xy` grid pixels per source pixel: an example box's from `src` (any
    `readers.Source`), None for a box that misses it; an example image's (`ExampleImage`) from its file,
    resampled by `chips[image]` = (chip pixels -> source pixels of `src`, `chips.chip_factor`; the bands to
    read) times the scale. Reads `len(boxes)` small windows, once per input and scale."""
    from .chips import read_chip

    sx, sy = scale_xy
    out: list[Exemplar | None] = []
    for i, b in enumerate(boxes):
        if isinstance(b, ExampleImage):
            factor, bands = (chips or {}).get(b, (1.0, None))
            rgb, valid = read_chip(b, factor * sx, bands)
            h, w = valid.shape
            out.append(Exemplar(i, b, rgb, valid, (0.0, 0.0, float(w), float(h)), None))
            continue
        win = patch_window(src.transform, src.width, src.height, b, scale_xy)
        if win is None:
            out.append(None)
            continue
        (bx0, by0, bx1, by1), (gx0, gy0, gx1, gy1) = win
        w, h = gx1 - gx0, gy1 - gy0
        rgb, valid = src.read_window(Window(gx0 / sx, gy0 / sy, w / sx, h / sy), (w, h))
        out.append(Exemplar(i, b, np.ascontiguousarray(rgb), valid,
                            (bx0 - gx0, by0 - gy0, bx1 - gx0, by1 - gy0), ((bx0 + bx1) / 2, (by0 + by1) / 2),
                            (bx0, by0, bx1, by1)))
    return out


# -- placement ---------------------------------------------------------------------------------------------

def _gap(a: tuple, b: tuple) -> float:
    """Euclidean distance between two rectangles (x0, y0, x1, y1); 0 when they touch or overlap."""
    dx = max(b[0] - a[2], a[0] - b[2], 0.0)
    dy = max(b[1] - a[3], a[1] - b[3], 0.0)
    return math.hypot(dx, dy)


def _hit(a: tuple, b: tuple) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _grow(r: tuple, d: float) -> tuple:
    return (r[0] - d, r[1] - d, r[2] + d, r[3] + d)


def place(tile: Tile, w: int, h: int, taken: Sequence[tuple]) -> tuple[int, int] | None:
    """Top-left (tile pixels) for a w x h patch in `tile`'s input away from its core and from `taken`
    patches (see the module notes), or None when none fits."""
    if w > MODEL_SIZE or h > MODEL_SIZE:
        return None
    core = tile.core_tile_px
    blocked = [_grow(core, 1 + GUARD)] + [_grow(t, GUARD) for t in taken]
    xs = {0, MODEL_SIZE - w}
    ys = {0, MODEL_SIZE - h}
    for r in blocked:
        xs.update((math.ceil(r[2]), math.floor(r[0]) - w))
        ys.update((math.ceil(r[3]), math.floor(r[1]) - h))
    vw, vh = tile.valid_wh
    best, best_rank = None, None
    for y in sorted(v for v in ys if 0 <= v <= MODEL_SIZE - h):
        for x in sorted(v for v in xs if 0 <= v <= MODEL_SIZE - w):
            r = (x, y, x + w, y + h)
            if any(_hit(r, b) for b in blocked):
                continue
            hidden = max(0, min(vw, x + w) - x) * max(0, min(vh, y + h) - y)
            # padding before content, then far from the core, then the bottom-right first: every tile takes
            # the same corner, so a tile's paste hides only what its bottom-right neighbours own, and those
            # hide their own bottom-right, never the same object from the other side of the seam
            rank = (hidden > 0, -_gap(r, core), hidden, -y, -x)
            if best_rank is None or rank < best_rank:
                best, best_rank = (x, y), rank
    return best


def paste_area(tile: Tile, r: tuple) -> str:
    """Where a paste (x0, y0, x1, y1 tile pixels) lies: "margin" when it hides tile content (context a
    neighbour owns), "strip" when it lies beyond the window of a grid narrowed below the model input (the
    exemplar strip, `sam3tiles.strip`), else "padding" (an edge tile's input past the image)."""
    vw, vh = tile.valid_wh
    if r[0] < vw and r[1] < vh:
        return "margin"
    if tile.size < MODEL_SIZE and (r[0] >= tile.size or r[1] >= tile.size):
        return "strip"
    return "padding"


def layout(tile: Tile, sizes: Sequence[tuple[int, int]]) -> list[tuple[int, int]] | None:
    """Top-left positions for patches of `sizes` (w, h) in `tile`, or None when they do not all fit. The
    largest (by its smaller side) are placed first: they need the widest free area (padding or strip),
    which a small one placed before could take."""
    order = sorted(range(len(sizes)), key=lambda k: (-min(sizes[k]), k))
    at: list = [None] * len(sizes)
    taken: list[tuple] = []
    for k in order:
        w, h = sizes[k]
        p = place(tile, w, h, taken)
        if p is None:
            return None
        at[k] = p
        taken.append((p[0], p[1], p[0] + w, p[1] + h))
    return at


@dataclass
class TilePlan:
    """One tile's exemplars: pasted (`pastes`), used where they lie (`in_place`), or left out."""

    pastes: list[Paste] = field(default_factory=list)
    in_place: set = field(default_factory=set)  # exemplar indices used where they lie
    no_room: list[int] = field(default_factory=list)  # exemplar indices that fit nowhere in this tile
    over_bound: list[int] = field(default_factory=list)  # left out: MAX_PASTES were pasted already

    def boxes_for(self, prompt: Prompt, boxes: Sequence) -> list[ExampleBox]:
        """The pasted copies' boxes of `prompt`'s exemplars (`boxes`: the job's distinct exemplars)."""
        index = {b: i for i, b in enumerate(boxes)}
        mine = {index[b] for b in prompt.examples if b in index}
        return [p.box for p in self.pastes if p.exemplar in mine]

    def key(self, exemplars: Sequence[Exemplar | None]) -> list | None:
        """What the checkpoint key needs: each paste's exemplar (a box in the CRS, or an example image's
        content hash and size at this scale), label and position; None without pastes."""
        if not self.pastes:
            return None
        out = []
        for p in self.pastes:
            b = exemplars[p.exemplar].box  # type: ignore[union-attr]
            what = [b.minx, b.miny, b.maxx, b.maxy] if isinstance(b, GeoBox) else ["image", b.digest]
            out.append([*what, b.positive, p.x0, p.y0, p.w, p.h])
        return ["exemplar-2", MARGIN, GUARD, out]

    def for_task(self, tile: Tile, exemplars: Sequence[Exemplar | None]) -> TilePastes | None:
        if not self.pastes:
            return None
        items = tuple((p.x0, p.y0, exemplars[p.exemplar].rgb, exemplars[p.exemplar].valid)  # type: ignore[union-attr]
                      for p in self.pastes)
        return TilePastes(items, tile.core_tile_px)


def _priority(tile: Tile, prompts: Sequence[Prompt], boxes: Sequence, exemplars, in_place: set) -> list[int]:
    """Exemplar indices to paste in `tile`, most wanted first (see the module notes, rule 3)."""
    cx, cy = tile.x0 + tile.valid_wh[0] / 2, tile.y0 + tile.valid_wh[1] / 2

    def dist(i: int) -> float:
        c = exemplars[i].centre
        return math.inf if c is None else math.hypot(c[0] - cx, c[1] - cy)  # example images after boxes

    index = {b: i for i, b in enumerate(boxes)}
    todo = sorted((i for i, e in enumerate(exemplars) if e is not None and i not in in_place),
                  key=lambda i: (dist(i), i))
    first: list[int] = []
    for want in (True, False):
        for p in prompts:
            mine = [index[b] for b in p.examples if b in index and b.positive == want]
            if not mine or any(i in in_place for i in mine):
                continue
            pick = next((i for i in todo if i in mine and i not in first), None)
            if pick is not None:
                first.append(pick)
    rest = [i for i in todo if i not in first]
    return first + [i for i in rest if exemplars[i].box.positive] + [i for i in rest if not exemplars[i].box.positive]


def plan_tile(tile: Tile, prompts: Sequence[Prompt], boxes: Sequence,
              exemplars: Sequence[Exemplar | None]) -> TilePlan:
    """Which exemplars `tile` uses in place, which it gets pasted, and where (module notes, rules 2-3)."""
    plan = TilePlan()
    window = tile.window_xyxy
    plan.in_place = {i for i, b in enumerate(boxes) if exemplars[i] is not None and isinstance(b, GeoBox)
                     and _hit(exemplars[i].grid_xyxy, window) and tile_boxes([b], tile)}
    chosen: list[int] = []
    at: list = []
    for i in _priority(tile, prompts, boxes, exemplars, plan.in_place):
        if len(chosen) >= MAX_PASTES:
            plan.over_bound.append(i)
            continue
        trial = layout(tile, [exemplars[j].wh for j in chosen + [i]])
        if trial is None:
            plan.no_room.append(i)
            continue
        chosen, at = chosen + [i], trial
    for i, (x, y) in zip(chosen, at):
        ex = exemplars[i]
        w, h = ex.wh
        bx0, by0, bx1, by1 = ex.box_px
        box = ExampleBox(((x + (bx0 + bx1) / 2) / MODEL_SIZE, (y + (by0 + by1) / 2) / MODEL_SIZE,
                          (bx1 - bx0) / MODEL_SIZE, (by1 - by0) / MODEL_SIZE), ex.box.positive)
        plan.pastes.append(Paste(i, x, y, w, h, box, paste_area(tile, (x, y, x + w, y + h))))
    return plan


# -- in the inference task ---------------------------------------------------------------------------------

def _cells(r: tuple) -> tuple[slice, slice]:
    """The 288-grid cells (rows, cols) that a tile-pixel rectangle touches."""
    c0, c1 = max(0, math.floor(r[0] / _CELL)), min(MASK_SIZE, math.ceil(r[2] / _CELL))
    r0, r1 = max(0, math.floor(r[1] / _CELL)), min(MASK_SIZE, math.ceil(r[3] / _CELL))
    return slice(r0, max(r0, r1)), slice(c0, max(c0, c1))


@dataclass(frozen=True, eq=False)
class TilePastes:
    """What `tasks.infer_task` gets for a tile with pastes: (x0, y0, rgb, valid) per patch, and the core."""

    items: tuple
    core_px: tuple[float, float, float, float]

    def compose(self, image: TileImage) -> tuple[TileImage, PasteScreen]:
        """The tile's model input with the patches pasted in (valid where the patch is), and the screen
        that keeps the pasted pixels out of its detections."""
        rgb, valid = image.rgb.copy(), image.valid.copy()
        rim = np.zeros((MODEL_SIZE, MODEL_SIZE), bool)
        zone = np.zeros((MASK_SIZE, MASK_SIZE), bool)
        hides = False
        for x0, y0, prgb, pvalid in self.items:
            h, w = pvalid.shape
            hides |= bool(image.valid[y0:y0 + h, x0:x0 + w].any())
            rgb[:, y0:y0 + h, x0:x0 + w] = prgb
            valid[y0:y0 + h, x0:x0 + w] = pvalid
            r = _grow((x0, y0, x0 + w, y0 + h), _RIM)
            rim[max(0, int(r[1])):int(r[3]), max(0, int(r[0])):int(r[2])] = True
            zone[_cells(r)] = True
        core = np.zeros((MASK_SIZE, MASK_SIZE), bool)
        core[_cells(_grow(self.core_px, 1))] = True
        return TileImage(rgb, valid), PasteScreen(image.valid & ~rim, zone, core & ~zone, hides, pasted=len(self.items))


@dataclass(eq=False)
class PasteScreen:
    """Drops or clips one tile's detections on its pastes (module notes, rule 4); counts what it did."""

    crop_valid: np.ndarray  # bool [1008,1008]: the tile's own valid pixels without the pastes and their rim
    zone: np.ndarray  # bool [288,288]: cells a paste (grown by one cell) touches
    core: np.ndarray  # bool [288,288]: cells of the core (grown by 1 px), never in `zone`
    hides_content: bool  # a paste covers tile content (context margin), not only padding
    pasted: int = 0
    dropped: int = 0
    clipped: int = 0
    by_prompt: dict = field(default_factory=dict)  # "dropped.<prompt index>", "clipped.<prompt index>"

    def crops(self, det: Detections, prompt: int, pass_index: int, valid_wh: tuple[int, int],
              holes: np.ndarray | None) -> list[InstanceCrop]:
        """`vectorize.crop_detections` for a tile with pastes. `holes`: the tile's validity mask where it
        has nodata (None: none), used for detections away from the pastes."""
        if not len(det):
            return []
        m = det.masks[:, 0] > 0.5
        on = (m & self.zone).any(axis=(1, 2))
        if not on.any():
            return crop_detections(det, prompt, pass_index, valid_wh, holes)
        reach = (m & self.core).any(axis=(1, 2))
        cut = on & reach
        for name, n in (("dropped", int((on & ~reach).sum())), ("clipped", int(cut.sum()))):
            setattr(self, name, getattr(self, name) + n)
            self.by_prompt[f"{name}.{prompt}"] = self.by_prompt.get(f"{name}.{prompt}", 0) + n
        out = crop_detections(_subset(det, ~on), prompt, pass_index, valid_wh, holes)
        kept = crop_detections(_subset(det, cut), prompt, pass_index, valid_wh, self.crop_valid)
        return out + ([replace(c, cut=True) for c in kept] if self.hides_content else kept)

    def stats(self) -> dict:
        return {"pasted": self.pasted, "dropped": self.dropped, "clipped": self.clipped, **self.by_prompt}


def _subset(det: Detections, sel: np.ndarray) -> Detections:
    return Detections(det.boxes[sel], det.scores[sel], det.masks[sel])


# -- one input ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TileExemplars:
    """One tile's share of the exemplars: `pasted` (prompt index -> the boxes of its pasted copies, tile
    frame: `prompts.prompts_for_tile` adds them to the prompt's boxes), `key` (what the checkpoint key
    needs, None without pastes) and `task` (the pastes the tile's task composes, None without pastes)."""

    pasted: dict[int, list[ExampleBox]]
    key: list | None
    task: TilePastes | None


@dataclass
class InputExemplars:
    """The exemplars of one input and the plans of its tiles; `counts` sums what the plans did: tile-exemplar
    pairs in_place / no_room / over_bound and pastes by area (margin / padding / strip), in all and per
    prompt ("margin.<prompt index>", ...)."""

    prompts: Sequence[Prompt]
    boxes: list
    exemplars: list[Exemplar | None]
    scale: float = 1.0
    counts: dict = field(default_factory=lambda: dict.fromkeys(
        ("in_place", "no_room", "over_bound", "margin", "padding", "strip"), 0))
    _no_room: dict = field(default_factory=dict)  # exemplar index -> tiles it fitted nowhere in

    def plan(self, tile: Tile) -> TilePlan:
        plan = plan_tile(tile, self.prompts, self.boxes, self.exemplars)
        c = self.counts
        index = {b: i for i, b in enumerate(self.boxes)}
        for k, p in enumerate(self.prompts):
            mine = {index[b] for b in p.examples if b in index}
            for name, n in [("in_place", len(plan.in_place & mine))] + [(q.where, 1) for q in plan.pastes
                                                                          if q.exemplar in mine]:
                c[f"{name}.{k}"] = c.get(f"{name}.{k}", 0) + n
        c["in_place"] += len(plan.in_place)
        c["no_room"] += len(plan.no_room)
        c["over_bound"] += len(plan.over_bound)
        for q in plan.pastes:
            c[q.where] = c.get(q.where, 0) + 1
        for i in plan.no_room:
            self._no_room[i] = self._no_room.get(i, 0) + 1
        return plan

    def for_tile(self, tile: Tile) -> TileExemplars:
        """Everything a tile needs of the exemplars, planned (and counted) once: see `TileExemplars`."""
        plan = self.plan(tile)
        pasted = {k: plan.boxes_for(p, self.boxes) for k, p in enumerate(self.prompts) if p.examples}
        return TileExemplars(pasted, plan.key(self.exemplars), plan.for_task(tile, self.exemplars))

    def warnings(self, overlap: int) -> list[str]:
        """One line per exemplar that fitted nowhere in some tiles, with the consequence and the fix."""
        out = []
        for i, n in sorted(self._no_room.items()):
            ex = self.exemplars[i]
            w, h = ex.wh  # type: ignore[union-attr]
            b = ex.box  # type: ignore[union-attr]
            what = (f"example box {b.minx:g},{b.miny:g},{b.maxx:g},{b.maxy:g}" if isinstance(b, GeoBox)
                    else f"example image {b.path}")
            side = min(ex.box_px[2] - ex.box_px[0], ex.box_px[3] - ex.box_px[1])  # type: ignore[union-attr]
            fix = (too_large_fix(side, self.scale) if side > LIMIT else
                   f"rerun with {opt('box_scope', 'image')} and the default {opt('tile_size')} so the run adds an "
                   f"exemplar strip, or a smaller {opt('scale')} ({opt('overlap', overlap)})")
            out.append(f"{what} is {w}x{h} px with its context at this scale and fits in no free margin or strip of "
                       f"{n} tile(s): there it acts only where it lies. {fix}")
        if self.counts["over_bound"]:
            out.append(f"{len([e for e in self.exemplars if e is not None])} exemplars: a tile takes at most "
                       f"{MAX_PASTES} pasted ones (docs/exemplars.md says which); {self.counts['over_bound']} "
                       "tile-exemplar pairs were left out")
        return out


def too_large_fix(side: float, scale: float) -> str:
    """The fix for an exemplar of `side` grid pixels (smaller side) over `LIMIT`."""
    s = math.floor(scale * LIMIT / side * 100) / 100
    return (f"Its smaller side is {side:.0f} px at this scale, over the {LIMIT} px (a third of SAM 3's "
            f"{MODEL_SIZE} px input) an exemplar may take: use {opt('scale', format(s, 'g'))} or below, "
            "or a tighter box")


def input_exemplars(src, prompts: Sequence[Prompt], scale_xy: tuple[float, float],
                    chips: dict | None = None, boxes: bool = True) -> InputExemplars | None:
    """The exemplars of `prompts` read from `src` and their example images' files (None when no prompt has
    an exemplar for this input). `boxes` False (--box-scope tile): example images only."""
    found = [b for b in distinct_boxes(prompts) if boxes or isinstance(b, ExampleImage)]
    if not found:
        return None
    exemplars = read_exemplars(src, found, scale_xy, chips)
    if all(e is None for e in exemplars):
        return None
    return InputExemplars(prompts, found, exemplars, scale=scale_xy[0])


def report_by_prompt(report, inp, prompts: Sequence[Prompt]) -> None:
    """The run report's exemplar figures: the strip's extra tiles (`strip_px`, `extra_tiles`, summed over
    the inputs) and, per prompt label, exemplars given, used in place, pasted by area, detections on
    pastes dropped and clipped (`report.exemplars_by_prompt`, from the flat per-prompt counters)."""
    e = report.exemplars
    if inp.exemplar_strip:
        e["strip_px"] = max(e.get("strip_px", 0), inp.exemplar_strip)
        e["extra_tiles"] = e.get("extra_tiles", 0) + inp.n_tiles - inp.base_tiles
    out = {}
    for k, p in enumerate(prompts):
        row = {"given": len(p.examples), "boxes": len(p.boxes), "images": len(p.images)}
        for name in ("in_place", "margin", "padding", "strip", "dropped", "clipped"):
            row[name] = e.get(f"{name}.{k}", 0)
        row["pasted"] = row["margin"] + row["padding"] + row["strip"]
        out[p.label] = row
    report.exemplars_by_prompt = out
