"""`sam3tiles plan`: how a raster will be tiled, before spending any GPU time."""

from __future__ import annotations

import click

from .options import handle_errors, overwrite_opt, tiling_options


@click.command(short_help="Show the tile grid of a raster.")
@click.argument("input")
@tiling_options
@click.option("--out", "-o", default=None, help="Write the grid as polygons (.gpkg, .geojson, ...).")
@click.option("--prompts", type=int, default=1, show_default=True, help="Prompts per tile, for the cost estimate.")
@overwrite_opt
@handle_errors
def plan(input, tile_size, overlap, scale, gsd, bands, squash, out, prompts, overwrite):
    """Print the tile count, skipped (all-nodata) tiles and a cost estimate for INPUT; optionally write
    the grid."""
    from ..writers import check_output, write_vector
    from ..pipeline import Options
    from ..plan import plan as make_plan
    from ..readers import open_source, parse_bands

    opts = Options(tile_size=tile_size, overlap=overlap, scale=scale, gsd=gsd, bands=parse_bands(bands),
                   squash=squash)
    if out:
        check_output(out, overwrite)
    grid = make_plan(input, opts)
    with open_source(input, bands=opts.bands) as src:
        click.echo(f"{input}: {src.width} x {src.height} px, {src.dataset.count} band(s) {src.dtype}, "
                   f"CRS {src.crs.to_string() if src.crs else 'none (pixel coordinates)'}")
        click.echo(f"bands used: {','.join(map(str, src.bands))}; stretch: "
                   f"{'none (uint8)' if src.stretch is None else f'{src.stretch.lo[0]:g}..{src.stretch.hi[0]:g} -> 0..255'}")
    n, skipped = len(grid), int((~grid["has_data"]).sum())
    rows, cols = int(grid["row"].max()) + 1, int(grid["col"].max()) + 1
    click.echo(f"tiles: {n} ({rows} rows x {cols} cols), {skipped} skipped (all nodata), {n - skipped} to run")
    click.echo(f"model calls: {n - skipped} encodes, {(n - skipped) * prompts} decodes; at ~0.35 s + 0.07 s per "
               f"prompt on a desktop GPU: ~{(n - skipped) * (0.35 + 0.07 * prompts) / 60:.1f} GPU-minutes")
    if out:
        write_vector(grid, out, layer="tiles")
        click.echo(f"wrote the grid to {out}")
