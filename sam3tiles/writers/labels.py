"""Instance label images: the objects burnt into a uint32 raster aligned with the source, block by block.

Pixel value = the object's `id` (the same id as in the vector output), 0 = background. A pixel belongs to
an object when its centre lies inside the polygon (GDAL's rasterize rule), so a polygon that follows
pixel edges gives exactly its pixels. Where two objects overlap, the higher id wins.

The format follows the name and the input:

* `.tif` of a georeferenced raster (or any raster that is not a slide): a GeoTIFF in COG layout, 256 px
  deflate tiles, nodata 0, overviews by nearest sampling down to one tile, the source's transform and
  CRS (none: plain pixel grid). Level 0 is written block by block to a scratch GeoTIFF, GDAL adds the
  overviews, and GDAL's COG driver copies both into place (its block cache held to GDAL_CACHEMAX).
* `.tif` / `.ome.tif` of a slide: a pyramidal OME-TIFF with the slide's levels (the same sizes, so the
  same downsample factors) and its physical pixel size (`writers.ome`).
* `.ome.zarr`: OME-Zarr (NGFF 0.4) with an image-label group (`writers.ome`).

Every level is built a block at a time, each block burning only the polygons that reach it (an STRtree or
the spool's R-tree), so memory stays flat whatever the image's size. The output is written under a
temporary name and renamed into place.
"""

from __future__ import annotations

import errno
import os
import tempfile
import warnings
from pathlib import Path

import numpy as np
import rasterio
import rasterio.shutil
import rasterio.windows
import shapely
from affine import Affine
from rasterio.enums import Resampling

from ..errors import OutputError, OutputExistsError, UsageError
from .atomic import atomic_path
from .pyramid import BLOCK, CHUNK, Levels, burn, fill_levels, overview_factors, settled
from ..wording import enable, opt

SUFFIXES = (".tif", ".tiff", ".ome.zarr")
TIFF_BLOCK = CHUNK
#: GDAL's block cache while writing (bytes): its default, 5 % of the RAM, would grow with the image.
GDAL_CACHE = 256 * 2 ** 20
#: Tag (GeoTIFF metadata) and OME name marking a sam3tiles label image (the napari reader looks for it).
TAG = "SAM3TILES_LABELS"


def is_zarr(path: str | os.PathLike) -> bool:
    return str(path).rstrip("/" + os.sep).lower().endswith(".ome.zarr")


def is_ome_tiff(path: str | os.PathLike) -> bool:
    return str(path).lower().endswith((".ome.tif", ".ome.tiff"))


def check_labels(path: str | os.PathLike, overwrite: bool) -> Path:
    """Validate a --labels path before any work: .tif/.tiff/.ome.zarr, writable folder, no clash; an
    existing .ome.zarr is replaced only when sam3tiles wrote it."""
    p = Path(str(path).rstrip("/" + os.sep))
    if not (p.suffix.lower() in (".tif", ".tiff") or is_zarr(p)):
        raise UsageError(f"{opt('labels', p)}: a label image is a TIFF or an OME-Zarr: end the name with .tif, .tiff, "
                         ".ome.tif or .ome.zarr")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise OutputError(f"{opt('labels', p)}: the folder {parent} does not exist: create it first")
    if not os.access(parent, os.W_OK):
        raise OutputError(f"{opt('labels', p)}: the folder {parent} is not writable: choose another path")
    if p.exists() and not overwrite:
        raise OutputExistsError(f"{opt('labels', p)} exists: {enable('overwrite')} to replace it, "
                                "or choose another name")
    if p.exists() and is_zarr(p):
        check_replaceable(p)
    if p.exists() and not is_zarr(p) and p.is_dir():
        raise OutputError(f"{opt('labels', p)} is a folder: name a file")
    return p


def check_replaceable(p: Path) -> None:
    """An existing OME-Zarr `p` is replaced only when sam3tiles wrote it and it holds nothing its writer does
    not make (a user's notes, another tool's label group): replacing the folder would delete those.
    Checked before any work and again just before the rename."""
    from .ome import foreign_paths

    if not p.exists() and not p.is_symlink():
        return
    if not _our_zarr(p):
        raise OutputError(f"{opt('labels', p)} exists and is not an OME-Zarr sam3tiles wrote, so it is not replaced: "
                          "choose another name (nothing was deleted)")
    foreign = foreign_paths(p)
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise OutputError(f"{opt('labels', p)} holds files sam3tiles did not write ({shown}), which replacing it would "
                          "delete: move them out of it, or choose another name (nothing was deleted)")


def _our_zarr(p: Path) -> bool:
    import json

    try:
        return "sam3tiles" in json.loads((p / ".zattrs").read_text())
    except (OSError, ValueError):
        return False


def check_labels_for(path: Path, crs) -> None:
    """The label format must keep the input's frame: OME formats hold no CRS, so a georeferenced input
    needs a GeoTIFF (`.tif`)."""
    if crs is not None and (is_zarr(path) or is_ome_tiff(path)):
        raise UsageError(f"{opt('labels', path)}: OME-TIFF and OME-Zarr hold no CRS, so the labels of this "
                         "georeferenced raster would lose their place on the map: name it "
                         f"{Path(path).name.split('.')[0]}.tif "
                         "for a GeoTIFF (COG layout) with the raster's CRS")


def write_labels(gdf, path: str | os.PathLike, width: int, height: int, transform: Affine = Affine.identity(),
                 crs=None, block: int = BLOCK, id_column: str = "id", levels=None,
                 pixel_size_um: tuple[float, float] | None = None) -> Path:
    """Write `gdf`'s polygons as a uint32 instance label image of `width` x `height` pixels.

    Ids come from `id_column` (1, 2, ... in row order when the column is missing); they must fit uint32.
    `gdf` may also be anything with `query(minx, miny, maxx, maxy) -> (geometries, ids)` in id order (e.g.
    `writers.stream.ObjectSpool`), so the objects need not all be in memory.
    `levels`: a slide's pyramid level sizes ((width, height), level 0 first): with them a `.tif` is a
    pyramidal OME-TIFF of those levels; `pixel_size_um` (x, y): its physical pixel size in µm.
    `block` (a multiple of 256) is the side of the pieces rasterized and written at a time.
    """
    p = Path(str(path).rstrip("/" + os.sep))
    block = max(TIFF_BLOCK, int(block) // TIFF_BLOCK * TIFF_BLOCK)
    query = gdf.query if hasattr(gdf, "query") and not hasattr(gdf, "geometry") else _frame_query(gdf, id_column, p)
    check_labels_for(p, crs)
    pieces = burn(query, int(width), int(height), transform, lambda ids: _check_ids(ids, p), block)
    kind = label_format(p, crs, levels)
    if kind == "ome-zarr":
        _write_zarr(pieces, p, Levels.of(width, height, levels), pixel_size_um, block)
    elif kind == "ome-tiff":
        _write_ome_tiff(pieces, p, Levels.of(width, height, levels), pixel_size_um, block)
    else:
        _write_cog(pieces, p, int(width), int(height), transform, crs)
    return p


def label_format(path: str | os.PathLike, crs=None, levels=None) -> str:
    """"ome-zarr", "ome-tiff" (a slide's `.tif`, or any `.ome.tif`) or "cog" (a GeoTIFF)."""
    if is_zarr(path):
        return "ome-zarr"
    return "ome-tiff" if crs is None and (levels or is_ome_tiff(path)) else "cog"


def _write_zarr(pieces, p: Path, levels: Levels, pixel_size_um, block: int) -> None:
    from .ome import label_name, open_ome_zarr

    with atomic_path(p, folder=True, check=lambda: check_replaceable(p)) as tmp, settled():
        arrays = open_ome_zarr(tmp, label_name(p), levels, pixel_size_um,
                               note={"values": "object id of the vector output; 0: background"})
        fill_levels(arrays, levels, pieces, block)


def _write_ome_tiff(pieces, p: Path, levels: Levels, pixel_size_um, block: int) -> None:
    from .ome import write_ome_tiff
    from .pyramid import create_levels, open_group

    with (atomic_path(p) as tmp, tempfile.TemporaryDirectory(prefix=tmp.name + ".levels.", dir=p.parent) as scratch,
          settled()):
        arrays = create_levels(open_group(scratch), levels)
        fill_levels(arrays, levels, pieces, block)
        write_ome_tiff(arrays, levels, tmp, pixel_size_um)


def _write_cog(pieces, p: Path, width: int, height: int, transform: Affine, crs) -> None:
    """Level 0 to a scratch tiled GeoTIFF, overviews by nearest, then GDAL's COG driver copy."""
    profile = dict(driver="GTiff", width=width, height=height, count=1, dtype="uint32", nodata=0, tiled=True,
                   blockxsize=TIFF_BLOCK, blockysize=TIFF_BLOCK, compress="deflate", predictor=2,
                   BIGTIFF="IF_SAFER", transform=transform)
    if crs is not None:
        profile["crs"] = crs
    with atomic_path(p) as tmp, warnings.catch_warnings(), rasterio.Env(GDAL_CACHEMAX=GDAL_CACHE):
        warnings.simplefilter("ignore", rasterio.errors.NotGeoreferencedWarning)
        base = tmp.with_name(tmp.name + ".base.tif")  # beside it: removed with the stale temporaries
        try:
            with rasterio.open(base, "w", **profile) as dst:
                dst.update_tags(**{TAG: "object id of the vector output; 0: background"})
                for x0, y0, out in pieces:
                    dst.write(out, 1, window=rasterio.windows.Window(x0, y0, out.shape[1], out.shape[0]))
                factors = overview_factors(width, height)
                if factors:
                    dst.build_overviews(factors, Resampling.nearest)
            check_whole(base, p)
            rasterio.shutil.copy(base, tmp, driver="COG", COMPRESS="DEFLATE", PREDICTOR="YES", BLOCKSIZE=TIFF_BLOCK,
                                 OVERVIEWS="FORCE_USE_EXISTING" if factors else "NONE", BIGTIFF="IF_SAFER")
            check_whole(tmp, p)
        finally:
            for q in (base, base.with_name(base.name + ".ovr"), base.with_name(base.name + ".aux.xml")):
                q.unlink(missing_ok=True)


def check_whole(path: Path, p: Path) -> None:
    """GDAL reports a failed write in its COG copy (a full disk) on stderr only, and leaves a file without
    its directory or some tiles: every tile of every level of `path` must lie whole inside the file.
    A full disk raises OSError(ENOSPC) (the run's exit 2 names it), any other failed write an OutputError."""
    import tifffile

    try:
        size = path.stat().st_size
        with tifffile.TiffFile(path) as tf:
            whole = len(tf.pages) > 0 and all(o > 0 and n > 0 and o + n <= size for page in tf.pages
                                              for o, n in zip(page.dataoffsets, page.databytecounts))
    except (OSError, ValueError, tifffile.TiffFileError):
        whole = False
    if whole:
        return
    st = os.statvfs(path.parent)
    if st.f_bavail * st.f_frsize < 1 << 20:  # the partial file still holds what the disk had
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
    raise OutputError(f"{opt('labels', p)}: GDAL could not write the label image whole in {path.parent} (a write "
                      "failed; its message is above): check that folder's disk, then rerun")


def _check_ids(ids: np.ndarray, p: Path) -> None:
    if len(ids) and (ids.min() < 1 or ids.max() > np.iinfo(np.uint32).max):
        raise UsageError(f"{opt('labels', p)}: object ids must lie in 1..{np.iinfo(np.uint32).max} for a uint32 "
                         f"label image (got {ids.min()}..{ids.max()})")


def _frame_query(gdf, id_column: str, p: Path):
    """`query(minx, miny, maxx, maxy) -> (geometries, ids)` in id order over a GeoDataFrame (an STRtree)."""
    geoms = np.asarray(gdf.geometry.values, dtype=object) if len(gdf) else np.asarray([], dtype=object)
    ids = (np.asarray(gdf[id_column], dtype=np.int64) if id_column in gdf.columns
           else np.arange(1, len(gdf) + 1, dtype=np.int64))
    _check_ids(ids, p)
    keep = np.asarray([g is not None and not g.is_empty for g in geoms], bool) if len(geoms) else np.zeros(0, bool)
    geoms, ids = geoms[keep], ids[keep]
    order = np.argsort(ids, kind="stable")  # rasterize in id order: the higher id wins an overlap
    geoms, ids = geoms[order], ids[order]
    tree = shapely.STRtree(geoms) if len(geoms) else None

    def query(minx, miny, maxx, maxy):
        if tree is None:
            return geoms, ids
        hits = np.sort(tree.query(shapely.box(minx, miny, maxx, maxy)))
        return geoms[hits], ids[hits]

    return query
