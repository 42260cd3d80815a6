"""Where a run writes: its outputs (one per input into a folder, or one combined; `resolve_outputs`, checked by
`_outputs` with the work folder), the side files' names beside them (`preview_path`, `report_path_for`,
`side_files`), and every path it writes as `preflight.check_paths` takes them (`written`). Nothing is written
here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from ...errors import UsageError
from ...options import Options
from ...readers.remote import input_name as file_name
from ...wording import opt
from ...writers.atomic import check_name
from ...writers.formats import PER_INPUT, endings
from ..recording.workfolder import check_work_dir
from .targets import Targets

#: The output's own columns, in order (`frames.objects_frame` makes its rows; the spool writes them), before
#: the area column and the geometry.
COLUMNS = ["id", "prompt", "score", "area_px", "area_um2", "n_tiles", "source", "backend", "model"]


def resolve_outputs(inputs: list[str], out: str | os.PathLike | None) -> tuple[list[Path | None], Path | None]:
    """Per-input outputs (out is a folder) or one combined output (out is a file), or none (API use)."""
    if out is None:
        return [None] * len(inputs), None
    p = Path(out)
    if p.suffix:
        return [None] * len(inputs), p
    if not p.is_dir():
        raise UsageError(f"{opt('out', p)}: for several inputs give an existing folder (one {PER_INPUT.suffix} each) "
                         f"or a file name ending in {endings(every=False, last=' or ')} (one combined output)")
    outs = [p / (Path(file_name(i)).stem + PER_INPUT.suffix) for i in inputs]
    seen: dict[Path, str] = {}
    for i, o in zip(inputs, outs):
        if o in seen:  # a/visual.tif and b/visual.tif: one would overwrite the other's objects
            raise UsageError(f"{opt('out', p)}: {seen[o]} and {i} would both be written to {o.name}: "
                             f"give {opt('out')} a file (one combined output with a `source` column) or segment them "
                             "separately")
        seen[o] = i
    return outs, None


def _outputs(paths: list[str], out, work_dir, checkpoint: bool, layer: str | None):
    """(per-input outputs, the combined output, the work folder): decided, their names and the work folder
    checked (`resolve_outputs`, `check_name`, `check_work_dir`)."""
    per_input, combined = resolve_outputs(paths, out)
    for p in (q for q in [combined, *per_input] if q is not None):
        check_name(p, "out", layer)  # before any path beside it is looked at (ENAMETOOLONG)
    check_work_dir(work_dir, paths)
    if work_dir is None and checkpoint and out is not None:
        work_dir = Path(str(combined or out).rstrip("/") + ".sam3tiles-work")
        check_work_dir(work_dir, paths, option="the work folder")
    return per_input, combined, work_dir


def preview_path(out: str | os.PathLike, layer: str | None = None) -> Path:
    """`OUT.preview.png` (`OUT.LAYER.preview.png` for a --layer of a GeoPackage)."""
    out = str(out).rstrip("/" + os.sep)  # a dataset folder's quicklook lies beside it
    return Path(f"{out}.{layer}.preview.png" if layer else f"{out}.preview.png")


def report_path_for(out: str | os.PathLike, layer: str | None = None) -> Path:
    """`OUT.report.json` (`OUT.LAYER.report.json` for a --layer of a GeoPackage: one report per layer, named
    as its preview is)."""
    out = str(out).rstrip("/" + os.sep)  # a folder's (per-input outputs, a dataset) report lies beside it
    return Path(f"{out}.{layer}.report.json" if layer else f"{out}.report.json")


def side_files(outputs: Sequence[Path], labels: Path | None, report: Path | None, opts: Options,
               report_role: str = "report_path") -> list[tuple[str, Path]]:
    """Every file a run writes besides its vector outputs, as (what, path): report, previews, labels."""
    out = [(report_role, Path(report))] if report is not None else []
    if not opts.no_preview:
        out += [("the preview", preview_path(p, opts.layer)) for p in outputs]
    return out + ([("labels", Path(labels))] if labels is not None else [])


def written(outputs: Sequence[Path], labels, report, work_dir, opts: Options, given: Targets) -> list[tuple[str, Path]]:
    """Every path a run writes, as (role, path) (`preflight.WRITTEN`): its outputs, report, previews, label image
    and work folder (where its object spool lies). A report or work folder the run was not given is named as
    such ("the report"): its path follows the output's."""
    files = [("out", p) for p in outputs]
    files += side_files(outputs, labels, report, opts, "report_path" if given.report_path is not None else "the report")
    if work_dir is not None:
        files.append(("work_dir" if given.work_dir is not None else "the work folder", Path(work_dir)))
    return files
