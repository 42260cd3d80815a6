"""GDAL's configuration for a run: a context entered by the run (`rasterio.Env`), never set at import.

`gdal_env()` is entered around a run's pre-flight reads (`plan.plan_input`, `tilelayer.tile_plan`), its
execution (`pipeline.execute`: the in-process workers read in it) and every tile read on a worker
(`tasks.read_task`: workers of a distributed cluster are other processes). A program that only imports
sam3tiles keeps GDAL as it was; a setting the user made in the environment wins over these.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator, Mapping

import rasterio

#: GDAL configuration options of a run. GDAL_CACHEMAX (bytes, as rasterio takes it): GDAL's block cache
#: defaults to 5% of the machine's memory per process (1.2 GB on a 24 GB machine), and a tile-by-tile
#: reader that never revisits a block gains nothing from it. (Measured: a 20000x20000 GeoTIFF peaked at
#: 1.6 GB RSS with the default, 0.64 GB with 256 MB.)
GDAL_OPTIONS: Mapping[str, object] = {"GDAL_CACHEMAX": 256 * 2**20}


def gdal_options(environ: Mapping[str, str] = os.environ) -> dict:
    """The options of `GDAL_OPTIONS` that `environ` (the user's environment) does not set."""
    return {k: v for k, v in GDAL_OPTIONS.items() if k not in environ}


@contextmanager
def gdal_env() -> Iterator[None]:
    """GDAL configured for reading tile by tile, for the duration of the block (also a decorator);
    GDAL's previous configuration is back when it ends."""
    with rasterio.Env(**gdal_options()):
        yield
