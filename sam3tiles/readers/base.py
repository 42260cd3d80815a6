"""What every reader shares: the stretch to uint8, band parsing, the Source base class, heap trimming.

Readers are the only modules (with `writers`) that touch file names. The whole image is never in memory:
a tile is read as a (possibly resampled) window, and the stretch is computed once per image from a
decimated read (GDAL uses overviews when the file has them).
"""

from __future__ import annotations

import ctypes
import logging
import os
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..errors import BandError, RasterReadError
from ..grid import Tile
from ..model.runtime import MODEL_SIZE, TileImage

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

    #: physical pixel size (x, y) in micrometres, for pixel-space images that state it (slides)
    pixel_size_um: tuple[float, float] | None = None

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
                              ds=getattr(self, "_ds", None), stamps=stamps)

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

