"""Remote inputs: URLs (never globs), cloud paths handed to GDAL as they are, and STAC items.

* `http(s)://` URLs, presigned ones included (`?X-Amz-Signature=...`, `?sig=...`): read by GDAL's
  /vsicurl with byte ranges; the query string is part of the name, never a glob pattern.
* `s3://`, `gs://`, `az://` and `/vsi...` paths: rasterio maps them to GDAL's virtual file systems, and
  GDAL finds credentials and options itself (AWS_*, GS_*, AZURE_*, GDAL_HTTP_* environment variables or
  config files), on the driver and on every Dask worker alike.
* STAC: an Item (`item.json`, local or a URL) names its files as assets; `--asset KEY` picks one. An
  ItemCollection (a STAC API search result saved to a file) gives one input per item. Plain JSON reading
  (no pystac needed); relative hrefs resolve against the item's own location.
"""

from __future__ import annotations

import json
import os
import posixpath
import urllib.parse
import urllib.request
from pathlib import Path

from ..errors import InputDataError, UsageError
from ..wording import opt

#: Seconds to wait for a STAC item over HTTP.
STAC_TIMEOUT = 60
_RASTER_TYPES = ("image/tiff", "image/jp2", "image/png", "image/jpeg", "application/x-hdf")


def is_remote(path: str) -> bool:
    """A URL or a GDAL virtual path: no local file to stat, and never a glob pattern."""
    s = str(path)
    return "://" in s or s.startswith("/vsi")


def source_name(path: str) -> str:
    """The input as given, for the `source` column: a path as passed, a URL without its query string
    and fragment (a presigned URL's signature is no part of the name). Two inputs that share a file
    name (a/visual.tif, b/visual.tif: STAC assets, tiled deliveries) keep two sources."""
    s = str(path)
    if "://" in s:
        u = urllib.parse.urlsplit(s)
        s = urllib.parse.urlunsplit((u.scheme, u.netloc, u.path, "", ""))
        if s.startswith("/vsi") and "?" in s:  # /vsicurl/https://...?sig: urlsplit saw no scheme
            s = s.split("?", 1)[0]
    return s


def input_name(path: str) -> str:
    """The input's file name (the `source` column, per-input output names): for a URL, the last segment of
    its path, without the query string (a presigned URL's signature is no part of the name)."""
    s = str(path)
    if "://" in s:
        s = urllib.parse.urlsplit(s).path
    return posixpath.basename(s.rstrip("/")) or s


def read_input_list(path: str) -> list[str]:
    """A text file of inputs, one a line (URLs, paths relative to the file's folder, globs, STAC items);
    blank lines and lines starting with '#' are skipped."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as e:
        raise InputDataError(f"{path}: cannot read the list of inputs ({e.strerror or e}): check the path") from None
    folder = os.path.dirname(os.path.abspath(path))
    out = [ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith("#")]
    out = [s if is_remote(s) or os.path.isabs(s) else os.path.join(folder, s) for s in out]
    if not out:
        raise InputDataError(f"{path}: the list of inputs is empty: give one raster, URL or STAC item a line")
    return out


def looks_like_stac(path: str, asset: str | None) -> bool:
    """JSON inputs are STAC items or item collections; with `--asset`, so is any input without a raster
    file extension (a STAC API item URL such as .../collections/C/items/ID)."""
    name = input_name(path).lower()
    if name.endswith((".json", ".geojson")):
        return True
    return asset is not None and not name.endswith((".tif", ".tiff", ".vrt", ".jp2", ".png", ".jpg", ".jpeg",
                                                      ".img", ".ntf", ".svs", ".ndpi", ".scn", ".mrxs"))


def _read_json(path: str) -> dict:
    try:
        if "://" in path:
            with urllib.request.urlopen(path, timeout=STAC_TIMEOUT) as r:
                return json.loads(r.read())
        return json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise InputDataError(f"{path}: cannot read it as a STAC item ({e}): give an item's JSON file or URL") from None


def stac_hrefs(path: str, asset: str | None) -> list[str]:
    """The raster(s) a STAC Item or ItemCollection at `path` names: the asset `asset` of each item (or an
    item's only raster asset when `asset` is None). A missing key is an error listing the item's assets."""
    return [href for href, _ in stac_items(path, asset)]


def stac_items(path: str, asset: str | None) -> list[tuple[str, str | None]]:
    """`stac_hrefs` with each item's datetime (ISO text: `datetime`, else `start_datetime`; None when it has
    neither): items of different days are different images of their ground (`run.planning.maps`)."""
    doc = _read_json(path)
    kind = doc.get("type") if isinstance(doc, dict) else None
    if kind == "FeatureCollection":
        items = doc.get("features") or []
        if not isinstance(items, list):
            raise InputDataError(f"{path}: the STAC item collection's 'features' is not a list of items: fix the file")
        if not items:
            raise InputDataError(f"{path}: the STAC item collection has no items: nothing to segment")
    elif kind == "Feature" and isinstance(doc.get("assets"), dict):
        items = [doc]
    else:
        raise InputDataError(f"{path}: not a STAC item (no 'type': 'Feature' with 'assets'): give an item's JSON, "
                             "or a raster")
    base = _self_href(doc, path)
    return [(_asset_href(item, asset, path, _self_href(item, base)), _item_datetime(item)) for item in items]


def _item_datetime(item: dict) -> str | None:
    props = item.get("properties") if isinstance(item, dict) else None
    if not isinstance(props, dict):
        return None
    when = props.get("datetime") or props.get("start_datetime")
    return when if isinstance(when, str) and when else None


def _self_href(doc: dict, fallback: str) -> str:
    links = doc.get("links") if isinstance(doc, dict) else None
    for link in links if isinstance(links, list) else []:
        if isinstance(link, dict) and link.get("rel") == "self" and isinstance(link.get("href"), str):
            return link["href"]
    return fallback


def _asset_href(item: dict, asset: str | None, path: str, base: str) -> str:
    if not isinstance(item, dict):
        raise InputDataError(f"{path}: an item of the collection is {type(item).__name__}, not a STAC item (a JSON "
                             "object with 'assets'): fix the file")
    assets = item.get("assets") or {}
    where = f"{path}" + (f" (item {item['id']})" if isinstance(item.get("id"), str) and item["id"] not in path else "")
    bad = next((k for k, v in assets.items() if not isinstance(v, dict)), None) if isinstance(assets, dict) else ""
    if bad is not None:
        what = f"asset {bad!r} is" if bad else "its 'assets' is"
        raise InputDataError(f"{where}: {what} not a JSON object with an 'href' (a STAC asset is {{\"href\": ..., "
                             "\"type\": ...}): fix the item, or give the raster itself")
    listing = ", ".join(f"{k} ({v.get('type', 'no media type')})" for k, v in assets.items()) or "none"
    if asset is None:
        rasters = [k for k, v in assets.items() if str(v.get("type", "")).split(";")[0].strip() in _RASTER_TYPES]
        if len(rasters) != 1:
            raise UsageError(f"{where}: choose the image with {opt('asset', 'KEY')}; the item's assets are: {listing}")
        asset = rasters[0]
    if asset not in assets:
        raise UsageError(f"{where}: the item has no asset {asset!r}; its assets are: {listing}")
    href = assets[asset].get("href")
    if not href or not isinstance(href, str):
        raise InputDataError(f"{where}: asset {asset!r} has no href")
    if "://" in href or href.startswith("/"):
        return href
    if "://" in base:
        return urllib.parse.urljoin(base, href)
    return os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(base)), href))
