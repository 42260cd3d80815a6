"""The exemplar strip: a run whose exemplars do not fit a tile's free margin narrows its tiles' content.

An exemplar is pasted where a tile owns nothing (`sam3tiles.exemplars`): its padding, or the context
margin outside its core, overlap/2 = 128 px at the default overlap, of which ~111 px are free once the
guard is kept. A box larger than that (most buildings, fields, ships at native resolution) fits there on
no interior tile. For such a run the grid is built with a smaller tile side, 1008 - S, so that every
tile's 1008x1008 model input keeps an L-shaped strip S pixels wide at its right and bottom edges that no
tile content reaches: the exemplars are pasted there, their decoder boxes pointing at the paste. The
cores still partition the image (the grid is a plain grid of smaller tiles, same overlap), so nothing a
tile owns is ever covered, and the merge is unchanged. S is the smallest side of the largest patch that
does not fit the margin (the strip holds it upright along either edge); exemplars that fit the margin
cost nothing and keep the default grid.

Cost: the narrowed grid has more tiles, about ((1008 - overlap) / (1008 - S - overlap))^2 as many (one
encode each): 1.0x for boxes up to 94 px, 1.41x at 100 px, 1.74x at 160 px, 2.39x at 250 px, 3.56x at
the limit (docs/exemplars.md). `plan`
and `run --dry-run` print it; the run report counts it (`exemplars.extra_tiles`).

Limit: a box up to `LIMIT` (a third of the model input, 336 px) on its smaller side at the run's scale.
A larger one is used only where it lies, with a warning naming the --scale that brings it under.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

from ..model.runtime import MODEL_SIZE
from ..tiling.grid import TileGrid, max_overlap
from ..wording import opt
from .exemplars import LIMIT, patch_window, place

__all__ = ["LIMIT", "StripChoice", "choose_strip", "fits", "patch_sizes", "strip_line"]


@dataclass(frozen=True)
class StripChoice:
    """What the exemplars of one input need: `strip` px (0: none), the tile side that leaves it, and the
    boxes too large for any strip (their sides in grid pixels)."""

    strip: int = 0
    tile_size: int = 0
    too_large: tuple = ()
    refused: str = ""  # why no strip could be made (overlap too large for the narrowed tiles), else ""


@lru_cache(maxsize=256)
def fits(w: int, h: int, tile_size: int, overlap: int) -> bool:
    """Whether a w x h patch fits the free area of an interior tile of a grid of `tile_size`."""
    if overlap > max_overlap(tile_size):  # no grid of such tiles
        return False
    g = TileGrid(3 * tile_size, 3 * tile_size, tile_size=tile_size, overlap=overlap)
    return place(g.tile(1, 1), w, h, []) is not None


def patch_sizes(transform, width: int, height: int, boxes: Sequence, scale: float) -> list[tuple[int, int, float]]:
    """(patch w, patch h, box's smaller side) in grid pixels for each example box lying in the image."""
    out = []
    for b in boxes:
        win = patch_window(transform, width, height, b, (scale, scale))
        if win is not None:
            (bx0, by0, bx1, by1), (gx0, gy0, gx1, gy1) = win
            out.append((gx1 - gx0, gy1 - gy0, min(bx1 - bx0, by1 - by0)))
    return out


def choose_strip(patches: Sequence[tuple[int, int, float]], tile_size: int, overlap: int) -> StripChoice:
    """The strip the patches need on a grid of `tile_size` and `overlap` (module notes)."""
    need = [p for p in patches if not fits(p[0], p[1], tile_size, overlap)]
    big = tuple(p[2] for p in need if p[2] > LIMIT or max(p[0], p[1]) > MODEL_SIZE)
    need = [p for p in need if p[2] <= LIMIT and max(p[0], p[1]) <= MODEL_SIZE]
    if not need:
        return StripChoice(too_large=big)
    size = min(tile_size, MODEL_SIZE - max(min(p[0], p[1]) for p in need))
    while size > 2 * overlap and not all(fits(p[0], p[1], size, overlap) for p in need):
        size -= 4
    if overlap > max_overlap(size):
        return StripChoice(too_large=big, refused=f"the exemplars need tiles of {size} px or less to leave them a "
                           f"strip, which {opt('overlap', overlap)} does not allow: use "
                           f"{opt('overlap', max(0, size // 2 - 64))} or a smaller {opt('scale')}")
    return StripChoice(MODEL_SIZE - size, size, big)


def strip_line(strip: int, tiles: int, base: int, tile_size: int) -> str:
    """The cost line of `plan` and `run --dry-run`."""
    if not strip:
        return ""
    return (f"exemplar strip: {strip} px (tiles of {tile_size} px content, so exemplars too large for the free "
            f"margin are pasted where no tile content lies): {tiles} tiles instead of {base}, "
            f"+{tiles - base} encodes ({tiles / max(base, 1):.2f}x)")
