"""GeoTIFFs with no file beside them that GDAL looks for are opened with the folder taken as empty
(`env.NO_SIBLINGS`, `georef.Georefs.without_siblings`, issue 48); a file with any (a mask, a PAM .aux.xml
naming its nodata, an overview, a world file, in any case) is opened as before, and every header reads as
the file read alone does."""

from __future__ import annotations

import numpy as np
import rasterio
from affine import Affine

from sam3tiles.options import Options
from sam3tiles.readers.georef import Georefs
from sam3tiles.run.planning.maps import read_headers

SIDE, PIXEL = 24, 1.0


def _tif(p, k, mask=False):
    t = Affine(PIXEL, 0, 1000.0 + k * SIDE * PIXEL, 0, -PIXEL, 5000.0)
    with rasterio.Env(GDAL_TIFF_INTERNAL_MASK="NO"), rasterio.open(
            p, "w", driver="GTiff", width=SIDE, height=SIDE, count=3, dtype="uint8", crs="EPSG:32633",
            transform=t) as ds:
        ds.write(np.full((3, SIDE, SIDE), 9, np.uint8))
        if mask:
            m = np.full((SIDE, SIDE), 255, np.uint8)
            m[:, :4] = 0
            ds.write_mask(m)
    return str(p)


def _folder(d):
    d.mkdir()
    paths = [_tif(d / name, k, mask=name == "m.tif") for k, name in
             enumerate(["a1.tif", "a10.tif", "a1_0.tif", "m.tif", "e.tif", "w.tif", "u.tif", "x.y.tif"])]
    (d / "e.tif.aux.xml").write_text('<PAMDataset><PAMRasterBand band="1"><NoDataValue>9</NoDataValue>'
                                     "</PAMRasterBand></PAMDataset>")
    (d / "w.TFW").write_text("1\n0\n0\n-1\n0.5\n0.5\n")
    (d / "u_rpc.txt").write_text("")
    return paths


def test_only_files_with_nothing_beside_them_skip_the_lookups(tmp_path):
    paths = _folder(tmp_path / "many")
    g = Georefs()
    alone = {p.rsplit("/", 1)[-1]: g.without_siblings([p]) for p in paths}
    # "a1.tif" has "a1_0.tif" beside it (GDAL would look for a1_rpc.txt): not alone, and "a10" is no sibling
    assert alone == {"a1.tif": False, "a10.tif": True, "a1_0.tif": True, "m.tif": False, "e.tif": False,
                     "w.tif": False, "u.tif": False, "x.y.tif": True}
    assert not g.without_siblings(paths) and g.without_siblings([paths[1], paths[2]])


def test_every_header_reads_as_the_file_alone(tmp_path):
    paths = _folder(tmp_path / "many")
    alone = [read_headers([p], Options())[0] for p in paths]  # one input: the folder listed by GDAL
    many = read_headers(paths, Options())
    for a, b in zip(alone, many):
        assert (a.files, a.nodata, a.crs, a.transform, a.bands, a.dtype) == \
            (b.files, b.nodata, b.crs, b.transform, b.bands, b.dtype), a.path
    by_name = {h.path.rsplit("/", 1)[-1]: h for h in many}
    assert by_name["e.tif"].nodata and by_name["m.tif"].nodata and not by_name["a10.tif"].nodata
    assert by_name["m.tif"].files[-1].endswith("m.tif.msk") and by_name["e.tif"].files[-1].endswith(".aux.xml")
