"""Open files in napari as a user does, with `viewer.open(path, plugin=None)`: napari chooses the reader
(`_open_or_raise_error`, what `napari FILES`, drag and drop and File > Open run; where napari would show
its reader dialog, `viewer.open` raises MultipleReaderError). napari's ViewerModel, no Qt. Run by
tests/test_napari.py in a fresh process whose NAPARI_CONFIG names a settings file of the test's own (the
user's napari settings are never read or written); never imported by pytest.

Args: OUT_DIR PATH... (`add_to:PATH`: opened with `sam3tiles.integrations.napari.add_to`). Writes
OUT_DIR/layers.json, per path {"dialog": [readers]} (napari would ask), {"failed": reader} (the reader napari
chose failed) or {"layers": [{kind, name, multiscale, shapes (of each level), metadata, key}]}, and OUT_DIR/data.npz:
for each layer `key`, level 0 of an image or labels layer, or a shapes layer's vertices (`key/i`) and ids.
"""

import json
import sys
from pathlib import Path

import numpy as np
from napari.components import ViewerModel
from napari.errors import MultipleReaderError, ReaderPluginError
from napari.plugins import _initialize_plugins


def main(out: Path, paths: list[str]) -> None:
    _initialize_plugins()
    viewer = ViewerModel()
    found, arrays = {}, {}
    for p in paths:
        try:
            if p.startswith("add_to:"):  # sam3tiles' own way in, whatever napari would pick by the name
                from sam3tiles.integrations.napari import add_to

                layers = add_to(viewer, p[len("add_to:"):])
            else:
                layers = viewer.open(p, plugin=None)
        except MultipleReaderError as e:
            found[p] = {"dialog": sorted(e.available_plugins)}
            continue
        except ReaderPluginError as e:
            found[p] = {"failed": e.reader_plugin}
            continue
        found[p] = {"layers": []}
        for layer in layers:
            key = f"{len(arrays)}"
            kind = type(layer).__name__.lower()
            levels = layer.data if getattr(layer, "multiscale", False) else [layer.data]
            if kind == "shapes":
                for i, v in enumerate(layer.data):
                    arrays[f"{key}/{i}"] = np.asarray(v)
                arrays[f"{key}/ids"] = np.asarray(layer.features["id"])
                shapes = [[len(layer.data)]]
            else:
                arrays[key] = np.asarray(levels[0])
                shapes = [list(level.shape) for level in levels]
            found[p]["layers"].append({"kind": kind, "name": layer.name, "key": key, "shapes": shapes,
                                       "multiscale": bool(getattr(layer, "multiscale", False)),
                                       "rgb": bool(getattr(layer, "rgb", False)),
                                       "metadata": json.loads(json.dumps(layer.metadata, default=str))})
    (out / "layers.json").write_text(json.dumps(found))
    np.savez(out / "data.npz", **arrays)


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
