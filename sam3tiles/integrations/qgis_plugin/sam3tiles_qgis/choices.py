"""The backends and devices the algorithm offers: sam3tiles' own lists, which `sam3tiles qgis install`
writes into choices.json beside this file (`model.providers.DEVICES`, the backends the registry knows).

QGIS's Python may not import sam3tiles (the plugin runs its command line), so the plugin keeps no list of
its own; this module imports neither qgis nor sam3tiles."""

import json
import os

CHOICES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "choices.json")


def choices():
    """(backends, devices) as choices.json lists them; RuntimeError naming the fix when it is missing or
    damaged (a plugin folder copied by other means than `sam3tiles qgis install`)."""
    try:
        with open(CHOICES, encoding="utf-8") as f:
            data = json.load(f)
        backends, devices = [str(b) for b in data["backends"]], [str(d) for d in data["devices"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise RuntimeError(f"{CHOICES} cannot be read ({e}): install the plugin with `sam3tiles qgis install "
                           "--overwrite`, which writes it") from None
    if not backends or not devices:
        raise RuntimeError(f"{CHOICES} lists no backend or no device: install the plugin again with "
                           "`sam3tiles qgis install --overwrite`")
    return backends, devices
