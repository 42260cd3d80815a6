"""Peak RSS and time of writing a label pyramid (`--labels`) at two image sizes: memory must not follow the size.

    python -m benchmarks.bench_labels                          # 8000 and 24000 px, pyramidal OME-TIFF
    python -m benchmarks.bench_labels --format cog --format ome-zarr --size 8000 --size 24000

Each (format, size) runs in a fresh process that writes the label image of an object field (one disc
per 48 x 48 px cell, about 250,000 objects at 24000 px) through `writers.labels.write_labels` and reports
its own peak RSS (`ru_maxrss`), the RSS before the write and the wall time. `--source spool` (default)
puts the objects in a real `ObjectSpool` first (SQLite + R-tree, filled a row of cells at a time, as a
run's merge blocks fill it) and burns from its `query`, as a run does; `--source field` makes them up
per window (the writer alone). Measured: level 0 burnt block by block, each reduced level read out of
the level above, the OME-TIFF copied tile by tile, the GeoTIFF's overviews and COG copy by GDAL under a
fixed cache.
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
import shapely

from .common import emit, run_child, smoke

CELL = 48
EXT = {"ome-tiff": ".ome.tif", "cog": ".tif", "ome-zarr": ".ome.zarr"}


class Field:
    """Discs on a grid (one per CELL x CELL px), ids in row order, served by `query` like the spool."""

    def __init__(self, width: int, height: int, cell: int = CELL):
        self.cell, self.cols, self.rows = cell, -(-width // cell), -(-height // cell)

    def query(self, minx, miny, maxx, maxy):
        c = self.cell
        i0, i1 = max(0, int(miny // c)), min(self.rows, int(maxy // c) + 1)
        j0, j1 = max(0, int(minx // c)), min(self.cols, int(maxx // c) + 1)
        ii, jj = np.mgrid[i0:i1, j0:j1]
        ids = (ii * self.cols + jj + 1).ravel().astype(np.int64)
        jitter = ((ids * 2654435761) % 997) / 997.0 - 0.5  # stable per object
        pts = shapely.points((jj.ravel() + 0.5 + 0.2 * jitter) * c, (ii.ravel() + 0.5) * c)
        return np.asarray(shapely.buffer(pts, c * (0.3 + 0.1 * jitter), quad_segs=6), dtype=object), ids


def spool_of(field: Field, size: int):
    """An ObjectSpool holding the field's objects (one input, pixel space), added a row of cells at a time."""
    import geopandas as gpd

    from sam3tiles.writers.stream import ObjectSpool, SpoolInput

    spool = ObjectSpool()
    i = spool.begin_input(SpoolInput("bench.ome.tif", None))
    c = field.cell
    for row in range(field.rows):
        geoms, ids = field.query(0, row * c + 1, size, row * c + c - 1)
        n = len(ids)
        spool.add(i, gpd.GeoDataFrame({"_order": ids, "prompt": ["disc"] * n, "score": np.full(n, 0.9),
                                       "area": np.full(n, 1.0), "area_px": np.full(n, 1.0),
                                       "n_tiles": np.ones(n, int), "source": ["bench.ome.tif"] * n,
                                       "backend": ["bench"] * n, "model": ["-"] * n}, geometry=list(geoms)))
    return spool


def slide_levels(size: int) -> list[tuple[int, int]]:
    """A slide's levels: halvings rounded up until the longer side is at most 1024."""
    out = [(size, size)]
    while max(out[-1]) > 1024:
        out.append(((out[-1][0] + 1) // 2, (out[-1][1] + 1) // 2))
    return out


def measure(size: int, fmt: str, source: str = "spool") -> dict:
    from sam3tiles.writers.labels import write_labels

    field = Field(size, size)
    objects = spool_of(field, size) if source == "spool" else field
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "labels" + EXT[fmt])
        t0 = time.perf_counter()
        levels = slide_levels(size) if fmt != "cog" else None
        crs = "EPSG:32633" if fmt == "cog" else None
        write_labels(objects, path, size, size, crs=crs, levels=levels,
                     pixel_size_um=(0.25, 0.25) if fmt != "cog" else None)
        wall = time.perf_counter() - t0
        nbytes = (sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())
                  if os.path.isdir(path) else os.path.getsize(path))
    if source == "spool":
        objects.close()
    return {"format": fmt, "source": source, "size": size, "objects": field.rows * field.cols,
            "wall_s": round(wall, 1), "mpx_per_s": round(size * size / wall / 1e6, 1),
            "file_mb": round(nbytes / 2 ** 20, 1), "rss_before_mb": round(base, 1),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, action="append", default=None, help="image side in px (repeat)")
    ap.add_argument("--format", action="append", default=None, choices=sorted(EXT))
    ap.add_argument("--source", default="spool", choices=("spool", "field"),
                    help="objects from a filled ObjectSpool (as a run) or made up per window (the writer alone)")
    ap.add_argument("--measure", action="store_true", help="(internal) one size and format in this process")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="600 and 1200 px, in this process (checks the code)")
    args = ap.parse_args(argv)
    sizes = args.size or ([600, 1200] if smoke(args.smoke) else [8000, 24000])
    formats = args.format or ["ome-tiff"]
    if args.measure:
        emit(measure(sizes[0], formats[0], args.source), args.json)
        return 0
    runs = [run_child("bench_labels", "--measure", "--size", s, "--format", f, "--source", args.source)
            for f in formats for s in sizes]
    ratios = {}
    for f in formats:
        mine = [r for r in runs if r["format"] == f]
        lo, hi = min(mine, key=lambda r: r["size"]), max(mine, key=lambda r: r["size"])
        ratios[f] = {"pixels_ratio": round((hi["size"] / lo["size"]) ** 2, 1),
                     "peak_rss_ratio": round(hi["peak_rss_mb"] / lo["peak_rss_mb"], 3)}
    emit({"runs": runs, "ratios": ratios}, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
