"""Scenes of a given size for the benchmarks, generated once and cached (merge pieces and the other
shared generators live in `sam3tiles.testing`).

The cache folder is `$SAM3TILES_BENCH_CACHE`, else benchmarks/.cache; the smoke runs point it at a
temporary folder.
"""

from __future__ import annotations

import os
from pathlib import Path

from sam3tiles.demo import write_scene
from sam3tiles.testing import grid_objects, grid_pieces  # noqa: F401 - benchmarks import both from here

CACHE = Path(__file__).resolve().parent / ".cache"


def cache_folder() -> Path:
    return Path(os.environ.get("SAM3TILES_BENCH_CACHE") or CACHE)


def cached_scene(width: int, height: int, cell: int = 500, seed: int = 0, folder: Path | None = None) -> Path:
    """A demo GeoTIFF of `width` x `height` with `grid_objects`, written once into the cache folder."""
    folder = Path(folder or cache_folder())
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"scene_{width}x{height}_c{cell}_s{seed}.tif"
    if not path.exists():
        tmp = path.with_suffix(".partial.tif")
        write_scene(tmp, width, height, seed=seed, objects=grid_objects(width, height, cell, seed))
        tmp.rename(path)
    return path
