"""Files of another CRS or pixel size read warped onto a map's lattice (issue 52).

A map (`readers.mosaic`) has one lattice: a CRS, a pixel size and an origin. A member on another one (a
vendor's re-projection to EPSG:4326, a STAC item in the next UTM zone, a newer flight at another pixel
size) is read through a GDAL warped VRT (rasterio's `WarpedVRT`) onto the map's lattice: the member's box in
the map's pixels (`Member.col/row/width/height`: the bounds of its footprint re-projected, grown to whole
pixels) is the VRT's grid, so the mosaic places it, reads its windows and applies the overlap rule exactly
as it does a file already on the lattice. GDAL warps only the blocks a window asks for, and the VRT stays
open in the thread's member cache (`readers.members`) across windows and tiles.

* **Resampling**: `RESAMPLING` (bilinear: images, never labels; a paletted file is warped by nearest).
* **Outside the footprint**: a re-projected footprint is no rectangle in the map's CRS; the corners of its
  box are no data (an alpha band the VRT adds, or the file's own alpha/nodata), so the mosaic's
  nearest-centre rule falls back to the neighbour that holds data there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from affine import Affine

#: How a warped member's pixels are resampled onto the map's lattice.
RESAMPLING = "bilinear"
#: Points along each edge of a footprint when its bounds are re-projected (curved edges in the other CRS).
DENSIFY = 21


@dataclass(frozen=True)
class Warp:
    """How a member is warped onto its map's lattice: its own CRS (text, for the report; WKT to open),
    pixel size (x, y) and size in pixels (to tell a changed file), and the resampling."""

    crs: str  # as the report names it (EPSG:4326)
    wkt: str
    pixel: tuple[float, float]
    width: int
    height: int
    resampling: str = RESAMPLING

    def describe(self, to_crs: str, to_pixel: tuple[float, float]) -> str:
        """"EPSG:4326 -> EPSG:32633, pixel 2.7e-06 x 2.7e-06 -> 0.3 x 0.3, bilinear"."""
        def px(p):
            return f"{p[0]:.4g} x {p[1]:.4g}"

        crs = f"{self.crs} -> {to_crs}" if self.crs != to_crs else f"{to_crs} (another lattice)"
        return f"{crs}, pixel {px(self.pixel)} -> {px(to_pixel)}, {self.resampling}"


def box_on(crs, bounds, dst_crs, lattice: Affine) -> tuple[int, int, int, int]:
    """A file's box on the map's lattice: (col0, row0, col1, row1), whole pixels of `lattice` (the map's
    pixel -> CRS transform at its origin), holding its footprint `bounds` (in `crs`) re-projected to
    `dst_crs`."""
    from rasterio.warp import transform_bounds

    x0, y0, x1, y1 = bounds if crs == dst_crs else transform_bounds(crs, dst_crs, *bounds, densify_pts=DENSIFY)
    inv = ~lattice
    cols, rows = zip(*(inv @ (x, y) for x in (x0, x1) for y in (y0, y1)))
    eps = 1e-6  # a bound on a pixel edge stays on it
    return (math.floor(min(cols) + eps), math.floor(min(rows) + eps), math.ceil(max(cols) - eps),
            math.ceil(max(rows) - eps))


def pixel_on(crs, transform, width: int, height: int, dst_crs) -> tuple[float, float]:
    """A file's pixel size (x, y) expressed in `dst_crs`: its own in its CRS, else GDAL's suggestion for
    re-projecting it (`calculate_default_transform`: about the same number of pixels over its footprint)."""
    from rasterio.warp import calculate_default_transform

    if crs == dst_crs:
        return (abs(transform.a), abs(transform.e))
    xs = (transform.c, transform.c + transform.a * width)
    ys = (transform.f, transform.f + transform.e * height)
    t, _, _ = calculate_default_transform(crs, dst_crs, width, height, min(xs), min(ys), max(xs), max(ys))
    return (abs(t.a), abs(t.e))


def open_warped(src, dst_wkt: str, transform: Affine, width: int, height: int, resampling: str = RESAMPLING):
    """`src` (an open rasterio dataset) as a `WarpedVRT` on the map's lattice: `transform` (the member's
    top-left pixel of the map) and `width` x `height` map pixels; an alpha band added where the file has
    none, so pixels outside its footprint read as no data."""
    from rasterio.crs import CRS
    from rasterio.enums import ColorInterp, Resampling
    from rasterio.vrt import WarpedVRT

    alpha = ColorInterp.alpha in src.colorinterp
    palette = src.count == 1 and src.colorinterp[0] == ColorInterp.palette
    how = Resampling.nearest if palette else Resampling[resampling]
    return WarpedVRT(src, crs=CRS.from_wkt(dst_wkt), transform=transform, width=width, height=height,
                     resampling=how, add_alpha=not alpha)
