"""The pre-flight checks: what keeps a run from losing data or giving a silently wrong answer, before
its first tile.

`plan.plan_run` calls them in its order (its docstring); each raises a `Sam3TilesError` whose message
names the problem and the fix:

* no path a run writes (output, preview, report, label image, work folder) is a path it reads (input,
  a file an input reads, example image, box file) or another it writes (`check_paths`);
* the outputs may be written (`check_out`), and nothing the run would ignore or replace unasked
  (`check_qupath_type`, `check_label_path`, `check_side_files`);
* rasters the tool cannot place (a CRS but no geotransform, GCPs or RPCs only) are refused with the
  `gdalwarp` command that fixes them (`check_placeable`), VRTs that read themselves or a missing source
  (`check_vrt_cycle`, `check_input`); an overlap too small for the merge is refused (`check_tiling`);
  one CRS per combined output (`check_plan`); room in the address space (`check_room`);
* example boxes have geometries and lie over some input (`check_box_file`, `check_boxes_inside`); each
  prompt is one the backend can find (`check_prompts_here`).

Each option's own range, and the rules between options that need nothing but options (the overlap under
half a tile), live with the options (`options.Options`, `options.cross_problems`); they are checked when
`Options` is built, before any of these. The work folder's own checks: `workfolder.check_work_dir`.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Sequence

from ...errors import CRSError, InputDataError, OutputExistsError, PromptError, UsageError
from ...model.registry import RuntimeSpec, get_runtime
from ...options import Options
from ...prompts.prompt import GeoBox, Prompt, boxes_outside, where_words
from ...readers.identity import local_path_of
from ...wording import enable, mention, opt
from ...writers import check_output
from ...writers.atomic import check_name
from ...writers.formats import GPKG, QUPATH, format_for
from ...writers.held import settle
from ...writers.labels import check_labels
from ...writers.stream import check_dataset
from ...writers.vector import check_layer
from ..recording.workfolder import is_within, real_path, replaceable, vouched
from .cluster import SCHEDULER_ENV, local_threads
from .lattice import distinct_wkts
from .limits import check_address_space

#: The object type a QuPath GeoJSON gets unless asked otherwise (`check_qupath_type`).
QUPATH_DEFAULT = Options.__dataclass_fields__["qupath_type"].default


# -- what a run reads against what it writes ---------------------------------------------------------------

#: What each path a run writes is called, and how to move it (roles of `outputs.written`).
WRITTEN = {"out": ("output", "write the output elsewhere"),
           "report_path": ("report", "write the report elsewhere"),
           "the report": ("report", f"give {opt('out')} another name (the report lies beside it)"),
           "the preview": ("preview", f"give {opt('out')} another name, or {enable('no_preview')}"),
           "labels": ("label image", "write the label image elsewhere"),
           "work_dir": ("work folder", "name another work folder"),
           "the work folder": ("work folder", f"name another work folder ({opt('work_dir')})")}


def _read_phrase(role: str, given: str, file: str) -> str:
    if role == "inputs":
        return f"the input {given}" if file == given else f"the input {given}'s file {file}"
    return f"an example image ({opt('example_images', given)})" if role == "example_images" else \
        f"the {'point' if role == 'point_file' else 'box'} file ({opt(role, given)})"


def _keys(p: Path) -> list:
    """What makes two paths one file: the resolved path, and for an existing file its device and inode (a
    hard link)."""
    try:
        st = os.stat(p)
    except (OSError, ValueError):
        return [p]
    return [p, (st.st_dev, st.st_ino)]


def check_paths(reads: Sequence[tuple[str, str, str]], writes: Sequence[tuple[str, str | os.PathLike]],
                several: bool = False) -> None:
    """The one rule for the paths of a run: no path it writes is a path it reads, and no two paths it writes
    are one. `reads`: (role, as given, file) for each input (and each file an input reads, such as a VRT's
    sources), example image ("example_images") and box file ("box_file"); `writes`: (role, path) for its
    outputs, report, previews, label image and work folder (`WRITTEN`; the object spool lies in the work
    folder, which may hold no file the run reads). Compared resolved (links, relative or absolute paths,
    hard links), each path looked at once. Exit 2 naming both roles and the fix; an input among `several`
    (a pattern that picked up what an earlier run wrote) is named as the run's own file."""
    read: dict = {}
    dirs: dict = {}  # folders resolved once (`real_path`)
    for role, given, file in reads:
        lp = local_path_of(file)
        if lp is not None:
            real = real_path(lp, dirs)
            for k in _keys(real):
                read.setdefault(k, (role, given, file, real))
    seen: dict = {}
    for what, target in writes:
        t = real_path(target)
        keys = _keys(t)
        noun, fix = WRITTEN[what]
        hit, inside = next((read[k] for k in keys if k in read), None), False
        if hit is None and noun == "work folder":  # the folder may hold no file the run reads either
            hit = next((r for r in read.values() if is_within(r[3], t)), None)
            inside = hit is not None
        if hit is not None:
            role, given, file, _ = hit
            if role == "inputs" and several and file == given and not inside:
                raise UsageError(f"the input {given} is this run's own {noun} (an input pattern that picks up what an "
                                 f"earlier run wrote?): narrow the inputs, or {fix}")
            verb, harm = ("holds", "cleared") if inside else ("is", "replaced")
            raise UsageError(f"{mention(what, target)} {verb} {_read_phrase(role, given, file)}: "
                             f"it would be {harm}; {fix}")
        other = next((seen[k] for k in keys if k in seen), None)
        if other is not None and not (other == what == "out"):  # two outputs: `check_distinct_outputs` names them
            raise UsageError(f"{mention(what, target)} is also {mention(other)}'s path: one would replace the other; "
                             "give them different paths")
        for k in keys:
            seen.setdefault(k, what)


def check_distinct_outputs(inputs: Sequence[str], outputs: Sequence[Path | None]) -> None:
    """Per-input outputs in one folder: two inputs with the same name stem would write one file."""
    seen: dict[Path, str] = {}
    for i, o in zip(inputs, outputs):
        if o is None:
            continue
        key = real_path(o)
        if key in seen:
            raise UsageError(f"{seen[key]} and {i} would both be written to {o} (same file name stem): "
                             f"give {opt('out')} a file name (one combined output) or rename one of them")
        seen[key] = i


# -- the outputs ------------------------------------------------------------------------------------------

def check_out(p: Path, overwrite: bool, opts: Options, dataset: bool = False) -> None:
    """An output path, and with --layer (or an existing GeoPackage) the layer written into it; a partitioned
    GeoParquet dataset (`name.parquet/`): `check_dataset`."""
    if dataset:
        check_dataset(p, overwrite)
        return
    check_output(p, overwrite or opts.layer is not None, opts.layer)
    check_layer(p, opts.layer, overwrite)
    if format_for(p) is GPKG and p.exists():
        settle(p)  # another program holds it open in WAL mode: refused before any work


def check_qupath_type(qupath_type: str, out: str | os.PathLike | None, combined: Path | None) -> None:
    """`qupath_type` other than its default shapes QuPath's GeoJSON (`*.qupath.geojson`) only: into any
    other output (or none) it would be ignored, so it is refused."""
    if qupath_type == QUPATH_DEFAULT or (combined is not None and format_for(combined) is QUPATH):
        return
    what = (f"{opt('out', out)} is no {QUPATH.name} (*{QUPATH.suffix}, objects in pixels)" if out is not None
            else f"no output is written ({opt('out')} not given)")
    name = (combined.name[: -len(combined.suffix)] if combined is not None else "objects") + QUPATH.suffix
    raise UsageError(f"{opt('qupath_type', qupath_type)}: {what}, so the object type would be ignored: name it "
                     f"{name}, or leave {opt('qupath_type')} out")


def check_label_path(labels, paths: list[str], overwrite: bool) -> Path | None:
    """The label image's path (`labels`), checked: one input only, and `writers.labels.check_labels`."""
    if labels is None:
        return None
    if len(paths) != 1:
        raise UsageError(f"{opt('labels')} writes the label image of one input, but {len(paths)} were given: "
                         "segment one image per run to get its labels")
    check_labels(labels, overwrite)
    return Path(labels)


def check_side_files(files: Sequence[tuple[str, Path]], overwrite: bool, ours) -> None:
    """The run owns only what it creates: an existing report or preview (of `files`, `written`'s list) it did
    not write (not an output of an unfinished run of this work folder) is exit 2 without --overwrite, like
    the output (a damaged record of the work folder is named: `workfolder.vouched`)."""
    for what, p in files:
        if what in ("report_path", "the report", "labels"):
            # a newline or an overlong name fails its rename
            check_name(p, "labels" if what == "labels" else "report_path")
    for what, p in files:
        if what not in ("report_path", "the report", "the preview") or overwrite or not os.path.lexists(p) or \
                replaceable(p, ours, True):
            continue
        with vouched(ours, what, p):
            raise OutputExistsError(f"{mention(what, p)} exists and this run did not write it: "
                                    f"{enable('overwrite')} to replace it, or move it away")


# -- the inputs: rasters the tool cannot place ------------------------------------------------------------

def check_placeable(path: str, src) -> None:
    """Refuse a raster whose pixels cannot be placed in its CRS: a CRS with no geotransform, or
    georeferencing by GCPs or RPCs only (the tool does not warp): exit 3 with the gdalwarp command.
    `src`: an open `readers.Source`."""
    if src is None:
        return
    identity = (src.transform.is_identity if hasattr(src.transform, "is_identity")
                else src.transform == src.transform.identity())
    t = src.transform
    if not identity and not (math.isfinite(t.determinant) and t.determinant != 0):
        raise CRSError(f"{path}: its geotransform ({t.a:g}, {t.b:g}, {t.c:g}, {t.d:g}, {t.e:g}, {t.f:g}) has a pixel "
                       "size of 0 (or not a number), so its pixels cannot be placed: fix it, e.g. gdal_edit.py "
                       "-a_ullr ULX ULY LRX LRY, or drop it (gdal_edit.py -unsetgt) to work in pixel coordinates")
    if not identity:
        return
    stem = Path(local_path_of(path) or path).with_suffix("").name + "_warped.tif"
    gcps, gcp_crs = src.gcps
    if gcps:
        srs = f" -t_srs {gcp_crs.to_string()}" if gcp_crs else ""
        raise CRSError(f"{path} is georeferenced by {len(gcps)} ground control points only, which sam3tiles does "
                       f"not warp: warp it first, e.g. gdalwarp{srs} -r bilinear {path} {stem}")
    if src.rpcs:
        raise CRSError(f"{path} is georeferenced by RPCs (a satellite sensor model) only, which sam3tiles does "
                       f"not orthorectify: warp it first, e.g. gdalwarp -rpc -t_srs EPSG:4326 [-to RPC_DEM=dem.tif] "
                       f"-r bilinear {path} {stem}")
    if src.crs is not None:
        raise CRSError(f"{path} has a CRS ({src.crs.to_string()}) but no geotransform, so its pixels cannot be placed "
                       "in it: add the transform (gdal_edit.py -a_ullr ULX ULY LRX LRY) or drop the CRS "
                       "(gdal_edit.py -unsetgt -unsetcrs) to work in pixel coordinates")


def check_input(path: str, src, opts) -> list[str]:
    """Per-input checks on an open source; returns every file its pixels come from."""
    from ...errors import RasterReadError
    from ...readers.identity import local_path_of

    check_placeable(path, src)
    files = list(src.source_files)
    for f in files[1:]:
        local = local_path_of(f)
        if local is not None and not os.path.exists(local):
            raise RasterReadError(f"{path} reads {f}, which does not exist (a VRT's source moved or deleted): "
                                  "restore it or rebuild the VRT (gdalbuildvrt)")
    return files


def _vrt_sources(vrt: str) -> list[str]:
    """The local files a VRT's sources name (SourceFilename, relative to the VRT where it says so)."""
    import xml.etree.ElementTree as ET

    try:
        root = ET.parse(vrt).getroot()
    except (OSError, ET.ParseError):
        return []  # GDAL says what is wrong with it
    out = []
    for el in root.iter("SourceFilename"):
        name = (el.text or "").strip()
        if not name or name.startswith("/vsi") or "://" in name:
            continue
        if el.get("relativeToVRT", "0") == "1" and not os.path.isabs(name):
            name = os.path.join(os.path.dirname(os.path.abspath(vrt)), name)
        out.append(os.path.realpath(name))
    return out


def check_vrt_cycle(path: str, limit: int = 64) -> None:
    """A VRT that reads itself, or VRTs that read each other: named as a cycle before the first tile (GDAL
    fails each read of it as if the file were damaged)."""
    local = local_path_of(path)
    if local is None or not local.lower().endswith(".vrt") or not os.path.isfile(local):
        return
    from ...errors import RasterReadError

    def walk(vrt: str, chain: tuple[str, ...]) -> None:
        if len(chain) > limit:
            return
        for ref in _vrt_sources(vrt):
            if ref in chain:
                names = " -> ".join(os.path.basename(q) for q in (*chain[chain.index(ref):], ref))
                raise RasterReadError(f"{path} reads itself ({names}, a cycle of VRTs): point its sources at the "
                                      "rasters themselves (gdalbuildvrt from the .tif files)")
            if ref.lower().endswith(".vrt") and os.path.isfile(ref):
                walk(ref, (*chain, ref))

    real = os.path.realpath(local)
    walk(real, (real,))


# -- the whole run, once the inputs are open ---------------------------------------------------------------

def min_overlap(edge_margin: int) -> int:
    """The smallest overlap (tile pixels) the merge needs to join an object cut by a seam: two cells of
    the model's mask grid (so both tiles see the object beyond the cut) plus the edge margin that marks
    pieces touching a tile's edge."""
    from ...model.runtime import MASK_SIZE, MODEL_SIZE

    return math.ceil(2 * MODEL_SIZE / MASK_SIZE) + int(edge_margin)


def check_tiling(tile_size: int, overlap: int, edge_margin: int, squash: bool = False,
                 single_tile: bool = False) -> None:
    """The overlap must be large enough for the merge to keep its promise (objects cut by a seam are
    joined), unless there is no seam (squash, one tile). The tile size's range and the overlap's upper
    bound are the options' own rules (`options.Options`): refused when the options were built."""
    if squash or single_tile:
        return
    need = min_overlap(edge_margin)
    if overlap < need:
        raise UsageError(f"{opt('overlap', overlap)} is below the {need} px the merge needs: objects crossing a seam "
                         f"would be cut in two and not joined. Use {opt('overlap', need)} or more (default 256)")


def check_plan(inputs: Sequence[str], crss: Sequence, tile_counts: Sequence[int], opts, *, per_input: Sequence = (),
               reads: Sequence[tuple[str, str, str]] = (),
               writes: Sequence[tuple[str, str | os.PathLike]] = ()) -> None:
    """Whole-run checks once the inputs are open: tiling, one CRS per combined output, distinct per-input
    outputs, and `check_paths` again with every file the inputs read (`reads`: a VRT's sources, ...)."""
    check_tiling(opts.tile_size, opts.overlap, opts.edge_margin, squash=opts.squash,
                 single_tile=all(n <= 1 for n in tile_counts))
    one_output = not any(p is not None for p in per_input)  # a combined output, or the API's one frame
    if one_output and len(distinct_wkts(crss)) > 1:
        names = [f"{i} ({c.to_string() if c is not None else 'no CRS'})" for i, c in zip(inputs, crss)]
        raise UsageError("the inputs are in different CRSs, so they cannot share one output: " + ", ".join(names[:3])
                         + ("..." if len(names) > 3 else "")
                         + f": give {opt('out')} a folder (one output per input) or "
                         "reproject them to one CRS")
    check_distinct_outputs(inputs, per_input)
    check_paths(reads, writes, several=len(inputs) > 1)


def check_room(opts: Options, planned: Sequence) -> None:
    """Refuse a run the address-space limit leaves too little room (`limits.check_address_space`): its
    threads in this process (Dask's; onnxruntime's pool a graph on the CPU), the model loaded here, GDAL's
    cache (at most the inputs' pixels). `planned`: the inputs' `plan.InputPlan`s."""
    from numpy import dtype

    pixels = sum(i.width * i.height * i.band_count * dtype(i.dtype).itemsize for i in planned)
    if opts.scheduler or os.environ.get(SCHEDULER_ENV):
        check_address_space(0, pixels=pixels)  # the tiles and the model run on the cluster's workers
        return
    onnx = opts.runtime_spec().backend == "onnx"
    model = sum(f.stat().st_size for f in Path(opts.model).glob("*.onnx*")) if onnx else 0
    pools = 3 * ((opts.threads or os.cpu_count() or 1) - 1) if onnx and opts.device in ("auto", "cpu") else 0
    check_address_space(local_threads(opts.workers) + pools, model, onnx, pixels=pixels)


# -- example boxes and prompts -----------------------------------------------------------------------------

def check_box_file(path: str) -> None:
    """A box file's features must have geometries: a null or empty one is named (exit 3), not blamed on
    the CRS later."""
    from ...errors import InputDataError

    if not os.path.isfile(path):
        return  # the reader names a missing file
    try:
        import pyogrio

        geoms = pyogrio.read_dataframe(path, columns=[]).geometry
    except Exception:  # noqa: BLE001 - an unreadable file: the reader says why
        return
    bad = [i for i, g in enumerate(geoms) if g is None or g.is_empty]
    if bad:
        raise InputDataError(f"{opt('box_file', path)}: feature {bad[0] + 1}"
                             f"{f' (and {len(bad) - 1} more)' if len(bad) > 1 else ''} "
                             "has an empty geometry, so it is no example box: remove it or draw its box")


def check_boxes_inside(boxes: list[GeoBox], n_given: int, bounds: list, crs, box_file: str | None) -> None:
    """An example box that misses every input is an error (usually coordinates in another CRS)."""
    lost = [i for i, b in enumerate(boxes) if all(boxes_outside([b], bd) for bd in bounds)]
    if not lost:
        return
    where, extent = where_words(crs, bounds)
    given = [i for i in lost if i < n_given]
    if given:
        b = boxes[given[0]]
        raise PromptError(f"{opt('boxes', format(b.minx, 'g'))},{b.miny:g},{b.maxx:g},{b.maxy:g} lies outside "
                          f"every input (bounds {extent}): give MINX,MINY,MAXX,MAXY in {where}")
    if len(lost) < len(boxes) - n_given:
        return  # some of the file's boxes are used; the others are counted in the report
    raise InputDataError(f"{opt('box_file', box_file)}: all its {len(lost)} box(es) lie outside every input (bounds "
                         f"{extent}): draw the boxes over the raster")


def check_prompts_here(spec: RuntimeSpec, prompts: Sequence[Prompt]) -> None:
    """Encode every prompt in this process; one the backend can never find is a PromptError."""
    rt = get_runtime(spec)
    prepared = [rt.prepare_prompt(p.model_text) for p in prompts]
    notes = [b.note or repr(b.text) for b in prepared if not b.usable]
    if notes:
        raise PromptError("; ".join(notes))
