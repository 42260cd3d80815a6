"""What an input may be, and every path a run reads: the inputs as given (paths, URLs, globs, `.txt` lists, STAC
items, open rasterio datasets; arrays refused) expanded to a list of paths (`expand_inputs`, `input_name`), and
the paths a run reads as `preflight.check_paths` takes them (`read_paths`). URLs, STAC and lists themselves:
`readers.remote`. Nothing is opened here but lists and STAC documents.
"""

from __future__ import annotations

import glob
import os
from typing import Sequence

from ...errors import UsageError
from ...readers.remote import is_remote, looks_like_stac, read_input_list, stac_items


def read_paths(inputs: Sequence, chips: Sequence, box_file, point_file=None) -> list[tuple[str, str, str]]:
    """Every path a run reads, as `preflight.check_paths` takes them: `inputs` (paths, or (input, a file it
    reads) pairs), example images (`chips.ExampleImage`), the box file, the point file."""
    out = [("inputs", *((i, i) if isinstance(i, str) else i)) for i in inputs]
    out += [("example_images", c.path, c.path) for c in chips]
    out += [("point_file", str(point_file), str(point_file))] if point_file else []
    return out + ([("box_file", str(box_file), str(box_file))] if box_file else [])


def expand_inputs(inputs, asset: str | None = None, _lists: tuple[str, ...] = (), own: Sequence = (),
                  dates: dict | None = None) -> list[str]:
    """Paths, URLs, globs or open rasterio datasets (one or a list) -> a list of paths, globs expanded and
    sorted; a glob that matches nothing is an error, and so is an in-memory array (it has no frame).
    A URL or /vsi path is never a glob (a presigned URL's '?'); STAC items and item collections become
    their assets' hrefs (`asset`: the key; see `readers.remote`); a `.txt` file lists inputs, one a line.
    `own`: files the run writes (its report): one among the inputs stays a path, for `preflight.check_paths`
    to name, and is not read as a STAC item. `dates`: filled with each STAC item's datetime by its href."""
    mine = {os.path.realpath(p) for p in own}
    if isinstance(inputs, (str, os.PathLike)) or _is_dataset(inputs) or _is_array(inputs):
        inputs = [inputs]
    out: list[str] = []
    for item in inputs:
        s = input_name(item)
        if s.lower().endswith(".txt") and not is_remote(s):
            real = os.path.realpath(s)
            if real in _lists:
                chain = " -> ".join(os.path.basename(q) for q in (*_lists[_lists.index(real):], real))
                raise UsageError(f"{s}: the list of inputs names itself ({chain}, a cycle): remove that line")
            out.extend(expand_inputs(read_input_list(s), asset, (*_lists, real), own, dates))
        elif looks_like_stac(s, asset) and (is_remote(s) or os.path.realpath(s) not in mine):
            for href, when in stac_items(s, asset):
                out.append(href)
                if dates is not None and when:
                    dates.setdefault(href, when)
        elif not is_remote(s) and any(ch in s for ch in "*?[") and not os.path.exists(s):  # existing: literal
            hits = sorted(glob.glob(s, recursive=True))
            if not hits:
                raise UsageError(f"{s}: the pattern matches no file: check the path")
            out.extend(hits)
        else:
            out.append(s)
    if not out:
        raise UsageError("no input given: name one or more rasters")
    return out  # a file named twice stays so: `once.distinct_inputs` makes it one input and says so


def _is_dataset(x) -> bool:
    return hasattr(x, "name") and hasattr(x, "transform") and hasattr(x, "read")


def _is_array(x) -> bool:
    return hasattr(x, "__array__") and hasattr(x, "shape") and hasattr(x, "dtype")


def input_name(item) -> str:
    """What `open_source` opens for one input: a path or URL as text, or an open dataset's name."""
    if _is_array(item):
        raise UsageError(f"an array ({'x'.join(map(str, item.shape))} {item.dtype}) is not an input: it has no "
                         "coordinate frame and cannot be read tile by tile. Write it to a GeoTIFF with "
                         "rasterio (rasterio.open(path, 'w', driver='GTiff', ..., transform=..., crs=...)) and "
                         "pass the path, or pass an open rasterio dataset")
    if _is_dataset(item):
        if getattr(item, "closed", False):
            raise UsageError(f"the rasterio dataset {item.name} is closed: pass it while open, or its path")
        return str(item.name)
    if isinstance(item, (str, os.PathLike)):
        return str(item)
    raise UsageError(f"{item!r} is not an input: give a path, URL, glob or open rasterio dataset")
