"""The GeoTIFF georeference of a TIFF's first image, from the tags `tiffhead.tiff_head` parsed (issue 48): what
`georef.Georefs` keys a georeference by, and the transform GDAL makes of the model tags (the rules: `georef`)."""

from __future__ import annotations

from dataclasses import dataclass

from affine import Affine

_PIXEL_SCALE, _TIEPOINT, _TRANSFORMATION = 33550, 33922, 34264
_GEOKEYS, _GEO_DOUBLES, _GEO_ASCII = 34735, 34736, 34737
_RASTER_TYPE, _PIXEL_IS_POINT = 1025, 2
#: `Affine.is_identity`'s precision (affine's EPSILON), checked on the GDAL geotransform (faster than building one).
IDENTITY = 1e-5


@dataclass(frozen=True)
class GeoTags:
    """The GeoTIFF georeference of a file's first image: `key` (its transform's form and its GeoKey
    directory, doubles and ASCII parameters: files of one key have one CRS) and `transform` (GDAL's, from
    the model tags)."""

    key: tuple
    transform: Affine


def geo_tags(value) -> GeoTags | None:
    """The `GeoTags` of a TIFF's first image, `value(tag)` giving a tag's value (numbers as a tuple, ASCII as
    str or bytes; None: no such tag), or None where its model tags are not in a form read one way (see
    `georef`'s module doc)."""
    scale, tie, matrix = value(_PIXEL_SCALE), value(_TIEPOINT), value(_TRANSFORMATION)
    keys = tuple(int(k) for k in value(_GEOKEYS) or ())
    if scale is not None and tie is not None and matrix is None:
        if len(scale) != 3 or len(tie) != 6 or not (scale[0] > 0 and scale[1] > 0):
            return None
        a, e = float(scale[0]), -abs(float(scale[1]))
        gt = [float(tie[3]) - float(tie[0]) * a, a, 0.0, float(tie[4]) - float(tie[1]) * e, 0.0, e]
        form = "scale"
    elif matrix is not None and scale is None and tie is None:
        m = [float(v) for v in matrix]
        if len(m) != 16 or m[12:] != [0.0, 0.0, 0.0, 1.0]:
            return None
        gt = [m[3], m[0], m[1], m[7], m[4], m[5]]
        form = "matrix"
    else:
        return None
    if _raster_type(keys) == _PIXEL_IS_POINT:  # GDAL's corner: half a pixel up and left of the tied centre
        gt[0] -= gt[1] * 0.5 + gt[2] * 0.5
        gt[3] -= gt[4] * 0.5 + gt[5] * 0.5
    if not all(map(_finite, gt)) or all(abs(v - i) < IDENTITY for v, i in zip(gt, (0.0, 1.0, 0.0, 0.0, 0.0, 1.0))):
        return None  # (near) identity: not georeferenced to the pre-flight (`Affine.is_identity`), GDAL decides
    t = Affine.from_gdal(*gt)
    doubles = tuple(float(v) for v in value(_GEO_DOUBLES) or ())
    text = value(_GEO_ASCII) or ""
    text = text.decode("latin-1") if isinstance(text, bytes) else str(text)
    return GeoTags((form, keys, doubles, text.rstrip("\0")), t)


def page_value(page):
    """`geo_tags`' `value` of a tifffile page (its one-number tags as tuples too)."""

    def value(code):
        tag = page.tags.get(code)
        if tag is None:
            return None
        v = tag.value
        return v if isinstance(v, (tuple, str, bytes)) else (v,)

    return value


def _finite(v: float) -> bool:
    return v == v and abs(v) != float("inf")


def _raster_type(keys: tuple) -> int | None:
    """GTRasterTypeGeoKey of a GeoKey directory (None: not given)."""
    for k in range(4, len(keys) - 3, 4):
        if keys[k] == _RASTER_TYPE and keys[k + 1] == 0:
            return keys[k + 3]
    return None
