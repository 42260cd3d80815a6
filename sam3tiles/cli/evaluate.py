"""`sam3tiles evaluate`: object-level precision, recall and F1 of predictions against truth."""

from __future__ import annotations

import click

from ..errors import InputDataError
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
            raise InputDataError(f"{path} is not a vector file GDAL or GeoParquet can read: give a .gpkg, "
                                 ".parquet, .fgb or .geojson") from None


@click.command(short_help="Compare predictions with truth.")
@click.argument("pred")
@click.argument("truth")
@click.option("--class-col", default="class", show_default=True, help="Class column of TRUTH (matched "
                                                                      "against PRED's prompt column).")
@click.option("--iou", type=float, default=0.5, show_default=True, help="IoU for a match.")
@click.option("--out", "-o", default=None, help="Also write the table as CSV.")
@handle_errors
def evaluate(pred, truth, class_col, iou, out):
    """Per class: precision, recall and F1 at IoU >= 0.5, mean IoU, duplicates and fragments."""
    from ..evaluate import evaluate as run, format_table

    table = run(read_vector(pred), read_vector(truth), class_col=class_col, iou_min=iou)
    click.echo(format_table(table))
    if out:
        table.to_csv(out, index=False)
