"""Run `sam3tiles:segment` in headless QGIS (Debian's /usr/bin/python3 with python3-qgis): run by
tests/test_qgis.py, never imported by pytest. Args: PLUGINS_DIR PARAMS_JSON [cancel]. Prints one JSON
line: {"ok", "output", "error", "progress" (the values the feedback got), "features", "layer_valid"}."""

import json
import os
import sys

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from qgis.core import QgsApplication, QgsProcessingException, QgsProcessingFeedback, QgsVectorLayer  # noqa: E402

app = QgsApplication([], False)
app.initQgis()
sys.path.insert(0, "/usr/share/qgis/python/plugins")
import processing  # noqa: E402
from processing.core.Processing import Processing  # noqa: E402

Processing.initialize()
sys.path.insert(0, sys.argv[1])
import sam3tiles_qgis  # noqa: E402

PROVIDER = sam3tiles_qgis.provider()  # kept: a provider whose Python object is collected vanishes
assert QgsApplication.processingRegistry().addProvider(PROVIDER), "the provider did not load"
cancel = len(sys.argv) > 3 and sys.argv[3] == "cancel"


class Feedback(QgsProcessingFeedback):
    values = []

    def setProgress(self, value):  # noqa: N802
        self.values.append(value)
        super().setProgress(value)
        if cancel and 0 < value < 100:
            self.cancel()


fb = Feedback()
result = {"ok": False, "output": None, "error": None}
try:
    out = processing.run("sam3tiles:segment", json.loads(sys.argv[2]), feedback=fb)
    layer = QgsVectorLayer(out["OUTPUT"], "objects", "ogr")
    result.update(ok=True, output=out["OUTPUT"], layer_valid=layer.isValid(), features=layer.featureCount())
except QgsProcessingException as e:
    result["error"] = str(e)
result["progress"] = Feedback.values
print("RESULT " + json.dumps(result), flush=True)
os._exit(0)  # QGIS's exit after Processing may crash headless; the result is printed
