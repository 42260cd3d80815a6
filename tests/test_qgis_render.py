"""Gigapixel results in QGIS: Debian's headless QGIS 3.22 opens the GeoPackage and the QuPath GeoJSON of a
slide with thousands of nuclei, sees the GeoPackage's spatial index, renders each as its canvas would and
shows the objects where they are (and the background between them); the time to the first render is printed
(`python -m benchmarks.bench_qgis --size 20000` measures it at 120,000 objects). Skipped where
/usr/bin/python3 cannot import qgis (CI installs python3-qgis qgis-providers)."""

from __future__ import annotations

import pytest

from benchmarks import bench_qgis

needs_qgis = pytest.mark.skipif(not bench_qgis.has_qgis(), reason="/usr/bin/python3 cannot import qgis "
                                "(apt-get install python3-qgis qgis-providers)")


@needs_qgis
def test_qgis_renders_our_many_object_outputs_where_the_objects_are(tmp_path):
    result = bench_qgis.run(3000, folder=tmp_path)
    gpkg, geojson = result["layers"]
    print(f"QGIS {result['version']}: {result['objects']:,} objects; to the first render (open + render) "
          f"GeoPackage {gpkg['to_first_view_s']:.2f} s, QuPath GeoJSON {geojson['to_first_view_s']:.2f} s")
    for layer in (gpkg, geojson):
        assert layer["valid"] and layer["features"] == result["objects"] > 2000, layer
        assert layer["inside_drawn"] == layer["inside"] == 300, layer  # each sampled object drawn where it is
        assert layer["outside"] >= 100 and layer["outside_drawn"] == 0, layer  # the background between them
        assert layer["first_render_s"] > 0 and layer["zoomed_render_s"] > 0
    assert gpkg["spatial_index"] == "present"  # the R-tree QGIS's zoomed renders query
    assert not any("Warning" in line or "ERROR" in line for line in result["stderr"]), result["stderr"]
