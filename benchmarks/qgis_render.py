"""Open vector files in headless QGIS and render them as its map canvas would: run by benchmarks/bench_qgis.py
and tests/test_qgis_render.py under Debian's /usr/bin/python3 with python3-qgis (QGIS 3.22 API only), never
imported by pytest or by sam3tiles. Args: SPEC_JSON OUT_JSON.

SPEC_JSON: {"size": [W, H], "layers": [{"uri": ..., "inside": [[x, y], ...], "outside": [[x, y], ...]}]}:
points (in the layer's coordinates) inside an object, where the render must show it, and away from every
object, where it must show the background. For each layer OUT_JSON has: valid, features, crs, the spatial
index QGIS reports (hasSpatialIndex), the seconds to open it, to render the whole layer (the first view
after opening), a window an eighth of its side (zoomed in: the spatial index's work) and the whole layer
again, and how many of the inside and outside points were drawn as objects.
"""

import json
import os
import sys
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from qgis.core import (QgsApplication, QgsFeatureSource, QgsFillSymbol, QgsMapRendererParallelJob,  # noqa: E402
                       QgsMapSettings, QgsPointXY, QgsRectangle, QgsSingleSymbolRenderer, QgsVectorLayer)
from qgis.PyQt.QtCore import QSize  # noqa: E402
from qgis.PyQt.QtGui import QColor  # noqa: E402

INDEX = {QgsFeatureSource.SpatialIndexPresent: "present", QgsFeatureSource.SpatialIndexNotPresent: "absent",
         QgsFeatureSource.SpatialIndexUnknown: "unknown"}


def render(layer, extent, size):
    """(seconds, image, map-to-pixel) of one render of `layer` over `extent` into a `size` image."""
    settings = QgsMapSettings()
    settings.setLayers([layer])
    settings.setDestinationCrs(layer.crs())
    settings.setOutputSize(QSize(*size))
    settings.setBackgroundColor(QColor(255, 255, 255))
    settings.setExtent(extent)
    t0 = time.perf_counter()
    job = QgsMapRendererParallelJob(settings)  # what the map canvas runs
    job.start()
    job.waitForFinished()
    return time.perf_counter() - t0, job.renderedImage(), settings.mapToPixel()


def drawn(image, m2p, points):
    """How many of `points` (layer coordinates) fall on a pixel that is not the white background (a point
    off the image counts as not drawn)."""
    n = 0
    for x, y in points:
        p = m2p.transform(QgsPointXY(x, y))
        col, row = int(p.x()), int(p.y())
        if 0 <= col < image.width() and 0 <= row < image.height():
            c = image.pixelColor(col, row)
            n += int(min(c.red(), c.green(), c.blue()) < 200)
    return n


def one(spec, size):
    t0 = time.perf_counter()
    layer = QgsVectorLayer(spec["uri"], "objects", "ogr")
    if not layer.isValid():
        return {"valid": False}
    features = layer.featureCount()
    t_open = time.perf_counter() - t0
    # a solid fill, so a drawn object can be told from the background (QGIS's default is a random colour)
    layer.setRenderer(QgsSingleSymbolRenderer(QgsFillSymbol.createSimple(
        {"color": "200,0,0,255", "outline_color": "120,0,0,255", "outline_width": "0"})))
    extent = layer.extent()
    first, image, m2p = render(layer, extent, size)
    centre, w, h = extent.center(), extent.width() / 16, extent.height() / 16
    zoomed, _, _ = render(layer, QgsRectangle(centre.x() - w, centre.y() - h, centre.x() + w, centre.y() + h), size)
    again, _, _ = render(layer, extent, size)  # back to the whole layer: its file in the page cache now
    return {"valid": True, "features": features, "crs": layer.crs().authid() or layer.crs().description(),
            "spatial_index": INDEX.get(layer.hasSpatialIndex(), str(layer.hasSpatialIndex())),
            "open_s": t_open, "first_render_s": first, "to_first_view_s": t_open + first, "zoomed_render_s": zoomed,
            "whole_again_s": again,
            "inside_drawn": drawn(image, m2p, spec["inside"]), "inside": len(spec["inside"]),
            "outside_drawn": drawn(image, m2p, spec["outside"]), "outside": len(spec["outside"])}


def peak_mb():
    """This process's peak memory (VmHWM), MB."""
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return None


def main():
    spec = json.loads(open(sys.argv[1]).read())
    t0 = time.perf_counter()
    app = QgsApplication([], False)
    app.initQgis()
    out = {"qgis_start_s": time.perf_counter() - t0, "version": __import__("qgis.core").core.Qgis.QGIS_VERSION,
           "layers": [one(s, tuple(spec["size"])) for s in spec["layers"]]}
    out["peak_rss_mb"] = peak_mb()
    with open(sys.argv[2], "w") as f:
        json.dump(out, f)
    sys.stdout.flush()
    os._exit(0)  # QGIS's exit tears down providers slowly and sometimes crashes headless: the result is written


if __name__ == "__main__":
    main()
