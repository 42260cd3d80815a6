"""`sam3tiles segment`: segment rasters with text prompts and/or example boxes."""

from __future__ import annotations

import click

from ..errors import EXIT_FAILED_TILES
from .options import handle_errors, overwrite_opt, quiet_opt, tiling_options, verbose_opt


def runtime_options(fn):
    opts = [
        click.option("--backend", type=click.Choice(["onnx", "reference", "simulated"]), default="onnx",
                     show_default=True, help="onnx: the SAM 3 model files; reference: a colour-matching stand-in "
                                             "(no weights, for tests and dry runs)."),
        click.option("--model", "model", default=None, help="Folder of the SAM 3 ONNX files (default: "
                                                           "$SAM3TILES_MODEL_DIR or the user cache; see "
                                                           "`sam3tiles model fetch`)."),
        click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True),
        click.option("--threads", type=int, default=0, help="onnxruntime threads per session (0: its default)."),
        click.option("--workers", type=int, default=None, help="CPU threads for reading and vectorizing "
                                                               "(local runs)."),
        click.option("--scheduler", default=None, envvar="SAM3TILES_SCHEDULER",
                     help="Address of a dask.distributed scheduler (or $SAM3TILES_SCHEDULER)."),
    ]
    for o in reversed(opts):
        fn = o(fn)
    return fn


@click.command(short_help="Segment rasters into polygons.")
@click.argument("inputs", nargs=-1, required=True)
@click.option("--text", "-t", "texts", multiple=True, help="What to find, e.g. --text building (repeatable).")
@click.option("--box", "boxes", multiple=True, metavar="MINX,MINY,MAXX,MAXY[,neg]",
              help="An example box in the raster's CRS (repeatable); ',neg' marks a negative example.")
@click.option("--box-file", default=None, help="Vector file of example boxes (any CRS; optional 'label' "
                                               "column 1/0).")
@click.option("--out", "-o", required=True, help="Output file (.gpkg, .parquet, .fgb, .geojson), or a folder "
                                                 "for one .gpkg per input.")
@runtime_options
@tiling_options
@click.option("--refine", type=click.Choice(["auto", "off"]), default="auto", show_default=True,
              help="auto: a tile where a prompt hits SAM 3's 200-object cap is re-run as 4 sub-tiles at twice "
                   "the zoom, for that prompt only, recursively where still saturated.")
@click.option("--refine-depth", type=click.IntRange(0, 4), default=2, show_default=True,
              help="Zoom doublings refinement may apply at most.")
@click.option("--min-area", type=float, default=0.0, help="Drop objects smaller than this (CRS units).")
@click.option("--simplify", type=float, default=0.0, help="Simplify polygons with this tolerance (CRS units).")
@click.option("--labels", default=None, metavar="OUT.tif",
              help="Also write an instance label image (uint32 TIFF aligned with the input, values = the "
                   "output's id column; one input only).")
@click.option("--work-dir", default=None, help="Checkpoint folder (default: beside the output).")
@click.option("--fresh", is_flag=True, help="Ignore checkpoints and start over.")
@click.option("--strict", is_flag=True, help="Exit with an error (5) when any tile failed or still hit SAM 3's "
                                             "200-object cap.")
@overwrite_opt
@verbose_opt
@quiet_opt
@click.pass_context
@handle_errors
def segment(ctx, inputs, texts, boxes, box_file, out, backend, model, device, threads, workers, scheduler,
            tile_size, overlap, scale, gsd, bands, squash, refine, refine_depth, min_area, simplify, work_dir, fresh,
            strict, overwrite, verbose, quiet, labels=None):
    """Segment INPUTS (rasters or globs) with SAM 3, tile by tile, and write merged polygons to --out.

    \b
    Examples:
      sam3tiles segment ortho.tif --text building --out buildings.gpkg
      sam3tiles segment 'tiles/*.tif' --text car --scale 2 --out cars/
      sam3tiles segment scene.tif --box 500010,4100020,500030,4100035 --out panels.parquet
    """
    from ..pipeline import Options, segment_job
    from ..readers import parse_bands

    quiet = quiet + (ctx.obj or {}).get("quiet", 0)
    opts = Options(backend=backend, model=model, device=device, tile_size=tile_size, overlap=overlap,
                   scale=scale, gsd=gsd, bands=parse_bands(bands), squash=squash, refine=refine,
                   refine_depth=refine_depth, min_area=min_area,
                   simplify=simplify, workers=workers, scheduler=scheduler, strict=strict,
                   progress=not quiet, threads=threads)
    gdf, report = segment_job(list(inputs), list(texts), boxes=list(boxes), box_file=box_file, out=out,
                              overwrite=overwrite, options=opts, work_dir=work_dir, fresh=fresh, labels=labels)
    if not quiet:
        click.echo(report.summary(), err=True)
        click.echo(f"wrote {len(gdf)} objects to {out}", err=True)
    if report.failed:
        ctx.exit(EXIT_FAILED_TILES)
