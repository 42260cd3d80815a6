"""The sam3tiles QGIS plugin: a Processing provider (id `sam3tiles`, algorithm `segment`).

Installed by `sam3tiles qgis install [--dest DIR]`. It runs the sam3tiles command line as a subprocess, so
QGIS's own Python needs none of sam3tiles' dependencies (onnxruntime, dask, ...)."""


def provider():
    """The Processing provider (for scripts and headless QGIS: add it to the processing registry)."""
    from .provider import Sam3TilesProvider

    return Sam3TilesProvider()


class Sam3TilesPlugin:
    """Registers the provider when QGIS loads the plugin, removes it when unloaded."""

    def __init__(self, iface=None):
        self.iface = iface
        self.provider = None

    def initProcessing(self):
        from qgis.core import QgsApplication

        self.provider = provider()
        QgsApplication.processingRegistry().addProvider(self.provider)

    def initGui(self):
        self.initProcessing()

    def unload(self):
        from qgis.core import QgsApplication

        if self.provider is not None:
            QgsApplication.processingRegistry().removeProvider(self.provider)
            self.provider = None


def classFactory(iface):  # noqa: N802 - the name QGIS looks for
    return Sam3TilesPlugin(iface)
