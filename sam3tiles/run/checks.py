"""Pre-flight checks that keep a run from losing data or giving a silently wrong answer.

Pure functions over paths, numbers and open rasters; the pipeline calls them before the first tile. Each
raises a `Sam3TilesError` whose message names the problem and the fix:

* the work folder is *owned*: it carries a marker file, and only marked folders are cleared, and then
  only of the files sam3tiles writes (`claim_work_dir`, `clear_work_dir`); a suspicious `--work-dir`
  (empty, `/`, home, the current folder or one above it, a folder holding inputs) is refused;
* no path a run writes (output, preview, report, label image, work folder) is a path it reads (input,
  a file an input reads, example image, box file) or another it writes (`check_paths`);
* rasters the tool cannot place (a CRS but no geotransform, GCPs or RPCs only) are refused with the
  `gdalwarp` command that fixes them (`check_placeable`); an overlap too small for the merge is refused
  (`check_tiling`).

Each option's own range, and the rules between options that need nothing but options (the overlap under
half a tile), live with the options (`options.Options`, `options.cross_problems`); they are checked when
`Options` is built, before any of these.
"""

from __future__ import annotations

import errno
import json
import logging
import math
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

from ..errors import CRSError, OutputError, OutputExistsError, UsageError
from ..readers.identity import local_path_of
from ..wording import enable, mention, opt

log = logging.getLogger(__name__)

#: The file that marks a folder as a sam3tiles work folder (JSON: tool, schema).
MARKER = "sam3tiles-work.json"
#: Every file sam3tiles writes in a work folder; `clear_work_dir` deletes these and nothing else.
OWN_FILES = (MARKER, "tiles.sqlite", "tiles.sqlite-wal", "tiles.sqlite-shm", "tiles.sqlite-journal", "outputs.json")


# -- the work folder --------------------------------------------------------------------------------------

def _real(p: str | os.PathLike) -> Path:
    return Path(os.path.realpath(os.path.expanduser(str(p))))


def _is_within(child: Path, parent: Path) -> bool:
    return child == parent or parent in child.parents


def check_work_dir(value, inputs: Sequence[str] = (), option: str = "work_dir") -> Path | None:
    """Refuse a work folder that a `--fresh` could never safely clear, before anything is written.

    `value` None means "not given" (fine). Refused (exit 2): an empty or blank value (an unset shell
    variable), `/`, the home folder or one above it, the current folder or one above it, a folder that
    holds an input, a file, and an existing folder holding files sam3tiles did not write."""
    if value is None:
        return None
    text = str(value)
    if not text.strip():
        raise UsageError(f"{mention(option)} is empty (an unset shell variable?): name a folder for the checkpoints, or "
                         "leave it out to use <output>.sam3tiles-work beside the output")
    p = _real(text)
    home = _real(Path.home())
    cwd = _real(os.getcwd())
    if p == Path(p.anchor) or _is_within(home, p) or _is_within(cwd, p):
        what = "the root folder" if p == Path(p.anchor) else "your home folder" if _is_within(home, p) and \
            p == home else "the current folder" if p == cwd else "a folder above the current or home folder"
        raise UsageError(f"{mention(option, text)}: that is {what}, which sam3tiles will not use for checkpoints (a {opt('fresh')} "
                         "would have to clear it): name a new folder, e.g. out.sam3tiles-work")
    for i in inputs:
        local = local_path_of(i)
        if local is not None and _is_within(_real(local), p):
            raise UsageError(f"{mention(option, text)} holds the input {i}: checkpoints go in a folder of their own; "
                             "name a new folder outside the inputs'")
    if p.exists() and not p.is_dir():
        raise UsageError(f"{option} {text} is a file, not a folder: name a new folder for the checkpoints")
    if p.is_dir() and not is_work_dir(p):
        foreign = sorted(e.name for e in p.iterdir() if not _own(e.name))
        if foreign:
            raise UsageError(f"{option} {text} is not a sam3tiles work folder (it holds {foreign[0]!r}"
                             f"{f' and {len(foreign) - 1} more' if len(foreign) > 1 else ''}, and no {MARKER}): "
                             "name a new or empty folder for the checkpoints")
    return p


def _own(name: str) -> bool:
    """A file sam3tiles writes in a work folder, or the temporary file of one (`.<stem>.<hex8>.tmp<ext>`)."""
    if name in OWN_FILES:
        return True
    return any(name.startswith(f".{Path(f).stem}.") and ".tmp" in name for f in (MARKER, "outputs.json"))


def _our_lock(entry: Path) -> bool:
    """The output lock this process holds (`--out w/o.gpkg --work-dir w`: the run's own lock is no foreign
    file in its work folder)."""
    if not entry.name.endswith(".lock") or not entry.is_file():
        return False
    try:
        owner = json.loads(entry.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(owner, dict) and owner.get("pid") == os.getpid()


def is_work_dir(path: str | os.PathLike) -> bool:
    """Whether `path` carries the marker sam3tiles writes into every work folder it creates."""
    try:
        data = json.loads((Path(path) / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("tool") == "sam3tiles"


def claim_work_dir(path: str | os.PathLike) -> Path:
    """Create the work folder (or adopt one holding only sam3tiles' files) and mark it as ours."""
    p = Path(path)
    if p.is_dir() and not is_work_dir(p):
        foreign = [e.name for e in p.iterdir() if not _own(e.name) and not _our_lock(e)]
        if foreign:  # checked before the run too; a folder that changed since is still not ours
            raise UsageError(f"{opt('work_dir', p)} is not a sam3tiles work folder (it holds {foreign[0]!r}): name a new "
                             "or empty folder for the checkpoints")
    p.mkdir(parents=True, exist_ok=True)
    if not is_work_dir(p):
        from ..writers.atomic import atomic_path

        with atomic_path(p / MARKER) as tmp:
            tmp.write_text(json.dumps({"tool": "sam3tiles", "schema": 1,
                                       "note": "checkpoints of sam3tiles; safe to delete when no run uses them"}))
    return p


def clear_work_dir(path: str | os.PathLike) -> list[Path]:
    """`--fresh`: delete the files sam3tiles wrote in a marked work folder, then the folder if it is empty.
    Anything else in it stays; an unmarked folder holding other files is refused (exit 2)."""
    p = Path(path)
    if not p.exists():
        return []
    if not p.is_dir():
        raise UsageError(f"{opt('work_dir', p)} is a file, not a folder: name a new folder for the checkpoints")
    if not is_work_dir(p):
        foreign = [e.name for e in p.iterdir() if not _own(e.name)]
        if foreign:
            raise UsageError(f"{opt('fresh')}: {p} is not a sam3tiles work folder (no {MARKER}; it holds {foreign[0]!r}): "
                             "nothing was deleted; name the work folder of the run to start over")
    gone = []
    for q in sorted(p.iterdir()):
        if q.name != MARKER and _own(q.name) and (q.is_file() or q.is_symlink()):
            q.unlink()
            gone.append(q)
    if [e.name for e in p.iterdir()] in ([], [MARKER]):
        (p / MARKER).unlink(missing_ok=True)
        p.rmdir()
    # else other files stay, and so do the folder and its marker (it is still ours)
    return gone


# -- what a run reads against what it writes ---------------------------------------------------------------

#: What each path a run writes is called, and how to move it (roles of `plan.written`).
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
    for role, given, file in reads:
        lp = local_path_of(file)
        if lp is not None:
            real = _real(lp)
            for k in _keys(real):
                read.setdefault(k, (role, given, file, real))
    seen: dict = {}
    for what, target in writes:
        t = _real(target)
        keys = _keys(t)
        noun, fix = WRITTEN[what]
        hit, inside = next((read[k] for k in keys if k in read), None), False
        if hit is None and noun == "work folder":  # the folder may hold no file the run reads either
            hit = next((r for r in read.values() if _is_within(r[3], t)), None)
            inside = hit is not None
        if hit is not None:
            role, given, file, _ = hit
            if role == "inputs" and several and file == given and not inside:
                raise UsageError(f"the input {given} is this run's own {noun} (an input pattern that picks up what an "
                                 f"earlier run wrote?): narrow the inputs, or {fix}")
            verb, harm = ("holds", "cleared") if inside else ("is", "replaced")
            raise UsageError(f"{mention(what, target)} {verb} {_read_phrase(role, given, file)}: it would be {harm}; {fix}")
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
        key = _real(o)
        if key in seen:
            raise UsageError(f"{seen[key]} and {i} would both be written to {o} (same file name stem): give {opt('out')} "
                             "a file name (one combined output) or rename one of them")
        seen[key] = i


# -- rasters the tool cannot place ------------------------------------------------------------------------

def check_placeable(path: str, src) -> None:
    """Refuse a raster whose pixels cannot be placed in its CRS: a CRS with no geotransform, or
    georeferencing by GCPs or RPCs only (the tool does not warp): exit 3 with the gdalwarp command.
    `src`: an open `readers.Source`."""
    if src is None:
        return
    identity = src.transform.is_identity if hasattr(src.transform, "is_identity") else src.transform == src.transform.identity()
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


def min_overlap(edge_margin: int) -> int:
    """The smallest overlap (tile pixels) the merge needs to join an object cut by a seam: two cells of
    the model's mask grid (so both tiles see the object beyond the cut) plus the edge margin that marks
    pieces touching a tile's edge."""
    from ..model.runtime import MASK_SIZE, MODEL_SIZE

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


# -- full disks ---------------------------------------------------------------------------------------------

DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def is_disk_full(e: BaseException, folder: str | os.PathLike | None = None) -> bool:
    """An OSError (or GDAL/SQLite error text) that says the disk or quota is full, or any write error in
    a folder whose file system has (almost) no space left: GDAL's GeoPackage driver, for one, then fails
    with an unrelated SQLite message ("no such table")."""
    if isinstance(e, OSError) and e.errno in DISK_ERRNOS:
        return True
    text = str(e).lower()
    if any(w in text for w in ("no space left", "disk is full", "database or disk is full", "quota exceeded",
                               "file too large")):
        return True
    if folder is None:
        return False
    try:
        st = os.statvfs(folder)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < 1 << 20  # under 1 MiB left


@contextmanager
def disk_errors(folder: str | os.PathLike, what: str = "the output"):
    """Turn a full disk while writing into an exit-2 error naming the folder (the writers leave nothing)."""
    try:
        yield
    except Exception as e:
        if not isinstance(e, (OutputError, KeyboardInterrupt)) and is_disk_full(e, folder):
            raise OutputError(f"no space left writing {what} in {folder} (the disk or quota is full): free space "
                              "there or choose another folder, then rerun (finished tiles are checkpointed)") from None
        raise


# -- the whole run, before the first tile --------------------------------------------------------------------

def check_input(path: str, src, opts) -> list[str]:
    """Per-input checks on an open source; returns every file its pixels come from."""
    from ..errors import RasterReadError
    from ..readers.identity import local_path_of

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
    from ..errors import RasterReadError

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


def check_plan(inputs: Sequence[str], crss: Sequence, tile_counts: Sequence[int], opts, *, per_input: Sequence = (),
               reads: Sequence[tuple[str, str, str]] = (), writes: Sequence[tuple[str, str | os.PathLike]] = ()) -> None:
    """Whole-run checks once the inputs are open: tiling, one CRS per combined output, distinct per-input
    outputs, and `check_paths` again with every file the inputs read (`reads`: a VRT's sources, ...)."""
    check_tiling(opts.tile_size, opts.overlap, opts.edge_margin, squash=opts.squash,
                 single_tile=all(n <= 1 for n in tile_counts))
    one_output = not any(p is not None for p in per_input)  # a combined output, or the API's one frame
    if one_output and len({None if c is None else c.to_wkt() for c in crss}) > 1:
        names = [f"{i} ({c.to_string() if c is not None else 'no CRS'})" for i, c in zip(inputs, crss)]
        raise UsageError("the inputs are in different CRSs, so they cannot share one output: " + ", ".join(names[:3])
                         + ("..." if len(names) > 3 else "") + f": give {opt('out')} a folder (one output per input) or "
                         "reproject them to one CRS")
    check_distinct_outputs(inputs, per_input)
    check_paths(reads, writes, several=len(inputs) > 1)


def check_box_file(path: str) -> None:
    """A box file's features must have geometries: a null or empty one is named (exit 3), not blamed on
    the CRS later."""
    from ..errors import InputDataError

    if not os.path.isfile(path):
        return  # the reader names a missing file
    try:
        import pyogrio

        geoms = pyogrio.read_dataframe(path, columns=[]).geometry
    except Exception:  # noqa: BLE001 - an unreadable file: the reader says why
        return
    bad = [i for i, g in enumerate(geoms) if g is None or g.is_empty]
    if bad:
        raise InputDataError(f"{opt('box_file', path)}: feature {bad[0] + 1}{f' (and {len(bad) - 1} more)' if len(bad) > 1 else ''} "
                             "has an empty geometry, so it is no example box: remove it or draw its box")


# -- outputs an earlier run of the same job left unfinished ----------------------------------------------------
# `outputs.json` in the work folder records each output a run put in place (size, time, inode, the run's
# failed tiles, and whether all its renames finished). A rerun may replace such an output without
# --overwrite when it is unchanged since and that run was not complete (tiles failed: exit 5; or killed
# between its renames): the docs' "rerun the same command" then does what it says.

def _stamp(p: Path) -> list | None:
    try:
        st = p.stat()
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def _entry(v) -> bool:
    return isinstance(v, dict) and isinstance(v.get("state"), str) and isinstance(v.get("failed", 0), int) and (
        v.get("stamp") is None or isinstance(v.get("stamp"), list))


def _read_records(work_dir) -> tuple[dict, str | None]:
    """The record's sound entries, and what is wrong with the file (None: nothing, or there is none)."""
    try:
        text = (Path(work_dir) / "outputs.json").read_text()
    except FileNotFoundError:
        return {}, None
    except (OSError, UnicodeDecodeError) as e:
        return {}, f"unreadable: {getattr(e, 'strerror', None) or e}"
    try:
        data = json.loads(text)
    except ValueError:
        return {}, "not JSON"
    if not isinstance(data, dict):
        return {}, f"not sam3tiles' record of outputs but a JSON {type(data).__name__}"
    good = {k: v for k, v in data.items() if _entry(v)}
    bad = [k for k in data if k not in good]
    return good, bad and f"not sam3tiles' record of outputs: its entry {bad[0]!r} is no record of a file"


def _records(work_dir) -> dict:
    return _read_records(work_dir)[0]


@contextmanager
def vouched(work_dir, what: str, path) -> Iterator[None]:
    """Around a check that refuses an existing file (OutputExistsError) unless an earlier run of `work_dir`
    wrote it (`replaceable`): when the work folder's record is damaged, the refusal names the record and
    what to do instead of saying the run did not write the file (it cannot tell)."""
    try:
        yield
    except OutputExistsError:
        problem = _read_records(work_dir)[1] if work_dir is not None and is_work_dir(work_dir) else None
        if not problem:
            raise
        raise OutputExistsError(
            f"{mention(what, path)} exists and this run cannot tell whether it wrote it: {Path(work_dir) / 'outputs.json'}, "
            f"the work folder's record of what its runs wrote, is damaged ({problem}): if the file is sam3tiles' own "
            f"(a rerun writes it anew), {enable('overwrite')} (with {opt('fresh')} the checkpoints start over too); "
            "else move it away") from None


def replaceable(output, work_dir, side_file: bool = False) -> bool:
    """Whether `output` is an unchanged output of an unfinished earlier run of this work folder; with
    `side_file` (a report or preview), of any earlier run of it (the file is sam3tiles' own, as it wrote it)."""
    if work_dir is None or not is_work_dir(work_dir):
        return False
    rec = _records(work_dir).get(str(_real(output)))
    if not isinstance(rec, dict) or rec.get("stamp") != _stamp(Path(output)):
        return False
    return side_file or bool(rec.get("failed")) or rec.get("state") != "done"


def record_outputs(work_dir, files: Sequence[tuple[Path, Path]], failed: int, state: str) -> None:
    """Record the outputs (temporary name, final name) a run puts in place; see `replaceable`."""
    if work_dir is None or not is_work_dir(work_dir):
        return
    from ..writers.atomic import atomic_path

    recs = _records(work_dir)
    for tmp, final in files:
        stamp = _stamp(tmp) if tmp.exists() else _stamp(final)  # a rename keeps size, time and inode
        recs[str(_real(final))] = {"stamp": stamp, "failed": int(failed), "state": state}
    with atomic_path(Path(work_dir) / "outputs.json") as t:
        t.write_text(json.dumps(recs, indent=1))
