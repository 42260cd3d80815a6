"""sam3tiles: SAM 3 on images far larger than its 1008x1008 view.

Aspect-preserving overlapping tiles, one image embedding per tile, text or example-box prompts, masks
merged across seams into polygons in the source CRS. See `sam3tiles.segment`.
"""

__version__ = "0.1.0"


def segment(*args, **kwargs):
    """Segment one or more rasters; returns a GeoDataFrame. See `sam3tiles.pipeline.segment`."""
    from .pipeline import segment as _segment

    return _segment(*args, **kwargs)


__all__ = ["segment", "__version__"]
