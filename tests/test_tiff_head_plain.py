"""A plain GeoTIFF's header facts read from its first directory's tags (`tiffhead._plain_geotiff`,
`readers.tiffifd`, issue 48) are tifffile's: on GeoTIFFs written by GDAL in every layout (strips, tiles,
BigTIFF, big-endian, planar, JPEG, truncated, pixel-is-point, rotated, a user CRS), and anything else is
left to tifffile."""

from __future__ import annotations

import os

import numpy as np
import pytest
import rasterio
import tifffile
from affine import Affine

from sam3tiles.readers import tiffhead
from sam3tiles.readers.tiffhead import _plain_geotiff, _tifffile_head, tiff_head

SIDE = 70
T = Affine(0.5, 0, 400000.0, 0, -0.5, 5000000.0)
USER_WKT = ('PROJCS["custom TM",GEOGCS["WGS 84",DATUM["WGS_1984",SPHEROID["WGS 84",6378137,298.257223563]],'
            'PRIMEM["Greenwich",0],UNIT["degree",0.0174532925199433]],PROJECTION["Transverse_Mercator"],'
            'PARAMETER["latitude_of_origin",12.5],PARAMETER["central_meridian",17.25],'
            'PARAMETER["scale_factor",0.9991],PARAMETER["false_easting",250000],PARAMETER["false_northing",-3000],'
            'UNIT["metre",1]]')
LAYOUTS = {
    "strips": dict(compress="deflate"),
    "one_strip": dict(blockysize=SIDE),
    "tiles": dict(tiled=True, blockxsize=16, blockysize=16, compress="lzw"),
    "bigtiff": dict(BIGTIFF="YES", tiled=True, blockxsize=32, blockysize=32),
    "big_endian": dict(ENDIANNESS="BIG", compress="packbits"),
    "planar": dict(interleave="band", compress="deflate"),
    "jpeg": dict(compress="jpeg"),
    "point": dict(point=True),
    "rotated": dict(transform=T @ Affine.rotation(20)),
    "user_crs": dict(crs=USER_WKT),
    "geographic": dict(crs="EPSG:4326", transform=Affine(1e-5, 0, 13.1, 0, -1e-5, 52.4)),
    "float_nodata": dict(dtype="float32", nodata=-9999.0, count=1),
}


def _write(p, point=False, **kw):
    args = dict(driver="GTiff", width=SIDE, height=SIDE, count=3, dtype="uint8", crs="EPSG:32633", transform=T)
    args.update(kw)
    rng = np.random.default_rng(3)
    with rasterio.open(p, "w", **args) as ds:
        ds.write(rng.integers(0, 255, (args["count"], SIDE, SIDE)).astype(args["dtype"]))
        if point:
            ds.update_tags(AREA_OR_POINT="Point")
    return str(p)


def _same(p):
    size = os.path.getsize(p)
    plain, parsed = _plain_geotiff(p, size), _tifffile_head(p, size)
    assert plain is not None and parsed is not None
    assert (plain.slide, plain.end, plain.size, plain.shape, plain.whole, plain.truncated) == \
        (parsed.slide, parsed.end, parsed.size, parsed.shape, parsed.whole, parsed.truncated)
    assert plain.geo == parsed.geo
    return plain


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_gdal_geotiff_reads_as_tifffile_reads_it(tmp_path, layout):
    head = _same(_write(tmp_path / f"{layout}.tif", **LAYOUTS[layout]))
    assert head.shape == (SIDE, SIDE) and not head.truncated and head.whole == (layout != "jpeg")
    assert head.geo is not None


@pytest.mark.parametrize("cut", [0.4, 0.9, 0.995])
def test_a_truncated_geotiff_reads_as_tifffile_reads_it(tmp_path, cut):
    p = _write(tmp_path / "whole.tif", compress="deflate", tiled=True, blockxsize=16, blockysize=16)
    data = open(p, "rb").read()
    cut_path = tmp_path / "cut.tif"
    cut_path.write_bytes(data[:int(len(data) * cut)])
    head = _same(str(cut_path))
    assert head.truncated and not head.whole


def test_other_tiffs_are_left_to_tifffile(tmp_path, monkeypatch):
    plain = tmp_path / "plain.tif"
    tifffile.imwrite(plain, np.zeros((SIDE, SIDE), np.uint8))  # no GeoKeys
    ome = tmp_path / "ome.ome.tif"
    tifffile.imwrite(ome, np.zeros((SIDE, SIDE), np.uint8), ome=True,
                     extratags=[(34735, "H", 4, (1, 1, 0, 0), True), (33550, "d", 3, (1.0, 1.0, 0.0), True),
                                (33922, "d", 6, (0, 0, 0, 10, 20, 0), True)])
    strips = tmp_path / "strips.tif"  # more strips listed than its size needs: tifffile drops the extra ones
    tifffile.imwrite(strips, np.zeros((SIDE, SIDE), np.uint8), rowsperstrip=10,
                     extratags=[(34735, "H", 4, (1, 1, 0, 0), True)])
    data = bytearray(strips.read_bytes())
    with tifffile.TiffFile(strips) as tf:
        tag = tf.pages.first.tags[278]
    data[tag.valueoffset:tag.valueoffset + 2] = (20).to_bytes(2, "little")  # rows a strip 10 -> 20
    strips.write_bytes(bytes(data))
    for p in (plain, ome, strips):
        assert _plain_geotiff(str(p), p.stat().st_size) is None, p
    calls = []
    real = tiffhead._tifffile_head
    monkeypatch.setattr(tiffhead, "_tifffile_head", lambda p, size: calls.append(p) or real(p, size))
    assert tiff_head(str(ome)) is not None and tiff_head(str(plain)) is not None
    assert tiff_head(str(strips)).end == real(str(strips), strips.stat().st_size).end
    assert len(calls) == 3
