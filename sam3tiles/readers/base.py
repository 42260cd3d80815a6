"""What every reader shares: the stretch to uint8, band parsing, the Source base class, heap trimming.

Readers are the only modules (with `writers`) that touch file names. The whole image is never in memory:
a tile is read as a (possibly resampled) window, and the stretch is computed once per image from a
decimated read (GDAL uses overviews when the file has them).
"""

from __future__ import annotations

import ctypes
import logging
import os
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..errors import BandError, RasterReadError
from ..model.runtime import MODEL_SIZE, TileImage
from ..tiling.grid import Tile
from ..wording import opt

log = logging.getLogger(__name__)


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
            raise BandError(f"{opt('bands', repr(text))} is not a list of band numbers: "
                            f"use e.g. {opt('bands', '4,3,2')}") from None
    else:
        try:
            bands = tuple(int(b) for b in text)  # a list from a job file or the API
        except (TypeError, ValueError):  # not a list (true, 4), or not of numbers
            raise BandError(f"{opt('bands', repr(text))} is not a list of band numbers: use e.g. "
                            f"{opt('bands', '4,3,2')}") from None
    if len(bands) not in (1, 3):
        raise BandError(f"{opt('bands')} takes 1 band (grey) or 3 bands (R,G,B), got {len(bands)}: "
                        f"e.g. {opt('bands', '4,3,2')}")
    return bands


class Source:
    """A reader: one open image, read window by window. The interface below is all that code outside
    `readers/` uses (tests/test_structure.py checks it); a new reader (Zarr, xarray, a STAC mosaic)
    provides these members and nothing else is asked of it.

    * `path`; `width`, `height`: the full-resolution size in source pixels; `crs` (None: pixel space)
      and `transform` (source pixel -> CRS; the identity in pixel space); `pixel_size_um` (pixel-space
      images that state it); `gcps`, `rpcs`: georeferencing by ground control points or a sensor model
      only (the run refuses those: it does not warp).
    * `kind`: "raster" (read by GDAL) or "slide" (a pyramid read by tifffile); `bands` (1-based, as
      read), `band_count` (bands or channels in the file), `dtype` (the file's), `stretch` (to uint8).
    * `levels`: (width, height) of every resolution a read can decode from, full resolution first (a
      slide's pyramid levels, a raster's overviews); `read_cost(out_wh)`: pixels decoded to read the
      whole image at `out_wh` (the level or overview such a read uses).
    * `identity`, `identity_for(verify)`, `source_files`: what the pixels come from (checkpoint keys).
    * `read_window`, `read_tile`, `tile_has_data`, `may_have_nodata()`, `compute_stretch`; `overview`
      (the whole image small, its own values: a slide's tissue mask); `close`, and the context manager.
      Pickles by path: Dask workers reopen it.

    Subclasses implement `_open`, `_reset` (forget open handles), `close`, `compute_stretch`,
    `read_window`, `may_have_nodata`, `read_cost` and `levels`, and set `bands`, `dtype`, `width`,
    `height`, `crs`, `transform`, `band_count`.
    """

    kind: str = "raster"
    path: str
    width: int  # source pixels
    height: int
    crs: object  # rasterio CRS, None in pixel space
    transform: object  # Affine: source pixel (col, row) -> CRS
    bands: tuple[int, ...]
    dtype: np.dtype
    stretch: Stretch | None
    #: physical pixel size (x, y) in micrometres, for pixel-space images that state it (slides)
    pixel_size_um: tuple[float, float] | None = None
    #: (ground control points, their CRS): a file placed by GCPs only; none by default
    gcps: tuple[list, object] = ((), None)
    #: the file's RPCs (a sensor model), or None
    rpcs: object = None

    @property
    def band_count(self) -> int:
        """Bands (channels) in the file, whatever `bands` reads."""
        raise NotImplementedError

    @property
    def levels(self) -> list[tuple[int, int]]:
        """(width, height) of each resolution a read can decode from, full resolution first."""
        raise NotImplementedError

    def read_cost(self, out_wh: tuple[int, int]) -> int:
        """Pixels decoded to read the whole image at `out_wh` (width, height)."""
        raise NotImplementedError

    def read_window(self, window, out_wh: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
        """The source-pixel `window` (rasterio Window) resampled to `out_wh` (width, height): (RGB uint8
        [3, h, w] after the stretch, validity [h, w] bool)."""
        raise NotImplementedError

    def compute_stretch(self, percentiles: tuple[float, float] = (2.0, 98.0)) -> Stretch:
        """One stretch for the whole image from a decimated read (see the readers)."""
        raise NotImplementedError

    def overview(self, out_wh: tuple[int, int]) -> np.ndarray:
        """The whole image resampled to `out_wh` (width, height) as float32 [bands, h, w] of its own values
        (before the stretch where the reader can: a slide's), NaN where there is no data. Read from the
        level `read_cost(out_wh)` counts; callers keep that small. By default, `read_window`'s (stretched)
        values."""
        from rasterio.windows import Window

        rgb, valid = self.read_window(Window(0, 0, self.width, self.height), out_wh)
        out = rgb[: len(self.bands)].astype(np.float32)
        out[:, ~valid] = np.nan
        return out

    def close(self) -> None:
        """Release the open file handles (the reader reopens by path when unpickled)."""
        raise NotImplementedError

    def may_have_nodata(self) -> bool:
        """Whether any pixel can be nodata (masked, alpha 0 or NaN): False lets `tile_has_data` skip a read."""
        raise NotImplementedError

    def _gdal_dataset(self):
        """The open rasterio dataset (content hashes read it block by block), None for other readers."""
        return None

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
        """What the pixels come from (every file's path, size and time; an archive member's CRC; a URL's
        ETag): changes when any of them does (checkpoint key). See `readers.identity`."""
        return self.identity_for(verify=False)

    def identity_for(self, verify: bool = False, stamps: list | None = None) -> str:
        """`identity`, or with `verify` a hash of the content itself (reads the whole input). `stamps`: the
        source files' `file_stamp`s when the caller has them already (a URL's stamp is a request)."""
        from .identity import input_identity

        return input_identity(self.path, self.source_files, self.bands, verify=verify,
                              ds=self._gdal_dataset(), stamps=stamps)

    @property
    def source_files(self) -> list[str]:
        """Every file the pixels come from (a VRT's sources, world files, ...); the path by default."""
        return [self.path]

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
        if (vw, vh) == (MODEL_SIZE, MODEL_SIZE):  # a whole tile of content: no padding to add (1.5 ms)
            return TileImage(rgb=np.ascontiguousarray(rgb_v, dtype=np.uint8), valid=np.ascontiguousarray(valid_v))
        rgb = np.zeros((3, MODEL_SIZE, MODEL_SIZE), np.uint8)
        valid = np.zeros((MODEL_SIZE, MODEL_SIZE), bool)
        rgb[:, :vh, :vw] = rgb_v
        valid[:vh, :vw] = valid_v
        return TileImage(rgb=rgb, valid=valid)

    def tile_has_data(self, tile: Tile) -> bool:
        """False when every pixel of the tile is nodata (masked, alpha 0, or NaN)."""
        if not self.may_have_nodata():
            return True
        try:
            return bool(self.read_window(tile.src_window, tile.valid_wh)[1].any())
        except RasterReadError:
            return True  # the tile's own read reports the damage


_LIBC = None
_TRIM = {"last": 0.0, "cost": 0.0, "rss": 0}
#: A trim may take this share of a process's time at most (see `trim_heap`).
TRIM_SHARE = 0.05
#: Resident bytes a process may grow by since its last trim before the next one (see `trim_heap`).
TRIM_GROWTH = 96 * 2**20


def resident_bytes() -> int | None:
    """The process's resident size now (Linux: /proc/self/statm), None where it cannot be read."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def trim_heap_due(now: float, rss: int | None, last: dict) -> bool:
    """Whether a trim is due at `now` with the resident size `rss` (None: unknown), after the last trim
    `last` ({"last": its end, "cost": its seconds, "rss": the resident size after it})."""
    if now - last["last"] < last["cost"] / TRIM_SHARE:
        return False
    return rss is None or rss - last["rss"] >= TRIM_GROWTH


def trim_heap() -> None:
    """Hand freed heap pages back to the OS (glibc's malloc_trim; a no-op elsewhere).

    Every tile allocates and frees megabytes of short-lived arrays between the small, long-lived polygons
    of earlier tiles; glibc keeps those freed pages, so without a trim the resident size grows by about
    2.5 KB per object found instead of the 0.6 KB the polygons need (measured on the reference backend).
    A trim has two costs: it walks the whole heap (10-20 ms on a worker holding thousands of polygons),
    and every page it hands back is faulted in again, zeroed, when the next tile's arrays take it (3-4 ms
    of a 9 ms tile read when it ran before every read). So it runs only when the resident size has grown
    by `TRIM_GROWTH` since the last trim (the next tiles' arrays reuse the pages in between, so the
    resident size stays within that of the live data), and never more than `TRIM_SHARE` of the time.
    """
    global _LIBC
    if _LIBC is None:
        try:
            _LIBC = ctypes.CDLL("libc.so.6")
            _LIBC.malloc_trim.argtypes = [ctypes.c_size_t]
        except (OSError, AttributeError):
            _LIBC = False
    if not _LIBC:
        return
    now = time.perf_counter()
    if not trim_heap_due(now, resident_bytes(), _TRIM):
        return
    _LIBC.malloc_trim(0)
    _TRIM["last"] = time.perf_counter()
    _TRIM["cost"] = _TRIM["last"] - now
    after = resident_bytes()
    _TRIM["rss"] = after if after is not None else 0


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    if "See previous exception" in text:  # rasterio: GDAL's own message is the chained one
        inner = e.__cause__ or e.__context__
        if inner is not None and str(inner).strip():
            text = str(inner).strip()
    return text.splitlines()[0] if text else type(e).__name__

