"""GeoTIFFs, COGs and every other raster GDAL reads, window by window through rasterio."""

from __future__ import annotations

import errno
import logging
import os
import stat

import numpy as np
import rasterio
from rasterio.enums import Resampling
from rasterio.errors import RasterioIOError
from rasterio.windows import Window

from ..errors import BandError, RasterReadError
from ..wording import opt
from .base import MAX_PIXELS, STATS_SIDE, Source, Stretch, _first_line
from .tiffhead import tiff_head

log = logging.getLogger(__name__)

#: Errors of a status call that mean no such file (those pathlib's `exists` answers False to).
_NO_FILE = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP})


class RasterSource(Source):
    """An open raster ready to deliver 1008x1008 model inputs. Use as a context manager.

    `bands` are 1-based; None picks 1 band (grey) or the first 3 (RGB) and refuses other counts.
    Pickles by path, so Dask workers reopen it.
    """

    #: Probe the file for truncation on open (a mosaic's member, probed when its map was planned: not again)
    _probe_file = True

    def __init__(self, path, bands=None, stretch="auto", head=None):
        self._given_head = head  # its TIFF header as `open_source` parsed it (`tiffhead.TiffHead`), if it did
        super().__init__(path, bands=bands, stretch=stretch)

    def _reset(self) -> None:
        self._ds = None
        self._lut = None  # a paletted raster's colour table: index -> (r, g, b, a)
        self._all_valid: bool | None = None  # every chosen band all-valid (see read_window), once known

    def _open(self) -> None:
        if "://" not in self.path and not self.path.startswith("/vsi"):
            try:  # one status call (pathlib's exists, is_dir and stat took three, 0.04 ms a small file's open)
                st = os.stat(self.path)
            except OSError as e:
                if e.errno not in _NO_FILE:  # what pathlib's exists() lets through
                    raise
                raise RasterReadError(f"{self.path}: no such file: check the path") from None
            if stat.S_ISDIR(st.st_mode):
                raise RasterReadError(f"{self.path} is a directory, not a raster: give an image file")
            if st.st_size == 0:
                raise RasterReadError(f"{self.path} is empty (0 bytes): the file was not written completely")
        try:
            ds = self._open_dataset()
        except RasterioIOError as e:
            raise RasterReadError(f"{self.path} is not a raster GDAL can read ({_first_line(e)}): "
                                  "give a GeoTIFF, COG, TIFF, PNG or JPEG") from None
        if ds.width * ds.height > MAX_PIXELS or ds.width < 1 or ds.height < 1:
            ds.close()
            raise RasterReadError(f"{self.path}: header claims {ds.width}x{ds.height} pixels, which is not "
                                  "plausible: the file is corrupt")
        head = self._head()
        if head is not None and head.truncated:
            ds.close()
            raise RasterReadError(f"{self.path} is truncated: its pixel data ends at byte {head.end} but the file "
                                  f"has {head.size} bytes: the copy or download was interrupted; copy it again")
        if ds.driver == "GTiff" and self._probe_file and not (head and head.whole and head.shape == ds.shape[::-1]):
            try:  # random access blocks: the first and last pixel cost one each (none where the ranges prove it)
                for col, row in ((0, 0), (ds.width - 1, ds.height - 1)):
                    ds.read(1, window=Window(col, row, 1, 1))
            except RasterioIOError as e:
                ds.close()
                raise RasterReadError(f"{self.path}: cannot read its pixels ({_first_line(e)}): the file is truncated "
                                      f"or its header ({ds.width}x{ds.height} px) is corrupt; copy it again") from None
        self._ds = ds
        self.bands = self._resolve_bands(ds.count)
        self.dtype = np.dtype(ds.dtypes[self.bands[0] - 1])
        if self.bands == (1,) and ds.colorinterp[0] == rasterio.enums.ColorInterp.palette:
            self._lut = _palette_lut(ds, self.dtype)
            self.dtype = np.dtype(np.uint8)  # expanded to RGB: no stretch
        self.stretch = self._resolve_stretch()

    def _head(self):
        """The file's TIFF header facts (`tiffhead.tiff_head`), where it is probed on open: those `open_source`
        parsed already, else parsed here; None for a member (checked when its map was planned) or a non-TIFF."""
        given = self.__dict__.pop("_given_head", None)
        if not self._probe_file:
            return None
        return given if given is not None else tiff_head(self.path)

    def _open_dataset(self):
        return rasterio.open(self.path)  # NotGeoreferencedWarning: filtered per run (`sam3tiles.run.executing.quiet`)

    def _resolve_bands(self, count: int) -> tuple[int, ...]:
        if self._bands_arg:
            bad = [b for b in self._bands_arg if not 1 <= b <= count]
            if bad:
                raise BandError(f"{opt('bands', ','.join(map(str, self._bands_arg)))}: {self.path} has "
                                f"{count} band(s), so band {bad[0]} does not exist: pick bands between 1 and {count}")
            return self._bands_arg
        if count == 1 or count == 3:
            return tuple(range(1, count + 1))
        if count == 4 and self._ds.colorinterp[3] == rasterio.enums.ColorInterp.alpha:
            return (1, 2, 3)
        if count == 2 and self._ds.colorinterp[1] == rasterio.enums.ColorInterp.alpha:
            return (1,)
        raise BandError(f"{self.path} has {count} bands: choose 3 as R,G,B or 1 as grey with {opt('bands')}, "
                        f"e.g. {opt('bands', ','.join(map(str, range(min(count, 3), 0, -1))))}")

    def close(self) -> None:
        if self._ds is not None:
            self._ds.close()
            self._ds = None

    # -- properties --------------------------------------------------------------------------------
    @property
    def dataset(self):
        """The open rasterio dataset (inside `readers/` only: not part of the `Source` interface)."""
        return self._ds

    def _gdal_dataset(self):
        return self._ds

    @property
    def band_count(self) -> int:
        return self._ds.count

    def _overviews(self) -> list[int]:
        try:
            return list(self._ds.overviews(self.bands[0]))
        except Exception:  # noqa: BLE001 - no overview information: assume none
            return []

    @property
    def levels(self) -> list[tuple[int, int]]:
        return [(int(self.width / f), int(self.height / f)) for f in [1, *self._overviews()]]

    def read_cost(self, out_wh: tuple[int, int]) -> int:
        # GDAL reads from the coarsest overview at least as fine as the output along x
        f = max([x for x in self._overviews() if x <= self.width / max(out_wh[0], 1)], default=1)
        return int(self.width / f) * int(self.height / f)

    @property
    def gcps(self):
        try:
            return self._ds.gcps
        except Exception:  # noqa: BLE001 - drivers without GCP support
            return [], None

    @property
    def rpcs(self):
        return getattr(self._ds, "rpcs", None)

    @property
    def source_files(self) -> list[str]:
        from .identity import source_files

        return source_files(self._ds, self.path)

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
        if abs(window.width - w) < 1e-6 and abs(window.height - h) < 1e-6 or self._lut is not None:
            resampling = Resampling.nearest  # palette indices are labels: never averaged
        try:
            data = ds.read(list(self.bands), window=window, out_shape=(len(self.bands), h, w),
                           resampling=resampling, masked=False)
            if self._all_valid is None:
                self._all_valid = not self.may_have_nodata()
            # every band all-valid (no nodata, mask or alpha; not float): GDAL's mask is 255 everywhere
            mask = np.ones((h, w), bool) if self._all_valid and self._lut is None else \
                ds.dataset_mask(window=window, out_shape=(h, w), resampling=Resampling.nearest) > 0
        except RasterioIOError as e:
            raise RasterReadError(f"{self.path}: cannot read window {window} ({_first_line(e)}): "
                                  "the file is damaged or truncated") from None
        if data.dtype.kind == "f":
            mask &= np.isfinite(data).all(axis=0)
        if self._lut is not None:
            rgba = self._lut[np.clip(data[0], 0, len(self._lut) - 1)]
            mask &= rgba[..., 3] > 0
            data = np.ascontiguousarray(rgba[..., :3].transpose(2, 0, 1))
        rgb = self.stretch.apply(data) if self.stretch is not None else data.astype(np.uint8, copy=False)
        if rgb.shape[0] == 1:
            rgb = np.repeat(rgb, 3, axis=0)
        if not mask.all():
            rgb[:, ~mask] = 0
        return rgb, mask

    def may_have_nodata(self) -> bool:
        flags = self._ds.mask_flag_enums  # every band's, asked of GDAL at each use: once here
        all_valid = all(flags[b - 1] == [rasterio.enums.MaskFlags.all_valid] for b in self.bands)
        return not all_valid or self.dtype.kind == "f"


def _palette_lut(ds, dtype: np.dtype) -> np.ndarray:
    """A paletted band's colour table as an [n, 4] uint8 array (index -> r, g, b, alpha); indices the table
    does not name are black and transparent (nodata)."""
    try:
        cmap = ds.colormap(1)
    except ValueError:  # a palette interpretation without a table: use the indices as grey
        cmap = {}
    n = 256 if dtype.itemsize == 1 else max(256, max(cmap, default=0) + 1)
    lut = np.zeros((n, 4), np.uint8)
    if not cmap:
        lut[:, :3] = np.arange(n)[:, None].clip(0, 255)
        lut[:, 3] = 255
    for i, rgba in cmap.items():
        if 0 <= i < n:
            lut[i] = rgba[:4] if len(rgba) >= 4 else (*rgba[:3], 255)
    return lut
