"""`sam3tiles plan`: how a raster will be tiled, before spending any GPU time."""

from __future__ import annotations

import click

from ..options import Options
from .options import handle_errors, overwrite_opt, registry_options


@click.command(short_help="Show the tile grid of a raster.")
@click.argument("input")
@registry_options("plan")
@click.option("--out", "-o", default=None, help="Write the grid as polygons (.gpkg, .geojson, ...).")
@click.option("--prompts", type=int, default=1, show_default=True, help="Prompts per tile, for the cost estimate.")
@overwrite_opt
@handle_errors
def plan(input, out, prompts, overwrite, **options):
    """Print the tile count, skipped (all-nodata) tiles and a cost estimate for INPUT; optionally write
    the grid."""
    from ..plan import DECODE_S, ENCODE_S, plan_input, tile_plan
    from ..writers import check_output, write_vector

    opts = Options.from_params(options)
    if out:
        check_output(out, overwrite)
    inp = plan_input(input, opts)  # the pre-flight's own step for one input
    grid = tile_plan(inp)
    click.echo(f"{input}: {inp.width} x {inp.height} px, {inp.band_count} band(s) {inp.dtype}, "
               f"CRS {inp.crs.to_string() if inp.crs else 'none (pixel coordinates)'}")
    st = inp.stretch
    click.echo(f"bands used: {','.join(map(str, inp.bands))}; stretch: "
               f"{'none (uint8)' if st is None else f'{st.lo[0]:g}..{st.hi[0]:g} -> 0..255'}")
    n, skipped = len(grid), int((~grid["has_data"]).sum())
    rows, cols = int(grid["row"].max()) + 1, int(grid["col"].max()) + 1
    click.echo(f"tiles: {n} ({rows} rows x {cols} cols), {skipped} skipped (all nodata), {n - skipped} to run")
    click.echo(f"model calls: {n - skipped} encodes, {(n - skipped) * prompts} decodes; at ~{ENCODE_S} s + {DECODE_S} s "
               f"per prompt on a desktop GPU: ~{(n - skipped) * (ENCODE_S + DECODE_S * prompts) / 60:.1f} GPU-minutes")
    if out:
        write_vector(grid, out, layer="tiles")
        click.echo(f"wrote the grid to {out}")
