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


#: Added where a run opens many files of one folder (the headers of many inputs, a mosaic's members): GDAL
#: lists a file's folder on each open to find its side files (.ovr, .msk, .aux.xml, world files), which cost
#: 0.35 of an open's 1.1 ms CPU in a folder of 1,024 files, and grows with the folder. Not listed, GDAL looks
#: each side file up by name (the extension in lower and upper case).
MANY_FILES: Mapping[str, object] = {"GDAL_DISABLE_READDIR_ON_OPEN": "TRUE"}
#: Instead, where the planner saw in the folder's listing that the files it opens have no file beside them
#: that GDAL would look for (`georef.Georefs.without_siblings`): GDAL takes the folder as empty and looks for
#: none (some 40 status calls an open: a small GeoTIFF's open without its georeferencing 0.18 -> 0.12 ms CPU).
NO_SIBLINGS: Mapping[str, object] = {"GDAL_DISABLE_READDIR_ON_OPEN": "EMPTY_DIR"}


def gdal_options(environ: Mapping[str, str] = os.environ, extra: Mapping[str, object] | None = None) -> dict:
    """The options of `GDAL_OPTIONS` (and `extra`) that `environ` (the user's environment) does not set."""
    return {k: v for k, v in {**GDAL_OPTIONS, **(extra or {})}.items() if k not in environ}


@contextmanager
def gdal_env(many_files: bool = False, no_siblings: bool = False) -> Iterator[None]:
    """GDAL configured for reading tile by tile, for the duration of the block (also a decorator);
    GDAL's previous configuration is back when it ends. `many_files`: opens in a folder of many files
    (`MANY_FILES`); `no_siblings`: of files known to have no side files (`NO_SIBLINGS`)."""
    extra = NO_SIBLINGS if no_siblings else MANY_FILES if many_files else None
    with rasterio.Env(**gdal_options(extra=extra)):
        yield


def open_local(path: str, **options):
    """`rasterio.open(path, **options)` of a local file where the run's GDAL configuration is entered
    (`gdal_env`): the dataset made directly (`rasterio.io.DatasetReader`), without the configuration that
    rasterio.open enters and leaves again around each open for a remote file's credentials (issue 48: a
    third of a small GeoTIFF's open without its georeferencing, 0.18 -> 0.12 ms CPU). Else rasterio.open."""
    from rasterio.env import hasenv

    if hasenv() and "://" not in path and not path.startswith("/vsi"):
        from rasterio.io import DatasetReader

        return DatasetReader(path, **options)
    return rasterio.open(path, **options)


def gdal_cache_bytes(environ: Mapping[str, str] = os.environ) -> int:
    """The most GDAL's block cache of a run holds (bytes): `GDAL_OPTIONS`' unless the environment sets
    GDAL_CACHEMAX (GDAL's forms: MB below 100000, else bytes; a unit, MB or GB; or a % of the memory)."""
    value = environ.get("GDAL_CACHEMAX")
    if value is None:
        return int(GDAL_OPTIONS["GDAL_CACHEMAX"])
    v = value.strip().upper()
    try:
        if v.endswith("%"):
            return int(float(v[:-1]) / 100 * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
        for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
            if v.endswith(unit):
                return int(float(v[:-2]) * scale)
        n = int(v)
        return n << 20 if n < 100000 else n
    except (ValueError, OSError):
        return 5 * (os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")) // 100  # GDAL's default: 5%
