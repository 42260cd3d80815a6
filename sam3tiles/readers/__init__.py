"""Readers: one interface (`base.Source`) over rasters (rasterio) and whole-slide images (tifffile + zarr).

`open_source` picks the reader for a path. Everything after the readers works on arrays and tiles.
"""

from __future__ import annotations

import os
from typing import Sequence

from .base import MAX_PIXELS, STATS_SIDE, Source, Stretch, parse_bands, trim_heap
from .env import gdal_env
from .mosaic import MosaicPath, MosaicSource
from .raster import RasterSource
from .slide import SlideSource, is_slide
from .tiffhead import tiff_head


def open_source(path: str | os.PathLike, bands: Sequence[int] | None = None,
                stretch: Stretch | None | str = "auto", identity: str = "", georefs=None) -> Source:
    """Open any supported image: a mosaic of many files (`mosaic.MosaicPath`, planned by `run.planning.maps`) through
    `MosaicSource`, whole-slide pyramids (OME-TIFF, pyramidal TIFF) through `SlideSource`, every other raster
    through rasterio (`RasterSource`). All give the same reader interface. `identity`: the input's checkpoint
    identity as planned, when known: a mosaic's readers of one identity share their open members per thread.
    `georefs`: the `georef.Georefs` of a planning that reads many headers (a GeoTIFF of a georeference it
    knows opens without GDAL's georeferencing)."""
    if isinstance(path, MosaicPath):
        return MosaicSource(path, bands=bands, stretch=stretch, identity=identity)
    head = tiff_head(str(path))  # one parse of a TIFF's header: slide or not, and the raster's truncation check
    if head is not None and head.slide:
        return SlideSource(path, bands=bands, stretch=stretch)
    if georefs is not None:
        return georefs.open(str(path), bands, stretch, head)
    return RasterSource(path, bands=bands, stretch=stretch, head=head)


__all__ = ["MAX_PIXELS", "STATS_SIDE", "MosaicPath", "MosaicSource", "RasterSource", "SlideSource", "Source", "Stretch",
           "gdal_env", "is_slide", "open_source", "parse_bands", "trim_heap"]
