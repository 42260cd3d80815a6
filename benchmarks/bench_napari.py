"""A gigapixel result in napari: a synthetic slide, its label pyramid and its QuPath GeoJSON opened in napari's
viewer model (headless, no Qt) as a user opens them, in a fresh process: seconds to the first view, peak
memory, the layer types napari was given, and how far each layer lies from the slide's own objects.

    python -m benchmarks.bench_napari --size 20000     # the bar: ~60,000 nuclei, first view <= 10 s, <= 2 GB
    python -m benchmarks.bench_napari --smoke          # the smoke size the tests run (4096 px, ~2,500 objects)
    python -m benchmarks.bench_napari --open DIR       # a run's own files (the README's 40,000 px example)

The outputs are written with the writers from the slide's own polygons (no segmentation: the run's
correctness is tested elsewhere; here the viewer's cost and the frame are measured). napari opens every file
with `viewer.open(path, plugin=None)`, napari's own choice by name, with the preference `PREFERENCES` (the
OME-TIFFs to sam3tiles) in a settings file of the benchmark's own. "First view": the files opened and each
layer drawn as napari's canvas would for the whole slide in a 1600 x 1200 window (the pyramid level it
picks, read; the points in view sliced). Alignment: for 500 objects, the points layer's marker against the
polygon's centroid, the labels layer's pixel under it, and the slide's colour there.
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

from .common import ROOT, emit

CANVAS = (1200, 1600)  # rows, cols of the simulated napari canvas
SAMPLE = 500


def build(folder: Path, size: int, seed: int = 0) -> dict:
    """The slide and its outputs, as a run names them: slide.ome.tif, nuclei.qupath.geojson,
    nuclei-labels.ome.tif. Returns the paths and the seconds each took."""
    import numpy as np
    import shapely

    import sam3tiles
    from sam3tiles.testing.slidegen import Pyramid, write_slide
    from sam3tiles.writers import write_vector
    from sam3tiles.writers.labels import write_labels

    t0 = time.perf_counter()
    slide = write_slide(folder / "slide.ome.tif", size, size, seed, pyramid=Pyramid(tile=512))
    t1 = time.perf_counter()
    gdf = slide.truth.rename(columns={"class": "prompt"})
    gdf.insert(0, "id", np.arange(1, len(gdf) + 1))
    gdf["score"] = 0.9
    gdf["area_px"] = shapely.area(gdf.geometry.values)
    meta = {"version": sam3tiles.__version__, "pixel_frame": {"source": "slide.ome.tif", "crs": None,
            "transform": [1.0, 0.0, 0.0, 0.0, 1.0, 0.0], "width": size, "height": size}}
    write_vector(gdf, folder / "nuclei.qupath.geojson", metadata=meta)
    t2 = time.perf_counter()
    write_labels(gdf, folder / "nuclei-labels.ome.tif", size, size, levels=slide.levels, pixel_size_um=(0.25, 0.25))
    t3 = time.perf_counter()
    centre = shapely.centroid(gdf.geometry.values)
    np.savez(folder / "truth.npz", id=gdf["id"].to_numpy(), x=shapely.get_x(centre), y=shapely.get_y(centre),
             prompt=gdf["prompt"].to_numpy(str))
    return {"objects": len(gdf), "slide_s": t1 - t0, "geojson_s": t2 - t1, "labels_s": t3 - t2,
            "paths": [str(folder / n) for n in ("slide.ome.tif", "nuclei-labels.ome.tif", "nuclei.qupath.geojson")]}


def view(out: Path, paths: list[str]) -> None:
    """In this (fresh) process: open `paths` in napari's ViewerModel as a user does, draw the first view,
    check the alignment; writes out/view.json."""
    import resource

    t0 = time.perf_counter()
    from napari.components import ViewerModel
    from napari.plugins import _initialize_plugins

    _initialize_plugins()
    viewer = ViewerModel()
    t_start = time.perf_counter()
    for p in paths:  # "napari:PATH": napari's own reader, as `viewer.open(path)` and the dialog's other choice
        viewer.open(p[len("napari:"):], plugin="napari") if p.startswith("napari:") else viewer.open(p, plugin=None)
    t_open = time.perf_counter()
    viewer.reset_view()
    for layer in viewer.layers:
        _draw(layer, viewer)
    t_view = time.perf_counter()
    use = resource.getrusage(resource.RUSAGE_SELF)  # CPU seconds: what the wall would be on a quiet core
    found = [{"name": lay.name, "kind": type(lay).__name__.lower(), "multiscale": bool(getattr(lay, "multiscale", 0)),
              "n": len(lay.data) if type(lay).__name__ == "Points" else None} for lay in viewer.layers]
    result = {"napari_start_s": t_start - t0, "open_s": t_open - t_start, "first_view_s": t_view - t_start,
              "first_view_with_start_s": t_view - t0,
              "cpu_to_first_view_with_start_s": use.ru_utime + use.ru_stime, "layers": found,
              "alignment": _alignment(viewer, out),
              "peak_rss_mb": _peak_rss_mb()}
    (out / "view.json").write_text(json.dumps(result))


def _draw(layer, viewer) -> None:
    """What napari's canvas does for a layer when it shows the whole slide in a CANVAS window: the level and
    corners for that view (`_update_draw`), then the slice, read."""
    import numpy as np

    h, w = layer.extent.world[1][-2:] - layer.extent.world[0][-2:]
    scale = max(h / CANVAS[0], w / CANVAS[1])
    corners = np.asarray([layer.extent.world[0][-2:], layer.extent.world[1][-2:]])
    layer._update_draw(scale_factor=scale, corner_pixels_displayed=corners, shape_threshold=CANVAS)
    layer.refresh()
    if getattr(layer, "multiscale", False):
        level = layer.data[layer.data_level]
        np.asarray(level[:])  # the level napari draws for this view, read whole (its tiles, decoded)


def _alignment(viewer, out: Path) -> dict:
    """Worst distances (pixels) over SAMPLE objects: marker - centroid; whether the label under the marker
    is the object's id and the slide there is not the background."""
    import numpy as np

    truth = np.load(out.parent / "truth.npz")
    points = [lay for lay in viewer.layers if type(lay).__name__ == "Points"]
    named = {n: next(lay for lay in viewer.layers if lay.name.startswith(n)) for n in ("nuclei-labels", "slide")}
    labels, image = _level0(named["nuclei-labels"]), _level0(named["slide"])
    rng = np.random.default_rng(0)
    worst, label_hits, colour_hits, n = 0.0, 0, 0, 0
    index = {int(i): k for k, i in enumerate(truth["id"])}
    background = np.asarray(image[0:1, 0:1])[0, 0].astype(int)
    for lay in points:
        ids = lay.features["id"].to_numpy()
        for k in rng.choice(len(ids), size=min(SAMPLE // len(points) + 1, len(ids)), replace=False):
            t = index[int(ids[k])]
            r, c = lay.data[k]
            worst = max(worst, float(np.hypot(r - (truth["y"][t] - 0.5), c - (truth["x"][t] - 0.5))))
            rr, cc = int(np.floor(r + 0.5)), int(np.floor(c + 0.5))
            label_hits += int(np.asarray(labels[rr, cc]) == ids[k])
            here = np.asarray(image[rr, cc]).astype(int)
            colour_hits += int(np.abs(here - background).max() > 30)
            n += 1
    return {"checked": n, "worst_marker_px": worst, "label_under_marker": label_hits,
            "slide_not_background": colour_hits}


def _level0(layer):
    return layer.data[0] if getattr(layer, "multiscale", False) else layer.data


def probe(folder: Path, paths: list[str], timeout: float = 600) -> dict:
    """`view` in a fresh process whose napari settings file is the benchmark's own (PREFERENCES)."""
    import yaml

    from sam3tiles.integrations.napari import PREFERENCES

    out = folder / "probe"
    out.mkdir(exist_ok=True)
    (out / "settings.yaml").write_text(yaml.safe_dump({"plugins": {"extension2reader": PREFERENCES}}))
    env = {**os.environ, "NAPARI_CONFIG": str(out / "settings.yaml"), "QT_QPA_PLATFORM": "offscreen",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-m", "benchmarks.bench_napari", "--view", str(out), *paths], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(r.stdout + r.stderr)
    return {**json.loads((out / "view.json").read_text()), "printed": r.stderr.strip().splitlines()}


def _peak_rss_mb() -> float:
    """This process's peak memory: VmHWM (its own address space), not ru_maxrss, which Linux carries over an
    exec from the forking process (a probe started from a large pytest process read 8.5 GB)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run(size: int, folder: Path | None = None, own_reader: bool = False) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench_napari.", dir=folder) as d:
        built = build(Path(d), size)
        paths = [f"napari:{p}" if own_reader and p.endswith(".ome.tif") else p for p in built["paths"]]
        return {"size": size, **{k: v for k, v in built.items() if k != "paths"}, **probe(Path(d), paths)}


def existing(folder: Path) -> dict:
    """`probe` on a run's own files in `folder` (the README's: slide.ome.tif, nuclei-labels.ome.tif,
    nuclei.qupath.geojson). Without the slide's truth the markers are checked against the file's own
    centroids (so their distance is no check); the label under each and the slide's colour there are."""
    import numpy as np

    from sam3tiles.integrations import napari_objects

    paths = [str(folder / n) for n in ("slide.ome.tif", "nuclei-labels.ome.tif", "nuclei.qupath.geojson")]
    if not (folder / "truth.npz").exists():
        g, _ = napari_objects.centroid_table(paths[2], "GeoJSON", None, ("id", "prompt"))
        np.savez(folder / "truth.npz", id=g["id"].to_numpy(), x=g.geometry.x.to_numpy(), y=g.geometry.y.to_numpy(),
                 prompt=g["prompt"].to_numpy(str))
    return {"folder": str(folder), **probe(folder, paths)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=20000, help="slide side in pixels (default 20000)")
    ap.add_argument("--smoke", action="store_true", help="4096 px, the size the tests run")
    ap.add_argument("--json", action="store_true", help="one line of JSON")
    ap.add_argument("--own-reader", action="store_true",
                    help="open the OME-TIFFs with napari's own reader (the figures before the sam3tiles reader)")
    ap.add_argument("--open", metavar="DIR", help="open a run's own files in DIR instead (the README's names: "
                    "slide.ome.tif, nuclei-labels.ome.tif, nuclei.qupath.geojson)")
    ap.add_argument("--view", nargs="+", help=argparse.SUPPRESS)  # the probe's own process: OUT PATH...
    args = ap.parse_args(argv)
    if args.view:
        view(Path(args.view[0]), args.view[1:])
        return 0
    if args.open:
        emit(existing(Path(args.open)), args.json)
        return 0
    result = run(4096 if args.smoke else args.size, own_reader=args.own_reader)
    emit(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
