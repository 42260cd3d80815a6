"""The Python API: `sam3tiles.segment`, one typed keyword per option of the registry (`options.py`)."""

from __future__ import annotations

import os
from typing import Any, Iterable, Sequence, Union

import geopandas as gpd

from .options import Options
from .pipeline import segment_job
from .prompts import GeoBox
from .report import RunReport

#: What `segment` takes as inputs: a path, URL or glob, an open rasterio dataset, or a list of them.
Inputs = Union[str, os.PathLike, Any, Iterable[Union[str, os.PathLike, Any]]]

_D = Options()  # the registry's defaults, so the signature below cannot drift from them


def segment(inputs: Inputs, prompts: str | Sequence[str] = (), *, boxes: Sequence[GeoBox | str] = (),
            box_file: str | os.PathLike | None = None, out: str | os.PathLike | None = None,
            overwrite: bool = False, labels: str | os.PathLike | None = None,
            work_dir: str | os.PathLike | None = None, fresh: bool = False, checkpoint: bool = True,
            report_path: str | os.PathLike | None = None, client: Any = None, options: Options | None = None,
            backend: str | object = _D.backend, model: str | None = _D.model, device: str = _D.device,
            threads: int = _D.threads, workers: int | None = _D.workers, scheduler: str | None = _D.scheduler,
            worker_timeout: float = _D.worker_timeout, tile_size: int = _D.tile_size, overlap: int = _D.overlap, scale: float = _D.scale,
            gsd: float | None = _D.gsd, bands: tuple[int, ...] | str | None = _D.bands, squash: bool = _D.squash,
            refine: str = _D.refine, refine_depth: int = _D.refine_depth,
            min_area: float = _D.min_area, max_area: float | None = _D.max_area, min_score: float = _D.min_score,
            simplify: float = _D.simplify, layer: str | None = _D.layer, geojson_crs: str = _D.geojson_crs,
            no_preview: bool = _D.no_preview, retries: int = _D.retries,
            strict: bool = _D.strict, progress: bool = _D.progress, max_in_flight: int | None = _D.max_in_flight,
            edge_margin: int = _D.edge_margin, encode_seconds: float = _D.encode_seconds,
            decode_seconds: float = _D.decode_seconds, merge_block: int = _D.merge_block,
            box_scope: str = _D.box_scope, verify_inputs: bool = _D.verify_inputs,
            asset: str | None = _D.asset, return_objects: bool = True) -> "gpd.GeoDataFrame | RunReport":
    """Segment one or more rasters with text prompts and/or example boxes; returns the objects.

    Returns a GeoDataFrame, one row per object, in the source CRS (no CRS for plain images: pixel
    coordinates, y down), with columns id, prompt, score, area, area_px, n_tiles, source, backend, model.
    The run report is in `gdf.attrs["sam3tiles_report"]`. Memory stays flat whatever the image size:
    tiles are read, segmented and merged a few at a time.

    Args:
        inputs: a path, URL (presigned ones too: never a glob), s3:// gs:// or /vsi path, glob, STAC item
            or saved search (JSON file or URL; see `asset`), .txt list of inputs, an open rasterio dataset
            (read again by its `name`), or a list of them. A numpy array is refused: write it to a GeoTIFF with rasterio (with its transform and
            CRS) and pass the path.
        prompts: what to find: one text ("building") or several (["building", "car"]).
        boxes: example boxes "MINX,MINY,MAXX,MAXY[,neg]" (or `GeoBox`) in the raster's CRS.
        box_file: a vector file of example boxes (any CRS; optional 'label' column 1/0).
        out: write the objects there (.gpkg, .parquet, .fgb, .geojson, .coco.json; "name.parquet/": a
            partitioned GeoParquet dataset), or into a folder (one .gpkg per input); with `out`,
            checkpoints are kept beside it and a rerun resumes.
        overwrite: replace an existing output.
        labels: also write a uint32 label image aligned with the (single) input (values = `id`).
        work_dir, fresh, checkpoint: checkpoint folder; ignore checkpoints; keep none at all.
        report_path: the run report JSON (default: beside `out`).
        client: a `distributed.Client` to run on (default: an in-process cluster, or `scheduler`).
        options: an `Options` value; the keywords below override its fields (on a copy).
        backend: "onnx" (SAM 3 model files), "reference" (a colour-matching stand-in, no weights) or
            "simulated"; the model backend registry may accept more.
        model, device, threads: the ONNX model folder, "auto"/"cpu"/"cuda", onnxruntime threads.
        workers, scheduler: CPU threads of a local run; a dask.distributed scheduler address.
        worker_timeout: seconds a cluster run waits for a model worker when none is left (then exit 4).
        tile_size, overlap: tile side and overlap in (scaled) pixels (tile_size at most 1008).
        scale, gsd: uniform zoom, or a target ground sampling distance (CRS units per pixel).
        bands, squash: bands as (R, G, B) or one band, 1-based; the whole image as one squashed tile.
        refine, refine_depth: "auto": a tile where a prompt hits SAM 3's 200-object cap is re-run as
            sub-tiles at twice the zoom, for that prompt, up to `refine_depth` doublings; "off" (see
            `sam3tiles.refine`).
        min_area, max_area, simplify: drop smaller / larger objects (`area` units: m² on a lon/lat CRS, else
            CRS units²); simplify polygons (metres on a lon/lat CRS, else CRS units).
        min_score: drop objects scored below it (0.5..1; the graphs already drop scores below 0.5).
        layer, geojson_crs, no_preview: the GeoPackage layer (default: the file's stem; other layers are
            kept); GeoJSON in "wgs84" (RFC 7946) or "native"; skip the quicklook OUT.preview.png.
        retries, strict: retries per tile; raise when any tile failed or still hit the 200-object cap.
        progress: a progress bar (tqdm.auto: a widget in notebooks).
        max_in_flight, edge_margin, encode_seconds, decode_seconds, merge_block: tuning and testing knobs
            (see `Options`).
        verify_inputs: tell changed inputs by a hash of their content (checkpoints), not size/time/ETag.
        box_scope: "image": every example box acts in every tile (its pixels are pasted into each tile's
            free margin, see `sam3tiles.exemplars`); "tile": a box acts only in the tiles it lies in.
        asset: STAC inputs: the key of the asset to segment.
        return_objects: False for huge jobs: return only the `RunReport` (its `output` is the path
            written). Objects stream to disk as merge blocks finish either way; True reads them back.
    """
    changes = {k: v for k, v in locals().items() if k in _OPTION_NAMES}
    changes = {k: v for k, v in changes.items() if options is None or v != getattr(_D, k)}
    gdf, report = segment_job(inputs, [prompts] if isinstance(prompts, str) else list(prompts), boxes=boxes,
                         box_file=None if box_file is None else str(box_file), out=out, overwrite=overwrite,
                         options=options, client=client, work_dir=work_dir, fresh=fresh, checkpoint=checkpoint,
                         report_path=report_path, labels=labels, return_objects=return_objects, **changes)
    return gdf if return_objects else report


_OPTION_NAMES = frozenset(Options.__dataclass_fields__)
