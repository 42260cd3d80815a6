"""`sam3tiles evaluate`: object-level precision, recall and F1 of predictions against truth."""

from __future__ import annotations

import os
from pathlib import Path

import click

from ..errors import InputDataError
from ..writers.formats import FORMATS, endings
from .options import handle_errors


def read_vector(path: str):
    import os

    import geopandas as gpd
    import pyogrio.errors

    if not os.path.exists(path):
        raise InputDataError(f"{path}: no such file: check the path")
    try:
        return gpd.read_file(path)
    except (pyogrio.errors.DataSourceError, pyogrio.errors.DataLayerError, ValueError):
        try:
            return gpd.read_parquet(path)
        except Exception:  # noqa: BLE001
            readable = [f for f in FORMATS if f.driver]  # what GDAL (or geopandas, GeoParquet) reads
            raise InputDataError(f"{path} is not a vector file GDAL or GeoParquet can read: give a "
                                 f"{endings(readable, every=False, last=' or ')}") from None


@click.command(short_help="Compare predictions with truth.")
@click.argument("pred")
@click.argument("truth")
@click.option("--class-col", default=None, help="Class column of TRUTH (matched against PRED's prompt column) "
                                               "[default: class; without one, everything is one class].")
@click.option("--iou", type=float, default=0.5, show_default=True, help="IoU for a match.")
@click.option("--out", "-o", default=None, help="Also write the table as CSV.")
@click.option("--overwrite", is_flag=True, help="Replace an existing --out.")
@handle_errors
def evaluate(pred, truth, class_col, iou, out, overwrite):
    """Per class: precision, recall and F1 at IoU >= 0.5, mean IoU, duplicates and fragments."""
    from ..errors import OutputExistsError, UsageError
    from ..evaluate import evaluate as run, format_table
    from ..writers.atomic import atomic_path, check_name

    if out:
        check_name(Path(out))
        if any(os.path.exists(x) and os.path.realpath(out) == os.path.realpath(x) for x in (pred, truth)):
            raise UsageError(f"--out {out} is one of the inputs: it would be replaced; write the table elsewhere")
        if os.path.lexists(out) and not overwrite:
            raise OutputExistsError(f"--out {out} exists: pass --overwrite to replace it, or choose another name")
    truth_gdf = read_vector(truth)
    if class_col is not None and class_col not in truth_gdf.columns:
        cols = ", ".join(c for c in truth_gdf.columns if c != "geometry") or "none"
        raise UsageError(f"--class-col {class_col}: {truth} has no such column (its columns: {cols}): name one of "
                         "them, or leave --class-col out to score everything as one class")
    table = run(read_vector(pred), truth_gdf, class_col=class_col or "class", iou_min=iou)
    click.echo(format_table(table))
    if out:
        with atomic_path(out) as tmp:
            table.to_csv(tmp, index=False)
