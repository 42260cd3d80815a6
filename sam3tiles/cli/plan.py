"""`sam3tiles plan`: how a raster will be tiled, before spending any GPU time."""

from __future__ import annotations

import time

import click

from ..options import Options
from .options import handle_errors, overwrite_opt, registry_options


@click.command(short_help="Show the tile grid of a raster.")
@click.argument("input")
@registry_options("plan")
@click.option("--out", "-o", default=None, help="Write the grid as polygons (.gpkg, .geojson, ...).")
@click.option("--box", "boxes", multiple=True, metavar="MINX,MINY,MAXX,MAXY[,neg]",
              help="Example boxes of the run: with --box-scope image, the extra tiles an exemplar strip costs.")
@click.option("--example-image", "example_images", multiple=True, metavar="PATH[,neg]",
              help="Example images of the run (as for segment): checked, and their strip's cost shown.")
@click.option("--point", "points", multiple=True, metavar="X,Y[,neg]",
              help="Points of the run (as for segment): what they will cost (encodes, zoom-outs, decoder calls).")
@click.option("--point-file", default=None, help="Point layer of the run (as for segment): what its points will cost.")
@click.option("--prompts", type=int, default=1, show_default=True, help="Prompts per tile, for the cost estimate.")
@click.option("--report", "report_path", default=None, metavar="REPORT.json",
              help="A previous run's report: also show the sub-tiles its refinement added (written with --out, "
                   "column depth).")
@overwrite_opt
@handle_errors
def plan(input, out, boxes, example_images, points, point_file, prompts, report_path, overwrite, **options):
    """Print the tile count, the tiles skipped (outside --aoi, no tissue, all nodata) and a cost estimate
    for INPUT against the full grid's; optionally write the grid (columns run, skip). INPUT may also be a
    glob, a .txt list or STAC items: the maps their files form are planned (several files of one map: a
    mosaic, read as one image)."""
    from ..errors import UsageError
    from ..prompts.chips import parse_example_images
    from ..prompts.prompt import GeoBox, build_prompts
    from ..run.planning.area import check_area_meets
    from ..run.planning.inputs import expand_inputs
    from ..run.planning.maps import map_lines
    from ..run.planning.once import distinct_inputs
    from ..run.planning.plan import plan_maps, with_exemplars
    from ..writers import check_output, write_vector

    t0 = time.perf_counter()
    opts = Options.from_params(options)
    if out:
        check_output(out, overwrite)
    dates: dict = {}
    once = distinct_inputs(expand_inputs(input, opts.asset, dates=dates))  # each file once, no sidecars
    paths = once.paths
    for note in once.notes:
        click.echo(f"inputs: {note}")
    maps, notes = plan_maps(paths, opts, [None] * len(paths), dates)  # the run's own step: the same grids
    check_area_meets(maps, opts.aoi)
    if boxes or example_images:
        maps = [with_exemplars(inp, build_prompts([], [GeoBox.parse(b) for b in boxes],
                                                  parse_example_images(example_images)), opts) for inp in maps]
    pts = _points(maps, points, point_file, boxes, example_images, opts)
    report = _load_report(report_path) if report_path else None
    if len(paths) > 1:
        for line in map_lines(maps, notes):
            click.echo(line)
    layers = [_show_map(inp, input if len(paths) == 1 else inp.path, opts, prompts, report, report_path, bool(out),
                        pts is None) for inp in maps]
    if pts is not None:
        from ..run.planning.plan import point_cost_lines

        for line in [pts.describe(), *point_cost_lines(pts, maps)]:
            click.echo(line)
    if out:
        if len({str(inp.crs) for inp in maps}) > 1:
            raise UsageError(f"--out {out}: the inputs form maps in {len({str(i.crs) for i in maps})} CRSs, which one "
                             "file cannot hold: plan the files of one CRS at a time")
        import pandas as pd

        write_vector(layers[0] if len(layers) == 1 else pd.concat(layers, ignore_index=True), out, layer="tiles")
        click.echo(f"wrote the grid to {out}")
    click.echo(took(time.perf_counter() - t0))


def _points(maps, points, point_file, boxes, example_images, opts):
    """The run's points placed on the planned maps (`PointPrompts`; checked as segment checks them), or None."""
    from ..prompts.points import check_point_run, point_arguments
    from ..run.planning.plan import _plan_prompts

    given, point_file = check_point_run(point_arguments(list(points)), point_file, (), boxes, None, example_images,
                                        opts.squash, opts.aoi)
    if not given and not point_file:
        return None
    return _plan_prompts(maps, (), [], None, (), given, point_file)[1]


def _show_map(inp, name: str, opts, prompts: int, report, report_path, layer: bool, calls: bool = True):
    """Print one planned map's tiles and costs (`calls`: the model calls of text prompts over its tiles); returns
    its tile layer (a `map` column when of a mosaic) when `layer` or a report asks for one, else None: the
    counts alone are made over the grid at once."""
    from ..run.planning.area import skip_estimate
    from ..run.planning.plan import DECODE_S, ENCODE_S, exemplar_lines, refine_line
    from ..run.planning.tilelayer import TileCounts, tile_counts, tile_plan

    everything = tile_plan(inp, report=report) if layer or report is not None else None
    counts = TileCounts.of_layer(everything) if everything is not None else tile_counts(inp)
    from ..readers.mosaic import layout_of

    mosaic = layout_of(inp.path) is not None  # its name says so: "mosaic of N files (...)", "F warped to CRS"
    click.echo(f"{name}: {inp.frame.width} x {inp.frame.height} px, {inp.band_count} band(s) {inp.dtype}, "
               f"CRS {inp.crs.to_string() if inp.crs else 'none (pixel coordinates)'}")
    st = inp.stretch
    click.echo(f"bands used: {','.join(map(str, inp.bands))}; stretch: "
               f"{'none (uint8)' if st is None else f'{st.lo[0]:g}..{st.hi[0]:g} -> 0..255'}")
    n, run = counts.tiles, counts.run
    order = ["outside the area", "no tissue", "all nodata"]
    why = ", ".join(f"{counts.skipped[k]} {k}" for k in sorted(counts.skipped, key=lambda k: (
        order.index(k) if k in order else len(order), k)))
    click.echo(f"tiles: {n} ({counts.rows} rows x {counts.cols} cols), {n - run} skipped{f' ({why})' if why else ''}, "
               f"{run} to run")
    if inp.skips is not None and inp.skips.edge:
        click.echo(f"area: {inp.skips.edge}")
    if inp.skips is not None and inp.skips.tissue:
        click.echo(f"tissue: {inp.skips.tissue}")
    if opts.aoi is not None:
        click.echo("the area grows at run time where an object in it crosses into a skipped tile")
    if calls:  # a point run's calls follow its points, not the grid: printed after the maps
        click.echo(f"model calls: {run} encodes, {run * prompts} decodes; at ~{ENCODE_S} s + {DECODE_S} s per prompt "
                   f"on a desktop GPU: " + (skip_estimate(run, n, prompts, ENCODE_S, DECODE_S) if run < n else
                                            f"~{run * (ENCODE_S + DECODE_S * prompts) / 60:.1f} GPU-minutes"))
    if mosaic:
        click.echo(inp.describe())
    if calls:  # refinement re-runs saturated text prompts: no point run has any
        click.echo(refine_line(opts))
    for line in exemplar_lines([inp]):
        click.echo(line)
    if report is not None:
        click.echo(_refined_line(everything, report_path, name))
    if mosaic and everything is not None:
        everything["map"] = str(inp.path)
    return everything


def took(seconds: float) -> str:
    """'planned in 2.1 s, peak memory 310 MB': the plan's own cost (the process's peak resident memory)."""
    import sys

    try:
        import resource
    except ImportError:  # Windows: the peak working set
        import psutil

        mb = psutil.Process().memory_info().peak_wset / 2**20
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KB on Linux, bytes on macOS
        mb = peak / 2**20 if sys.platform == "darwin" else peak / 2**10
    return f"planned in {seconds:.1f} s, peak memory {mb:.0f} MB"


def _refined_line(tiles, report_path: str, input: str) -> str:
    """Where a previous run's refinement happened: refined grid tiles, sub-tiles per depth."""
    subs = tiles[tiles["depth"] > 0]
    if not len(subs):
        return f"refinement in {report_path}: no tile of {input} was refined"
    per = ", ".join(f"depth {d}: {c}" for d, c in subs["depth"].value_counts().sort_index().items())
    grid = tiles[tiles["depth"] == 0]
    return (f"refinement in {report_path}: {int((grid['refined_prompts'] != '').sum())} grid tile(s) refined, "
            f"{len(subs)} sub-tile(s) ({per})")


def _load_report(path: str) -> dict:
    import json

    from ..errors import UsageError

    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        raise UsageError(f"--report {path}: cannot read it as a sam3tiles run report ({e}): give the "
                         "<output>.report.json a run wrote") from None
    if not isinstance(data, dict) or "tiles" not in data:
        raise UsageError(f"--report {path} is not a sam3tiles run report: give the <output>.report.json a run wrote")
    return data
