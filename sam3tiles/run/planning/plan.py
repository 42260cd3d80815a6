"""The plan of a run: everything decided before the first tile, as one `RunPlan`.

`plan_run(...)` is the one place where a run's inputs, outputs, options, model, prompts and boxes are
decided and checked (the checks: `preflight`), in this order: inputs (paths, globs: `inputs`) -> what the run
reads against what it writes (`preflight.check_paths`) -> outputs (`outputs`; may they be written?) -> the label
image -> every input opened once (bad files fail fast with their own message; its grid) -> the model
(backend and files) -> example boxes (inside some input?) -> prompts. `segment`, `run`, `run --dry-run`
and `sam3tiles plan` all go through it, so a run and its dry run refuse the same things with the same
messages and exit codes. Checks added later belong in `plan_run`'s sequence. Nothing is written here.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

from ...errors import UsageError
from ...model.files import require_model
from ...model.registry import RuntimeSpec, spec_identity
from ...options import Options
from ...prompts.chips import parse_example_images
from ...prompts.points import ZOOM_OUT_DEPTH, PointPrompts, check_point_run, plan_points, point_arguments
from ...prompts.prompt import GeoBox, Prompt, build_prompts, prompt_arguments, raster_bounds, read_box_file
from ...readers import Source, Stretch, gdal_env, open_source
from ...readers.identity import changed_error, changed_while_opened, file_stamps, opening_stamp
from ...readers.mosaic import layout_of, member_identities, mosaic_identity
from ...tiling.grid import DEFAULT_OVERLAP, TILE_SIZE, Tile, TileGrid, scale_for_gsd, squash_tile
from ...tiling.refine import Refiner
from ...units import Frame, pixel_size
from ...wording import named_in, opt, raw, spoken
from ...writers.formats import check_space, is_dataset
from ...writers.labels import check_labels_for, label_format
from ..recording.checkpoint import pixels_identity
from ..recording.workfolder import replaceable, vouched
from .area import check_area_meets, plan_skips
from .cluster import check_scheduler
from .inputs import expand_inputs, read_paths
from .maps import group_inputs, map_lines
from .once import distinct_inputs
from .outputs import _outputs, report_path_for, written
from .preflight import (check_box_file, check_boxes_inside, check_input, check_label_path, check_out, check_paths,
                        check_plan, check_prompts_here, check_qupath_type, check_room, check_side_files,
                        check_vrt_cycle)
from .targets import Targets


#: Rough desktop-GPU costs for the estimate (SAM 3 at 1008x1008): seconds per encode and per decode.
ENCODE_S, DECODE_S = 0.35, 0.07
#: ... and per click (two point decoder passes: 27 ms on an RTX 3080 Ti in the v0.6.0 write-up).
POINT_DECODE_S = 0.03


log = logging.getLogger(__name__)


@dataclass(frozen=True)
class InputPlan:
    """One input as the pre-flight found it: size, frame, bands and stretch, checkpoint identity, grid."""

    path: str
    width: int
    height: int
    crs: object  # rasterio CRS or None (pixel coordinates, y down)
    transform: object  # Affine: source pixel -> CRS
    bands: tuple[int, ...]  # the bands used (1-based)
    band_count: int  # bands in the file
    dtype: str
    stretch: Stretch | None
    identity: str  # the file's checkpoint identity
    grid: TileGrid | None  # None when squashed
    squash_size: int
    output: Path | None  # its own output (when --out is a folder)
    pixel_size_um: tuple[float, float] | None = None  # a slide's physical pixel size (OME), when it states one

    @property
    def frame(self) -> Frame:
        """The input's frame for units and outputs (`units.Frame`): the files' extent, without an anchored
        mosaic's margin (`margin`; the label image, the quicklook and the plan's figures cover the files)."""
        dc, dr = self.margin
        t = self.transform @ self.transform.translation(dc, dr) if (dc, dr) != (0, 0) else self.transform
        return Frame(self.crs, t, self.width - dc, self.height - dr, self.pixel_size_um)
    files: tuple[str, ...] = ()  # every file its pixels come from (a VRT's sources, ...)
    # exemplars (`sam3tiles.prompts.strip`): the strip the grid leaves in each tile input (0: none), the tiles
    # the grid had without it, each example image's (image, chip -> source pixels, bands to read), a note
    exemplar_strip: int = 0
    base_tiles: int = 0
    chips: tuple = ()
    exemplar_note: str = ""
    levels: tuple[tuple[int, int], ...] = ()  # a slide's pyramid levels (width, height), full resolution first
    stamps: tuple = ()  # their `readers.identity.file_stamp`s when planned (None: unknown)
    # a mosaic (`readers.mosaic`, issue 38): each member's checkpoint identity and own output (--out FOLDER/)
    member_ids: tuple[str, ...] = ()
    member_outputs: tuple = ()

    @property
    def paths(self) -> tuple[str, ...]:
        """The files the map is made of: a mosaic's members, or the input itself."""
        lay = layout_of(self.path)
        return lay.paths if lay is not None else (self.path,)

    def identity_at(self, window) -> str:
        """The checkpoint identity of the pixels of a source-pixel window: the input's, or a mosaic's for
        the members the window touches only (a changed member recomputes only its tiles)."""
        return pixels_identity(self.path, self.identity, self.member_ids, window)

    skips: object = None  # `run.planning.area.InputSkips`: the tiles it skips (area of interest, tissue), None: none
    anchored: bool = False  # a grid anchored to its lattice: files added keep its tiles (`run.planning.anchor`)
    margin: tuple[int, int] = (0, 0)  # the anchor's strip of holes (columns, rows) before the files: tiles only

    def selection(self):
        """Which tiles of the grid run and why the others are skipped (`tiling.selection.TileSelection`),
        None when every tile runs (no skip rule, or squashed)."""
        if self.grid is None or self.skips is None or not self.skips.rules:
            return None
        from ...tiling.selection import TileSelection

        return TileSelection.of(self.grid, self.skips.rules)

    @property
    def n_to_run(self) -> int:
        """The tiles the plan encodes (before nodata tiles are found; the area may grow at run time)."""
        sel = self.selection()
        return sel.to_run if sel is not None else self.n_tiles

    @property
    def bounds(self) -> tuple[float, float, float, float]:
        """The files' extent in the CRS (`frame`: an anchored grid's margin is no part of it)."""
        f = self.frame
        return raster_bounds(f.transform, f.width, f.height)

    @property
    def pixel_area(self) -> float:
        """CRS units squared per source pixel."""
        t = self.transform
        return abs(t.a * t.e - t.b * t.d)

    @property
    def overlap(self) -> int:
        return self.grid.overlap if self.grid is not None else 0

    @property
    def n_tiles(self) -> int:
        return len(self.grid) if self.grid is not None else 1

    def tiles(self) -> Iterator[Tile]:
        """The tiles, made as iterated (a grid of a huge image is not held as a list)."""
        if self.grid is None:
            yield squash_tile(self.width, self.height, self.transform, self.squash_size)
        else:
            yield from self.grid

    def describe(self) -> str:
        if self.member_ids:
            from .maps import mosaic_line

            return mosaic_line(self)
        crs = self.crs.to_string() if self.crs else "no CRS (pixel coordinates)"
        stretch = "" if self.stretch is None else f", stretched {self.stretch.lo[0]:g}..{self.stretch.hi[0]:g}"
        strip = (f" ({self.base_tiles} without the {self.exemplar_strip} px exemplar strip)"
                 if self.exemplar_strip else "")
        return (f"{self.path}: {self.frame.width} x {self.frame.height} px, bands {','.join(map(str, self.bands))} "
                f"{self.dtype}{stretch}, {crs}: {self.n_tiles} tile(s){strip}")


@dataclass(frozen=True)
class RunPlan:
    """A checked run: what `segment_job` executes and `run --dry-run` prints."""

    inputs: tuple[InputPlan, ...]
    options: Options  # with the model folder resolved
    spec: RuntimeSpec
    model_identity: str
    prompts: tuple[Prompt, ...]
    boxes: tuple[GeoBox, ...]
    out: str | None  # as given
    combined: Path | None  # the one combined output, when --out is a file
    labels: Path | None
    overwrite: bool
    work_dir: Path | None  # checkpoints; None: none kept
    report_path: Path | None
    dataset: bool = False  # the combined output is a partitioned GeoParquet dataset (`name.parquet/`)
    points: PointPrompts | None = None  # point prompts (`run.executing.points`): then `prompts` is empty
    map_notes: tuple[str, ...] = ()  # how the inputs were grouped into maps (`maps.Grouping.notes`)
    input_notes: tuple[str, ...] = ()  # inputs left out: a file named twice, a sidecar (`once.distinct_inputs`)

    @property
    def paths(self) -> list[str]:
        """Every input file, a mosaic's members each."""
        return [p for i in self.inputs for p in i.paths]

    @property
    def outputs(self) -> list[Path]:
        """Every vector output this run writes (the label image aside)."""
        return [p for p in [self.combined, *(o for i in self.inputs for o in (i.output, *i.member_outputs))]
                if p is not None]

    @property
    def n_tiles(self) -> int:
        return sum(i.n_tiles for i in self.inputs)

    @property
    def decoder_calls_per_tile(self) -> int:
        """One a prompt, or with a batched decoder (`layouts.Fit.batched`) one for every text-only prompt."""
        from ...model.layouts import folder_fit

        fit = folder_fit(self.options.model) if self.spec.backend == "onnx" else None
        if fit is None or not fit.batched:
            return len(self.prompts)
        text = sum(1 for p in self.prompts if not (p.boxes or p.images))
        return min(1, text) + len(self.prompts) - text

    def estimates(self) -> dict[str, float]:
        """Model calls and GPU minutes at desktop-GPU speed for the tiles to run (`InputPlan.n_to_run`: the
        area of interest and the tissue skip tiles; nodata tiles are skipped later), and the full grid's.
        Points: the tiles holding points, one click (two point decoder passes) each (objects followed past a
        tile add more)."""
        if self.points is not None:
            from ...prompts.points import home_tiles

            tiles = home_tiles(self.points, self.inputs)
            return {"tiles": tiles, "encodes": tiles, "decodes": self.points.positives,
                    "gpu_minutes": (tiles * ENCODE_S + self.points.positives * POINT_DECODE_S) / 60}
        tiles, full = sum(i.n_to_run for i in self.inputs), self.n_tiles
        decodes = tiles * self.decoder_calls_per_tile
        return {"tiles": tiles, "grid_tiles": full, "encodes": tiles, "decodes": decodes, "decoder_calls": decodes,
                "gpu_minutes": (tiles * ENCODE_S + decodes * DECODE_S) / 60,
                "gpu_minutes_full": full * (ENCODE_S + len(self.prompts) * DECODE_S) / 60}

    def parameters(self) -> dict:
        """The run report's parameters."""
        o = self.options
        return {"scale": o.scale, "gsd": o.gsd, "tile_size": o.tile_size, "overlap": o.overlap, "squash": o.squash,
                "bands": o.bands, "min_area": o.min_area, "simplify": o.simplify,
                "prompts": [p.label for p in self.prompts], "boxes": len(self.boxes), "box_scope": o.box_scope,
                "example_images": [im.path for im in dict.fromkeys(i for p in self.prompts for i in p.images)],
                "exemplar_strip": max((i.exemplar_strip for i in self.inputs), default=0),
                "refine": o.refine, "refine_depth": o.refine_depth,
                **({"points": len(self.points.points)} if self.points is not None else {})}

    def describe(self) -> list[str]:
        """The plan as lines for the terminal (`run --dry-run`)."""
        o, e = self.options, self.estimates()
        model = f", model {o.model}, device {o.device}" if self.spec.backend == "onnx" else ""
        lines = [*map_lines(self.inputs, self.map_notes), *(f"inputs: {n}" for n in self.input_notes),
                 *(f"  {i.describe()}" for i in self.inputs),
                 self.points.describe() if self.points is not None else
                 "prompts: " + ", ".join(repr(p.label) for p in self.prompts)
                 + (f" ({len(self.boxes)} example box(es), box scope {o.box_scope})" if self.boxes else "")
                 + (f" ({n} example image(s))" if (n := len({i for p in self.prompts for i in p.images})) else ""),
                 f"backend: {self.spec.backend}{model}",
                 "tiling: " + ("squash (one tile per input)" if o.squash else
                               f"{o.tile_size} px tiles, overlap {o.overlap}"
                               + (f", gsd {o.gsd:g}" if o.gsd else f", scale {o.scale:g}")),
                 refine_line(o),
                 *exemplar_lines(self.inputs),
                 "output:", *(f"  {p}" + _exists(p, "will be replaced") for p in self.outputs)]
        if self.labels is not None:
            inp = self.inputs[0]
            kind = {"cog": "GeoTIFF, COG layout", "ome-tiff": "pyramidal OME-TIFF", "ome-zarr": "OME-Zarr"}[
                label_format(self.labels, inp.crs, inp.levels)]
            lines.append(f"  {self.labels}  (label image, {kind})" + _exists(self.labels, "will be replaced"))
        if self.work_dir is not None:
            lines.append(f"checkpoints: {self.work_dir}"
                         + (spoken(f"  (exists: a run resumes from it; {opt('fresh')} starts over)")
                            if self.work_dir.is_dir() else "")
                         + (f"; {n} map(s) of several files on a grid anchored to the CRS lattice (files added later "
                            "leave its tiles where they are: a rerun reuses those over unchanged files)"
                            if (n := sum(i.anchored for i in self.inputs)) else ""))
        if self.points is not None:
            return lines + point_cost_lines(self.points, self.inputs)
        lines += [*area_lines(self.inputs, e),
                  f"tiles: {e['tiles']} (all-nodata tiles are skipped at run time, checkpointed ones resumed)",
                  f"model calls: {e['encodes']} encodes, {e['decodes']} decodes (more when a tile holds more "
                  "example boxes than a pass takes, or refinement adds sub-tiles)",
                  f"estimated GPU time: ~{e['gpu_minutes']:.1f} min at ~{ENCODE_S} s per encode + {DECODE_S} s "
                  "per decode on a desktop GPU"]
        return lines


def exemplar_lines(inputs: Sequence[InputPlan]) -> list[str]:
    """What the exemplars cost (plan, dry run): the strip's extra tiles per input, and notes."""
    from ...prompts.strip import strip_line

    out = [f"  {os.path.basename(i.path)}: {strip_line(i.exemplar_strip, i.n_tiles, i.base_tiles, i.grid.tile_size)}"
           for i in inputs if i.exemplar_strip and i.grid is not None]
    out += [f"  {os.path.basename(i.path)}: {i.exemplar_note}" for i in inputs if i.exemplar_note]
    extra = sum(i.n_tiles - i.base_tiles for i in inputs if i.exemplar_strip)
    return ([f"exemplars: +{extra} tiles (+{extra} encodes) for the exemplar strip"] if extra else
            ["exemplars: pasted into free margins and padding, no extra tiles"] if any(i.chips for i in inputs)
            else []) + out


def area_lines(inputs: Sequence[InputPlan], e: dict) -> list[str]:
    """What the area of interest and the tissue skip (plan, dry run), and the GPU time that saves."""
    from .area import skip_lines

    out = [f"  {os.path.basename(i.path)}: {line.strip()}"
           for i in inputs for line in skip_lines(i.selection(), i.skips)]
    if not out:
        return []
    saved = e["gpu_minutes_full"] - e["gpu_minutes"]
    return ["skipped tiles:", *out, f"  {e['tiles']} of {e['grid_tiles']} tiles to run: ~{saved:.1f} GPU-minutes saved"]


def refine_line(opts: Options) -> str:
    """What refinement may add to a run (plan, dry run): it is decided per tile while the run goes."""
    if opts.squash or opts.refine == "off" or opts.refine_depth == 0:
        return "refinement: off (tiles that hit SAM 3's 200-object cap are reported, not re-run)"
    return (f"refinement: auto, depth {opts.refine_depth}: a tile where a prompt hits SAM 3's 200-object cap is "
            f"re-run as up to 4 sub-tiles at twice the zoom (that prompt only), so the run may add tiles: at most "
            f"4 per saturated tile per level (9 for an image of one tile)")


def _exists(p: Path, what: str) -> str:
    return f"  (exists: {what})" if os.path.exists(p) else ""


def plan_run(inputs, text: Sequence[str] | str = (), *, boxes: Sequence[GeoBox | str] | GeoBox | str = (),
             box_file: str | None = None, example_images: Sequence[str] | str = (), points=(),
             point_file: str | os.PathLike | None = None, targets: Targets = Targets(),
             options: Options | None = None, check_prompts: bool = False) -> RunPlan:
    """Check a run and decide everything about it before any work; raises the run's own errors. `text`,
    `boxes`, `example_images`: one or several (`prompts.prompt_arguments`); `points`, `point_file`: a point run
    (`prompts.points`). `targets`: where it writes (`targets.Targets`). `check_prompts`: also encode each
    prompt here when the backend loads in a moment (not onnx), as a dry run does; a real run checks them on
    its model worker instead."""
    out, overwrite, labels, work_dir, checkpoint, report_path = targets.values()
    opts = options or Options()
    texts, geo_boxes, example_images = prompt_arguments(text, boxes, example_images)
    given_points, point_file = check_point_run(point_arguments(points), point_file, texts, geo_boxes, box_file,
                                               example_images, opts.squash, opts.aoi)
    check_scheduler(opts.scheduler)  # a scheduler address that cannot be one: before anything is opened
    if report_path is None and out is not None:
        report_path = report_path_for(Path(out), opts.layer)
    dates: dict = {}  # STAC items' datetimes, by href (`maps`: two days are two images)
    once = distinct_inputs(expand_inputs(inputs, opts.asset, own=[report_path] if report_path is not None else [],
                                         dates=dates))  # a file named twice is one input; sidecars are none
    paths = once.paths
    per_input, combined, work_dir = _outputs(paths, out, work_dir, checkpoint, opts.layer)
    check_qupath_type(opts.qupath_type, out, combined)
    chips = parse_example_images(example_images)
    outputs = [p for p in [combined, *per_input] if p is not None]
    writes = written(outputs, labels, report_path, work_dir if checkpoint else None, opts, targets)
    check_paths(read_paths(paths, chips, box_file, point_file), writes, several=len(paths) > 1)  # before "exists"
    ours = work_dir if checkpoint else None  # outputs an unfinished run of this work folder left may be replaced
    dataset = is_dataset(out)
    for p in outputs:
        with vouched(ours, "out", p):
            check_out(p, overwrite or replaceable(p, ours), opts, dataset)
    with vouched(ours, "labels", labels):
        label_path = check_label_path(labels, paths if opts.no_mosaic else paths[:1],
                                      overwrite or (labels is not None and replaceable(labels, ours)))
    opts = model_side(opts)  # the tile side is the model's (a 644 px export: 644 px tiles)
    planned, notes = plan_maps(paths, opts, per_input, dates)
    check_area_meets(planned, opts.aoi)  # an area of interest that misses every input: exit 2, both extents
    opts, spec = resolve_model(opts)  # after the inputs: a wrong path is exit 3 with or without the model
    check_room(opts, planned)  # a low `ulimit -v` aborts native code mid-run, its lock left behind
    reads = read_paths([(f if i.member_ids else i.path, f) for i in planned for f in i.files], chips, box_file,
                       point_file)
    check_maps(paths, planned, opts, per_input, reads, writes, label_path, combined)
    if label_path is not None:
        check_labels_for(label_path, planned[0].crs)
    if combined is not None:
        check_space(combined, planned[0].crs)
    check_side_files(writes, overwrite, ours)
    geo_boxes, pts, prompts = _plan_prompts(planned, texts, geo_boxes, box_file, chips, given_points, point_file)
    planned = tuple(with_exemplars(i, prompts, opts) for i in planned)
    if check_prompts and spec.backend != "onnx":
        check_prompts_here(spec, prompts)
    return RunPlan(inputs=planned, options=opts, spec=spec, model_identity=spec_identity(spec), prompts=prompts,
                   boxes=tuple(geo_boxes), out=str(out) if out is not None else None, combined=combined,
                   labels=label_path, overwrite=overwrite, dataset=dataset, points=pts,
                   work_dir=Path(work_dir) if (checkpoint and work_dir is not None) else None,
                   report_path=Path(report_path) if report_path is not None else None, map_notes=tuple(notes),
                   input_notes=tuple(once.notes))


def point_cost_lines(points: PointPrompts, inputs: Sequence[InputPlan]) -> list[str]:
    """What a point run will cost (`plan --point`, `run --dry-run`): the encodes of the tiles holding points
    and the zoom-outs at most, the decoder calls, the GPU time at desktop speed; what only the run knows (the
    tiles objects are followed into) said as such."""
    from ...prompts.points import home_tiles

    tiles, n = home_tiles(points, inputs), points.positives
    zoom = ZOOM_OUT_DEPTH * n
    low = tiles * ENCODE_S + n * POINT_DECODE_S
    high = low + zoom * (ENCODE_S + POINT_DECODE_S)
    return [f"tiles holding points: {tiles} ({tiles} encodes; a tile's points share its encode)",
            f"decoder calls: {2 * n} ({n} clicks x 2 point decoder passes), in batches of the clicks of a tile",
            f"zoom-outs: up to {zoom} encodes ({ZOOM_OUT_DEPTH} a point whose answer fills its window: objects "
            "larger than half a tile, and clicks on bare ground; each one click more)",
            "following: one encode and one click more for each tile an object reaches past its home tile (known "
            "at run time: the report counts them)",
            f"estimated GPU time: ~{_minutes(low)} (no zoom-out) to ~{_minutes(high)} (every point zoomed out), at "
            f"~{ENCODE_S} s per encode + {POINT_DECODE_S} s per click on a desktop GPU, plus following"]


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 60 else f"{seconds / 60:.1f} min"


def _plan_prompts(planned: Sequence[InputPlan], texts, geo_boxes: list, box_file, chips, given_points, point_file):
    """(the example boxes, with the box file's; the run's points or None; its prompts): boxes read in the first
    map's CRS, points each in the CRS of the map that holds it; all checked to lie on some map."""
    crs0, bounds = planned[0].crs, [i.bounds for i in planned]
    n_given = len(geo_boxes)
    if box_file:
        check_box_file(box_file)
        geo_boxes = geo_boxes + read_box_file(box_file, crs0)
    check_boxes_inside(geo_boxes, n_given, bounds, crs0, box_file)
    pts = None
    if given_points or point_file:
        from ...units import area_column
        from .outputs import COLUMNS  # the output's own columns: a point file's of those names are carried renamed

        own = (*COLUMNS, *dict.fromkeys(area_column(i.frame) for i in planned))
        pts = plan_points(given_points, point_file, [(i.crs, i.bounds) for i in planned], own)
    prompts = tuple(build_prompts(texts, geo_boxes, chips)) if pts is None else ()
    return geo_boxes, pts, prompts


def plan_maps(paths: list[str], opts: Options, per_input: Sequence, dates: dict) -> tuple[tuple[InputPlan, ...], list]:
    """The inputs grouped into maps (`maps.group_inputs`: several files of one map are a mosaic) and each map
    planned (`plan_input`); a mosaic's files keep their own outputs (`member_outputs`, --out FOLDER/); a mosaic's
    grid is anchored to its lattice (`anchor.anchor_map`).
    Returns (the maps' plans, the notes on the grouping)."""
    from .anchor import anchor_map, lattice_path

    grouping = group_inputs(paths, opts, dates)
    planned = []
    for g in grouping.maps:
        path = lattice_path(g.path, opts) if len(g.members) == 1 else g.path  # --anchor-grid lattice
        if layout_of(path) is None:
            planned.append(plan_input(g.path, opts, per_input[g.members[0]]))
            continue
        outs = tuple(per_input[k] for k in g.members)
        path, margin = anchor_map(path, opts)
        inp = dataclasses.replace(plan_input(path, opts, known=grouping.stamps), anchored=margin is not None,
                                  margin=margin or (0, 0))
        planned.append(dataclasses.replace(inp, member_outputs=outs) if any(o is not None for o in outs) else inp)
    return tuple(planned), grouping.notes


def check_maps(paths: list[str], planned: Sequence[InputPlan], opts: Options, per_input: Sequence, reads: list,
               writes: list, labels: Path | None, combined: Path | None) -> None:
    """The whole-run checks once the maps are planned (`preflight.check_plan`: tiling, one CRS per combined
    output, outputs, paths read and written), and what a run of several maps or of a mosaic cannot write:
    one label image for several maps; COCO annotations (in each input image's pixels) of a mosaic, which is
    no image file."""
    from ...writers.formats import COCO, format_for

    crs_of = {p: i.crs for i in planned for p in i.paths}
    check_plan(paths, [crs_of[p] for p in paths], [i.n_tiles for i in planned], opts, per_input=per_input,
               reads=reads, writes=writes)
    if labels is not None and len(planned) > 1:
        raise UsageError(f"{opt('labels')} writes the label image of one input (or one map of several files), but the "
                         f"inputs form {len(planned)} maps "
                         f"({', '.join(os.path.basename(i.paths[0]) for i in planned[:3])}"
                         f"{', ...' if len(planned) > 3 else ''}): segment one map per run to get its labels")
    mosaic = next((i for i in planned if i.member_ids), None)
    if combined is not None and mosaic is not None and format_for(combined) is COCO:
        raise UsageError(f"{opt('out', combined)}: COCO annotations are in each input image's pixels, and "
                         f"{len(mosaic.paths)} of the inputs form one map (a mosaic) that is no image file: write "
                         f"a GeoPackage or GeoParquet, or give {opt('no_mosaic')} (objects at file edges are then "
                         "cut or doubled)")


def model_side(opts: Options) -> Options:
    """The tile side is the model's: an export whose input side is under the tile side (the batched 644 px one)
    sets the tiles to its side and the default overlap in proportion (256 of 1008 -> 164 of 644); a
    --tile-size the model cannot take is refused. A folder that cannot be read is told later (`resolve_model`)."""
    if opts.runtime_spec().backend != "onnx":
        return opts
    from ...model.layouts import folder_fit

    fit = folder_fit(opts.model)
    if fit is None or fit.image_side >= opts.tile_size:
        return opts
    side = fit.image_side
    if opts.tile_size != TILE_SIZE:
        raise UsageError(f"{opt('tile_size', opts.tile_size)}: the {fit.layout.title} model in "
                         f"{opts.model or 'the model folder'} takes {side} px inputs: give at most {side}")
    overlap = round(opts.overlap * side / TILE_SIZE) if opts.overlap == DEFAULT_OVERLAP else opts.overlap
    log.info("the %s model takes %d px inputs: tiles of %d px, overlap %d", fit.layout.title, side, side, overlap)
    return dataclasses.replace(opts, tile_size=side, overlap=overlap)


def resolve_model(opts: Options) -> tuple[Options, RuntimeSpec]:
    """The runtime spec of `opts`; for onnx the model folder is found (or ModelNotFoundError names how
    to get it) and set in the returned copy of the options (the caller's are not changed), and the spec
    carries the files' fingerprint (`RuntimeSpec.files`)."""
    spec = opts.runtime_spec()
    if spec.backend == "onnx":
        opts = dataclasses.replace(opts, model=str(require_model(opts.model)))
        spec = opts.runtime_spec()
        spec = dataclasses.replace(spec, files=spec_identity(spec))  # files replaced later: loaded anew
    elif opts.model is not None and spec.backend in ("reference", "simulated"):
        log.warning(spoken(f"{opt('model', opts.model)}: not used by the {spec.backend} backend, which loads no "
                           f"model files: the objects are the {spec.backend} backend's; give "
                           f"{opt('backend', 'onnx')} to run SAM 3"))
    return opts, spec


@gdal_env()
def plan_input(path: str, opts: Options, output: Path | None = None, known: dict | None = None) -> InputPlan:
    """Open one input (its own errors: unreadable, bands, size) and lay out its tiles. `known`: its files'
    stamps taken as their headers were read (a mosaic's: `maps.Grouping.stamps`)."""
    check_vrt_cycle(path)  # before GDAL opens it: it would read itself until its depth limit
    # a file replaced after GDAL's first read of it and before `stamps`: seen (a mosaic's files: by their own stamps)
    before = opening_stamp(path) if layout_of(path) is None else None
    with open_source(path, bands=opts.bands) as src:
        if src.kind == "slide" and src.crs is None and src.pixel_size_um is None:
            log.warning("%s: the slide states no physical pixel size (OME PhysicalSizeX): areas stay in pixels, "
                        "no area_um2", path)
        files = tuple(check_input(path, src, opts))  # placeable, a VRT's sources exist
        stamps = file_stamps(src.source_files, known)  # checked again when the input is done
        if changed_while_opened(path, before, stamps):
            raise changed_error(path, path, kept=False)
        grid = None if opts.squash else build_grid(src, opts)
        skips = plan_skips(src, opts)  # the area of interest, a slide's tissue (`run.planning.area`)
        if grid is not None and opts.refine == "auto":
            Refiner(grid, opts.refine_depth)  # refuses a depth whose sub-tile numbers the merge cannot hold
        ids = member_identities(path, stamps, opts.verify_inputs)  # a mosaic's: each member's (per-tile keys)
        identity = mosaic_identity(path, ids) if ids else src.identity_for(verify=opts.verify_inputs,
                                                                           stamps=list(stamps))
        return InputPlan(path=path, width=src.width, height=src.height, crs=src.crs, transform=src.transform,
                         bands=tuple(src.bands), band_count=int(src.band_count), dtype=str(src.dtype),
                         stretch=src.stretch, identity=identity, grid=grid, squash_size=opts.tile_size, output=output,
                         pixel_size_um=src.pixel_size_um, files=files,
                         levels=tuple(src.levels) if src.kind == "slide" else (), stamps=stamps, member_ids=ids,
                         skips=skips)


def with_exemplars(inp: InputPlan, prompts: Sequence[Prompt], opts: Options) -> InputPlan:
    """`inp` with its example images checked (bands, pixel size, size at the run's scale) and, when its
    exemplars do not fit a tile's free margin, its grid narrowed to leave an exemplar strip
    (`sam3tiles.prompts.strip`; --box-scope tile: example images only)."""
    from ...prompts.chips import chip_bands, chip_factor, chip_wh, check_chip_size
    from ...prompts.exemplars import LIMIT
    from ...prompts.strip import choose_strip, patch_sizes

    images = list(dict.fromkeys(im for p in prompts for im in p.images))
    boxes = list(dict.fromkeys(b for p in prompts for b in p.boxes)) if opts.box_scope == "image" else []
    if inp.grid is None or not (images or boxes):
        return inp
    scale, chips, patches = inp.grid.scale, [], []
    for im in images:
        bands = chip_bands(im, inp.band_count, inp.bands)
        factor, w, h = chip_factor(im, inp.frame, bands)
        wh = chip_wh(w, h, factor * scale)
        check_chip_size(im, wh, scale, LIMIT)
        chips.append((im, factor, bands))
        patches.append((wh[0], wh[1], float(min(wh))))
    patches += patch_sizes(inp.transform, inp.width, inp.height, boxes, scale)
    choice = choose_strip(patches, inp.grid.tile_size, inp.grid.overlap)
    grid = inp.grid
    if choice.strip:
        grid = dataclasses.replace(grid, tile_size=choice.tile_size)
        if opts.refine == "auto":
            Refiner(grid, opts.refine_depth)
    note = choice.refused and spoken(f"exemplars too large for the free margin act only where they lie: "
                                     f"{choice.refused}")
    if note:
        log.warning("%s: %s", inp.path, note)
    return dataclasses.replace(inp, grid=grid, exemplar_strip=choice.strip, base_tiles=len(inp.grid),
                               chips=tuple(chips), exemplar_note=note)


def gsd_scale(src: Source, gsd: float) -> float:
    """--gsd in the frame's length unit (metres on a geographic CRS, microns on a slide: `units`)."""
    size = pixel_size(Frame.of(src))
    if size is None:
        raise UsageError(f"{opt('gsd', format(gsd, 'g'))}: {src.path} states no pixel size (no CRS, no OME "
                         f"PhysicalSizeX), so a sampling distance cannot be honoured: zoom with {opt('scale')} instead")
    return scale_for_gsd(src.transform, gsd, resolution=size[0])


def build_grid(src: Source, opts: Options) -> TileGrid:
    scale = gsd_scale(src, opts.gsd) if opts.gsd else opts.scale
    try:
        return TileGrid(src.width, src.height, scale=scale, tile_size=opts.tile_size, overlap=opts.overlap,
                        transform=src.transform)
    except UsageError as e:
        if opts.gsd and "scale" in named_in(raw(e)):  # the user gave a gsd: name it, and the scale it means here
            raise UsageError(f"{opt('gsd', format(opts.gsd, 'g'))} on {src.path} means a scale of {scale:g}: "
                             f"{raw(e).split(': ', 1)[-1]}; choose a {opt('gsd')} near the raster's own "
                             "resolution") from None
        raise
