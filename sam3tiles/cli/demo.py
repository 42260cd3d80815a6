"""`sam3tiles demo`: the whole job on a generated scene, tiled and squashed, side by side."""

from __future__ import annotations

from pathlib import Path

import click

from .options import handle_errors

PROMPTS = ("red", "blue", "yellow")
GREEN, MAGENTA = (0, 255, 0), (255, 0, 255)
#: The overlay's legend (and the README figure's, examples/readme_figure.py).
LEGEND = [("tiled: sam3tiles, merged across seams", GREEN), ("squashed to 1008 px: the published callers", MAGENTA)]
NAMES = {"red": "vehicles ~10x20 px", "blue": "buildings 40-160 px", "yellow": "fields larger than a tile"}


@click.command(short_help="Run the pipeline on a generated scene.")
@click.option("--out", "-o", default="sam3tiles-demo", show_default=True, help="Folder for everything written.")
@click.option("--size", default="5000x4000", show_default=True, help="Scene size WIDTHxHEIGHT in pixels.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--workers", type=int, default=None, help="CPU threads.")
@click.option("--overwrite", is_flag=True, help="Replace the demo's files in an existing --out folder.")
@click.pass_context
@handle_errors
def demo(ctx, out, size, seed, workers, overwrite):
    """Generate a georeferenced scene (UTM, 0.3 m pixels) with vehicles, buildings and fields of known
    extent; segment it with the reference backend, tiled and --squash; write polygons, an overlay PNG
    and the evaluation of both."""
    from ..errors import UsageError
    from ..evaluate import evaluate, format_table
    from ..run.pipeline import Options, segment_job
    from ..testing.demo import add_overviews, overlay_png, write_scene

    try:
        width, height = (int(v) for v in size.lower().split("x"))
    except ValueError:
        raise UsageError(f"--size {size!r}: give WIDTHxHEIGHT, e.g. 5000x4000") from None
    if min(width, height) < 64:
        raise UsageError("--size: the scene needs at least 64 pixels on a side")
    quiet = (ctx.obj or {}).get("quiet", 0)
    d = Path(out)
    check_demo_folder(d, overwrite)
    d.mkdir(parents=True, exist_ok=True)
    click.echo(f"writing a {width}x{height} scene to {d / 'scene.tif'} ...", err=True)
    scene = write_scene(d / "scene.tif", width, height, seed)
    add_overviews(scene.path)  # as a COG has them: QGIS and the quicklook draw from them
    from ..writers import write_vector

    write_vector(scene.truth, d / "truth.gpkg")
    write_examples(d, scene)
    tables = {}
    results = {}
    for mode, squash in (("tiled", False), ("squash", True)):
        click.echo(f"\n== {mode}: " + ("1008x1008 tiles, overlap 256, merged across seams" if not squash else
                                        "the whole scene squashed to one 1008x1008 input (published callers)"),
                   err=True)
        opts = Options(backend="reference", squash=squash, workers=workers, progress=not quiet)
        gdf, report = segment_job(str(d / "scene.tif"), list(PROMPTS), out=d / f"{mode}.gpkg", overwrite=True,
                                  options=opts, checkpoint=False)
        click.echo(report.summary(), err=True)
        table = evaluate(gdf, scene.truth, class_col="class")
        table.to_csv(d / f"{mode}-evaluation.csv", index=False)
        tables[mode] = table
        results[mode] = gdf
    png = overlay_png(d / "scene.tif", [(results["squash"], MAGENTA), (results["tiled"], GREEN)], d / "overlay.png",
                      legend=LEGEND)
    click.echo("")
    for mode, table in tables.items():
        click.echo(f"{mode}:")
        click.echo(format_table(table))
        click.echo("")
    rec = {m: dict(zip(t["class"], t["recall"])) for m, t in tables.items()}
    for cls in PROMPTS:
        click.echo(f"{cls:>6} ({NAMES[cls]}): recall tiled {rec['tiled'].get(cls, 0):.2f}, "
                   f"squashed {rec['squash'].get(cls, 0):.2f}")
    click.echo(f"\nwrote {d}/tiled.gpkg, {d}/squash.gpkg, {d}/truth.gpkg, {png} (green: tiled, magenta: "
               f"squashed), and example prompts: {d}/boxes.gpkg, {d}/chips/, {d}/background.png")


#: What `sam3tiles demo` writes into its folder (with each GeoPackage's report and preview).
DEMO_FILES = ("scene.tif", "truth.gpkg", "overlay.png", "boxes.gpkg", "chips", "background.png",
              *(f"{m}{x}" for m in ("tiled", "squash") for x in (".gpkg", ".gpkg.report.json", ".gpkg.preview.png",
                                                                 "-evaluation.csv")))


def write_examples(d: Path, scene) -> None:
    """The example prompts the README's commands use: `boxes.gpkg` (two buildings, and a vehicle with
    `label` 0: a negative example), `chips/` (two buildings cut from the scene) and `background.png` (a
    patch of ground, a negative example image)."""
    import geopandas as gpd
    import numpy as np
    import rasterio
    from PIL import Image
    from rasterio.windows import Window, from_bounds
    from shapely.geometry import box

    from ..writers import write_vector

    truth = scene.truth
    buildings = truth[truth["class"] == "blue"].head(2)
    picks = [*buildings.geometry, *truth[truth["class"] == "red"].head(1).geometry]
    labels = [1] * len(buildings) + [0] * (len(picks) - len(buildings))
    write_vector(gpd.GeoDataFrame({"label": labels}, geometry=[box(*g.bounds) for g in picks], crs=truth.crs),
                 d / "boxes.gpkg")
    (d / "chips").mkdir(exist_ok=True)
    with rasterio.open(scene.path) as ds:
        for i, g in enumerate(buildings.geometry, 1):
            win = from_bounds(*g.buffer(1.5).bounds, transform=ds.transform).round_offsets().round_lengths()
            Image.fromarray(np.moveaxis(ds.read(window=win), 0, -1)).save(d / "chips" / f"building-{i}.png")
        free = next(w for w in (Window(c, r, 48, 48) for r in range(0, ds.height - 48, 48)
                                for c in range(0, ds.width - 48, 48))
                    if not truth.intersects(box(*rasterio.windows.bounds(w, ds.transform))).any())
        Image.fromarray(np.moveaxis(ds.read(window=free), 0, -1)).save(d / "background.png")


def check_demo_folder(d: Path, overwrite: bool) -> None:
    """The demo replaces only its own files: one of them already in --out (the user's scene.tif, truth.gpkg)
    is exit 2 without --overwrite, before anything is written."""
    from ..errors import OutputError, OutputExistsError

    if d.exists() and not d.is_dir():
        raise OutputError(f"--out {d} is a file: name a folder for the demo")
    there = [n for n in DEMO_FILES if (d / n).exists() or (d / n).is_symlink()]
    if there and not overwrite:
        raise OutputExistsError(f"--out {d} already holds {there[0]}"
                                f"{f' and {len(there) - 1} more' if len(there) > 1 else ''} "
                                "of the files the demo writes: pass --overwrite to replace them, "
                                "or choose a new folder")
