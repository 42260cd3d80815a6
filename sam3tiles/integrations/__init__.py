"""Integrations: doors from other programs, beside the command line. `napari` (its npe2 manifest,
`napari.yaml`) opens our outputs as napari layers; `qgis_plugin/` is the QGIS Processing provider that
`sam3tiles qgis install` copies, and that runs our command line. Nothing else in the package imports them."""
