"""Reading rasters window by window: band selection, one global stretch to uint8, validity masks.

The only module (with `output`) that touches file names. The whole image is never in memory: a tile is
read as a (possibly resampled) window, and the stretch is computed once per image from a decimated read
(GDAL uses overviews when the file has them).
"""

from __future__ import annotations

import hashlib
import logging
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import rasterio
from rasterio.enums import Resampling
from rasterio.errors import NotGeoreferencedWarning, RasterioIOError
from rasterio.windows import Window

from .errors import BandError, RasterReadError
from .grid import Tile
from .runtime import MODEL_SIZE, TileImage

log = logging.getLogger(__name__)

# GDAL's block cache defaults to 5% of the machine's memory per process (1.2 GB on a 24 GB machine), and a
# tile-by-tile reader that never revisits a block gains nothing from it: cap it unless the user chose.
# (Measured: a 20000x20000 GeoTIFF peaked at 1.6 GB RSS with the default, 0.64 GB with 256 MB.)
os.environ.setdefault("GDAL_CACHEMAX", "256")

#: Longest side of the decimated read used for the global stretch statistics.
STATS_SIDE = 1024
#: Largest raster accepted (pixels); headers claiming more are treated as corrupt.
MAX_PIXELS = 10**12


@dataclass(frozen=True)
class Stretch:
    """A linear map of raw values to uint8, the same for every tile of one image: lo -> 0, hi -> 255."""

    lo: tuple[float, ...]
    hi: tuple[float, ...]

    def apply(self, data: np.ndarray) -> np.ndarray:
        """`data` [bands, h, w] of any dtype -> uint8; NaN -> 0."""
        lo = np.asarray(self.lo, np.float32)[:, None, None]
        hi = np.asarray(self.hi, np.float32)[:, None, None]
        scaled = (data.astype(np.float32) - lo) * (255.0 / np.maximum(hi - lo, 1e-12))
        return np.nan_to_num(np.clip(scaled, 0, 255), nan=0.0).round().astype(np.uint8)


def parse_bands(text: str | Sequence[int] | None) -> tuple[int, ...] | None:
    """'4,3,2' -> (4, 3, 2); 1-based, as GDAL numbers bands."""
    if text is None or text == "":
        return None
    if isinstance(text, str):
        try:
            bands = tuple(int(b) for b in text.replace(" ", "").split(","))
        except ValueError:
            raise BandError(f"--bands {text!r} is not a list of band numbers: use e.g. --bands 4,3,2") from None
    else:
        bands = tuple(int(b) for b in text)
    if len(bands) not in (1, 3):
        raise BandError(f"--bands takes 1 band (grey) or 3 bands (R,G,B), got {len(bands)}: e.g. --bands 4,3,2")
    return bands


class Source:
    """What every reader shares: construction, pickling by path (Dask workers reopen it), the context
    manager, the checkpoint identity, the stretch choice and the padded 1008x1008 model input.

    Subclasses implement `_open`, `_reset` (forget open handles), `close`, `compute_stretch`,
    `read_window` and `_may_have_nodata`, and set `bands`, `dtype`, `width`, `height`, `crs`, `transform`.
    """

    def __init__(self, path: str | os.PathLike, bands: Sequence[int] | None = None,
                 stretch: Stretch | None | str = "auto"):
        self.path = str(path)
        self._bands_arg = tuple(bands) if bands else None
        self._stretch_arg = stretch
        self._reset()
        self._open()

    def __getstate__(self):
        return {"path": self.path, "_bands_arg": self._bands_arg, "_stretch_arg": self.stretch}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._reset()
        self._open()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def identity(self) -> str:
        """Path, size and modification time: changes when the file does (checkpoint key)."""
        try:
            st = os.stat(self.path)
            stamp = f"{st.st_size}:{st.st_mtime_ns}"
        except OSError:
            stamp = "remote"
        h = hashlib.sha256(f"{os.path.abspath(self.path)}|{stamp}|{self.bands}".encode()).hexdigest()
        return h[:16]

    def _resolve_stretch(self) -> Stretch | None:
        arg = self._stretch_arg
        if isinstance(arg, Stretch) or arg is None:
            return arg
        if self.dtype == np.uint8:
            return None
        return self.compute_stretch()

    def read_tile(self, tile: Tile) -> TileImage:
        """The tile's 1008x1008 model input: content at the top-left, zero padding, validity mask."""
        trim_heap()
        vw, vh = tile.valid_wh
        rgb_v, valid_v = self.read_window(tile.src_window, (vw, vh))
        rgb = np.zeros((3, MODEL_SIZE, MODEL_SIZE), np.uint8)
        valid = np.zeros((MODEL_SIZE, MODEL_SIZE), bool)
        rgb[:, :vh, :vw] = rgb_v
        valid[:vh, :vw] = valid_v
        return TileImage(rgb=rgb, valid=valid)

    def tile_has_data(self, tile: Tile) -> bool:
        """False when every pixel of the tile is nodata (masked, alpha 0, or NaN)."""
        if not self._may_have_nodata():
            return True
        try:
            return bool(self.read_window(tile.src_window, tile.valid_wh)[1].any())
        except RasterReadError:
            return True  # the tile's own read reports the damage


class RasterSource(Source):
    """An open raster ready to deliver 1008x1008 model inputs. Use as a context manager.

    `bands` are 1-based; None picks 1 band (grey) or the first 3 (RGB) and refuses other counts.
    Pickles by path, so Dask workers reopen it.
    """

    def _reset(self) -> None:
        self._ds = None

    def _open(self) -> None:
        p = Path(self.path)
        if "://" not in self.path and not self.path.startswith("/vsi"):
            if not p.exists():
                raise RasterReadError(f"{self.path}: no such file: check the path")
            if p.is_dir():
                raise RasterReadError(f"{self.path} is a directory, not a raster: give an image file")
            if p.stat().st_size == 0:
                raise RasterReadError(f"{self.path} is empty (0 bytes): the file was not written completely")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", NotGeoreferencedWarning)
                ds = rasterio.open(self.path)
        except RasterioIOError as e:
            raise RasterReadError(f"{self.path} is not a raster GDAL can read ({_first_line(e)}): "
                                  "give a GeoTIFF, COG, TIFF, PNG or JPEG") from None
        if ds.width * ds.height > MAX_PIXELS or ds.width < 1 or ds.height < 1:
            ds.close()
            raise RasterReadError(f"{self.path}: header claims {ds.width}x{ds.height} pixels, which is not "
                                  "plausible: the file is corrupt")
        short = _tiff_truncated(self.path)
        if short:
            ds.close()
            raise RasterReadError(f"{self.path} is truncated: its pixel data ends at byte {short[0]} but the file "
                                  f"has {short[1]} bytes: the copy or download was interrupted; copy it again")
        if ds.driver == "GTiff":  # blocks are random access: the first and last pixel cost a block each
            try:
                for col, row in ((0, 0), (ds.width - 1, ds.height - 1)):
                    ds.read(1, window=Window(col, row, 1, 1))
            except RasterioIOError as e:
                ds.close()
                raise RasterReadError(f"{self.path}: cannot read its pixels ({_first_line(e)}): the file is truncated "
                                      f"or its header ({ds.width}x{ds.height} px) is corrupt; copy it again") from None
        self._ds = ds
        self.bands = self._resolve_bands(ds.count)
        self.dtype = np.dtype(ds.dtypes[self.bands[0] - 1])
        self.stretch = self._resolve_stretch()

    def _resolve_bands(self, count: int) -> tuple[int, ...]:
        if self._bands_arg:
            bad = [b for b in self._bands_arg if not 1 <= b <= count]
            if bad:
                raise BandError(f"--bands {','.join(map(str, self._bands_arg))}: {self.path} has {count} band(s), "
                                f"so band {bad[0]} does not exist: pick bands between 1 and {count}")
            return self._bands_arg
        if count == 1 or count == 3:
            return tuple(range(1, count + 1))
        if count == 4 and self._ds.colorinterp[3] == rasterio.enums.ColorInterp.alpha:
            return (1, 2, 3)
        if count == 2 and self._ds.colorinterp[1] == rasterio.enums.ColorInterp.alpha:
            return (1,)
        raise BandError(f"{self.path} has {count} bands: choose 3 as R,G,B or 1 as grey with --bands, "
                        f"e.g. --bands {','.join(map(str, range(min(count, 3), 0, -1)))}")

    def close(self) -> None:
        if self._ds is not None:
            self._ds.close()
            self._ds = None

    # -- properties --------------------------------------------------------------------------------
    @property
    def dataset(self):
        return self._ds

    @property
    def width(self) -> int:
        return self._ds.width

    @property
    def height(self) -> int:
        return self._ds.height

    @property
    def crs(self):
        return self._ds.crs

    @property
    def transform(self):
        return self._ds.transform

    # -- statistics ----------------------------------------------------------------------------------
    def compute_stretch(self, percentiles: tuple[float, float] = (2.0, 98.0)) -> Stretch:
        """One stretch for the whole image: the 2nd-98th percentile of the valid pixels of all chosen bands,
        from a decimated read (overviews when present), so results do not depend on where tiles fall."""
        ds = self._ds
        f = max(ds.width, ds.height) / STATS_SIDE
        out_w, out_h = max(1, round(ds.width / max(f, 1))), max(1, round(ds.height / max(f, 1)))
        try:
            data = ds.read(list(self.bands), out_shape=(len(self.bands), out_h, out_w),
                           resampling=Resampling.nearest, masked=True)
        except RasterioIOError as e:
            raise RasterReadError(f"{self.path}: cannot read pixels ({_first_line(e)}): the file is damaged") from None
        values = data.astype(np.float64).filled(np.nan)
        valid = np.isfinite(values)
        if not valid.any():
            return Stretch(lo=(0.0,) * len(self.bands), hi=(1.0,) * len(self.bands))
        lo, hi = np.percentile(values[valid], percentiles)
        if hi <= lo:
            hi = lo + 1.0
        log.info("stretch for %s: %s -> 0, %s -> 255 (percentiles %s of %d valid samples)",
                 self.path, lo, hi, percentiles, int(valid.sum()))
        return Stretch(lo=(float(lo),) * len(self.bands), hi=(float(hi),) * len(self.bands))

    # -- reading --------------------------------------------------------------------------------------
    def read_window(self, window: Window, out_wh: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
        """RGB uint8 [3, h, w] and valid bool [h, w] for a source window resampled to `out_wh`."""
        ds = self._ds
        w, h = out_wh
        up = out_wh[0] > window.width + 1e-6
        resampling = Resampling.bilinear if up else Resampling.average
        if abs(window.width - w) < 1e-6 and abs(window.height - h) < 1e-6:
            resampling = Resampling.nearest
        try:
            data = ds.read(list(self.bands), window=window, out_shape=(len(self.bands), h, w),
                           resampling=resampling, masked=False)
            mask = ds.dataset_mask(window=window, out_shape=(h, w), resampling=Resampling.nearest) > 0
        except RasterioIOError as e:
            raise RasterReadError(f"{self.path}: cannot read window {window} ({_first_line(e)}): "
                                  "the file is damaged or truncated") from None
        if data.dtype.kind == "f":
            mask &= np.isfinite(data).all(axis=0)
        rgb = self.stretch.apply(data) if self.stretch is not None else data.astype(np.uint8, copy=False)
        if rgb.shape[0] == 1:
            rgb = np.repeat(rgb, 3, axis=0)
        rgb[:, ~mask] = 0
        return rgb, mask

    def _may_have_nodata(self) -> bool:
        ds = self._ds
        all_valid = all(ds.mask_flag_enums[b - 1] == [rasterio.enums.MaskFlags.all_valid] for b in self.bands)
        return not all_valid or self.dtype.kind == "f"


def _tiff_truncated(path: str) -> tuple[int, int] | None:
    """(end of the pixel data, file size) when a local TIFF's first image ends past the end of the file,
    else None. Reads the header only; a TIFF tifffile cannot parse is left to GDAL."""
    if "://" in path or path.startswith("/vsi"):
        return None
    try:
        with open(path, "rb") as f:
            if f.read(4) not in (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+"):
                return None
        import tifffile

        size = os.path.getsize(path)
        tlog = logging.getLogger("tifffile")
        level = tlog.level
        tlog.setLevel(logging.CRITICAL)  # a damaged header is reported below, not logged
        try:
            with tifffile.TiffFile(path) as tf:
                page = tf.pages.first if hasattr(tf.pages, "first") else tf.pages[0]
                ends = [o + c for o, c in zip(page.dataoffsets, page.databytecounts) if c]
        finally:
            tlog.setLevel(level)
    except Exception:  # noqa: BLE001 - a header tifffile cannot read: GDAL's open decides
        return None
    end = max(ends, default=0)
    return (end, size) if end > size else None


_LIBC = None


def trim_heap() -> None:
    """Hand freed heap pages back to the OS (glibc's malloc_trim; a no-op elsewhere), about 3 ms a tile.

    Every tile allocates and frees megabytes of short-lived arrays between the small, long-lived polygons
    of earlier tiles; glibc keeps those freed pages, so without a trim the resident size grows by about
    2.5 KB per object found instead of the 0.6 KB the polygons need (measured on the reference backend).
    """
    global _LIBC
    if _LIBC is None:
        try:
            import ctypes

            _LIBC = ctypes.CDLL("libc.so.6")
            _LIBC.malloc_trim.argtypes = [ctypes.c_size_t]
        except (OSError, AttributeError):
            _LIBC = False
    if _LIBC:
        _LIBC.malloc_trim(0)


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    if "See previous exception" in text:  # rasterio: GDAL's own message is the chained one
        inner = e.__cause__ or e.__context__
        if inner is not None and str(inner).strip():
            text = str(inner).strip()
    return text.splitlines()[0] if text else type(e).__name__


def open_source(path: str | os.PathLike, bands: Sequence[int] | None = None,
                stretch: Stretch | None | str = "auto"):
    """Open any supported image: whole-slide pyramids (OME-TIFF, pyramidal TIFF) through `slide`, every
    other raster through rasterio. Both give the same reader interface as `RasterSource`."""
    from . import slide

    if slide.is_slide(str(path)):
        return slide.SlideSource(path, bands=bands, stretch=stretch)
    return RasterSource(path, bands=bands, stretch=stretch)
