"""Our outputs opened by the LTS GIS stacks users have: Debian 12's GDAL 3.6 `ogrinfo` and its
`validate_gpkg.py`, and QGIS 3.22's own opening of the layers. These need the Debian packages (CI installs
them: `apt-get install gdal-bin python3-gdal python3-qgis qgis-providers`); without them the tests skip."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import rasterio
from click.testing import CliRunner
from PIL import Image

from sam3tiles.cli.main import cli
from sam3tiles.testing.demo import write_scene

OGRINFO = Path("/usr/bin/ogrinfo")
SYSTEM_PYTHON = Path("/usr/bin/python3")
VALIDATE = [Path("/usr/lib/python3/dist-packages/osgeo_utils/samples/validate_gpkg.py"),
            Path("/usr/share/doc/python3-gdal/examples/validate_gpkg.py")]

needs_ogrinfo = pytest.mark.skipif(not OGRINFO.exists(), reason="no /usr/bin/ogrinfo (apt-get install gdal-bin)")


def _segment(*args) -> None:
    r = CliRunner().invoke(cli, ["-q", "segment", *[str(a) for a in args], "--backend", "reference"],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output


@pytest.fixture(scope="module")
def gpkgs(tmp_path_factory):
    """A georeferenced output with a second layer (pixel space) added by --layer, and a no-CRS output."""
    d = tmp_path_factory.mktemp("gpkg")
    scene = write_scene(d / "scene.tif", 700, 600, seed=3).path
    with rasterio.open(scene) as s:
        Image.fromarray(np.moveaxis(s.read(), 0, -1)).save(d / "plain.png")
    _segment(scene, "-t", "red", "-t", "blue", "--out", d / "objects.gpkg")
    _segment(d / "plain.png", "-t", "red", "--out", d / "objects.gpkg", "--layer", "pixels")
    _segment(d / "plain.png", "-t", "red", "--out", d / "plain.gpkg")
    return [d / "objects.gpkg", d / "plain.gpkg"]


@needs_ogrinfo
def test_debian_gdal_opens_our_geopackages_without_a_warning(gpkgs):
    """GDAL >= 3.7 writes GeoPackage 1.4 by default: GDAL 3.6 then warns "user_version=0x000028A0 (10400,
    v1.4.0) ... may only be partially supported" at every open (QGIS 3.22 prints it for each layer)."""
    for path in gpkgs:
        r = subprocess.run([str(OGRINFO), "-ro", "-al", "-so", str(path)], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0 and r.stderr == "", r.stderr
        assert "Warning" not in r.stdout and "Feature Count" in r.stdout
    layers = subprocess.run([str(OGRINFO), "-ro", "-q", str(gpkgs[0])], capture_output=True, text=True).stdout
    assert "objects" in layers and "pixels" in layers


@needs_ogrinfo
def test_debian_validate_gpkg_passes(gpkgs):
    """GDAL 3.6's validate_gpkg.py knows GeoPackage up to 1.3 and its R-tree triggers (update1/update3;
    1.4's update6/update7 fail its Req 75)."""
    script = next((p for p in VALIDATE if p.exists()), None)
    if script is None or not SYSTEM_PYTHON.exists():
        pytest.skip("no validate_gpkg.py (apt-get install python3-gdal)")
    for path in gpkgs:
        r = subprocess.run([str(SYSTEM_PYTHON), str(script), str(path)], capture_output=True, text=True,
                           timeout=120, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
        assert r.returncode == 0 and r.stdout.strip() == "" and r.stderr.strip() == "", r.stdout + r.stderr


def test_parquet_output_says_which_tools_open_it(gpkgs, tmp_path):
    scene = gpkgs[0].parent / "scene.tif"
    out = tmp_path / "objects.parquet"
    r = CliRunner().invoke(cli, ["segment", str(scene), "-t", "red", "--backend", "reference", "--out", str(out)],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    note = json.loads((tmp_path / "objects.parquet.report.json").read_text())["output_notes"]
    assert len(note) == 1 and "GDAL >= 3.5" in note[0] and "Debian" in note[0] and ".gpkg" in note[0]
    assert "Parquet driver" in r.output
    if OGRINFO.exists():  # the note's claim, on this machine's Debian GDAL
        formats = subprocess.run([str(OGRINFO), "--formats"], capture_output=True, text=True).stdout
        opened = subprocess.run([str(OGRINFO), "-ro", "-so", "-al", str(out)], capture_output=True, text=True)
        assert ("Parquet" in formats) == (opened.returncode == 0), opened.stderr


QGIS_OPEN = """
import json, os, sys
os.environ["QT_QPA_PLATFORM"] = "offscreen"
from qgis.core import Qgis, QgsApplication, QgsVectorLayer
app = QgsApplication([], False); app.initQgis()
msgs = []
QgsApplication.messageLog().messageReceived.connect(lambda m, tag, lvl: msgs.append(m) if lvl != Qgis.Info else None)
out = {}
for uri in sys.argv[1:]:
    layer = QgsVectorLayer(uri, "x", "ogr")
    out[uri] = [layer.isValid(), layer.featureCount(), layer.crs().authid()]
app.processEvents()
print("RESULT " + json.dumps({"layers": out, "messages": msgs, "version": Qgis.QGIS_VERSION}), flush=True)
os._exit(0)
"""


def test_debian_qgis_opens_our_vector_outputs_without_a_message(gpkgs, tmp_path):
    if not SYSTEM_PYTHON.exists() or subprocess.run([str(SYSTEM_PYTHON), "-c", "import qgis.core"],
                                                    capture_output=True).returncode != 0:
        pytest.skip("/usr/bin/python3 cannot import qgis (apt-get install python3-qgis qgis-providers)")
    scene = gpkgs[0].parent / "scene.tif"
    for ext in ("fgb", "geojson"):
        _segment(scene, "-t", "red", "--out", tmp_path / f"objects.{ext}", "--no-preview")
    uris = [f"{gpkgs[0]}|layername=objects", f"{gpkgs[0]}|layername=pixels", str(gpkgs[1]),
            str(tmp_path / "objects.fgb"), str(tmp_path / "objects.geojson")]
    r = subprocess.run([str(SYSTEM_PYTHON), "-c", QGIS_OPEN, *uris], capture_output=True, text=True, timeout=120,
                       env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line is not None, r.stdout + r.stderr
    res = json.loads(line[len("RESULT "):])
    assert all(v[0] and v[1] > 0 for v in res["layers"].values()), res
    assert res["layers"][uris[0]][2] == "EPSG:32633" and res["layers"][uris[4]][2] == "EPSG:4326"
    assert res["messages"] == [] and "Warning" not in r.stderr, (res["messages"], r.stderr)
