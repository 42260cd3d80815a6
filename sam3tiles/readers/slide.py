"""Whole-slide images (OME-TIFF, pyramidal TIFF, BigTIFF) read window by window through tifffile + zarr.

`SlideSource` has the reader interface of `source.RasterSource`, so the pipeline treats a slide like any
raster without a CRS: pixel coordinates of the full-resolution level, origin top-left, y down.

* Only the chunks (TIFF tiles or strips) under a window are decoded; the slide is never loaded.
* Each read uses the coarsest pyramid level whose resolution is still at least the requested output
  resolution (so `--scale 0.25` reads the 4x level, not the full slide), then resamples the rest: area
  average when shrinking, pixel replication for integer zooms (`--scale 2`, `4`: object edges stay on
  pixel edges), bilinear for other zooms, exact copies when the grid falls on the level.
* Channels (`--channels`, alias of `--bands`, 1-based): one becomes grey, three become RGB. Planar
  channels (axis C, fluorescence) and samples (axis S, RGB brightfield, interleaved or planar) are both handled;
  other axes (T, Z, ...) must be singletons.
* Data that is not uint8 is stretched to uint8 with one linear map for the whole slide: percentiles
  2 and 98 of a low pyramid level (per channel for fluorescence channels, jointly for RGB samples).
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path

import numpy as np
from affine import Affine
from rasterio.windows import Window

from ..errors import BandError, InputDataError, RasterReadError
from ..units import ome_pixel_size_um
from .base import MAX_PIXELS, STATS_SIDE, Source, Stretch, _first_line
from ..wording import opt

log = logging.getLogger(__name__)

#: Levels larger than this (pixels) are sampled in blocks for the statistics instead of read whole.
_STATS_MAX_READ = 16_000_000
_STATS_BLOCK = 256
_SPATIAL = ("Y", "X")
_CHANNEL_AXES = ("C", "S")


def is_slide(path: str | os.PathLike) -> bool:
    """True for an OME-TIFF or a TIFF whose main image has pyramid levels; reads the header only
    (`tiffhead.tiff_head`).

    GeoTIFFs stay with rasterio (their overviews are GDAL's business) unless they are pyramidal OME-TIFFs.
    Anything that is not a local TIFF file is False.
    """
    from .tiffhead import tiff_head

    head = tiff_head(str(path))
    return head is not None and head.slide


class SlideSource(Source):
    """An open whole-slide image ready to deliver 1008x1008 model inputs. Use as a context manager.

    `bands` are 1-based channel numbers (1 = grey, 3 = R,G,B); None picks 1 channel, or the first 3 of an
    RGB(A) image, and refuses other counts. Pickles by path, so Dask workers reopen it.
    """

    kind = "slide"
    crs = None
    transform = Affine.identity()

    def _reset(self) -> None:
        self._tf = None
        self._arrays: list = []
        self.levels_read: dict[int, int] = {}  # level -> number of window reads (diagnostics, tests)

    def _open(self) -> None:
        import tifffile
        import zarr

        p = Path(self.path)
        if not p.exists():
            raise RasterReadError(f"{self.path}: no such file: check the path")
        if p.is_dir():
            raise RasterReadError(f"{self.path} is a directory, not a slide: give an OME-TIFF or TIFF file")
        try:
            tf = tifffile.TiffFile(self.path)
        except Exception as e:  # noqa: BLE001 - tifffile raises many kinds
            raise RasterReadError(f"{self.path} is not a TIFF slide tifffile can read ({_first_line(e)}): "
                                  "give an OME-TIFF, pyramidal TIFF or BigTIFF") from None
        try:
            series = tf.series[0]
            self.axes = series.axes.upper()
            self.level_shapes = [tuple(int(v) for v in lvl.shape) for lvl in series.levels]
            self._check_axes()
            store = tf.aszarr(series=0)
            node = zarr.open(store, mode="r")
            if len(self.level_shapes) > 1:
                self._arrays = [node[str(i)] for i in range(len(self.level_shapes))]
            else:
                self._arrays = [node]
            for i, (arr, shape) in enumerate(zip(self._arrays, self.level_shapes)):
                if tuple(arr.shape) != shape:
                    raise RasterReadError(f"{self.path}: pyramid level {i} has shape {tuple(arr.shape)} in the "
                                          f"store but {shape} in the header: the file is damaged")
            self.dtype = np.dtype(series.dtype)
        except Exception:
            tf.close()
            raise
        self._tf = tf
        #: physical pixel size (x, y) in micrometres from the OME metadata (None: unknown)
        self.pixel_size_um = ome_pixel_size_um(tf.ome_metadata if tf.is_ome else None,
                                               tf.pages[0].description if tf.pages else None)
        ya, xa = self.axes.index("Y"), self.axes.index("X")
        self._wh = [(s[xa], s[ya]) for s in self.level_shapes]
        w0, h0 = self._wh[0]
        if w0 * h0 > MAX_PIXELS or w0 < 1 or h0 < 1:
            self.close()
            raise RasterReadError(f"{self.path}: header claims {w0}x{h0} pixels, which is not plausible: the "
                                  "file is corrupt")
        #: per level: (source pixels per level pixel along x, along y)
        self.factors = [(w0 / w, h0 / h) for w, h in self._wh]
        self.bands = self._resolve_bands()
        self.stretch = self._resolve_stretch()

    def _check_axes(self) -> None:
        axes = self.axes
        shape = self.level_shapes[0]
        if "Y" not in axes or "X" not in axes or axes.index("Y") > axes.index("X"):
            raise InputDataError(f"{self.path}: image axes {axes!r} lack Y before X: sam3tiles reads 2D images "
                                 "(Y, X, optional channels C or samples S): re-save the slide as a 2D OME-TIFF")
        big = {a: n for a, n in zip(axes, shape) if a not in _SPATIAL and n > 1}
        chans = [a for a in big if a in _CHANNEL_AXES]
        other = [a for a in big if a not in _CHANNEL_AXES]
        if other or len(chans) > 1:
            what = ", ".join(f"{a}={n}" for a, n in big.items())
            raise InputDataError(f"{self.path}: unsupported axes {axes!r} ({what}): sam3tiles segments one 2D "
                                 "plane with channels (C) or RGB samples (S); save the plane to segment as its "
                                 "own OME-TIFF (e.g. one time point, one Z slice or a max projection)")
        self._ch_axis = chans[0] if chans else next((a for a in axes if a in _CHANNEL_AXES), None)

    def _resolve_bands(self) -> tuple[int, ...]:
        count = self.count
        if self._bands_arg:
            bad = [b for b in self._bands_arg if not 1 <= b <= count]
            if bad:
                raise BandError(f"{opt('bands', ','.join(map(str, self._bands_arg)))}: {self.path} has {count} "
                                f"channel(s), so channel {bad[0]} does not exist: pick channels between 1 and "
                                f"{count}")
            return self._bands_arg
        if count in (1, 3):
            return tuple(range(1, count + 1))
        if count == 4 and self._ch_axis == "S":
            return (1, 2, 3)  # RGBA
        raise BandError(f"{self.path} has {count} channels: choose 1 as grey or 3 as R,G,B with {opt('bands')} "
                        f"(channel numbers, 1-based), e.g. {opt('bands', '1')} for a nuclear stain")

    # -- properties --------------------------------------------------------------------------------
    @property
    def count(self) -> int:
        if self._ch_axis is None:
            return 1
        return int(self.level_shapes[0][self.axes.index(self._ch_axis)])

    @property
    def dataset(self) -> "SlideSource":
        """Dataset-like view (`.count`, `.width`, `.height`) for code written against rasterio."""
        return self

    @property
    def width(self) -> int:
        return self._wh[0][0]

    @property
    def height(self) -> int:
        return self._wh[0][1]

    @property
    def n_levels(self) -> int:
        return len(self._wh)

    @property
    def band_count(self) -> int:
        return self.count

    @property
    def levels(self) -> list[tuple[int, int]]:
        return [(int(w), int(h)) for w, h in self._wh]

    def read_cost(self, out_wh: tuple[int, int]) -> int:
        lw, lh = self._wh[self.level_for(out_wh[0] / self.width, out_wh[1] / self.height)]
        return int(lw) * int(lh)

    def close(self) -> None:
        self._arrays = []
        if self._tf is not None:
            self._tf.close()
            self._tf = None

    # -- raw reads ---------------------------------------------------------------------------------------
    def _read_level(self, level: int, x0: int, y0: int, x1: int, y1: int) -> np.ndarray:
        """Raw values [len(bands), y1-y0, x1-x0] of one level (integer box inside the level)."""
        arr = self._arrays[level]
        ch = self._ch_axis
        try:
            if ch == "C":
                planes = []
                for b in self.bands:
                    idx = tuple(slice(y0, y1) if a == "Y" else slice(x0, x1) if a == "X" else
                                (b - 1) if a == "C" else 0 for a in self.axes)
                    planes.append(np.asarray(arr[idx]))
                return np.stack(planes)
            idx = tuple(slice(y0, y1) if a == "Y" else slice(x0, x1) if a == "X" else
                        slice(None) if a == "S" else 0 for a in self.axes)
            data = np.asarray(arr[idx])
        except Exception as e:  # noqa: BLE001 - codecs raise their own kinds (zlib.error, ...)
            raise RasterReadError(f"{self.path}: cannot read level {level} box ({x0}, {y0}, {x1}, {y1}) "
                                  f"({_first_line(e)}): the file is damaged or truncated") from None
        if ch == "S":
            # the samples' axis is last when interleaved (YXS) and first when planar (SYX, PlanarConfiguration 2)
            kept = [a for a in self.axes if a in ("Y", "X", "S")]
            data = np.moveaxis(data, kept.index("S"), 0)[[b - 1 for b in self.bands]]
        else:
            data = data[None]
        return data

    def level_for(self, res_x: float, res_y: float) -> int:
        """The coarsest level whose resolution is >= the requested one (output pixels per source pixel)."""
        best = 0
        for i, (fx, fy) in enumerate(self.factors):
            if fx * res_x <= 1 + 1e-6 and fy * res_y <= 1 + 1e-6:
                best = i if self._wh[i][0] * self._wh[i][1] < self._wh[best][0] * self._wh[best][1] else best
        return best

    # -- statistics ----------------------------------------------------------------------------------
    def _stats_level(self) -> int:
        """The smallest level whose longer side is still >= STATS_SIDE (level 0 when none is)."""
        best = 0
        for i, (w, h) in enumerate(self._wh):
            if max(w, h) >= STATS_SIDE and w * h < self._wh[best][0] * self._wh[best][1]:
                best = i
        return best

    def _stats_sample(self, level: int) -> np.ndarray:
        """Float64 [bands, n] samples of one level: the whole level when small, else a grid of blocks."""
        w, h = self._wh[level]
        if w * h <= _STATS_MAX_READ:
            step = 2048
            parts = [self._read_level(level, x, y, min(w, x + step), min(h, y + step)).reshape(len(self.bands), -1)
                     for y in range(0, h, step) for x in range(0, w, step)]
        else:
            n = max(1, int(math.sqrt(_STATS_MAX_READ) // _STATS_BLOCK))
            bw, bh = min(_STATS_BLOCK, w), min(_STATS_BLOCK, h)
            xs = np.unique(np.linspace(0, w - bw, n).round().astype(int))
            ys = np.unique(np.linspace(0, h - bh, n).round().astype(int))
            log.info("%s: no pyramid level near %d px: statistics from %d blocks of level %d",
                     self.path, STATS_SIDE, len(xs) * len(ys), level)
            parts = [self._read_level(level, x, y, x + bw, y + bh).reshape(len(self.bands), -1)
                     for y in ys for x in xs]
        return np.concatenate(parts, axis=1).astype(np.float64)

    def compute_stretch(self, percentiles: tuple[float, float] = (2.0, 98.0)) -> Stretch:
        """One stretch for the whole slide from a low pyramid level: percentiles 2 and 98 of the valid
        values, per channel for fluorescence channels (C), jointly for RGB samples (S)."""
        level = self._stats_level()
        values = self._stats_sample(level)
        valid = np.isfinite(values)
        nb = len(self.bands)
        if not valid.any():
            return Stretch(lo=(0.0,) * nb, hi=(1.0,) * nb)
        if self._ch_axis == "S" or nb == 1:
            lo, hi = np.percentile(values[valid], percentiles)
            los, his = [float(lo)] * nb, [float(hi)] * nb
        else:
            los, his = [], []
            for b in range(nb):
                v = values[b][valid[b]]
                lo, hi = np.percentile(v, percentiles) if v.size else (0.0, 1.0)
                los.append(float(lo))
                his.append(float(hi))
        his = [h if h > lo else lo + 1.0 for lo, h in zip(los, his)]
        log.info("stretch for %s (level %d): %s -> 0, %s -> 255", self.path, level, los, his)
        return Stretch(lo=tuple(los), hi=tuple(his))

    # -- reading --------------------------------------------------------------------------------------
    def read_window(self, window: Window, out_wh: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
        """RGB uint8 [3, h, w] and valid bool [h, w] for a source window resampled to `out_wh`."""
        w, h = int(out_wh[0]), int(out_wh[1])
        level = self.level_for(w / window.width, h / window.height)
        self.levels_read[level] = self.levels_read.get(level, 0) + 1
        fx, fy = self.factors[level]
        lw, lh = self._wh[level]
        lx0, ly0 = window.col_off / fx, window.row_off / fy
        lx1, ly1 = (window.col_off + window.width) / fx, (window.row_off + window.height) / fy
        # output pixel centres that fall inside the level (the rest is beyond the slide's edge)
        cx = lx0 + (np.arange(w) + 0.5) * (lx1 - lx0) / w
        cy = ly0 + (np.arange(h) + 0.5) * (ly1 - ly0) / h
        valid = ((cy >= 0) & (cy < lh))[:, None] & ((cx >= 0) & (cx < lw))[None, :]
        if not valid.any():
            return np.zeros((3, h, w), np.uint8), valid
        rx0, ry0 = round(lx0), round(ly0)
        exact = (abs(lx0 - rx0) < 1e-6 and abs(ly0 - ry0) < 1e-6 and abs(lx1 - lx0 - w) < 1e-6
                 and abs(ly1 - ly0 - h) < 1e-6 and rx0 >= 0 and ry0 >= 0 and rx0 + w <= lw and ry0 + h <= lh)
        if exact:
            data = self._read_level(level, rx0, ry0, rx0 + w, ry0 + h)
        else:
            data = self._resampled(level, (lx0, ly0, lx1, ly1), (w, h))
        if data.dtype.kind == "f":
            valid &= np.isfinite(data).all(axis=0)
        if self.stretch is not None:
            rgb = self.stretch.apply(data)
        elif data.dtype == np.uint8:
            rgb = data
        else:
            rgb = np.clip(np.nan_to_num(data, nan=0.0), 0, 255).round().astype(np.uint8)
        if rgb.shape[0] == 1:
            rgb = np.repeat(rgb, 3, axis=0)
        else:
            rgb = np.ascontiguousarray(rgb)
        rgb[:, ~valid] = 0
        return rgb, valid

    def _resampled(self, level: int, box: tuple[float, float, float, float], out_wh: tuple[int, int]) -> np.ndarray:
        """The level's values under a fractional box, resampled to out_wh (PIL: BOX shrinking, BILINEAR
        enlarging). uint8 stays uint8; other types come back as float32."""
        from PIL import Image

        lw, lh = self._wh[level]
        w, h = out_wh
        bx0, by0, bx1, by1 = box
        shrink = max((bx1 - bx0) / w, (by1 - by0) / h)
        pad = int(math.ceil(shrink)) + 2
        ix0, iy0 = max(0, int(math.floor(bx0)) - pad), max(0, int(math.floor(by0)) - pad)
        ix1, iy1 = min(lw, int(math.ceil(bx1)) + pad), min(lh, int(math.ceil(by1)) + pad)
        if ix1 <= ix0 or iy1 <= iy0:
            return np.zeros((len(self.bands), h, w), np.float32)
        raw = self._read_level(level, ix0, iy0, ix1, iy1)
        rel = [bx0 - ix0, by0 - iy0, bx1 - ix0, by1 - iy0]
        # the box may reach past the slide's edge: extend the read by its edge values (masked invalid later)
        pl, pt = max(0, math.ceil(-rel[0])), max(0, math.ceil(-rel[1]))
        pr, pb = max(0, math.ceil(rel[2] - raw.shape[2])), max(0, math.ceil(rel[3] - raw.shape[1]))
        if pl or pt or pr or pb:
            raw = np.pad(raw, ((0, 0), (pt, pb), (pl, pr)), mode="edge")
            rel = [rel[0] + pl, rel[1] + pt, rel[2] + pl, rel[3] + pt]
        kx, ky = w / (bx1 - bx0), h / (by1 - by0)
        if shrink > 1 + 1e-9:
            resample = Image.Resampling.BOX
        elif abs(kx - round(kx)) < 1e-6 and abs(ky - round(ky)) < 1e-6:
            resample = Image.Resampling.NEAREST  # integer zoom: each pixel a block, edges stay on pixel edges
        else:
            resample = Image.Resampling.BILINEAR
        keep_u8 = raw.dtype == np.uint8
        out = np.empty((raw.shape[0], h, w), np.uint8 if keep_u8 else np.float32)
        for i, plane in enumerate(raw):
            img = Image.fromarray(plane if keep_u8 else plane.astype(np.float32))
            out[i] = np.asarray(img.resize((w, h), resample=resample, box=tuple(rel)))
        return out

    def overview(self, out_wh: tuple[int, int]) -> np.ndarray:
        """The whole slide at `out_wh` from the level `level_for` picks (area averages), its own values
        (before the stretch: fluorescence keeps its dim tissue apart from the glass)."""
        w, h = int(out_wh[0]), int(out_wh[1])
        level = self.level_for(w / self.width, h / self.height)
        lw, lh = self._wh[level]
        return self._resampled(level, (0.0, 0.0, float(lw), float(lh)), (w, h)).astype(np.float32)

    def may_have_nodata(self) -> bool:
        return self.dtype.kind == "f"  # slides have no nodata mask; NaN-only tiles are skipped


