"""The Processing provider: id `sam3tiles`, one algorithm (`segment`), one setting (the command line)."""

from qgis.core import QgsProcessingProvider

from .algorithm import CLI_SETTING, SegmentAlgorithm


class Sam3TilesProvider(QgsProcessingProvider):
    def id(self):
        return "sam3tiles"

    def name(self):
        return "sam3tiles"

    def longName(self):  # noqa: N802
        return "sam3tiles (SAM 3 on large rasters)"

    def load(self):
        try:  # Settings > Options > Processing > Providers > sam3tiles: "sam3tiles command"
            from processing.core.ProcessingConfig import ProcessingConfig, Setting

            ProcessingConfig.settingIcons[self.name()] = self.icon()
            ProcessingConfig.addSetting(Setting(self.name(), CLI_SETTING, "sam3tiles command (e.g. "
                                                "/opt/venv/bin/sam3tiles)", ""))
            ProcessingConfig.readSettings()
        except Exception:  # noqa: BLE001 - no Processing plugin: $SAM3TILES_CLI or PATH still work
            pass
        self.refreshAlgorithms()
        return True

    def unload(self):
        try:
            from processing.core.ProcessingConfig import ProcessingConfig

            ProcessingConfig.removeSetting(CLI_SETTING)
        except Exception:  # noqa: BLE001
            pass

    def supportedOutputVectorLayerExtensions(self):  # noqa: N802 - what sam3tiles writes and QGIS opens
        return ["gpkg", "fgb", "geojson"]

    def defaultVectorFileExtension(self, hasGeometry=True):  # noqa: N802, N803
        return "gpkg"

    def loadAlgorithms(self):  # noqa: N802
        self.addAlgorithm(SegmentAlgorithm())
