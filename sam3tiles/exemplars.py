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
   positions each paste takes the one farthest from the core (the tile's corners first, then flush
   against an outer edge), then the one hiding the fewest content pixels: the paste stays as far as it
   can from anything the tile owns and prefers padding to content.
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

from .grid import Tile
from .model.runtime import MASK_SIZE, MODEL_SIZE, Detections, ExampleBox, TileImage
from .prompts import GeoBox, Prompt, tile_boxes
from .vectorize import InstanceCrop, crop_detections

#: Grid pixels of context read around an example box.
MARGIN = 8
#: Pixels kept free between a paste and the tile's core (grown by 1 px) and between two pastes: more than
#: one 288-grid cell (3.5 px) of rim plus the cells either side, so the copy's cells never touch the core.
GUARD = 16
#: Exemplars pasted into one tile at most (see the module notes).
MAX_PASTES = 4
_CELL = MODEL_SIZE / MASK_SIZE
_RIM = 4  # one mask cell, rounded up: bilinear upsampling reads one cell either side


@dataclass(frozen=True, eq=False)
class Exemplar:
    """One example box's patch: `rgb` uint8 [3,h,w], `valid` bool [h,w], `box_px` the box inside the patch
    (x0, y0, x1, y1, patch pixels), `centre` the box centre and `grid_xyxy` the box in grid pixels."""

    index: int
    box: GeoBox
    rgb: np.ndarray
    valid: np.ndarray
    box_px: tuple[float, float, float, float]
    centre: tuple[float, float]
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

    @property
    def xyxy(self) -> tuple[int, int, int, int]:
        return (self.x0, self.y0, self.x0 + self.w, self.y0 + self.h)


def distinct_boxes(prompts: Sequence[Prompt]) -> list[GeoBox]:
    """Every prompt's example boxes, each once, in order of appearance."""
    return list(dict.fromkeys(b for p in prompts for b in p.boxes))


def read_exemplars(src, boxes: Sequence[GeoBox], scale_xy: tuple[float, float]) -> list[Exemplar | None]:
    """Each box's patch from `src` (any `readers.Source`) at `scale_xy` grid pixels per source pixel; None
    for a box that misses the source. Reads `len(boxes)` small windows, once per input."""
    sx, sy = scale_xy
    inv = ~src.transform
    gw, gh = math.ceil(src.width * sx - 1e-9), math.ceil(src.height * sy - 1e-9)
    out: list[Exemplar | None] = []
    for i, b in enumerate(boxes):
        xs, ys = zip(*(inv @ (x, y) for x, y in ((b.minx, b.miny), (b.maxx, b.maxy), (b.minx, b.maxy), (b.maxx, b.miny))))
        bx0, bx1 = max(min(xs) * sx, 0.0), min(max(xs) * sx, float(gw))
        by0, by1 = max(min(ys) * sy, 0.0), min(max(ys) * sy, float(gh))
        if bx1 - bx0 < 1 or by1 - by0 < 1:
            out.append(None)
            continue
        gx0, gy0 = max(0, math.floor(bx0) - MARGIN), max(0, math.floor(by0) - MARGIN)
        gx1, gy1 = min(gw, math.ceil(bx1) + MARGIN), min(gh, math.ceil(by1) + MARGIN)
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
            rank = (-_gap(r, core), hidden, y, x)
            if best_rank is None or rank < best_rank:
                best, best_rank = (x, y), rank
    return best


@dataclass
class TilePlan:
    """One tile's exemplars: pasted (`pastes`), used where they lie (`in_place`), or left out."""

    pastes: list[Paste] = field(default_factory=list)
    in_place: int = 0
    no_room: list[int] = field(default_factory=list)  # exemplar indices that fit nowhere in this tile
    over_bound: list[int] = field(default_factory=list)  # left out: MAX_PASTES were pasted already

    def boxes_for(self, prompt: Prompt, boxes: Sequence[GeoBox]) -> list[ExampleBox]:
        """The pasted copies' boxes of `prompt`'s example boxes (`boxes`: the job's distinct boxes)."""
        index = {b: i for i, b in enumerate(boxes)}
        mine = {index[b] for b in prompt.boxes}
        return [p.box for p in self.pastes if p.exemplar in mine]

    def key(self, exemplars: Sequence[Exemplar | None]) -> list | None:
        """What the checkpoint key needs: each paste's box (CRS), label and position; None without pastes."""
        if not self.pastes:
            return None
        out = []
        for p in self.pastes:
            b = exemplars[p.exemplar].box  # type: ignore[union-attr]
            out.append([b.minx, b.miny, b.maxx, b.maxy, b.positive, p.x0, p.y0, p.w, p.h])
        return ["exemplar-1", MARGIN, GUARD, out]

    def for_task(self, tile: Tile, exemplars: Sequence[Exemplar | None]) -> TilePastes | None:
        if not self.pastes:
            return None
        items = tuple((p.x0, p.y0, exemplars[p.exemplar].rgb, exemplars[p.exemplar].valid)  # type: ignore[union-attr]
                      for p in self.pastes)
        return TilePastes(items, tile.core_tile_px)


def _priority(tile: Tile, prompts: Sequence[Prompt], boxes: Sequence[GeoBox], exemplars, in_place: set) -> list[int]:
    """Exemplar indices to paste in `tile`, most wanted first (see the module notes, rule 3)."""
    cx, cy = tile.x0 + tile.valid_wh[0] / 2, tile.y0 + tile.valid_wh[1] / 2

    def dist(i: int) -> float:
        ex = exemplars[i]
        return math.hypot(ex.centre[0] - cx, ex.centre[1] - cy)

    index = {b: i for i, b in enumerate(boxes)}
    todo = sorted((i for i, e in enumerate(exemplars) if e is not None and i not in in_place), key=lambda i: (dist(i), i))
    first: list[int] = []
    for want in (True, False):
        for p in prompts:
            mine = [index[b] for b in p.boxes if b.positive == want]
            if not mine or any(i in in_place for i in mine):
                continue
            pick = next((i for i in todo if i in mine and i not in first), None)
            if pick is not None:
                first.append(pick)
    return first + [i for i in todo if i not in first]


def plan_tile(tile: Tile, prompts: Sequence[Prompt], boxes: Sequence[GeoBox],
              exemplars: Sequence[Exemplar | None]) -> TilePlan:
    """Which exemplars `tile` uses in place, which it gets pasted, and where (module notes, rules 2-3)."""
    plan = TilePlan()
    window = tile.window_xyxy
    in_place = {i for i, b in enumerate(boxes) if exemplars[i] is not None
                and _hit(exemplars[i].grid_xyxy, window) and tile_boxes([b], tile)}
    plan.in_place = len(in_place)
    taken: list[tuple] = []
    for i in _priority(tile, prompts, boxes, exemplars, in_place):
        if len(plan.pastes) >= MAX_PASTES:
            plan.over_bound.append(i)
            continue
        ex = exemplars[i]
        w, h = ex.wh
        at = place(tile, w, h, taken)
        if at is None:
            plan.no_room.append(i)
            continue
        x, y = at
        bx0, by0, bx1, by1 = ex.box_px
        box = ExampleBox(((x + (bx0 + bx1) / 2) / MODEL_SIZE, (y + (by0 + by1) / 2) / MODEL_SIZE,
                          (bx1 - bx0) / MODEL_SIZE, (by1 - by0) / MODEL_SIZE), ex.box.positive)
        plan.pastes.append(Paste(i, x, y, w, h, box))
        taken.append((x, y, x + w, y + h))
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
        self.dropped += int((on & ~reach).sum())
        cut = on & reach
        self.clipped += int(cut.sum())
        out = crop_detections(_subset(det, ~on), prompt, pass_index, valid_wh, holes)
        kept = crop_detections(_subset(det, cut), prompt, pass_index, valid_wh, self.crop_valid)
        return out + ([replace(c, cut=True) for c in kept] if self.hides_content else kept)

    def stats(self) -> dict:
        return {"pasted": self.pasted, "dropped": self.dropped, "clipped": self.clipped}


def _subset(det: Detections, sel: np.ndarray) -> Detections:
    return Detections(det.boxes[sel], det.scores[sel], det.masks[sel])


# -- one input ---------------------------------------------------------------------------------------------

@dataclass
class InputExemplars:
    """The exemplars of one input and the plans of its tiles; `counts` sums what the plans did."""

    prompts: Sequence[Prompt]
    boxes: list[GeoBox]
    exemplars: list[Exemplar | None]
    counts: dict = field(default_factory=lambda: {"in_place": 0, "no_room": 0, "over_bound": 0})
    _no_room: dict = field(default_factory=dict)  # exemplar index -> tiles it fitted nowhere in

    def plan(self, tile: Tile) -> TilePlan:
        plan = plan_tile(tile, self.prompts, self.boxes, self.exemplars)
        self.counts["in_place"] += plan.in_place
        self.counts["no_room"] += len(plan.no_room)
        self.counts["over_bound"] += len(plan.over_bound)
        for i in plan.no_room:
            self._no_room[i] = self._no_room.get(i, 0) + 1
        return plan

    def pasted(self, plan: TilePlan):
        """For `pipeline._prompts_for_tile`: a prompt -> its pasted copies' boxes in this tile."""
        return lambda p: plan.boxes_for(p, self.boxes)

    def warnings(self, overlap: int) -> list[str]:
        """One line per exemplar that fitted nowhere in some tiles, with the consequence and the fix."""
        out = []
        for i, n in sorted(self._no_room.items()):
            ex = self.exemplars[i]
            w, h = ex.wh  # type: ignore[union-attr]
            b = ex.box  # type: ignore[union-attr]
            need = 2 * (min(w, h) + GUARD + 1)
            out.append(f"example box {b.minx:g},{b.miny:g},{b.maxx:g},{b.maxy:g} is {w}x{h} px with its context at "
                       f"this scale and fits in no free margin of {n} tile(s) (overlap {overlap}): there it acts only "
                       f"where it lies. Use --overlap {need} or more, or a smaller --scale")
        if self.counts["over_bound"]:
            out.append(f"{len([e for e in self.exemplars if e is not None])} example boxes: a tile takes at most "
                       f"{MAX_PASTES} pasted ones (the nearest, see sam3tiles.exemplars); {self.counts['over_bound']} "
                       "tile-exemplar pairs were left out")
        return out


def input_exemplars(src, prompts: Sequence[Prompt], scale_xy: tuple[float, float]) -> InputExemplars | None:
    """The exemplars of `prompts` read from `src` (None when no prompt has a box inside it)."""
    boxes = distinct_boxes(prompts)
    if not boxes:
        return None
    exemplars = read_exemplars(src, boxes, scale_xy)
    if all(e is None for e in exemplars):
        return None
    return InputExemplars(prompts, boxes, exemplars)
