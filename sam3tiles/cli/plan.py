"""`sam3tiles plan`: how a raster will be tiled, before spending any GPU time."""

from __future__ import annotations

import click

from .options import handle_errors, overwrite_opt, tiling_options


@click.command(short_help="Show the tile grid of a raster.")
@click.argument("input")
@tiling_options
@click.option("--out", "-o", default=None, help="Write the grid as polygons (.gpkg, .geojson, ...).")
@click.option("--prompts", type=int, default=1, show_default=True, help="Prompts per tile, for the cost estimate.")
@click.option("--report", "report_path", default=None, metavar="REPORT.json",
              help="A previous run's report: also show the sub-tiles its refinement added (written with --out, "
                   "column depth).")
@overwrite_opt
@handle_errors
def plan(input, tile_size, overlap, scale, gsd, bands, squash, out, prompts, report_path, overwrite):
    """Print the tile count, skipped (all-nodata) tiles and a cost estimate for INPUT; optionally write
    the grid."""
    import geopandas as gpd

    from ..writers import check_output, write_vector
    from .run import refine_line
    from ..pipeline import Options
    from ..plan import plan as make_plan
    from ..readers import open_source, parse_bands

    opts = Options(tile_size=tile_size, overlap=overlap, scale=scale, gsd=gsd, bands=parse_bands(bands),
                   squash=squash)
    if out:
        check_output(out, overwrite)
    report = _load_report(report_path) if report_path else None
    grid = make_plan(input, opts, report=report)
    with open_source(input, bands=opts.bands) as src:
        click.echo(f"{input}: {src.width} x {src.height} px, {src.dataset.count} band(s) {src.dtype}, "
                   f"CRS {src.crs.to_string() if src.crs else 'none (pixel coordinates)'}")
        click.echo(f"bands used: {','.join(map(str, src.bands))}; stretch: "
                   f"{'none (uint8)' if src.stretch is None else f'{src.stretch.lo[0]:g}..{src.stretch.hi[0]:g} -> 0..255'}")
    subs = grid[grid["depth"] > 0]
    grid = grid[grid["depth"] == 0]
    n, skipped = len(grid), int((~grid["has_data"]).sum())
    rows, cols = int(grid["row"].max()) + 1, int(grid["col"].max()) + 1
    click.echo(f"tiles: {n} ({rows} rows x {cols} cols), {skipped} skipped (all nodata), {n - skipped} to run")
    click.echo(f"model calls: {n - skipped} encodes, {(n - skipped) * prompts} decodes; at ~0.35 s + 0.07 s per "
               f"prompt on a desktop GPU: ~{(n - skipped) * (0.35 + 0.07 * prompts) / 60:.1f} GPU-minutes")
    click.echo(refine_line(opts))
    if report is not None:
        if len(subs):
            per = ", ".join(f"depth {d}: {c}" for d, c in subs["depth"].value_counts().sort_index().items())
            click.echo(f"refinement in {report_path}: {int((grid['refined_prompts'] != '').sum())} grid tile(s) "
                       f"refined, {len(subs)} sub-tile(s) ({per})")
        else:
            click.echo(f"refinement in {report_path}: no tile of {input} was refined")
    if out:
        import pandas as pd

        write_vector(gpd.GeoDataFrame(pd.concat([grid, subs]), geometry="geometry", crs=grid.crs), out,
                     layer="tiles")
        click.echo(f"wrote the grid to {out}")


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
