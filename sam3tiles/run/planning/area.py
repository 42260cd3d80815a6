"""Only where there is something to find: an input's skip rules (area of interest, tissue), its objects kept
in the area, and what the plan says about them.

* `plan_skips(src, opts)`: the rules of `tiling.selection` for one open input: `--aoi` (`readers.area`,
  in the input's CRS, as source pixels) and, for slides, `--tissue auto` (`tiling.tissue`, from a
  low-resolution level). The plan keeps them (`InputPlan.skips`); `InputPlan.selection()` applies them to
  the input's final grid (an exemplar strip may narrow it after the input is opened).
* `check_area_meets(inputs, text)`: an area that meets no input is exit 2 naming both extents (one that only
  touches an input's edge or corner meets it not); one that overlaps an input in a sliver is said (a warning,
  the plan).
* `AreaFilter`: objects that intersect the area are written whole, the others not; with `--aoi-clip`
  clipped to it (their area columns then follow the clipped shape).
* `skip_lines`, `skip_estimate`: the plan's and the dry run's words and GPU time saved.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import numpy as np
import shapely
from shapely import affinity
from shapely.geometry.base import BaseGeometry

from ...errors import UsageError
from ...readers.area import Area, read_area
from ...tiling.selection import OUTSIDE, AreaSkip, MaskSkip, TileSelection, describe_counts
from ...tiling.tissue import MASK_SIDE, tissue_mask
from ...wording import opt, spoken

log = logging.getLogger(__name__)

#: An area whose part inside an input is under this share of both the area and the input overlaps it in a sliver.
SLIVER = 0.01
#: Pixels a tissue overview may decode at most (a slide without a pyramid level near `MASK_SIDE`: none).
TISSUE_READ_BUDGET = 32_000_000


@dataclass(frozen=True, eq=False)
class InputSkips:
    """What one input skips: the rules (`tiling.selection`), its area of interest in its CRS (None: none),
    and a note on the tissue (why none was found, or its share)."""

    rules: tuple = ()
    area: Area | None = None
    tissue: str = ""
    meets: bool = True  # the area meets the input (has an area in common with it)
    edge: str = ""  # a note when the area only touches the input or overlaps it in a sliver


def plan_skips(src, opts) -> InputSkips:
    """The skip rules of one open input (`src`, a `readers.Source`) under `opts`."""
    rules: list = []
    area, meets = None, True
    edge = ""
    if opts.aoi is not None:
        area = read_area(opts.aoi, src.crs)
        px = affinity.affine_transform(area.geometry, (~src.transform).to_shapely())
        meets, edge = _overlap(px, src, opts.aoi)
        rules.append(AreaSkip(px if meets else shapely.Polygon()))  # touching alone runs no tile
    tissue = ""
    if opts.tissue == "auto" and src.kind == "slide":
        rule, tissue = _tissue_rule(src)
        if rule is not None:
            rules.append(rule)
    return InputSkips(tuple(rules), area, tissue, meets, edge)


def _overlap(px: BaseGeometry, src, text: str) -> tuple[bool, str]:
    """Whether the area (source pixels) has an area in common with the input, and a note when that part is a
    sliver (under `SLIVER` of both the area and the input: usually a shifted area or the wrong CRS)."""
    raster = shapely.box(0, 0, src.width, src.height)
    if not px.intersects(raster):
        return False, ""
    inside = px.intersection(raster).area
    if inside <= 0:
        return False, spoken(f"{opt('aoi', text)} touches {src.path} only along its edge or at a corner, with no "
                             "area in common: no tile of it runs")
    if inside < SLIVER * px.area and inside < SLIVER * raster.area:
        note = spoken(f"{opt('aoi', text)} overlaps {src.path} only in a sliver at its edge ({inside:.4g} px, "
                      f"{inside / px.area:.2%} of the area): the run segments the tiles along it and writes only the "
                      "objects that reach into it: check the area's CRS or coordinates if more was meant")
        log.warning("%s", note)
        return True, note
    return True, ""


def _tissue_rule(src) -> tuple[MaskSkip | None, str]:
    """The slide's tissue as a skip rule, and a note (None and why when nothing can be skipped)."""
    k = min(1.0, MASK_SIDE / max(src.width, src.height))
    out_wh = (max(1, round(src.width * k)), max(1, round(src.height * k)))
    if src.read_cost(out_wh) > TISSUE_READ_BUDGET:
        note = ("no pyramid level near " f"{MASK_SIDE} px to find the tissue in: every tile runs (a pyramidal "
                "OME-TIFF has one)")
        log.warning("%s: %s", src.path, note)
        return None, note
    tm = tissue_mask(src.overview(out_wh))
    if tm.note:
        log.warning("%s: %s", src.path, tm.note)
        return None, tm.note
    note = f"tissue on {tm.share:.0%} of the slide ({tm.mode})"
    return MaskSkip(tm.mask, (src.width / out_wh[0], src.height / out_wh[1])), note


def check_area_meets(inputs: Sequence, text: str | None) -> None:
    """An area of interest that meets none of `inputs` (`InputPlan`s): exit 2 naming both extents."""
    if text is None or not inputs:
        return
    if any(i.skips is None or i.skips.meets for i in inputs):
        for i in inputs:  # an input the area only touches runs no tile: said, as the others run
            if i.skips is not None and not i.skips.meets and i.skips.edge:
                log.warning("%s", i.skips.edge)
        return
    first = inputs[0]
    crs = first.crs.to_string() if first.crs is not None else "pixels"
    area = ",".join(f"{v:.10g}" for v in first.skips.area.bounds)
    rasters = "; ".join(f"{i.path}: " + ",".join(f"{v:.10g}" for v in i.bounds) for i in inputs[:3])
    plural = "s" if len(inputs) > 1 else ""
    how = (f"only touches the input{plural} along an edge or at a corner (no area in common)"
           if any(i.skips.edge for i in inputs) else f"does not overlap the input{plural}")
    raise UsageError(f"{opt('aoi', text)} {how}: the area spans "
                     f"{area} and {rasters}{'; ...' if len(inputs) > 3 else ''} (in {crs}): check the area's CRS "
                     "or coordinates")


@dataclass
class AreaFilter:
    """Keeps the objects that intersect `area` (the input's CRS), clipped to it with `clip`; counts them."""

    area: BaseGeometry
    clip: bool = False
    dropped: int = 0
    clipped: int = 0
    _ready: bool = field(default=False, repr=False)

    def keep(self, geoms: Sequence) -> tuple[list, np.ndarray]:
        """(the kept geometries, clipped when asked; which of `geoms` were kept)."""
        if not self._ready:
            shapely.prepare(self.area)
            self._ready = True
        g = np.asarray(list(geoms), dtype=object)
        if not len(g):
            return [], np.zeros(0, bool)
        keep = shapely.intersects(self.area, g)
        out = g[keep]
        if self.clip and len(out):
            inside = shapely.within(out, self.area)
            cut = shapely.intersection(out[~inside], self.area)
            cut = shapely.force_2d(np.asarray([_polygonal(c) for c in cut], dtype=object))  # outputs are 2D
            out[~inside] = cut
            ok = ~shapely.is_empty(out) & (shapely.area(out) > 0)
            self.clipped += int((~inside).sum() - (~ok).sum())
            keep[np.flatnonzero(keep)[~ok]] = False
            out = out[ok]
        self.dropped += int((~keep).sum())
        return list(out), keep


def _polygonal(g: BaseGeometry) -> BaseGeometry:
    """The polygons of an intersection (a polygon touching the area's edge leaves lines or points too)."""
    if g.geom_type in ("Polygon", "MultiPolygon"):
        return g
    parts = [p for p in shapely.get_parts(np.asarray([g], dtype=object)) if p.geom_type == "Polygon"]
    return shapely.union_all(parts) if parts else shapely.Polygon()


def skip_lines(selection: TileSelection | None, skips: InputSkips | None) -> list[str]:
    """What an input's selection skips, for the plan: tiles to run of the grid, per reason; the tissue note."""
    out = []
    if selection is not None and selection.rules:
        counts = describe_counts(selection.counts())
        out.append(f"{selection.to_run} of {len(selection.codes)} tiles to run"
                   + (f", {selection.skipped} skipped ({counts})" if counts else ", none skipped"))
        if any(r.reason == OUTSIDE for r in selection.rules):
            out.append("  the area grows at run time where an object in it crosses into a skipped tile")
    if skips is not None and skips.edge:
        out.append(f"  {skips.edge}")
    if skips is not None and skips.tissue:
        out.append(f"  {skips.tissue}")
    return out


def skip_estimate(tiles_to_run: int, tiles: int, prompts: int, encode_s: float, decode_s: float) -> str:
    """The GPU time of the tiles to run against the full grid's, at the plan's per-call costs."""
    per = encode_s + decode_s * prompts
    run, full = tiles_to_run * per / 60, tiles * per / 60
    return (f"~{run:.1f} GPU-minutes for {tiles_to_run} tile(s) against ~{full:.1f} for the full grid of {tiles}: "
            f"~{full - run:.1f} saved ({(1 - tiles_to_run / tiles) if tiles else 0:.0%})")


class InputArea:
    """One input's skipping while it runs (`run.executing.runner.InputRun`): its selection (a copy: growing it leaves
    the plan's as planned), the area's growth (`tiling.growth`), its object filter, and the report's counts
    (`RunReport.skipped_by`, `RunReport.area`)."""

    def __init__(self, inp, opts, report, frames):
        self.report = report
        self.plan = plan = inp.selection()  # as planned: the grid tiles are admitted by it
        self.selection = plan.copy() if plan is not None else None  # grown as the run goes
        skips = inp.skips
        area = skips.area if skips is not None else None
        self.filter = AreaFilter(area.geometry, opts.aoi_clip) if area is not None else None
        self.growth = None
        if self.selection is not None and area is not None and any(r.growable for r in self.selection.rules):
            from ...tiling.growth import Growth

            self.growth = Growth(inp.grid, frames, self.selection, area.geometry, reach=opts.edge_margin + 1)
        if self.selection is not None:
            for reason, n in self.selection.counts().items():
                report.skipped_by[reason] = report.skipped_by.get(reason, 0) + n
                report.skipped += n
        if area is not None:
            report.area.setdefault("aoi", area.text)
            report.area["clip"] = bool(opts.aoi_clip)
            report.area.setdefault("tiles_grown", 0)
        if skips is not None and skips.edge:
            report.area.setdefault("edge", []).append(skips.edge)
        if skips is not None and skips.tissue:
            report.area.setdefault("tissue", []).append(f"{inp.path}: {skips.tissue}")

    def planned(self, index: int) -> bool:
        """Whether the plan runs grid tile `index` (a tile grown into since is admitted when it grows)."""
        return self.plan is None or self.plan.runs(index)

    def to_plan(self, n: int) -> Iterator[int]:
        """The grid tiles (of `n`) the plan runs, in index order (a tile grown into since is admitted when it
        grows), without a look at each skipped one."""
        if self.plan is None:
            yield from range(n)
        else:
            for start in range(0, n, 65536):  # a slice at a time: not a list of 10^6 indices
                yield from (start + np.flatnonzero(self.plan.codes[start:start + 65536] == 0)).tolist()

    @property
    def to_run(self) -> int | None:
        return self.selection.to_run if self.selection is not None else None

    def _growable(self) -> np.ndarray:
        """Per grid tile: skipped by a rule that lets the run take it back (the area of interest)."""
        sel = self.selection
        grows = np.asarray([False] + [bool(r.growable) for r in sel.rules])
        return grows[sel.codes]

    def blocks(self, blocks):
        """Merge blocks (a dict, or `merge.GridBlocks`) with every tile the area may grow into in a block of
        its own: such a tile merges alone when it runs, and its neighbours' pieces near it wait for the final
        pass (`merge.BlockMerger`), so a block along the area's edge merges without waiting for the run's end.
        A grid of one block merges at the end anyway: there they stay in it (a tile never grown into is closed
        at the end, as a failed one), one merge as in the full run, no one-tile merges, no final pass."""
        if self.selection is None:
            return blocks
        if hasattr(blocks, "with_alone"):  # by index: a bool per tile, not a dict entry
            return blocks if blocks.single() else blocks.with_alone(self._growable())
        return {**blocks, **{int(i): -1 - int(i) for i in np.flatnonzero(self._growable())}}

    def never(self) -> list[int]:
        """The skipped tiles that never run (no tissue, ...): the merger takes them as tiles without pieces
        at once, as it takes an all-nodata tile, so their blocks merge when their other tiles are in."""
        if self.selection is None:
            return []
        return np.flatnonzero((self.selection.codes != 0) & ~self._growable()).tolist()

    def arrived(self, tile, pieces) -> list[int]:
        """The skipped tiles to run now that `tile` finished with `pieces` (counted in the report)."""
        if self.growth is None:
            return []
        grown = self.growth.arrived(tile, pieces)
        if grown:
            r = self.report
            r.skipped_by[OUTSIDE] -= len(grown)
            r.skipped -= len(grown)
            r.area["tiles_grown"] = r.area.get("tiles_grown", 0) + len(grown)
        return grown

    def nodata(self, n: int = 1) -> None:
        """Tiles found all nodata when read (the report's `skipped` is counted by the runner)."""
        from ...tiling.selection import NODATA

        self.report.skipped_by[NODATA] = self.report.skipped_by.get(NODATA, 0) + n

    def finish(self) -> None:
        """The filter's counts into the report."""
        if self.filter is not None:
            self.report.area["objects_outside"] = self.report.area.get("objects_outside", 0) + self.filter.dropped
            if self.filter.clip:
                self.report.area["objects_clipped"] = self.report.area.get("objects_clipped", 0) + self.filter.clipped
