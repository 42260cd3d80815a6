"""napari's start with sam3tiles installed: its plugin discovery (npe2, at every napari start, whatever files
the user opens) imports our package to find the manifest; the package's public names load on first use, so
that costs no run machinery (it took 1.3 s of CPU before); and the napari reader counts a GeoJSON only up to
the shapes-or-points limit."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import sam3tiles
from sam3tiles.integrations import napari_objects

ROOT = Path(sam3tiles.__file__).resolve().parents[1]
HEAVY = ("sam3tiles.api", "sam3tiles.run.pipeline", "sam3tiles.model", "sam3tiles.readers", "sam3tiles.writers",
         "dask", "geopandas", "onnxruntime")


def _fresh(code: str) -> dict:
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_npe2_discovery_finds_our_manifest_without_loading_the_run():
    pytest.importorskip("npe2")
    out = _fresh("import json, sys, npe2\n"
                 "pm = npe2.PluginManager(); pm.discover()\n"
                 "found = [m.name for m in pm.iter_manifests()]\n"
                 f"print(json.dumps({{'found': found, 'loaded': [m for m in {HEAVY!r} if m in sys.modules]}}))")
    assert "sam3tiles" in out["found"]
    assert out["loaded"] == []


def test_the_public_names_load_on_first_use():
    out = _fresh("import json, sys, sam3tiles\n"
                 "before = 'sam3tiles.api' in sys.modules\n"
                 "from sam3tiles import segment, segment_report, Options, GeoBox, GeoPoint\n"
                 "names = [f.__module__ for f in (segment, segment_report, Options, GeoBox, GeoPoint)]\n"
                 "try:\n    sam3tiles.no_such_name\n    missing = False\nexcept AttributeError:\n    missing = True\n"
                 "print(json.dumps({'before': before, 'names': names, 'missing': missing, "
                 "'listed': set(sam3tiles.__all__) <= set(dir(sam3tiles)), 'version': sam3tiles.__version__}))")
    assert out["before"] is False and out["missing"] and out["listed"]
    assert out["names"] == ["sam3tiles.api", "sam3tiles.api", "sam3tiles.options", "sam3tiles.prompts.prompt",
                            "sam3tiles.prompts.points"]
    assert out["version"] == sam3tiles.__version__
    assert sam3tiles.segment is sam3tiles.api.segment  # the same object, cached after the first use


def test_a_geojson_is_counted_only_up_to_the_limit(tmp_path):
    """The choice between shapes and points needs the count up to the limit: the rest of a 10^5-object file
    (hundreds of MB) is not read twice. What is counted stops where the count passes `upto`."""
    feature = b'{"type": "Feature", "id": "x", "geometry": null, "properties": {}}'
    p = tmp_path / "o.geojson"
    p.write_bytes(b'{"type": "FeatureCollection", "features": [\n' + b",\n".join([feature] * 3000) + b"\n]}\n")
    assert napari_objects._count_features(str(p), block=4096) == 3000
    early = napari_objects._count_features(str(p), block=4096, upto=101)
    assert 101 <= early < 101 + 4096 // len(feature) + 1
    assert napari_objects.count(str(p), "GeoJSON", None) == 3000
