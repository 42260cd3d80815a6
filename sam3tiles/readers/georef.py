"""Many local GeoTIFFs' georeferencing read once per distinct GeoTIFF georeference (issue 48: of a 300 px file's
header, GDAL's normal open took 0.8 ms CPU, 0.18 ms without its georeferencing: the rest is the CRS looked up
in PROJ's database, the same answer for each of a map's 1,000 files).

A file's georeference is the GeoTIFF tags of its first image (`geotags.GeoTags`, parsed with its header by
`tiffhead.tiff_head`): its GeoKey directory, double and ASCII parameters (the CRS: its `key`, with the form
of its transform) and its model tags (the transform, by GDAL's rules below). Where the planner reads the
headers of many files (`Georefs`, one per planning), a file of a georeference already seen `VERIFY` times
opens without its georeferencing (GDAL's GEOREF_SOURCES=NONE, as a mosaic's members do) and takes the CRS
GDAL gave the first files of that georeference and the transform of its own tags. Every other file opens
the normal way, and each of the first files of a georeference is compared: its CRS (as WKT) and its
transform must be exactly what GDAL gave, else the files of that georeference all open the normal way.

Only where this is provably GDAL's answer:
* the model tags in a form GDAL reads one way: ModelPixelScale (three values, both pixel sizes positive)
  with one ModelTiepoint and no ModelTransformation, or a ModelTransformation (16 values, an affine last
  row) alone; GDAL's geotransform from them, its origin half a pixel up and left where the raster type is
  PixelIsPoint (`GTRasterTypeGeoKey` = 2: GDAL's default, GTIFF_POINT_GEO_IGNORE unset);
* no side file GDAL may read georeferencing or metadata from (`side_files`: .aux.xml, .aux, .xml, world
  files, .tab, each name in the cases GDAL looks for) beside the file, in its folder's names as listed once
  a planning;
* none of the GDAL options that change how a GeoTIFF's georeferencing is read is set (`GDAL_OPTIONS`).
"""

from __future__ import annotations

import os
import threading

from .env import open_local
from .geotags import GeoTags
from .raster import RasterSource

#: A georeference's files opened the normal way and compared before its others skip GDAL's georeferencing.
VERIFY = 2
#: GDAL options under which the georeferencing is read otherwise (any of them set: every file the normal way).
GDAL_OPTIONS = ("GDAL_GEOREF_SOURCES", "GTIFF_POINT_GEO_IGNORE", "GTIFF_HONOUR_NEGATIVE_SCALEY",
                "GDAL_PAM_PROXY_DIR", "GTIFF_SRS_SOURCE", "GTIFF_REPORT_COMPD_CS")


def side_files(path: str) -> list[str]:
    """The names of side files GDAL may read a GeoTIFF's georeferencing or metadata from (PAM's .aux.xml,
    .aux, ESRI's .xml, world files, MapInfo's .tab), in the cases GDAL looks them up by name."""
    stem, ext = os.path.splitext(path)
    ext = ext[1:]
    names = [f"{path}.aux.xml", f"{path}.AUX.XML"]
    for e in ("aux", "xml", "tab", "wld", (ext[:1] + ext[-1:] + "w") if ext else "", f"{ext}w" if ext else ""):
        if e:
            names += [f"{stem}.{e.lower()}", f"{stem}.{e.upper()}"]
    return names + [f"{path}.aux", f"{path}.AUX"]


def _options_allow() -> bool:
    """None of `GDAL_OPTIONS` is set, in GDAL's configuration or the environment."""
    from rasterio.env import get_gdal_config

    return not any(os.environ.get(k) or get_gdal_config(k, normalize=False) for k in GDAL_OPTIONS)


class _KnownGeoref(RasterSource):
    """A GeoTIFF opened without its georeferencing (GEOREF_SOURCES=NONE), its CRS and transform given
    (`Georefs`). Pickles as a plain `RasterSource` of its path."""

    def __init__(self, path, bands, stretch, head, crs, transform):
        self._known = (crs, transform)
        super().__init__(path, bands=bands, stretch=stretch, head=head)

    def _open_dataset(self):
        from .members import _quiet_open

        with _quiet_open():
            return open_local(self.path, GEOREF_SOURCES="NONE")

    def __reduce__(self):
        return RasterSource, (self.path, self._bands_arg, self.stretch)

    @property
    def crs(self):
        return self._known[0]

    @property
    def transform(self):
        return self._known[1]

    @property
    def gcps(self):
        return [], None  # a file with a transform: its tiepoints are no GCPs


class Georefs:
    """The georeferences seen while one planning reads many local headers (see the module doc); shared by
    its header threads. `skipped`: files opened without their georeferencing so far."""

    def __init__(self):
        self.enabled = _options_allow()
        self.skipped = 0
        self._lock = threading.Lock()
        self._seen: dict[tuple, list | None] = {}  # key -> [crs, its WKT, files verified], None: not trusted
        self._folders: dict[str, tuple | None] = {}  # folder -> `_folder`'s (None: not listable)

    def open(self, path: str, bands, stretch, head) -> RasterSource:
        """`path` opened as `readers.open_source` would (`head`: its `tiffhead.TiffHead`), without its
        georeferencing where its georeference is known."""
        geo = head.geo if self.enabled and head is not None else None
        if geo is None or self._has_side_file(path):
            return RasterSource(path, bands=bands, stretch=stretch, head=head)
        with self._lock:
            seen = self._seen.get(geo.key, [])
            trusted = seen is not None and len(seen) == 3 and seen[2] >= VERIFY
            if trusted:
                self.skipped += 1
        if trusted:
            return _KnownGeoref(path, bands, stretch, head, seen[0], geo.transform)
        src = RasterSource(path, bands=bands, stretch=stretch, head=head)
        self._compare(geo, src.crs, src.transform)
        return src

    def _has_side_file(self, path: str) -> bool:
        """A side file (`side_files`) beside `path`, looked up in its folder's names, listed once a planning
        (the 16 names' status cost 0.03 ms CPU a file); by status where the folder cannot be listed."""
        folder = self._folder(path)
        if folder is None:
            return any(os.path.lexists(n) for n in side_files(path))
        return any(os.path.basename(n) in folder[0] for n in side_files(path))

    def without_siblings(self, paths) -> bool:
        """Every one of `paths` a GeoTIFF alone in its folder under its name: no other name there starts
        with its name's stem and "." or "_" (in any case), where every file GDAL looks for beside it is
        named (.aux.xml, .ovr, .msk, world files, _rpc.txt, ...). GDAL may then open them without looking
        for any (`env.NO_SIBLINGS`)."""
        for p in paths:
            folder = None if not p.lower().endswith((".tif", ".tiff")) else self._folder(p)
            stem = os.path.splitext(os.path.basename(p))[0].lower()
            if folder is None or folder[1].get(stem, 0) != 1:
                return False
        return True

    def _folder(self, path: str) -> tuple | None:
        """(names, {lower-case prefix ending before a "." or "_": names that start so}) of the folder of
        `path`, listed once a planning; None where it cannot be listed."""
        folder = os.path.dirname(path) or "."
        with self._lock:
            if folder in self._folders:
                return self._folders[folder]
        try:
            names = os.listdir(folder)
        except OSError:
            listed = None
        else:
            stems: dict[str, int] = {}
            for name in names:
                low = name.lower()
                for k, c in enumerate(low):
                    if c in "._" and k:
                        stems[low[:k]] = stems.get(low[:k], 0) + 1
            listed = (frozenset(names), stems)
        with self._lock:
            self._folders[folder] = listed
        return listed

    def _compare(self, geo: GeoTags, crs, transform) -> None:
        """A file of `geo` opened the normal way: GDAL's answer against the tags' (any difference: its
        georeference is never trusted)."""
        wkt = crs.to_wkt() if crs is not None else None
        with self._lock:
            seen = self._seen.setdefault(geo.key, [])
            if seen is None:
                return
            if tuple(transform) != tuple(geo.transform) or (seen and seen[1] != wkt):
                self._seen[geo.key] = None
            elif seen:
                seen[2] += 1
            else:
                seen += [crs, wkt, 1]
