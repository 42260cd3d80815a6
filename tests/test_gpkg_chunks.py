"""A GeoPackage written in chunks (runs of more than `writers.stream.CHUNK_ROWS` objects) declares a geometry
type that every row conforms to, whichever chunk first holds a MultiPolygon (GDAL warned 'not conformant' and
QGIS reads the layer as Polygon when the first chunk held only Polygons)."""

from __future__ import annotations

import geopandas as gpd
import pyogrio
import pytest
from shapely.geometry import MultiPolygon, box

from sam3tiles.writers.vector import write_vector


def _chunk(n: int, x0: float, multi_at: int | None = None) -> gpd.GeoDataFrame:
    geoms = [box(x0 + i * 10, 0, x0 + i * 10 + 5, 5) for i in range(n)]
    if multi_at is not None:
        g = geoms[multi_at]
        geoms[multi_at] = MultiPolygon([g, box(g.bounds[0], 7, g.bounds[0] + 3, 9)])
    return gpd.GeoDataFrame({"id": range(int(x0), int(x0) + n)}, geometry=geoms, crs="EPSG:32633")


def _conforms(path) -> tuple[str, set[str]]:
    declared = pyogrio.read_info(str(path))["geometry_type"]
    types = set(pyogrio.read_dataframe(str(path)).geometry.geom_type)
    return declared, types


@pytest.mark.parametrize("chunks", [
    [(3, 0, None), (3, 1000, 1)],           # the second chunk brings the first MultiPolygon
    [(0, 0, None), (3, 0, None), (3, 1000, 2)],  # an empty first chunk (the columns), then chunks
    [(3, 0, 0), (3, 1000, None)],           # the first chunk holds it
])
def test_chunked_gpkg_rows_conform_to_the_declared_type(tmp_path, chunks):
    out = tmp_path / "o.gpkg"
    write_vector(iter([_chunk(*c) for c in chunks]), out)
    declared, types = _conforms(out)
    assert sum(c[0] for c in chunks) == len(pyogrio.read_dataframe(str(out)))
    assert declared in ("MultiPolygon", "Unknown") or types == {declared}, (declared, types)
    if declared == "MultiPolygon":
        assert types == {"MultiPolygon"}


def test_one_chunk_of_polygons_stays_polygon(tmp_path):
    out = tmp_path / "o.gpkg"
    write_vector(_chunk(4, 0), out)
    assert _conforms(out) == ("Polygon", {"Polygon"})
