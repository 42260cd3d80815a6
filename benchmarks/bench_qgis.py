"""A gigapixel result in QGIS: the GeoPackage and the QuPath GeoJSON of a slide's nuclei opened in headless
QGIS (Debian's /usr/bin/python3 with python3-qgis, QGIS 3.22) as its canvas shows them: seconds to open,
to the first render of the whole layer, to a render zoomed in, whether QGIS sees the spatial index, and
whether the render shows the objects where they are.

    python -m benchmarks.bench_qgis --size 20000     # ~120,000 nuclei (the napari benchmark's slide layout)
    python -m benchmarks.bench_qgis --smoke          # 3000 px, ~2,700 objects: what the test runs

The files are written with the writers from the layout's own polygons, as a run writes them (no slide raster,
no segmentation: QGIS's cost is measured here). The render is 1600 x 1200 px; "inside": the centroids of 300
objects, which must be drawn; "outside": points at least two screen pixels from every object, which must be
the background.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .common import HERE, emit

SYSTEM_PYTHON = Path("/usr/bin/python3")
SCRIPT = HERE / "qgis_render.py"
CANVAS = (1600, 1200)
SAMPLE = 300
FILES = ("nuclei.gpkg", "nuclei.qupath.geojson")


def has_qgis() -> bool:
    if not SYSTEM_PYTHON.exists():
        return False
    return subprocess.run([str(SYSTEM_PYTHON), "-c", "import qgis.core"], capture_output=True, timeout=120,
                          env=_env()).returncode == 0


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["QT_QPA_PLATFORM"] = "offscreen"
    return env


def build(folder: Path, size: int, seed: int = 0, files: tuple[str, ...] = FILES) -> dict:
    """The layout's nuclei written as a run names them, and the points the render is checked at."""
    import numpy as np
    import shapely

    import sam3tiles
    from sam3tiles.testing.slidegen import BRIGHTFIELD, layout, truth_frame
    from sam3tiles.writers import write_vector

    gdf = truth_frame(layout(size, size, seed, names=tuple(BRIGHTFIELD))).rename(columns={"class": "prompt"})
    gdf.insert(0, "id", np.arange(1, len(gdf) + 1))
    gdf["score"] = 0.9
    gdf["area_px"] = shapely.area(gdf.geometry.values)
    meta = {"version": sam3tiles.__version__, "pixel_frame": {"source": "slide.ome.tif", "crs": None,
            "transform": [1.0, 0.0, 0.0, 0.0, 1.0, 0.0], "width": size, "height": size}}
    seconds = {}
    for name in files:
        t0 = time.perf_counter()
        write_vector(gdf, folder / name, metadata=meta)
        seconds[name] = time.perf_counter() - t0
    rng = np.random.default_rng(seed)
    pick = rng.choice(len(gdf), size=min(SAMPLE, len(gdf)), replace=False)
    inside = shapely.get_coordinates(shapely.centroid(gdf.geometry.values[pick])).tolist()
    gap = 2.0 * size / min(CANVAS)  # two screen pixels at the whole-layer view
    tree, outside = shapely.STRtree(gdf.geometry.values), []
    x0, y0, x1, y1 = gdf.total_bounds  # within the layer's extent: on the rendered image
    for xy in rng.uniform((x0 + gap, y0 + gap), (x1 - gap, y1 - gap), (20 * SAMPLE, 2)):
        if len(outside) < SAMPLE and not len(tree.query(shapely.Point(*xy), predicate="dwithin", distance=gap)):
            outside.append(xy.tolist())
    return {"objects": len(gdf), "write_s": seconds, "inside": inside, "outside": outside,
            "paths": [str(folder / n) for n in files]}


def probe(folder: Path, built: dict, timeout: float = 3000) -> dict:
    """qgis_render.py under the system python; its JSON."""
    spec = {"size": list(CANVAS), "layers": [{"uri": p, "inside": built["inside"], "outside": built["outside"]}
                                             for p in built["paths"]]}
    (folder / "spec.json").write_text(json.dumps(spec))
    out = folder / "qgis.json"
    t0 = time.perf_counter()
    r = subprocess.run([str(SYSTEM_PYTHON), str(SCRIPT), str(folder / "spec.json"), str(out)], env=_env(),
                       capture_output=True, text=True, timeout=timeout)
    if not out.exists():
        raise RuntimeError(f"QGIS wrote no result (exit {r.returncode}):\n{r.stdout[-3000:]}{r.stderr[-3000:]}")
    result = json.loads(out.read_text())
    result["process_s"] = time.perf_counter() - t0
    result["stderr"] = [ln for ln in r.stderr.splitlines() if ln.strip()][-20:]
    for path, layer in zip(built["paths"], result["layers"]):
        layer["file"] = Path(path).name
        layer["mb"] = round(_size(path) / 1e6, 1)
    return result


def _size(path: str) -> int:
    return os.path.getsize(path) if os.path.isfile(path) else 0


def run(size: int, folder: Path | None = None, files: tuple[str, ...] = FILES) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench_qgis.", dir=folder) as d:
        built = build(Path(d), size, files=files)
        found = probe(Path(d), built)
        return {"size": size, "objects": built["objects"], "write_s": built["write_s"], **found}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=20000, help="slide side in pixels (default 20000)")
    ap.add_argument("--smoke", action="store_true", help="3000 px, the size the test runs")
    ap.add_argument("--gpkg-only", action="store_true", help="the GeoPackage only (GDAL reads a GeoJSON whole)")
    ap.add_argument("--json", action="store_true", help="one line of JSON")
    args = ap.parse_args(argv)
    if not has_qgis():
        print("bench_qgis: /usr/bin/python3 cannot import qgis (apt-get install python3-qgis qgis-providers)",
              file=sys.stderr)
        return 2
    result = run(3000 if args.smoke else args.size, files=FILES[:1] if args.gpkg_only else FILES)
    emit(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
