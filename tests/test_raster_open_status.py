"""A raster's open asks the file's status once (issue 48): a missing path, a folder, an empty file and a link
to nowhere are still refused by name, with the messages they had."""

from __future__ import annotations

import os

import pytest

from sam3tiles.errors import RasterReadError
from sam3tiles.readers.raster import RasterSource


def test_what_is_no_raster_is_named(tmp_path):
    (tmp_path / "empty.tif").write_bytes(b"")
    os.symlink(tmp_path / "gone.tif", tmp_path / "dangling.tif")
    cases = {"missing.tif": "no such file: check the path", "": "is a directory, not a raster",
             "empty.tif": r"is empty \(0 bytes\)", "dangling.tif": "no such file", "empty.tif/x.tif": "no such file"}
    for name, message in cases.items():
        with pytest.raises(RasterReadError, match=message):
            RasterSource(str(tmp_path / name) if name else str(tmp_path))
