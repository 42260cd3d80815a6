"""`sam3tiles segment`: segment rasters with text prompts and/or example boxes."""

from __future__ import annotations

import click

from ..errors import EXIT_FAILED_TILES, UsageError
from ..options import Options
from ..writers.formats import PER_INPUT, endings, help_text, last_argument
from .options import handle_errors, overwrite_opt, quiet_opt, registry_options, verbose_opt


@click.command(short_help="Segment rasters into polygons.", epilog=help_text("cli"))
@click.argument("inputs", nargs=-1, required=True)
@click.option("--text", "--prompt", "-t", "texts", multiple=True,
              help="What to find, e.g. --text building (repeatable; --prompt is the same).")
@click.option("--box", "boxes", multiple=True, metavar="MINX,MINY,MAXX,MAXY[,neg]",
              help="An example box in the raster's CRS (repeatable); ',neg' marks a negative example.")
@click.option("--example-image", "example_images", multiple=True, metavar="PATH[,neg]",
              help="An example from another image (repeatable; a folder or glob: every image in it): the chip's "
                   "whole extent is one exemplar, resampled to the run's pixel size when georeferenced.")
@click.option("--box-file", default=None, help="Vector file of example boxes (any CRS; optional 'label' "
                                               "column 1/0).")
@click.option("--point", "points", multiple=True, metavar="X,Y[,neg]",
              help="A click in the raster's CRS (pixels for an image without one), repeatable: each positive point is "
                   "one object and one output row; ',neg' marks a negative point (it acts on the positives in its "
                   "tile). Points run on their own, without --text or examples (docs/points.md).")
@click.option("--point-file", default=None, help="Vector layer of points (any CRS; optional 'label' column 1/0; "
                                                 "its other columns are carried to the output rows).")
@click.option("--out", "-o", default=None, help=f"Output file ({endings(every=False)}: see the formats below), a "
                                                f"folder for one {PER_INPUT.suffix} per input, or NAME.parquet/ for "
                                                "a partitioned GeoParquet dataset. Also as the last argument "
                                                "(rio style: segment IN.tif OUT.gpkg).")
@registry_options("segment")
@click.option("--labels", default=None, metavar="OUT.tif|OUT.ome.zarr",
              help="Also write an instance label pyramid (uint32, values = the output's id column; one input "
                   "only): .tif is a GeoTIFF in COG layout (nodata 0), or for a slide a pyramidal OME-TIFF "
                   "with its levels and pixel size; .ome.zarr is OME-Zarr (NGFF 0.4) with an image-label group.")
@click.option("--work-dir", default=None, help="Checkpoint folder (default: beside the output).")
@click.option("--fresh", is_flag=True, help="Ignore checkpoints and start over.")
@overwrite_opt
@verbose_opt
@quiet_opt
@click.pass_context
@handle_errors
def segment(ctx, inputs, texts, boxes, example_images, box_file, points, point_file, out, verbose, quiet, **params):
    """Segment INPUTS (rasters, globs, URLs, STAC items, .txt lists) with SAM 3, tile by tile, and write merged
    polygons to --out (a file; a folder for one .gpkg per input; NAME.parquet/ for a GeoParquet dataset).

    \b
    Examples:
      sam3tiles segment ortho.tif --text building --out buildings.gpkg
      sam3tiles segment 'tiles/*.tif' --text car --scale 2 --out cars/
      sam3tiles segment scene.tif --box 500010,4100020,500030,4100035 --out panels.parquet
      sam3tiles segment ortho.tif --point-file trees.gpkg --out crowns.gpkg
    """
    from ..run.pipeline import segment_job  # geopandas, dask: loaded when a command runs, not for --help

    quiet = quiet + (ctx.obj or {}).get("quiet", 0)
    inputs, out = positional_output(list(inputs), out)
    opts = Options.from_params(params, progress=not quiet)  # `params`: the registry's options, and below
    _, report = segment_job(inputs, list(texts), boxes=list(boxes), box_file=box_file,
                            example_images=list(example_images), points=list(points), point_file=point_file,
                            out=out, overwrite=params["overwrite"],
                            options=opts, work_dir=params["work_dir"], fresh=params["fresh"],
                            labels=params["labels"], return_objects=False)
    if not quiet:
        click.echo(report.summary(), err=True)
    if report.failed:
        ctx.exit(EXIT_FAILED_TILES)


def positional_output(inputs: list[str], out: str | None) -> tuple[list[str], str]:
    """rio style: `segment IN.tif OUT.gpkg`. The last argument is the output when it names one
    (`writers.formats.last_argument`: an ending only outputs have; without --out also one a STAC input may
    have, .geojson, or a folder ending in '/'); given with a different --out, refused."""
    last = inputs[-1] if len(inputs) > 1 else None
    is_out = last is not None and last_argument(last, out_given=out is not None)
    if is_out and out is not None and out != last:
        raise UsageError(f"two outputs given: --out {out} and {last} (the last argument): give one")
    if is_out:
        return inputs[:-1], last
    if out is None and len(inputs) == 1 and last_argument(inputs[0], out_given=True):
        # a name only an output has (.gpkg, .fgb, .parquet, ...), alone: the input was forgotten, not the output
        raise UsageError(f"no input given: {inputs[0]} names an output; name the raster(s) to segment before it "
                         f"(segment IN.tif {inputs[0]}, or segment IN.tif --out {inputs[0]})")
    if out is None:
        raise UsageError("no output given: add --out OUT.gpkg (or the output as the last argument: "
                         "segment IN.tif OUT.gpkg)")
    return inputs, out
