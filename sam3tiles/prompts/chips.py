"""Example images (`--example-image PATH[,neg]`): exemplars cut from other images, a chip library.

A chip's whole extent is one exemplar, pasted into tiles exactly as an in-image example box's patch is
(`sam3tiles.exemplars`). Its size in the run's grid pixels:

* a georeferenced chip (a CRS, or a slide's stated pixel size) is resampled to the run's sampling
  distance: chip pixel size / the input's pixel size (metres on lon/lat rasters, microns on slides,
  `units.pixel_size`), times the run's scale;
* a plain image (PNG, JPEG, no transform) is taken at the run's scale: one chip pixel is one source pixel.

Chips are checked in the pre-flight (missing, unreadable, wrong band count, too large at the run's
scale: exit 2 or 3 before any tile). Each carries a hash of its bytes (`ExampleImage.digest`) that goes
into the checkpoint key of every tile it was pasted into, and is checked again when the chip is read.
"""

from __future__ import annotations

import glob
import hashlib
import math
import os
from dataclasses import replace
from typing import Sequence

import numpy as np
from rasterio.windows import Window

from ..errors import BandError, InputDataError, UsageError
from ..units import Frame, pixel_size
from ..wording import opt, raw
from .prompt import ExampleImage

#: What a folder or glob of example images picks up.
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp", ".gif", ".webp", ".jp2")
_TAGS = {"neg": False, "negative": False, "0": False, "-": False, "pos": True, "positive": True, "1": True, "+": True}


def _digest(path: str) -> str:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError as e:
        raise InputDataError(f"{opt('example_images', path)}: cannot read it ({e.strerror}): check the path") from None
    return h.hexdigest()


def parse_example_images(specs: Sequence[str]) -> list[ExampleImage]:
    """'PATH[,neg]' values -> one ExampleImage per file; a folder or glob means every image in it (sorted).
    A missing path, or a folder or glob with no image, is an InputDataError naming it."""
    out: list[ExampleImage] = []
    for text in specs:
        path, positive = str(text), True
        head, _, tail = path.rpartition(",")
        if head and tail.strip().lower() in _TAGS:
            path, positive = head, _TAGS[tail.strip().lower()]
        if os.path.isdir(path):
            files = sorted(os.path.join(path, f) for f in os.listdir(path) if f.lower().endswith(IMAGE_SUFFIXES))
            if not files:
                raise InputDataError(f"{opt('example_images', path)}: the folder holds no image "
                                     f"({', '.join(IMAGE_SUFFIXES)})")
        elif any(ch in path for ch in "*?[") and not os.path.exists(path):
            files = sorted(f for f in glob.glob(path, recursive=True) if f.lower().endswith(IMAGE_SUFFIXES))
            if not files:
                raise InputDataError(f"{opt('example_images', path)}: the pattern matches no image: check the path")
        elif not os.path.isfile(path):
            raise InputDataError(f"{opt('example_images', path)}: no such file: check the path")
        else:
            files = [path]
        out += [ExampleImage(f, positive, _digest(f)) for f in files]
    return list(dict.fromkeys(out))


def _open(img: ExampleImage, bands: Sequence[int] | None = None):
    from ..readers import open_source

    try:
        return open_source(img.path, bands=bands)
    except BandError as e:
        raise BandError(f"{opt('example_images', img.path)}: {raw(e).split(': ', 1)[0]}; an example image needs 3 "
                        "bands (R,G,B, optionally alpha), 1 (grey), or the input's band count") from None
    except InputDataError as e:
        raise InputDataError(f"{opt('example_images', img.path)}: cannot be used as an example ({raw(e)})") from None


def chip_bands(img: ExampleImage, band_count: int, bands: Sequence[int]) -> tuple[int, ...] | None:
    """The bands to read from a chip: the input's own selection when the chip has the input's band count
    (a chip cut from the same kind of product), else the chip's default (RGB, RGBA or grey)."""
    import rasterio

    try:
        with rasterio.open(img.path) as ds:
            return tuple(bands) if ds.count == band_count and band_count not in (1, 3) else None
    except rasterio.errors.RasterioIOError:
        return None  # `_open` reports it


def chip_factor(img: ExampleImage, target: Frame, bands: Sequence[int] | None = None) -> tuple[float, int, int]:
    """(chip pixels -> the target's source pixels, chip width, chip height) (see the module notes)."""
    with _open(img, bands) as src:
        size = pixel_size(Frame.of(src))
        w, h = int(src.width), int(src.height)
    if size is None:
        return 1.0, w, h
    own = pixel_size(target)
    if own is None:
        raise InputDataError(f"{opt('example_images', img.path)} states its pixel size ({size[0]:g} {size[1]}) "
                             "but the input does not (no CRS, no slide pixel size): use a plain image (PNG/JPEG) "
                             "as the example, "
                             "taken at the run's scale")
    if own[1] != size[1]:
        raise InputDataError(f"{opt('example_images', img.path)}: its pixels are {size[0]:g} {size[1]}, the input's "
                             f"{own[0]:g} {own[1]}: give a chip in the input's units, or a plain image")
    return size[0] / own[0], w, h


def chip_wh(w: int, h: int, factor: float) -> tuple[int, int]:
    """A chip's size in grid pixels at `factor` (chip pixels -> grid pixels)."""
    return max(1, round(w * factor)), max(1, round(h * factor))


def check_chip_size(img: ExampleImage, wh: tuple[int, int], scale: float, limit: int) -> None:
    """An example image larger than `limit` grid pixels on its smaller side cannot be pasted: UsageError."""
    side = min(wh)
    if side > limit:
        s = math.floor(scale * limit / side * 100) / 100
        raise UsageError(f"{opt('example_images', img.path)} is {wh[0]}x{wh[1]} px at this run's scale, "
                         f"more than a tile input can hold beside its own content ({limit} px on the smaller side): "
                         "crop the chip "
                         f"to one object, or run at {opt('scale', format(s, 'g'))} or below")


def read_chip(img: ExampleImage, factor: float, bands: Sequence[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The chip's RGB uint8 [3,h,w] and valid [h,w] resampled by `factor` (chip -> grid pixels). The file
    must still hold the content the plan hashed (checkpoint keys carry that hash)."""
    if img.digest and _digest(img.path) != img.digest:
        raise InputDataError(f"{opt('example_images', img.path)} changed while the run went on: "
                             "rerun once it stays put")
    with _open(img, bands) as src:
        w, h = chip_wh(src.width, src.height, factor)
        rgb, valid = src.read_window(Window(0, 0, src.width, src.height), (w, h))
    if not valid.any():
        raise InputDataError(f"{opt('example_images', img.path)}: every pixel is nodata (masked or alpha 0): "
                             "nothing to show")
    return np.ascontiguousarray(rgb), valid


def with_digest(img: ExampleImage) -> ExampleImage:
    return img if img.digest else replace(img, digest=_digest(img.path))
