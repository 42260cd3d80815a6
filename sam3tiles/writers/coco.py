"""COCO instance annotations (`OUT.coco.json`), as SAHI, Detectron2 and pycocotools read them.

* `images`: one per input (`file_name` is the input's file name, `width` x `height` its full-resolution
  pixel size), ids 1, 2, ... in input order;
* `categories`: one per prompt, ids 1, 2, ... in prompt order (`supercategory` "sam3tiles");
* `annotations`: one per object, in source pixel coordinates (x right, y down, origin at the image's
  top-left corner, whatever the CRS): `segmentation` as polygons (the exterior of each part, closing
  point dropped), or as an uncompressed RLE over the whole image when an object has holes (COCO polygons
  cannot hold holes, and unioned polygons would fill them); `bbox` [x, y, w, h]; `area` in source pixels;
  `score`; `iscrowd` 0; `id` the object's id of the other outputs.

The file is streamed one annotation at a time.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
from pathlib import Path

import geopandas as gpd
import numpy as np
import shapely

from ..readers.remote import input_name
from ..units import Frame, to_pixels


def _parts(geom) -> list:
    if geom is None or geom.is_empty:
        return []
    if geom.geom_type == "Polygon":
        return [geom]
    return [g for g in getattr(geom, "geoms", []) if g.geom_type == "Polygon" and not g.is_empty]


def _rle(parts: list, width: int, height: int) -> dict:
    """Uncompressed COCO RLE (column-major runs, background first) of the pixels whose centres lie inside."""
    import rasterio.features
    from affine import Affine

    union = shapely.union_all(parts)
    x0, y0, x1, y1 = union.bounds
    c0, r0 = max(0, int(math.floor(x0))), max(0, int(math.floor(y0)))
    c1, r1 = min(width, int(math.ceil(x1))), min(height, int(math.ceil(y1)))
    counts: list[int] = []
    if c1 > c0 and r1 > r0:
        m = rasterio.features.rasterize([(union, 1)], out_shape=(r1 - r0, c1 - c0),
                                        transform=Affine.translation(c0, r0), dtype="uint8")
        rr, cc = np.nonzero(m)
        idx = np.sort((cc.astype(np.int64) + c0) * height + (rr + r0))
        if len(idx):
            breaks = np.flatnonzero(np.diff(idx) != 1)
            starts = np.r_[idx[0], idx[breaks + 1]]
            ends = np.r_[idx[breaks], idx[-1]] + 1
            prev = 0
            for s, e in zip(starts.tolist(), ends.tolist()):
                counts += [s - prev, e - s]
                prev = e
            counts.append(width * height - prev)
    if not counts:
        counts = [width * height]
    return {"size": [int(height), int(width)], "counts": counts}


def _segmentation(parts: list, width: int, height: int):
    if any(len(p.interiors) for p in parts):
        return _rle(parts, width, height)
    polys = []
    for p in parts:
        xy = np.asarray(p.exterior.coords)[:-1]
        if len(xy) >= 3:
            polys.append([round(float(v), 3) for v in xy.ravel()])
    return polys


def coco_lines(gdf: gpd.GeoDataFrame, frames: dict[str, Frame], prompts: list[str] | None,
               metadata: dict | None = None, chunk: int = 5000):
    """The file's text in pieces: header (info, images, categories), one annotation per piece, footer."""
    names = list(frames)
    if not names and "source" in gdf.columns:
        names = list(dict.fromkeys(gdf["source"]))
    image_ids = {n: i + 1 for i, n in enumerate(names)}
    if not prompts:
        prompts = list(dict.fromkeys(gdf["prompt"])) if "prompt" in gdf.columns else ["object"]
    cat_ids = {p: i + 1 for i, p in enumerate(prompts)}
    images = []
    for n in names:
        f = frames.get(n)
        images.append({"id": image_ids[n], "file_name": input_name(n), "width": f.width if f else None,
                       "height": f.height if f else None})
    head = {"info": {"description": "sam3tiles instance segmentation",
                     "version": str((metadata or {}).get("version", "")),
                     "date_created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                     "sam3tiles": metadata or {}},
            "licenses": [], "images": images,
            "categories": [{"id": i, "name": p, "supercategory": "sam3tiles"} for p, i in cat_ids.items()]}
    yield json.dumps(head, default=str)[:-1] + ', "annotations": [\n'
    first = True
    ids = gdf["id"].to_numpy() if "id" in gdf.columns else np.arange(1, len(gdf) + 1)
    for start in range(0, len(gdf), chunk):
        part = gdf.iloc[start:start + chunk]
        sources = (part["source"].to_numpy() if "source" in part.columns
                   else np.full(len(part), names[0] if names else ""))
        labels = part["prompt"].to_numpy() if "prompt" in part.columns else np.full(len(part), prompts[0])
        areas = part["area_px"].to_numpy(np.float64) if "area_px" in part.columns else None
        scores = part["score"].to_numpy(np.float64) if "score" in part.columns else None
        geoms = np.asarray(part.geometry.values, dtype=object)
        pix = np.empty(len(part), dtype=object)
        for n in set(sources.tolist()):
            sel = sources == n
            pix[sel] = to_pixels(geoms[sel], frames.get(n))
        for i in range(len(part)):
            parts = _parts(pix[i])
            if not parts:
                continue
            f = frames.get(sources[i])
            w, h = (f.width, f.height) if f else (0, 0)
            x0, y0, x1, y1 = shapely.union_all(parts).bounds
            area = float(areas[i]) if areas is not None else float(sum(p.area for p in parts))
            ann = {"id": int(ids[start + i]), "image_id": image_ids.get(sources[i], 1),
                   "category_id": cat_ids.get(labels[i], 0),
                   "segmentation": _segmentation(parts, w, h), "area": round(area, 3),
                   "bbox": [round(x0, 3), round(y0, 3), round(x1 - x0, 3), round(y1 - y0, 3)], "iscrowd": 0}
            if scores is not None:
                ann["score"] = round(float(scores[i]), 5)
            yield ("" if first else ",\n") + json.dumps(ann)
            first = False
    yield "\n]}\n"


def write_coco(gdf: gpd.GeoDataFrame, path: str | os.PathLike, frames: dict[str, Frame],
               prompts: list[str] | None = None, metadata: dict | None = None) -> Path:
    """Write `gdf` (in its sources' CRS, or pixel space) to `path` as COCO instance annotations. Not atomic by
    itself: `write_vector` calls it on a temporary name and renames the file into place."""
    p = Path(path)
    with open(p, "w", encoding="utf-8") as f:
        for piece in coco_lines(gdf, frames, prompts, metadata):
            f.write(piece)
    return p
