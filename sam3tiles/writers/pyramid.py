"""Label pyramids: an instance label image and its reduced levels, built block by block in a zarr store.

Level 0 is burnt from the objects window by window (`burn`); each reduced level is then read out of the
level above it by nearest sampling, one block at a time, so memory stays flat whatever the image's size
(a few blocks of uint32, never a level). The store is the OME-Zarr output itself, or a scratch store
from which the OME-TIFF writer copies the levels tile by tile (`writers.ome`).

Nearest sampling keeps label values exact (no blend of two ids). Level k's pixel (row, col) is level
k-1's pixel (row * s, col * s) when the levels differ by a whole factor s (a pyramid of halvings, rounded
up or down: s = 2), else (floor(row * h_prev / h), floor(col * w_prev / w)). For whole factors, level k is
thus level 0 sampled every s^k pixels: `level0[::s**k, ::s**k]` for ceil-halved levels.
"""

from __future__ import annotations

import asyncio
import math
import time
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import rasterio.features
import rasterio.windows
from affine import Affine
from rasterio.windows import Window

#: Side of the zarr chunks (and TIFF tiles) of label levels, in pixels.
CHUNK = 256
#: Side of the pieces burnt or resampled at a time (a multiple of CHUNK): 16 MB of uint32.
BLOCK = 2048
#: Reduced levels are added until the longer side is at most this (when the source gives none).
MIN_SIDE = 1024


@dataclass(frozen=True)
class Levels:
    """The pixel sizes (width, height) of each level, level 0 first (the full resolution)."""

    sizes: tuple[tuple[int, int], ...]

    @classmethod
    def of(cls, width: int, height: int, source: tuple | list | None = None) -> "Levels":
        """The source's levels when it has a pyramid (a slide's), else halvings (rounded up) until the
        longer side is at most MIN_SIDE."""
        if source and len(source) > 1:
            sizes = [tuple(int(v) for v in s) for s in source]
            if sizes[0] != (width, height):
                raise ValueError(f"level 0 of the source is {sizes[0]}, not the image's {(width, height)}")
            return cls(tuple(sizes))
        sizes = [(int(width), int(height))]
        while max(sizes[-1]) > MIN_SIDE and min(sizes[-1]) > 1:
            w, h = sizes[-1]
            sizes.append(((w + 1) // 2, (h + 1) // 2))
        return cls(tuple(sizes))

    def __len__(self) -> int:
        return len(self.sizes)

    def index(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Level k's (rows, cols) as indices into level k-1 (nearest sampling, see the module doc)."""
        (w0, h0), (w1, h1) = self.sizes[k - 1], self.sizes[k]
        return _index(h1, h0), _index(w1, w0)

    def factors(self, k: int) -> tuple[float, float]:
        """Level-0 pixels per level-k pixel (x, y): the product of the steps (whole factors) or the ratio."""
        fx = fy = 1.0
        for j in range(1, k + 1):
            (w0, h0), (w1, h1) = self.sizes[j - 1], self.sizes[j]
            fx *= _step(w1, w0) or w0 / w1
            fy *= _step(h1, h0) or h0 / h1
        return fx, fy


def _step(n: int, n_prev: int) -> int | None:
    """The whole factor between two level sizes, when there is one (n = n_prev / s rounded up or down)."""
    s = max(1, round(n_prev / n))
    return s if n in (n_prev // s, -(-n_prev // s)) else None


def _index(n: int, n_prev: int) -> np.ndarray:
    s = _step(n, n_prev)
    idx = np.arange(n, dtype=np.int64) * s if s else np.floor(np.arange(n) * (n_prev / n)).astype(np.int64)
    return np.minimum(idx, n_prev - 1)


def create_levels(group, levels: Levels, chunk: int = CHUNK):
    """The empty uint32 arrays "0", "1", ... of every level in a zarr group (zarr format 2, as NGFF 0.4
    has it: '/' chunk keys, blosc-zstd; chunks never written read as 0). zarr 2 and 3 both work."""
    import numcodecs
    import zarr

    comp = numcodecs.Blosc(cname="zstd", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE)
    out = []
    for k, (w, h) in enumerate(levels.sizes):
        kw = dict(shape=(h, w), chunks=(min(chunk, h), min(chunk, w)), dtype="uint32", fill_value=0)
        if int(zarr.__version__.split(".")[0]) >= 3:
            out.append(group.create_array(str(k), compressors=comp, **kw,
                                          chunk_key_encoding={"name": "v2", "separator": "/"}))
        else:  # zarr 2 (Python 3.10)
            out.append(group.create_dataset(str(k), compressor=comp, dimension_separator="/", **kw))
    return out


def open_group(path) -> object:
    """A new zarr group (format 2) at `path`, with zarr 2 or 3."""
    import zarr

    if int(zarr.__version__.split(".")[0]) >= 3:
        return zarr.open_group(str(path), mode="w", zarr_format=2)
    return zarr.open_group(str(path), mode="w")


@contextmanager
def settled(timeout: float = 60.0):
    """On an error inside the block, wait for zarr's writes still in flight before it is left (and the
    caller removes the store): zarr 3 writes a block's chunks in threads, and when one fails (a full disk)
    the others go on, creating their folders again after the store was removed."""
    try:
        yield
    except BaseException:
        _drain_zarr(timeout)
        raise


def _drain_zarr(timeout: float) -> None:
    """Wait (at most `timeout` s) until zarr's event loop runs no task but this one."""
    try:
        from zarr.core.sync import sync
    except ImportError:  # zarr 2 writes in the calling thread: nothing in flight
        return

    async def rest():
        me, end = asyncio.current_task(), time.monotonic() + timeout
        while time.monotonic() < end:
            others = [t for t in asyncio.all_tasks() if t is not me and not t.done()]
            if not others:
                return
            await asyncio.wait(others, timeout=max(0.0, end - time.monotonic()))

    try:
        sync(rest())
    except Exception:  # noqa: BLE001 - the error being raised is the one to report
        pass


def blocks(width: int, height: int, block: int = BLOCK):
    """(x0, y0, w, h) of the pieces of a width x height image, row by row."""
    for y0 in range(0, height, block):
        for x0 in range(0, width, block):
            yield x0, y0, min(block, width - x0), min(block, height - y0)


def burn(query, width: int, height: int, transform: Affine, check_ids, block: int = BLOCK):
    """The label image's pieces: yields (x0, y0, uint32 array) for each block of `block` pixels.

    `query(minx, miny, maxx, maxy) -> (geometries, ids)` gives the objects meeting a box of the CRS in id
    order; a pixel takes the id of the last object whose polygon holds its centre (the higher id wins)."""
    for x0, y0, w, h in blocks(width, height, block):
        out = np.zeros((h, w), np.uint32)
        # all four corners: a rotated or sheared transform's window is no axis-aligned box
        xs, ys = zip(*(transform @ (c, r) for c in (x0, x0 + w) for r in (y0, y0 + h)))
        geoms, ids = query(min(xs), min(ys), max(xs), max(ys))
        if len(ids):
            check_ids(ids)
            wt = rasterio.windows.transform(Window(x0, y0, w, h), transform)
            rasterio.features.rasterize(zip(geoms, ids.astype(np.uint32)), out=out, transform=wt, dtype="uint32")
        yield x0, y0, out


def fill_levels(arrays, levels: Levels, pieces, block: int = BLOCK) -> None:
    """Write level 0 from `pieces` ((x0, y0, array) as `burn` yields), then each reduced level from the
    level above, block by block."""
    for x0, y0, out in pieces:
        if out.any():  # blocks of background stay unwritten: zarr reads them as 0
            arrays[0][y0:y0 + out.shape[0], x0:x0 + out.shape[1]] = out
    for k in range(1, len(levels)):
        rows, cols = levels.index(k)
        w, h = levels.sizes[k]
        for x0, y0, bw, bh in blocks(w, h, block):
            r, c = rows[y0:y0 + bh], cols[x0:x0 + bw]
            src = arrays[k - 1][int(r[0]):int(r[-1]) + 1, int(c[0]):int(c[-1]) + 1]
            out = np.asarray(src)[np.ix_(r - r[0], c - c[0])]
            if out.any():
                arrays[k][y0:y0 + bh, x0:x0 + bw] = out


def overview_factors(width: int, height: int, tile: int = CHUNK) -> list[int]:
    """GDAL overview factors 2, 4, 8, ... until the longer side fits one tile."""
    n = max(0, math.ceil(math.log2(max(width, height) / tile))) if max(width, height) > tile else 0
    return [2 ** i for i in range(1, n + 1)]
