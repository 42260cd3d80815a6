"""Many files of one folder open without GDAL listing the folder (`readers.env.MANY_FILES`, issue 48): the
side files of a file (a .msk mask, a world file) are still found, by the headers of many inputs and by a
mosaic's members, and the map reads as with the folder listed."""

from __future__ import annotations

import numpy as np
import rasterio
from affine import Affine
from rasterio.windows import Window

from sam3tiles.options import Options
from sam3tiles.readers import gdal_env, open_source
from sam3tiles.readers import members as members_mod
from sam3tiles.readers.members import MemberCache
from sam3tiles.run.planning.maps import group_inputs, read_headers

SIDE, PIXEL, X0, Y0 = 40, 0.5, 400000.0, 5000000.0


def _folder(d):
    """3 x 3 adjacent files; r1c1 with an external mask (.msk) hiding its left half, r0c2 placed by a world
    file (.tfw) only."""
    d.mkdir()
    for r in range(3):
        for c in range(3):
            p = d / f"r{r}c{c}.tif"
            at = Affine(PIXEL, 0, X0 + c * SIDE * PIXEL, 0, -PIXEL, Y0 - r * SIDE * PIXEL)
            kw = dict(driver="GTiff", width=SIDE, height=SIDE, count=3, dtype="uint8", crs="EPSG:32633")
            if (r, c) != (0, 2):
                kw["transform"] = at
            with rasterio.Env(GDAL_TIFF_INTERNAL_MASK="NO"), rasterio.open(p, "w", **kw) as ds:
                ds.write(np.full((3, SIDE, SIDE), 10 * r + c + 1, np.uint8))
                if (r, c) == (1, 1):
                    mask = np.full((SIDE, SIDE), 255, np.uint8)
                    mask[:, : SIDE // 2] = 0
                    ds.write_mask(mask)
            if (r, c) == (0, 2):  # the world file names the centre of the top-left pixel
                (d / "r0c2.tfw").write_text(f"{PIXEL}\n0\n0\n{-PIXEL}\n{at.c + PIXEL / 2}\n{at.f - PIXEL / 2}\n")
    return sorted(str(p) for p in d.glob("*.tif"))


def test_side_files_are_found_without_listing_the_folder(tmp_path):
    paths = _folder(tmp_path / "map")
    listed = {p: (h.files, h.nodata, tuple(h.transform)) for p, h in
              zip(paths, [read_headers([p], Options())[0] for p in paths])}  # one input: the folder listed
    headers = read_headers(paths, Options())  # many inputs: not listed
    for p, h in zip(paths, headers):
        assert (h.files, h.nodata, tuple(h.transform)) == listed[p]
    by_name = {p.rsplit("/", 1)[-1]: h for p, h in zip(paths, headers)}
    assert by_name["r1c1.tif"].nodata and by_name["r1c1.tif"].files[-1].endswith("r1c1.tif.msk")
    assert by_name["r0c2.tif"].transform.c == X0 + 2 * SIDE * PIXEL
    assert by_name["r0c2.tif"].files[-1].endswith("r0c2.tfw")


def test_a_members_mask_is_read_without_listing_the_folder(tmp_path):
    (m,) = group_inputs(_folder(tmp_path / "map"), Options()).maps
    assert len(m.members) == 9
    before = members_mod._shared["cache"]
    cache = members_mod._shared["cache"] = MemberCache()
    try:
        with gdal_env(many_files=True), open_source(m.path, identity="map") as src:  # as a read task opens them
            rgb, valid = src.read_window(Window(0, 0, 3 * SIDE, 3 * SIDE), (3 * SIDE, 3 * SIDE))
    finally:
        cache.close()
        members_mod._shared["cache"] = before
    middle = (slice(SIDE, 2 * SIDE), slice(SIDE, 2 * SIDE))
    assert not valid[middle][:, : SIDE // 2].any() and valid[middle][:, SIDE // 2:].all()
    assert (rgb[0][middle][:, SIDE // 2:] == 12).all() and (rgb[0][middle][:, : SIDE // 2] == 0).all()
    assert (rgb[0, :SIDE, 2 * SIDE:] == 3).all() and valid.sum() == 9 * SIDE * SIDE - SIDE * SIDE // 2
