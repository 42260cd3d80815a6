"""Many GeoTIFFs' georeferencing read once per distinct georeference (`readers.georef`, issue 48): each file's
CRS and transform as the planner reads them are rasterio's own answer for that file, on varied files (EPSG
codes projected and geographic, a user-defined CRS, pixel-is-point, a rotated grid, no CRS, a world file, an
.aux.xml with another CRS, an external mask), and the plan's maps are those of the files each opened the
normal way."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import rasterio
from affine import Affine
from rasterio.crs import CRS

from sam3tiles.options import Options
from sam3tiles.readers import gdal_env, georef, open_source
from sam3tiles.readers.georef import Georefs
from sam3tiles.readers.raster import RasterSource
from sam3tiles.readers.tiffhead import tiff_head
from sam3tiles.run.planning.maps import group_inputs, read_headers

N = 5  # files a georeference: the first VERIFY opened the normal way, the others without GDAL's georeferencing
SIDE = 32
USER_WKT = ('PROJCS["custom TM",GEOGCS["WGS 84",DATUM["WGS_1984",SPHEROID["WGS 84",6378137,298.257223563]],'
            'PRIMEM["Greenwich",0],UNIT["degree",0.0174532925199433]],PROJECTION["Transverse_Mercator"],'
            'PARAMETER["latitude_of_origin",12.5],PARAMETER["central_meridian",17.25],'
            'PARAMETER["scale_factor",0.9991],PARAMETER["false_easting",250000],PARAMETER["false_northing",-3000],'
            'UNIT["metre",1]]')
KINDS = {  # name: (crs, pixel size, origin, rotation in degrees, pixel-is-point)
    "utm": ("EPSG:32633", 0.5, (400000.0, 5000000.0), 0, False),
    "geo": ("EPSG:4326", 1e-5, (13.1, 52.4), 0, False),
    "user": (USER_WKT, 2.0, (1000.0, 9000.0), 0, False),
    "point": ("EPSG:3857", 3.0, (1.2e6, 6.1e6), 0, True),
    "rotated": ("EPSG:32632", 1.0, (600000.0, 5100000.0), 15, False),
    "nocrs": (None, 1.0, (0.0, 100.0), 0, False),
}


def _write(path, crs, t, point=False, mask=False):
    kw = dict(driver="GTiff", width=SIDE, height=SIDE, count=3, dtype="uint8", transform=t)
    if crs:
        kw["crs"] = crs
    with rasterio.Env(GDAL_TIFF_INTERNAL_MASK="NO"), rasterio.open(path, "w", **kw) as ds:
        ds.write(np.full((3, SIDE, SIDE), 7, np.uint8))
        if point:
            ds.update_tags(AREA_OR_POINT="Point")
        if mask:
            ds.write_mask(np.full((SIDE, SIDE), 255, np.uint8))


def _files(d):
    """N adjacent files of each kind in one folder; three of them with side files."""
    d.mkdir()
    paths = []
    for name, (crs, px, (x0, y0), rot, point) in KINDS.items():
        for k in range(N):
            t = Affine.translation(x0 + k * SIDE * px, y0) @ Affine.rotation(rot) @ Affine.scale(px, -px)
            p = d / f"{name}{k}.tif"
            _write(p, crs, t, point, mask=(name, k) == ("utm", 4))
            paths.append(str(p))
    at = Affine(0.5, 0, 400000.0 + 5 * SIDE * 0.5, 0, -0.5, 5000000.0)
    _write(d / "utm5.tif", "EPSG:32633", at)  # a world file beside it, of another origin
    (d / "utm5.tfw").write_text(f"0.5\n0\n0\n-0.5\n{at.c + 1000.25}\n{at.f - 0.25}\n")
    _write(d / "utm6.tif", "EPSG:32633", at @ Affine.translation(SIDE, 0))  # an .aux.xml with another CRS
    (d / "utm6.tif.aux.xml").write_text(f"<PAMDataset><SRS>{CRS.from_epsg(32634).to_wkt()}</SRS></PAMDataset>")
    return paths + [str(d / "utm5.tif"), str(d / "utm6.tif")]


def _gdal(path):
    """rasterio's own answer for one file: (CRS as WKT, transform, files)."""
    with gdal_env(many_files=True), rasterio.open(path) as ds:
        return (ds.crs.to_wkt() if ds.crs else None, tuple(ds.transform), tuple(ds.files))


def _answer(src):
    return (src.crs.to_wkt() if src.crs else None, tuple(src.transform), tuple(src.source_files))


def test_each_file_gets_gdals_georeferencing(tmp_path):
    paths = _files(tmp_path / "many")
    georefs = Georefs()
    with gdal_env(many_files=True):
        for p in paths:  # in order: each georeference's first VERIFY files are compared, then trusted
            with open_source(p, stretch=None, georefs=georefs) as src:
                assert _answer(src) == _gdal(p), p
                side = p.endswith(("utm5.tif", "utm6.tif"))
                assert isinstance(src, georef._KnownGeoref) == (not side and int(p[-5]) >= georef.VERIFY), p
    assert georefs.skipped == len(KINDS) * (N - georef.VERIFY)
    assert _gdal(str(tmp_path / "many" / "utm6.tif"))[0] == CRS.from_epsg(32634).to_wkt()  # the .aux.xml's CRS
    assert _gdal(str(tmp_path / "many" / "utm5.tif"))[1][2] == 400000.0 + 5 * SIDE * 0.5  # internal over .tfw


def test_planned_headers_and_maps_are_those_of_normal_opens(tmp_path, monkeypatch):
    paths = _files(tmp_path / "many")
    opts = Options()
    fast = read_headers(paths, opts)
    for p, h in zip(paths, fast):
        crs, t, files = _gdal(p)
        assert (h.crs.to_wkt() if h.crs else None, tuple(h.transform), h.files) == (crs, t, files), p
    maps = group_inputs(paths, opts)
    monkeypatch.setattr(georef, "VERIFY", 10**9)  # every file the normal way
    normal = read_headers(paths, opts)
    assert [(h.crs, h.transform, h.files, h.nodata, h.box) for h in fast] == \
        [(h.crs, h.transform, h.files, h.nodata, h.box) for h in normal]
    slow = group_inputs(paths, opts)
    assert [(m.members, m.path) for m in maps.maps] == [(m.members, m.path) for m in slow.maps]
    assert maps.notes == slow.notes and len(maps.maps) > 1


def test_a_gdal_option_that_reads_georeferencing_otherwise_opens_every_file_the_normal_way(tmp_path, monkeypatch):
    paths = [p for p in _files(tmp_path / "many") if "point" in p]
    monkeypatch.setenv("GTIFF_POINT_GEO_IGNORE", "TRUE")
    georefs = Georefs()
    with gdal_env(many_files=True):
        for p in paths:
            with open_source(p, stretch=None, georefs=georefs) as src:
                assert _answer(src) == _gdal(p)
    assert georefs.skipped == 0 and not georefs.enabled
    assert _gdal(paths[0])[1] != tuple(tiff_head(paths[0]).geo.transform)  # the option moved GDAL's answer


def test_a_georeference_gdal_reads_otherwise_is_never_trusted(tmp_path):
    paths = [p for p in _files(tmp_path / "many") if "geo" in p.rsplit("/", 1)[-1]]
    georefs = Georefs()
    head = tiff_head(paths[0])
    georefs._compare(head.geo, CRS.from_epsg(4326), head.geo.transform @ Affine.translation(0.5, 0))  # half a pixel
    with gdal_env(many_files=True):
        for p in paths:
            with open_source(p, stretch=None, georefs=georefs) as src:
                assert type(src) is RasterSource and _answer(src) == _gdal(p)
    assert georefs.skipped == 0


@pytest.mark.parametrize("form", ["scale", "matrix"])
def test_tags_gdal_reads_another_way_are_left_to_gdal(tmp_path, form):
    """Several tiepoints (GCPs), or a transformation matrix beside a pixel scale: no `GeoTags`."""
    import tifffile

    p = tmp_path / "odd.tif"
    extra = [(33922, "d", 12, (0, 0, 0, 10, 20, 0, 5, 5, 0, 15, 15, 0), True)] if form == "scale" else \
        [(33922, "d", 6, (0, 0, 0, 10, 20, 0), True), (34264, "d", 16, (1, 0, 0, 10, 0, -1, 0, 20) + (0,) * 7 + (1,),
                                                          True)]
    tifffile.imwrite(p, np.zeros((8, 8), np.uint8), extratags=[(33550, "d", 3, (1.0, 1.0, 0.0), True), *extra])
    head = tiff_head(str(p))
    assert head is not None and head.geo is None


def test_a_known_georeference_source_pickles_as_a_plain_one(tmp_path):
    paths = [p for p in _files(tmp_path / "many") if "utm" in p][:N]
    georefs = Georefs()
    with gdal_env(many_files=True):
        opened = [open_source(p, stretch=None, georefs=georefs) for p in paths]
        again = pickle.loads(pickle.dumps(opened[-1]))
    assert isinstance(opened[-1], georef._KnownGeoref) and type(again) is RasterSource
    assert _answer(again) == _answer(opened[-1])
    for src in [*opened, again]:
        src.close()
