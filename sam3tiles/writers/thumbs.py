"""The quicklook's picture of an input, put together from the tiles the run reads anyway.

The quicklook (`quicklook.py`) shows the image under the outlines. Read from a pyramid level or an
overview that costs next to nothing; an image without one would be decoded a second time, whole, for a
1024 px picture (0.3 s of CPU for 16 Mpx, beside the tiles' own reads; and not at all past
`quicklook.READ_BUDGET`, where the picture was grey). So each grid tile hands back a decimated copy of its
valid content (`take`, every `step`-th pixel: no finer than the picture needs) and `Picture` places it: a
picture pixel takes the tile sample nearest its centre. When every picture pixel was covered (all grid
tiles computed in this run; tiles with no data count, black as a read shows them) the picture is used;
otherwise (tiles resumed from checkpoints, failed tiles) the quicklook reads the image as before.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_SIDE = 1024  # the quicklook's longest side


def panel_wh(width: int, height: int, side: int) -> tuple[int, int]:
    """A panel's size in picture pixels for an image of width x height in a `side` px square."""
    k = min(1.0, side / max(width, height))  # never larger than the image
    return max(1, round(width * k)), max(1, round(height * k))


def take(rgb: np.ndarray, valid_wh: tuple[int, int], step: int) -> np.ndarray:
    """Every `step`-th pixel of a tile's valid content: RGB [3, h, w] -> [h', w', 3] uint8 (a copy)."""
    vw, vh = valid_wh
    return np.ascontiguousarray(np.moveaxis(rgb[:, :vh:step, :vw:step], 0, -1))


@dataclass(frozen=True)
class Patch:
    """A tile's samples cut to the picture pixels it covers (`Sampling.patch`): rows y0:y1, columns x0:x1."""

    y0: int
    y1: int
    x0: int
    x1: int
    pixels: np.ndarray  # [y1 - y0, x1 - x0, 3] uint8


@dataclass(frozen=True)
class Sampling:
    """A picture's geometry: `w` x `h` picture pixels, `kx`, `ky` picture pixels per source pixel, `origin`
    its first source pixel. Sent with a batch of tiles (a few numbers), it cuts each tile's patch where the
    tile is read (`patch`): the driver only pastes it (`Picture.paste`)."""

    w: int
    h: int
    kx: float
    ky: float
    origin: tuple[int, int]

    def step(self, tile) -> int:
        """The decimation a tile's copy needs: the largest that is still no coarser than the picture."""
        sx, sy = tile.scale_xy
        return max(1, int(min(sx / self.kx, sy / self.ky)))

    @staticmethod
    def _span(off: float, length: float, k: float, n: int) -> tuple[slice, np.ndarray]:
        """Picture pixels whose centres lie in the source span [off, off + length), and their positions
        (source pixels from `off`)."""
        lo = max(0, int(np.ceil(off * k - 0.5)))
        hi = min(n, int(np.ceil((off + length) * k - 0.5)))
        centres = (np.arange(lo, hi) + 0.5) / k - off
        return slice(lo, hi), centres

    def spans(self, tile) -> tuple[slice, np.ndarray, slice, np.ndarray]:
        win = tile.src_window
        xs, cx = self._span(win.col_off - self.origin[0], win.width, self.kx, self.w)
        ys, cy = self._span(win.row_off - self.origin[1], win.height, self.ky, self.h)
        return ys, cy, xs, cx

    def patch(self, tile, thumb: np.ndarray, step: int) -> Patch:
        """The picture pixels a tile covers, each the sample of its copy (`take(..., step)`) nearest its
        centre."""
        ys, cy, xs, cx = self.spans(tile)
        if xs.start >= xs.stop or ys.start >= ys.stop:
            return Patch(0, 0, 0, 0, np.zeros((0, 0, 3), np.uint8))
        sx, sy = tile.scale_xy
        ix = np.minimum((cx * sx / step).astype(np.int64), thumb.shape[1] - 1)
        iy = np.minimum((cy * sy / step).astype(np.int64), thumb.shape[0] - 1)
        return Patch(ys.start, ys.stop, xs.start, xs.stop, np.ascontiguousarray(thumb[iy][:, ix]))


class Picture:
    """An input's quicklook picture (`out_wh` = (width, height) in picture pixels) being filled tile by
    tile. Coordinates: source pixels of a `width` x `height` image; a tile's `src_window` and `scale_xy`
    (tile pixels per source pixel) place its samples."""

    def __init__(self, width: int, height: int, out_wh: tuple[int, int], origin: tuple[int, int] = (0, 0)):
        self.w, self.h = int(out_wh[0]), int(out_wh[1])
        # origin: the picture's first source pixel (a map's margin before it: `run.planning.anchor`)
        self.sampling = Sampling(self.w, self.h, self.w / width, self.h / height, tuple(origin))
        self.rgb = np.zeros((self.h, self.w, 3), np.uint8)
        self.covered = np.zeros((self.h, self.w), bool)

    def step(self, tile) -> int:
        return self.sampling.step(tile)

    def add(self, tile, thumb: np.ndarray | None, step: int) -> None:
        """Place a tile's copy (`take(..., step)`); None: the tile had no data (black, as a read shows it)."""
        if thumb is not None:
            self.paste(self.sampling.patch(tile, thumb, step))
            return
        ys, _, xs, _ = self.sampling.spans(tile)
        if xs.start < xs.stop and ys.start < ys.stop:
            self.rgb[ys, xs] = 0
            self.covered[ys, xs] = True

    def paste(self, p: Patch) -> None:
        """A tile's patch, cut where it was read (`Sampling.patch`)."""
        if p.y0 < p.y1 and p.x0 < p.x1:
            self.rgb[p.y0:p.y1, p.x0:p.x1] = p.pixels
            self.covered[p.y0:p.y1, p.x0:p.x1] = True

    def image(self) -> np.ndarray | None:
        """The picture [h, w, 3], or None while some pixel was covered by no tile."""
        return self.rgb if self.covered.all() else None
