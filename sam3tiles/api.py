"""The Python API: `sam3tiles.segment`, one typed keyword per option of the registry (`options.py`)."""

from __future__ import annotations

import functools
import inspect
import os
from typing import Any, Callable, Iterable, ParamSpec, Sequence, Union

import geopandas as gpd

from .options import Options
from .prompts.points import GeoPoint
from .prompts.prompt import GeoBox
from .run.pipeline import segment_job
from .run.recording.report import RunReport

#: What `segment` takes as inputs: a path, URL or glob, an open rasterio dataset, or a list of them.
Inputs = Union[str, os.PathLike, Any, Iterable[Union[str, os.PathLike, Any]]]
#: Example boxes: one box (a GeoBox, its text, a tuple, a shapely geometry) or a list of them.
Boxes = Union[GeoBox, str, Sequence[Union[GeoBox, str, tuple, Any]]]
#: Point prompts: one point (a GeoPoint, "X,Y[,neg]" text, an (x, y[, positive]) tuple, a shapely Point) or a list.
Points = Union[GeoPoint, str, tuple, Sequence[Union[GeoPoint, str, tuple, Any]]]
#: Example images: one path ("PATH[,neg]", a folder or glob, a pathlib.Path) or a list of them.
ExampleImages = Union[str, os.PathLike[str], Sequence[Union[str, os.PathLike[str]]]]

_D = Options()  # the registry's defaults, so the signature below cannot drift from them


def segment(inputs: Inputs, prompts: str | Sequence[str] = (), *, boxes: Boxes = (),
            box_file: str | os.PathLike | None = None, example_images: ExampleImages = (), points: Points = (),
            point_file: str | os.PathLike | None = None, out: str | os.PathLike | None = None, overwrite: bool = False,
            labels: str | os.PathLike | None = None, work_dir: str | os.PathLike | None = None, fresh: bool = False,
            checkpoint: bool = True, report_path: str | os.PathLike | None = None, client: Any = None,
            options: Options | None = None, backend: str | object = _D.backend, model: str | None = _D.model,
            device: str = _D.device, precision: str = _D.precision, score_threshold: float = _D.score_threshold,
            threads: int = _D.threads, workers: int | None = _D.workers, scheduler: str | None = _D.scheduler,
            worker_timeout: float = _D.worker_timeout, tile_size: int = _D.tile_size, overlap: int | float = _D.overlap,
            scale: float = _D.scale, gsd: float | None = _D.gsd, bands: tuple[int, ...] | str | None = _D.bands,
            squash: bool = _D.squash, refine: str = _D.refine, refine_depth: int = _D.refine_depth,
            tissue: str = _D.tissue, aoi: str | os.PathLike | Sequence[float] | None = _D.aoi,
            aoi_clip: bool = _D.aoi_clip, min_area: float = _D.min_area, max_area: float | None = _D.max_area,
            min_score: float = _D.min_score, simplify: float = _D.simplify, layer: str | None = _D.layer,
            geojson_crs: str = _D.geojson_crs, qupath_type: str = _D.qupath_type, no_preview: bool = _D.no_preview,
            clean: bool = _D.clean, retries: int = _D.retries, strict: bool = _D.strict, progress: bool = _D.progress,
            max_in_flight: int | None = _D.max_in_flight, tiles_per_task: int | None = _D.tiles_per_task,
            edge_margin: int = _D.edge_margin, encode_seconds: float = _D.encode_seconds,
            decode_seconds: float = _D.decode_seconds, merge_block: int = _D.merge_block, box_scope: str = _D.box_scope,
            verify_inputs: bool = _D.verify_inputs, asset: str | None = _D.asset, no_mosaic: bool = _D.no_mosaic,
            crs: str | None = _D.crs, anchor: str = _D.anchor,
            progress_format: str = _D.progress_format) -> gpd.GeoDataFrame:
    """Segment one or more rasters with text prompts and/or example boxes, or point prompts; returns the objects.

    Returns a GeoDataFrame, one row per object, in the source CRS (no CRS for plain images: pixel
    coordinates, y down): id, prompt, score, the area named for its unit (area_m2, ...), area_px, n_tiles,
    source, backend, model; the run report in `gdf.attrs["sam3tiles_report"]`. Memory stays flat. Huge jobs:
    `segment_report(...)` (same arguments) returns only the `RunReport`, never every object.

    Args:
        inputs: a path, URL (presigned ones too: never a glob), s3:// gs:// or /vsi path, glob, STAC item
            or saved search (JSON file or URL; see `asset`), .txt list of inputs, an open rasterio dataset
            (read again by its `name`), or a list of them. A numpy array is refused: write a GeoTIFF.
        prompts: what to find: one text ("building") or several (["building", "car"]).
        boxes, box_file: example boxes in the raster's CRS: (minx, miny, maxx, maxy[, positive]) tuples, shapely
            geometries (their bounds), `sam3tiles.GeoBox`, or text "MINX,MINY,MAXX,MAXY[,neg]", one or a list;
            a vector file of example boxes (any CRS; optional 'label' column 1/0).
        example_images: exemplars from other images, "PATH[,neg]" or a `pathlib.Path` (a folder or glob:
            every image in it), one or a list; see `sam3tiles.prompts.chips`.
        points, point_file: a point run (no texts or examples beside it): clicks in the raster's CRS as
            `sam3tiles.GeoPoint`, "X,Y[,neg]", (x, y[, positive]) or shapely Points, one or a list; a vector
            layer of points (any CRS; 'label' 1/0; its columns carried). One object, one row a point.
        out: write the objects there (.gpkg, .parquet, .fgb, .geojson, .coco.json; "name.parquet/": a
            partitioned GeoParquet dataset), or into a folder (one .gpkg per input); with `out`,
            checkpoints are kept beside it and a rerun resumes.
        overwrite, labels: replace an existing output; also write a uint32 label pyramid aligned with the
            (single) input (values = `id`): `.tif` (COG; a slide's: pyramidal OME-TIFF) or `.ome.zarr`.
        work_dir, fresh, checkpoint, report_path: checkpoint folder; ignore them; keep none; the report (beside out).
        client, options: a `distributed.Client` to run on (default: an in-process cluster, or `scheduler`); an
            `Options` value, whose fields the keywords below override (on a copy).
        backend: "onnx" (SAM 3 model files), "reference" (a colour-matching stand-in), "simulated", or a plugin's.
        model, device, precision, threads: the ONNX model folder, "auto"/"cpu"/"cuda"/"tensorrt"/"coreml"/"dml",
            "auto"/"fp32"/"tf32" (CUDA's TF32 off/on)/"fp16" (TensorRT), onnxruntime threads.
        score_threshold: the model's score cut (0.5; lower only with a raw-score decoder: `sam3tiles model info`).
        workers, scheduler, worker_timeout: CPU threads of a local run; a dask.distributed scheduler address;
            seconds a cluster run waits for a model worker when none is left (then exit 4).
        tile_size, overlap, scale, gsd: tile side and overlap in (scaled) pixels (tile_size at most 1008; an
            overlap below 1 is a fraction of the tile side: 0.2 -> 202 px); uniform zoom, or a target ground
            sampling distance (CRS units per pixel).
        bands, squash, anchor: bands as (R, G, B) or one band, 1-based; the whole image as one squashed tile;
            "lattice": one file's grid on its CRS lattice, as a mosaic's (docs/growing-archives.md).
        refine, refine_depth: "auto": a tile where a prompt hits SAM 3's 200-object cap is re-run as sub-tiles
            at twice the zoom, for that prompt, up to `refine_depth` doublings; "off" (`sam3tiles.tiling.refine`).
        aoi, aoi_clip, tissue: an area of interest (a vector file or a box), clip objects to it; skip a slide's
            glass: "auto"/"off" (docs/area-of-interest.md).
        min_area, max_area, simplify, min_score: drop smaller / larger objects (the area column's units: m² on
            a lon/lat CRS, else CRS units²); simplify polygons (metres on a lon/lat CRS, else CRS units); drop
            objects scored below it (from score_threshold to 1; at 0.5 it follows a lower score_threshold).
        layer, geojson_crs, no_preview, clean, qupath_type: the GeoPackage layer (default: the file's stem;
            other layers are kept); GeoJSON in "wgs84" (RFC 7946) or "native"; skip the quicklook
            OUT.preview.png; delete the work folder after a run with no failed tile (kept by default: a rerun
            resumes from it); QuPath objects as "detection" (default) or "annotation" (editable in QuPath).
        retries, strict, progress: retries per tile; raise when a tile failed or hit the 200-object cap; a bar.
        max_in_flight, tiles_per_task, edge_margin, encode_seconds, decode_seconds, merge_block: tuning (`Options`).
        verify_inputs, box_scope: tell changed inputs by a hash of their content, not size/time/ETag; "image":
            every example box acts in every tile (pasted into each tile's free margin); "tile": only where it is.
        asset, progress_format, no_mosaic, crs: STAC inputs' asset key; "bar", or "json" lines on stderr; each
            input on its own (default: one map's files are one image); the map's CRS (docs/many-files.md).
    """
    return _objects(locals())


_OPTION_NAMES = frozenset(Options.__dataclass_fields__)
_P = ParamSpec("_P")


def _objects(args: dict[str, Any]) -> gpd.GeoDataFrame:
    """`segment`'s arguments (by name) -> the objects the run wrote, read back (`_run`)."""
    gdf, _ = _run(args, return_objects=True)
    assert gdf is not None  # return_objects=True always reads the objects back
    return gdf


def _run(args: dict[str, Any], *, return_objects: bool) -> tuple[gpd.GeoDataFrame | None, RunReport]:
    """`segment`'s arguments (by name) -> `segment_job`: option keywords become `Options` changes."""
    options = args["options"]
    changes = {k: v for k, v in args.items() if k in _OPTION_NAMES}
    changes = {k: v for k, v in changes.items() if options is None or v != getattr(_D, k)}
    box_file = args["box_file"]  # prompts, boxes, example images: as given (`prompts.prompt_arguments`)
    point_file = args["point_file"]
    return segment_job(args["inputs"], args["prompts"], boxes=args["boxes"],
                       box_file=None if box_file is None else str(box_file), example_images=args["example_images"],
                       points=args["points"], point_file=None if point_file is None else str(point_file),
                       out=args["out"], overwrite=args["overwrite"], options=options, client=args["client"],
                       work_dir=args["work_dir"], fresh=args["fresh"], checkpoint=args["checkpoint"],
                       report_path=args["report_path"], labels=args["labels"],
                       return_objects=return_objects, **changes)


def _report_only(f: Callable[_P, gpd.GeoDataFrame]) -> Callable[_P, RunReport]:
    """`f`'s signature (so type checkers check every keyword), returning the run's `RunReport`."""
    signature = inspect.signature(f)

    @functools.wraps(f)
    def run(*args: _P.args, **kwargs: _P.kwargs) -> RunReport:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return _run(dict(bound.arguments), return_objects=False)[1]

    return run


segment_report = _report_only(segment)
segment_report.__name__ = segment_report.__qualname__ = "segment_report"
segment_report.__doc__ = """`segment` for jobs too big to hold in memory: the same arguments (give `out`), the objects
    are written to `out` as merge blocks finish and never all loaded; returns the `RunReport` (its `output`
    is the path written, `inputs` the inputs as given)."""
