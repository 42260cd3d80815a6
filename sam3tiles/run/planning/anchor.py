"""The grid of a map of many files (issue 52): anchored to its lattice, so that adding files keeps every tile.

A mosaic (several files as one map) lays its tile origins on multiples of the tile stride counted from the CRS
origin in the map's pixel size and lattice phase: origin x = phase + k * stride * pixel size (y alike). The map
gets a margin of holes before its first file (`tiling.grid.lattice_offset` pixels, under one stride) to put its
first tile there. Files added anywhere (west and north included) then leave every existing tile where it was,
holding the same pixels; its checkpoint (keyed on place and pixels: `checkpoint.tile_place`,
`checkpoint.pixels_identity`) is reused, and a run in a new work folder lays the same grid and gives the same
objects as the incremental rerun. Nothing is recorded in the work folder: the grid follows from the map.

Choices and costs: the margin can cost a mosaic up to one more row and column of tiles than the same scene as
one file. A single file is not anchored (its grid starts at its own top-left, as before: no tile more than it
needs; a mosaic it later grows into recomputes its tiles once) unless `--anchor-grid lattice` asks
(`lattice_path`: then it is a map of one file, anchored as a mosaic). The margin is where tiles are laid only:
the outputs and the plan's figures cover the files (`plan.InputPlan.frame`). Not anchored either, each laid from its own
top-left: a map without a CRS, a rotated or sheared one, a squashed run, `--gsd`, and a stride that is no whole
number of source pixels at the run's scale.
"""

from __future__ import annotations

import dataclasses
import math

from ...options import Options
from ...readers.mosaic import MosaicPath, layout_of
from ...tiling.grid import lattice_offset


def lattice_path(path: str, opts: Options) -> str:
    """One file as a map of one file (`readers.mosaic.MosaicPath`, named as the file) where `--anchor-grid
    lattice` asks for its grid on the lattice (`anchor_map` anchors it as a mosaic's): its tiles are then the ones
    a mosaic it grows into lays, their checkpoints reused. Otherwise, or a file without a CRS, `path` as given."""
    from .maps import mosaic_path, read_header

    if opts.anchor != "lattice" or layout_of(path) is not None:
        return path
    header = read_header(path, opts)
    if header.crs is None:
        return path
    return MosaicPath(str(path), mosaic_path([header]).layout)


def anchor_map(path, opts: Options):
    """`path`, a mosaic, with the margin that puts its tiles on its lattice's grid (see the module); any other
    path, or one that cannot be anchored, as given. Returns (the path, its margin (columns, rows) of holes
    before the files, None when not anchored)."""
    lay = layout_of(path)
    if lay is None or lay.crs is None or opts.squash or opts.gsd:
        return path, None
    a, b, c, d, e, f = lay.transform[:6]
    if b != 0 or d != 0:
        return path, None
    stride = opts.tile_size - opts.overlap
    dc, dr = lattice_offset(c, a, stride, opts.scale), lattice_offset(f, e, stride, opts.scale)
    if dc is None or dr is None:
        return path, None
    if (dc, dr) == (0, 0):
        return path, (0, 0)
    members = tuple(dataclasses.replace(m, col=m.col + dc, row=m.row + dr) for m in lay.members)
    t = (a, 0.0, c - dc * a, 0.0, e, f - dr * e)
    grown = dataclasses.replace(lay, members=members, width=lay.width + dc, height=lay.height + dr, transform=t,
                                nodata=True)
    return MosaicPath(str(path), grown), (dc, dr)


def on_lattice(geoms, transform, per_pixel: int = 1024):
    """`geoms` with every vertex snapped to 1/`per_pixel` of the map's pixel, counted from the lattice's point
    nearest the CRS origin (`_phase`), not from the map's own origin: the same points whichever run computed them.
    A tile reused from a run whose map had another origin (files added west or north) gives outlines that differ
    from a fresh run's by float noise (~1e-10 of a metre): an outline on a file's edge would then meet that file
    in one and only touch it in the other (`readers.mosaic.Ownership.sources`), and the merge's measures carry
    the noise on (its consensus move: up to 3e-5 of an object's area). Rotated maps: as given."""
    import numpy as np
    import shapely

    a, b, c, d, e, f = transform[:6]
    if b != 0 or d != 0 or a == 0 or e == 0:
        return geoms
    g = np.array([a, e]) / per_pixel
    o = np.array([_phase(c, a), _phase(f, e)])
    return shapely.transform(np.asarray(geoms, dtype=object), lambda xy: o + np.round((xy - o) / g) * g)


def _phase(origin: float, pixel: float) -> float:
    """A lattice point next to the CRS origin along one axis, for a map whose origin is `origin` in pixels of
    `pixel`: the origin's offset from a whole number of pixels, taken in [-0.25, 0.75) as
    `tiling.grid.lattice_offset` takes it (the usual phases, 0 and one half, far from its ends) and rounded to
    2^-20 of a pixel: maps of one lattice whose origins differ by float noise give the same float."""
    p = origin / pixel
    return round((p - math.floor(p + 0.25)) * 2 ** 20) / 2 ** 20 * pixel
