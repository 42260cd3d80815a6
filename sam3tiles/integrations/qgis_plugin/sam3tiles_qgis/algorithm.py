"""`sam3tiles:segment`: the sam3tiles command line run as a subprocess from QGIS Processing.

The command is found from the Processing setting "sam3tiles command", else $SAM3TILES_CLI (a command line,
e.g. "/opt/venv/bin/python -m sam3tiles"), else `sam3tiles` on PATH. It runs with `--progress json`
(one JSON object a line: {"event": "progress", "percent": ...}), which is streamed to the feedback
(`stream.run_streamed`, which closes the command's pipe and waits for it whatever happens); a
cancel terminates it (SIGTERM: the command removes its temporary files; its outputs are written under
temporary names and renamed at the end, so a cancelled run leaves no output behind).
"""

import os
import shlex
import shutil

from qgis.core import (QgsProcessing, QgsProcessingAlgorithm, QgsProcessingException,
                       QgsProcessingParameterBoolean, QgsProcessingParameterDefinition, QgsProcessingParameterEnum,
                       QgsProcessingParameterFeatureSource, QgsProcessingParameterFile,
                       QgsProcessingParameterMultipleLayers,
                       QgsProcessingParameterNumber, QgsProcessingParameterRasterLayer,
                       QgsProcessingParameterString, QgsProcessingParameterVectorDestination)

from .choices import choices
from .stream import run_streamed

CLI_SETTING = "SAM3TILES_CLI"


def cli_command():
    """The sam3tiles command line as a list: the Processing setting, else $SAM3TILES_CLI, else PATH."""
    setting = None
    try:
        from processing.core.ProcessingConfig import ProcessingConfig

        setting = ProcessingConfig.getSetting(CLI_SETTING)
    except Exception:  # noqa: BLE001 - no Processing plugin or no such setting
        pass
    for value in (setting, os.environ.get("SAM3TILES_CLI")):
        if value and str(value).strip():
            return shlex.split(str(value))
    found = shutil.which("sam3tiles")
    if found:
        return [found]
    raise QgsProcessingException(
        "the sam3tiles command was not found: install it (pip install sam3tiles, in a Python >= 3.10 "
        "environment), then set Settings > Options > Processing > Providers > sam3tiles > sam3tiles command "
        "(or $SAM3TILES_CLI) to its sam3tiles executable")


def _choices():
    """(backends, devices): sam3tiles' own lists, as `sam3tiles qgis install` wrote them (`choices`)."""
    try:
        return choices()
    except RuntimeError as e:
        raise QgsProcessingException(str(e)) from None


def _layer_path(source):
    """A layer's file path (without GDAL/OGR '|option' suffixes)."""
    return source.split("|", 1)[0]


class SegmentAlgorithm(QgsProcessingAlgorithm):
    def name(self):
        return "segment"

    def displayName(self):  # noqa: N802
        return "Segment (SAM 3, tiled)"

    def shortHelpString(self):  # noqa: N802
        return ("Segments a raster of any size with SAM 3, tile by tile, from comma-separated text prompts "
                "and/or a layer of example boxes, and writes merged polygons in the raster's CRS (columns id, "
                "prompt, score, area_m2 or the CRS unit's, area_px, n_tiles, source). An area of interest "
                "(a polygon layer, or its selected features) runs only the tiles that see it and keeps the "
                "objects that meet it, whole or clipped. More rasters of the same map (a delivery's tiles) "
                "are segmented with the first as one image: objects whole across file edges. Runs the "
                "sam3tiles command line; see its README. A POINTS layer instead of prompts gives the one object under "
                "each point, a row a point with the layer's fields.")

    def createInstance(self):  # noqa: N802
        return SegmentAlgorithm()

    def initAlgorithm(self, config=None):  # noqa: N802
        backends, devices = _choices()
        self.addParameter(QgsProcessingParameterRasterLayer("INPUT", "Raster"))
        self.addParameter(QgsProcessingParameterMultipleLayers(
            "MORE", "More rasters of the same map (adjacent or overlapping tiles: segmented with it as one map)",
            QgsProcessing.TypeRaster, optional=True))
        self.addParameter(QgsProcessingParameterString("PROMPTS", "Prompts (comma-separated text, e.g. "
                                                                  "building, car)", optional=True))
        self.addParameter(QgsProcessingParameterFeatureSource(
            "BOXES", "Example boxes (polygons; optional 'label' field 1/0)", [QgsProcessing.TypeVectorPolygon],
            optional=True))
        self.addParameter(QgsProcessingParameterFeatureSource(
            "POINTS", "Points instead of prompts: the one object under each point (any CRS; optional 'label' "
            "field 1/0; its fields carried)", [QgsProcessing.TypeVectorPoint], optional=True))
        self.addParameter(QgsProcessingParameterFeatureSource(
            "AREA", "Area of interest (polygons, any CRS; only the tiles that see it run; objects that meet it)",
            [QgsProcessing.TypeVectorPolygon], optional=True))
        self.addParameter(QgsProcessingParameterBoolean("AREA_CLIP", "Clip the objects to the area of interest",
                                                        defaultValue=False))
        self.addParameter(QgsProcessingParameterEnum("BACKEND", "Backend", backends, defaultValue=0))
        self.addParameter(QgsProcessingParameterFile("MODEL", "SAM 3 model folder (default: sam3tiles' cache)",
                                                     behavior=QgsProcessingParameterFile.Folder, optional=True))
        self.addParameter(QgsProcessingParameterEnum("DEVICE", "Device", devices, defaultValue=0))
        self.addParameter(QgsProcessingParameterNumber("SCALE", "Scale (2: zoom in for tiny objects)",
                                                       QgsProcessingParameterNumber.Double, 1.0, minValue=0.01))
        self.addParameter(QgsProcessingParameterNumber("MIN_SCORE", "Minimum score",
                                                       QgsProcessingParameterNumber.Double, 0.5, minValue=0.5,
                                                       maxValue=1.0))
        self.addParameter(QgsProcessingParameterNumber("MIN_AREA", "Minimum area (the area column's unit)",
                                                       QgsProcessingParameterNumber.Double, 0.0, minValue=0.0))
        advanced = [
            QgsProcessingParameterNumber("TILE_SIZE", "Tile size (px)", QgsProcessingParameterNumber.Integer,
                                         1008, minValue=64, maxValue=1008),
            QgsProcessingParameterNumber("OVERLAP", "Overlap (px, or below 1 a fraction of the tile)",
                                         QgsProcessingParameterNumber.Double, 256, minValue=0.0),
            QgsProcessingParameterString("EXTRA", "More sam3tiles segment arguments (e.g. --refine off)",
                                         optional=True),
        ]
        for p in advanced:
            p.setFlags(p.flags() | QgsProcessingParameterDefinition.FlagAdvanced)
            self.addParameter(p)
        self.addParameter(QgsProcessingParameterVectorDestination("OUTPUT", "Objects",
                                                                  QgsProcessing.TypeVectorPolygon))

    def command(self, parameters, context, feedback):
        """The sam3tiles segment command line for these parameters (and the output path)."""
        raster = self.parameterAsRasterLayer(parameters, "INPUT", context)
        if raster is None:
            raise QgsProcessingException("INPUT: choose a raster layer or file")
        prompts = [p.strip() for p in (self.parameterAsString(parameters, "PROMPTS", context) or "").split(",")]
        prompts = [p for p in prompts if p]
        out = self.parameterAsOutputLayer(parameters, "OUTPUT", context)
        more = [_layer_path(layer.source()) for layer in self.parameterAsLayerList(parameters, "MORE", context)]
        inputs = list(dict.fromkeys([_layer_path(raster.source()), *more]))
        cmd = cli_command() + ["segment", *inputs, "--out", out, "--progress", "json"]
        for p in prompts:
            cmd += ["--text", p]
        boxes = None
        if parameters.get("BOXES") is not None:
            boxes = self.parameterAsCompatibleSourceLayerPath(parameters, "BOXES", context, [], "gpkg", feedback)
            if boxes:
                cmd += ["--box-file", _layer_path(boxes)]
        points = self._points(parameters, context, feedback)
        cmd += points
        if not prompts and not boxes and not points:
            raise QgsProcessingException("give PROMPTS (comma-separated text), a BOXES layer of examples or a "
                                         "POINTS layer")
        cmd += self._area(parameters, context, feedback)
        backends, devices = _choices()
        cmd += ["--backend", backends[self.parameterAsEnum(parameters, "BACKEND", context)],
                "--device", devices[self.parameterAsEnum(parameters, "DEVICE", context)]]
        model = self.parameterAsFile(parameters, "MODEL", context)
        if model:
            cmd += ["--model", model]
        for key, flag in (("SCALE", "--scale"), ("MIN_SCORE", "--min-score"), ("MIN_AREA", "--min-area"),
                          ("OVERLAP", "--overlap")):
            cmd += [flag, "%g" % self.parameterAsDouble(parameters, key, context)]
        cmd += ["--tile-size", str(self.parameterAsInt(parameters, "TILE_SIZE", context))]
        cmd += shlex.split(self.parameterAsString(parameters, "EXTRA", context) or "")
        if os.path.exists(out):  # QGIS asked before choosing an existing file
            cmd.append("--overwrite")
        return cmd, out

    def _points(self, parameters, context, feedback):
        """--point-file for the POINTS layer (its selected features only, when QGIS is told so). QGIS writes
        each vector layer we take (boxes, points, area) out as a file of one layer (no format is given as
        'compatible'), so a layer of a GeoPackage of several is never read as its first."""
        if parameters.get("POINTS") is None:
            return []
        layer = self.parameterAsCompatibleSourceLayerPath(parameters, "POINTS", context, [], "gpkg", feedback)
        return ["--point-file", _layer_path(layer)] if layer else []

    def _area(self, parameters, context, feedback):
        """--aoi (and --aoi-clip) for the AREA layer (its selected features only, when QGIS is told so)."""
        if parameters.get("AREA") is None:
            return []
        area = self.parameterAsCompatibleSourceLayerPath(parameters, "AREA", context, [], "gpkg", feedback)
        if not area:
            return []
        clip = self.parameterAsBool(parameters, "AREA_CLIP", context)
        return ["--aoi", _layer_path(area)] + (["--aoi-clip"] if clip else [])

    def processAlgorithm(self, parameters, context, feedback):  # noqa: N802
        cmd, out = self.command(parameters, context, feedback)
        feedback.pushCommandInfo(" ".join(shlex.quote(c) for c in cmd))
        rc, tail = run_streamed(cmd, feedback, QgsProcessingException)
        if feedback.isCanceled():
            raise QgsProcessingException("cancelled: the sam3tiles run was stopped and wrote no output "
                                         "(rerun to resume from its checkpointed tiles)")
        if rc != 0:
            raise QgsProcessingException(f"sam3tiles exited with status {rc}: " + " | ".join(tail[-5:]))
        return {"OUTPUT": out}
