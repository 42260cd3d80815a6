"""Units: what the area columns, `--min-area`, `--max-area`, `--simplify` and `--gsd` mean on each kind of input.

* *projected CRS* (UTM, a national grid): the CRS's own units, as the CRS says (metres, US feet).
* *geographic CRS* (lon/lat, EPSG:4326): degrees are no unit for an area or a tolerance, so lengths are
  metres and the area is square metres, measured on a Lambert azimuthal equal-area projection centred on
  the image (on the source's own datum): an equal-area projection keeps every area exact, and centring
  it on the image keeps the shapes near the truth as well.
* *no CRS* (slides, plain images): source pixels. When the physical pixel size is known (OME
  PhysicalSizeX/Y of a slide) `--gsd` is microns per pixel and outputs carry `area_um2`.

The area column is named for its unit (`area_column`), never plain `area` (GeoPandas' own
`GeoDataFrame.area` hides such a column from `gdf.area`): `area_m2` on a lon/lat CRS or a metre CRS,
`area_ft2` (international foot), `area_us_ft2` (US survey foot), `area_km2`, else `area_<unit>2` with
the unit's name in lower case and underscores; without a CRS the pixel is the unit and `area_px` is the
area column. `area_px` (source pixels) is written everywhere. This module holds values and arithmetic only; readers
report the pixel size (`Source.pixel_size_um`), the pipeline builds a `Frame` per input.
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass

import numpy as np
import shapely
from affine import Affine

log = logging.getLogger(__name__)

#: OME length units -> micrometres (OME-XML UnitsLength; the default unit is the micrometre).
_UM_PER = {"pm": 1e-6, "Å": 1e-4, "A": 1e-4, "nm": 1e-3, "µm": 1.0, "μm": 1.0, "um": 1.0, "mm": 1e3,
           "cm": 1e4, "dm": 1e5, "m": 1e6}


@dataclass(frozen=True)
class Frame:
    """One input's coordinate frame: the CRS (None: pixel space), the pixel -> CRS transform, the size
    in pixels and, for pixel space, the physical pixel size in micrometres (x, y) when known."""

    crs: object | None
    transform: Affine
    width: int
    height: int
    pixel_size_um: tuple[float, float] | None = None

    @classmethod
    def of(cls, src) -> "Frame":
        """The frame of an open reader (`Source`)."""
        return cls(src.crs, src.transform, int(src.width), int(src.height), getattr(src, "pixel_size_um", None))

    @property
    def geographic(self) -> bool:
        return self.crs is not None and bool(self.crs.is_geographic)

    @property
    def pixel_area(self) -> float:
        """One source pixel's area in CRS units squared (pixels: 1)."""
        t = self.transform
        return abs(t.a * t.e - t.b * t.d)

    @property
    def centre_lonlat(self) -> tuple[float, float]:
        """The image centre in the geographic CRS's lon, lat (geographic frames only)."""
        t, cx, cy = self.transform, self.width / 2, self.height / 2
        return float(t.a * cx + t.b * cy + t.c), float(t.d * cx + t.e * cy + t.f)

    def crs_unit(self) -> str:
        """The CRS's linear unit name ('metre', 'US survey foot'), 'pixel' without a CRS."""
        if self.crs is None:
            return "pixel"
        try:
            from pyproj import CRS

            return CRS.from_user_input(self.crs).axis_info[0].unit_name or "unit"
        except Exception:  # noqa: BLE001 - a CRS pyproj cannot describe still has units
            return "CRS unit"


def equal_area_crs(frame: Frame):
    """Lambert azimuthal equal-area centred on the image, on the source's geodetic datum (pyproj CRS)."""
    from pyproj import CRS
    from pyproj.crs import ProjectedCRS
    from pyproj.crs.coordinate_operation import LambertAzimuthalEqualAreaConversion

    lon, lat = frame.centre_lonlat
    conv = LambertAzimuthalEqualAreaConversion(latitude_natural_origin=lat, longitude_natural_origin=lon)
    geodetic = CRS.from_user_input(frame.crs).geodetic_crs
    return ProjectedCRS(conv, name=f"sam3tiles LAEA {lat:.4f} {lon:.4f}", geodetic_crs=geodetic)


def metres_per_degree(frame: Frame) -> tuple[float, float]:
    """Metres per degree of longitude and of latitude at the image centre (on the CRS's ellipsoid)."""
    from pyproj import CRS, Geod

    lon, lat = frame.centre_lonlat
    ell = CRS.from_user_input(frame.crs).ellipsoid
    geod = Geod(a=ell.semi_major_metre, rf=ell.inverse_flattening) if ell else Geod(ellps="WGS84")
    d = 1e-3
    lat_c = max(-89.9, min(89.9, lat))
    _, _, ex = geod.inv(lon - d / 2, lat_c, lon + d / 2, lat_c)
    _, _, ny = geod.inv(lon, lat_c - d / 2, lon, lat_c + d / 2)
    return ex / d, ny / d


def pixel_size(frame: Frame) -> tuple[float, str] | None:
    """The source's ground (or physical) sampling distance and its unit: metres on a geographic CRS,
    the CRS unit on a projected one, micrometres on a slide of known pixel size; None when unknown."""
    if frame.crs is None:
        if frame.pixel_size_um is None:
            return None
        return math.sqrt(frame.pixel_size_um[0] * frame.pixel_size_um[1]), "µm"
    if frame.geographic:
        mx, my = metres_per_degree(frame)
        t = frame.transform
        # the pixel's sides as ground vectors: their cross product is the pixel's area in m^2
        return math.sqrt(abs(t.a * t.e - t.b * t.d) * mx * my), "metre"
    return math.sqrt(frame.pixel_area), frame.crs_unit()


def length_to_crs(frame: Frame, length: float) -> float:
    """A tolerance given in the frame's length unit (metres on a geographic CRS) in CRS units. On a
    geographic CRS a degree of latitude is the longer one, so the result never exceeds `length` metres
    in any direction."""
    if not length or not frame.geographic:
        return length
    return length / max(metres_per_degree(frame))


#: CRS linear unit names (pyproj) -> the short unit in the area column's name
_SHORT_UNIT = {"metre": "m", "meter": "m", "kilometre": "km", "foot": "ft", "US survey foot": "us_ft"}


def area_column(frame: Frame | None) -> str:
    """The name of the column --min-area / --max-area act on, named for its unit (see the module
    docstring): `area_m2` on a lon/lat or metre CRS, `area_ft2`, `area_us_ft2`, ...; `area_px` without a CRS."""
    if frame is None or frame.crs is None:
        return "area_px"
    if frame.geographic:
        return "area_m2"
    unit = frame.crs_unit()
    short = _SHORT_UNIT.get(unit) or re.sub(r"[^0-9a-z]+", "_", unit.lower()).strip("_") or "crs_unit"
    return f"area_{short}2"


def area_unit(frame: Frame) -> str:
    """What the area column (`area_column`; --min-area / --max-area) holds, in words for docs and metadata."""
    if frame.crs is None:
        return "square source pixels (no CRS)"
    if frame.geographic:
        lon, lat = frame.centre_lonlat
        return (f"square metres, measured on a Lambert azimuthal equal-area projection centred on the image "
                f"(lat {lat:.5f}, lon {lon:.5f})")
    unit = frame.crs_unit()
    plural = unit[:-4] + "feet" if unit.endswith("foot") else unit + "s" if unit.endswith("metre") else unit + " units"
    return f"square {plural} (CRS units)"


def add_areas(gdf, frame: Frame):
    """Add the area column `area_column(frame)` (see `area_unit`; none without a CRS), `area_px` (source
    pixels) and, when the pixel size is known, `area_um2`. Never calls geopandas' `.area` on degrees
    (its warning would reach the user)."""
    geoms = np.asarray(gdf.geometry.values, dtype=object)
    crs_area = shapely.area(geoms) if len(geoms) else np.zeros(0)
    gdf["area_px"] = crs_area / frame.pixel_area
    name = area_column(frame)
    if frame.geographic and len(geoms):
        gdf[name] = gdf.geometry.to_crs(equal_area_crs(frame)).area.to_numpy()
    elif frame.crs is not None:
        gdf[name] = crs_area
    if frame.crs is None and frame.pixel_size_um is not None:
        gdf["area_um2"] = gdf["area_px"] * (frame.pixel_size_um[0] * frame.pixel_size_um[1])
    return gdf


def to_pixels(geoms: np.ndarray, frame: Frame | None) -> np.ndarray:
    """Geometries in the frame's CRS -> source pixel coordinates (x right, y down, origin top-left)."""
    if frame is None or frame.transform.is_identity:
        return geoms
    inv = ~frame.transform

    def apply(xy):
        x, y = xy[:, 0], xy[:, 1]
        return np.column_stack([inv.a * x + inv.b * y + inv.c, inv.d * x + inv.e * y + inv.f])

    return shapely.transform(geoms, apply)


def coordinate_precision(resolution: float) -> int:
    """Decimal digits that keep a tenth of a pixel of `resolution` (coordinate units per pixel)."""
    if not resolution or not math.isfinite(resolution) or resolution <= 0:
        return 15
    return int(min(15, max(0, math.ceil(-math.log10(resolution / 10)))))


def lonlat_resolution(frame: Frame) -> float:
    """The source pixel size in degrees (for GeoJSON written in WGS84 lon/lat)."""
    size = pixel_size(frame)
    if size is None:
        return 0.0
    metres = size[0] if frame.geographic else size[0] * _metres_per_unit(frame)
    return metres / 111_320.0


def _metres_per_unit(frame: Frame) -> float:
    try:
        from pyproj import CRS

        factor = CRS.from_user_input(frame.crs).axis_info[0].unit_conversion_factor
        return float(factor or 1.0)
    except Exception:  # noqa: BLE001
        return 1.0


def native_resolution(frame: Frame) -> float:
    """The source pixel size in CRS units (degrees on a geographic CRS)."""
    return math.sqrt(frame.pixel_area)


# -- slides ------------------------------------------------------------------------------------------

def ome_pixel_size_um(ome_xml: str | None, description: str | None = None) -> tuple[float, float] | None:
    """The physical pixel size (x, y) in micrometres from OME-XML (first image's Pixels PhysicalSizeX/Y
    and their units), else from an Aperio description's 'MPP = ...'; None when neither says."""
    if ome_xml:
        size = _ome_size(ome_xml)
        if size is not None:
            return size
    if description:
        m = re.search(r"\bMPP\s*=\s*([0-9.]+(?:[eE][-+]?\d+)?)", description)
        if m and float(m.group(1)) > 0:
            v = float(m.group(1))
            return (v, v)
    return None


def _ome_size(ome_xml: str) -> tuple[float, float] | None:
    import xml.etree.ElementTree as ET

    try:
        root = ET.fromstring(ome_xml)
    except ET.ParseError:
        return None
    pixels = next((el for el in root.iter() if el.tag.rsplit("}", 1)[-1] == "Pixels"), None)
    if pixels is None:
        return None
    out = []
    for axis in ("X", "Y"):
        value = pixels.get(f"PhysicalSize{axis}")
        unit = pixels.get(f"PhysicalSize{axis}Unit", "µm")
        try:
            v = float(value) * _UM_PER[unit] if value is not None else None
        except (ValueError, KeyError):
            log.warning("OME PhysicalSize%s %r %r is not a length sam3tiles knows: pixel size ignored",
                        axis, value, unit)
            return None
        out.append(v)
    if out[0] is None or not out[0] > 0:
        return None
    return (out[0], out[1] if out[1] and out[1] > 0 else out[0])
