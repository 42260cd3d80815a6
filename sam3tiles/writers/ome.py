"""Label pyramids in the OME formats microscopy tools open: pyramidal OME-TIFF and OME-Zarr (NGFF 0.4).

* OME-TIFF: level 0 in the main IFD, each reduced level in a SubIFD (the layout of QuPath, bfconvert
  and tifffile), 256 px zlib tiles, uint32, the physical pixel size in the OME-XML (PhysicalSizeX/Y in
  µm) when the source states one. The levels are copied tile by tile from a scratch zarr pyramid
  (`writers.pyramid`) that is removed afterwards.
* OME-Zarr: NGFF 0.4 (zarr format 2, '/' chunk keys), an image-label group `labels/<name>` with
  `multiscales` (axes y, x in micrometer, or without a unit when the pixel size is unknown: pixels),
  one `scale` coordinateTransformation per level, and `image-label` metadata. There is no image at the
  root (the source stays where it is); the root's attributes list the label group under `labels` too,
  so readers pointed at `OUT.ome.zarr` itself (ome-zarr-py, napari-ome-zarr) find it.

Written with plain zarr (already a dependency, used by the slide reader): ome-zarr-py's writer takes
whole (dask) arrays per level, and it would pull s3fs and scikit-image into every install.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from .pyramid import CHUNK, Levels

#: The OME image name (and the marker the napari reader looks for) of sam3tiles label images.
LABELS_NAME = "sam3tiles labels"
NGFF_VERSION = "0.4"


def tiles(array, tile: int = CHUNK):
    """The tiles of a 2D array in TIFF order (row by row), edge tiles cut short (tifffile pads them)."""
    h, w = array.shape
    for y in range(0, h, tile):
        for x in range(0, w, tile):
            yield np.asarray(array[y:y + tile, x:x + tile])


def write_ome_tiff(arrays, levels: Levels, path: Path, pixel_size_um=None, tile: int = CHUNK) -> None:
    """A pyramidal OME-TIFF of the levels' arrays (zarr, read tile by tile); BigTIFF when level 0 alone
    could pass 2 GB uncompressed."""
    import tifffile

    w0, h0 = levels.sizes[0]
    meta: dict = {"axes": "YX", "Name": LABELS_NAME}
    if pixel_size_um:
        meta.update(PhysicalSizeX=float(pixel_size_um[0]), PhysicalSizeXUnit="µm",
                    PhysicalSizeY=float(pixel_size_um[1]), PhysicalSizeYUnit="µm")
    opts = dict(dtype=np.uint32, tile=(tile, tile), photometric="minisblack", compression="zlib",
                compressionargs={"level": 6})
    bigtiff = w0 * h0 * 4 * 1.34 > 2 ** 31 - 2 ** 26
    with tifffile.TiffWriter(path, bigtiff=bigtiff, ome=True) as tw:
        tw.write(tiles(arrays[0], tile), shape=(h0, w0), subifds=len(levels) - 1, metadata=meta, **opts)
        for k in range(1, len(levels)):
            w, h = levels.sizes[k]
            tw.write(tiles(arrays[k], tile), shape=(h, w), subfiletype=1, metadata=None, **opts)


def ngff_multiscales(name: str, levels: Levels, pixel_size_um=None) -> dict:
    """NGFF 0.4 `multiscales` of a 2D label pyramid: scale per level in micrometer (pixels: no unit)."""
    unit = {"unit": "micrometer"} if pixel_size_um else {}
    px, py = (float(pixel_size_um[0]), float(pixel_size_um[1])) if pixel_size_um else (1.0, 1.0)
    datasets = []
    for k in range(len(levels)):
        fx, fy = levels.factors(k)
        datasets.append({"path": str(k), "coordinateTransformations": [{"type": "scale", "scale": [py * fy, px * fx]}]})
    return {"version": NGFF_VERSION, "name": name,
            "axes": [{"name": "y", "type": "space", **unit}, {"name": "x", "type": "space", **unit}],
            "datasets": datasets, "type": "nearest",
            "metadata": {"description": "level k is level k-1 sampled by nearest (sam3tiles.writers.pyramid)"}}


def open_ome_zarr(path: Path, name: str, levels: Levels, pixel_size_um=None, note: dict | None = None):
    """Create the OME-Zarr groups and the empty level arrays; returns the arrays (level 0 first)."""
    from .pyramid import create_levels, open_group

    root = open_group(path)
    root.attrs.update({"labels": [f"labels/{name}"], "sam3tiles": {"kind": LABELS_NAME, **(note or {})}})
    group = root.create_group("labels")
    group.attrs.update({"labels": [name]})
    image = group.create_group(name)
    image.attrs.update({"multiscales": [ngff_multiscales(name, levels, pixel_size_um)],
                        "image-label": {"version": NGFF_VERSION}})
    return create_levels(image, levels)


def label_name(path: Path) -> str:
    """The label group's name: the output's name without `.ome.zarr`."""
    name = path.name
    for suffix in (".ome.zarr", ".zarr"):
        if name.lower().endswith(suffix):
            return name[: -len(suffix)] or "labels"
    return name


def foreign_paths(path: Path) -> list[str]:
    """What an OME-Zarr label store sam3tiles wrote holds that its writer does not make (a user's notes,
    another tool's label group, a folder): paths relative to the store, a folder with a trailing '/' (its
    contents not listed), sorted. The store's own metadata says its label group, its levels and each
    level's chunk grid; a link is never the writer's."""
    exact, grids = _layout(path)
    foreign = []
    for root, dirs, files in os.walk(path):
        rel = Path(root).relative_to(path).as_posix()
        rel = "" if rel == "." else rel + "/"
        for d in list(dirs):
            if os.path.islink(os.path.join(root, d)) or not _ours(rel + d + "/", exact, grids):
                foreign.append(rel + d + "/")
                dirs.remove(d)
        foreign += [rel + f for f in files
                    if os.path.islink(os.path.join(root, f)) or not _ours(rel + f, exact, grids)]
    return sorted(foreign)


def _layout(path: Path) -> tuple[set[str], dict[str, tuple[int, int]]]:
    """The files and folders `open_ome_zarr` makes in the store at `path` (exact names), and the chunk grid
    (rows, columns) of each level folder: the one label group the root names (sam3tiles names one)."""
    exact = {".zgroup", ".zattrs", "labels/", "labels/.zgroup", "labels/.zattrs"}
    grids: dict[str, tuple[int, int]] = {}
    entries = _json(path / ".zattrs").get("labels")
    group = entries[0] if isinstance(entries, list) and entries and isinstance(entries[0], str) else ""
    name = group[len("labels/"):]
    if not group.startswith("labels/") or not name or "/" in name or name in (".", ".."):
        return exact, grids
    group += "/"
    exact |= {group, group + ".zgroup", group + ".zattrs"}
    for ms in _json(path / group / ".zattrs").get("multiscales") or []:
        for d in (ms.get("datasets") or []) if isinstance(ms, dict) else []:
            level = f"{group}{d.get('path') if isinstance(d, dict) else ''}/"
            meta = _json(path / level / ".zarray")
            try:
                (h, w), (ch, cw) = meta["shape"], meta["chunks"]
                grid = (-(-int(h) // int(ch)), -(-int(w) // int(cw)))
            except (KeyError, TypeError, ValueError, ZeroDivisionError):
                continue
            if level[len(group):-1].isdigit():
                exact |= {level, level + ".zarray", level + ".zattrs"}
                grids[level] = grid
    return exact, grids


def _ours(rel: str, exact: set[str], grids: dict[str, tuple[int, int]]) -> bool:
    """`rel` (a folder ends in '/') is a file or folder of the writer's: a name of `exact`, or in a level
    folder a chunk row folder `<row>/` or chunk `<row>/<col>` inside its grid ('/' chunk keys)."""
    if rel in exact:
        return True
    for level, (rows, cols) in grids.items():
        if rel.startswith(level):
            parts = rel[len(level):].rstrip("/").split("/")
            whole = [int(v) if v.isdigit() else None for v in parts]
            if None in whole or not 0 < len(parts) <= 2 or (len(parts) == 2) == rel.endswith("/"):
                return False
            return whole[0] < rows and (len(parts) == 1 or whole[1] < cols)
    return False


def _json(path: Path) -> dict:
    try:
        out = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return out if isinstance(out, dict) else {}
