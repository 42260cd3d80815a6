"""The end-of-run report: tiles done / resumed / skipped / failed / saturated, objects, seconds per stage,
every file written.

Two readers: the terminal (`summary`: a few lines in a user's words, a unit on every quantity, the merge as
"N objects crossed tile seams, M duplicates removed", the work folder's purpose, and last every file
written with its size) and programs (`as_dict`, the JSON beside the output: every figure, the merge's
internals, every path written in `files`, what each figure counts in `units`).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ...readers.remote import source_name
from ...version import __version__
from ...wording import opt, spoken
from ...writers import atomic_path

#: Warped files the plan and the report name one by one.
MAX_WARPED_LINES = 5
STAGES = ("read", "prompt", "encode", "decode", "vectorize", "merge", "write")
#: What the report's quantities are in (the JSON's `units`; the text names its units itself).
UNITS = {"seconds": "s (read, prompt, encode, decode, vectorize: summed over tiles)", "wall_seconds": "s",
         "tiles_per_second": "tiles per second of wall time",
         "merge": "counts of parts (a part: one tile's piece of an object) and objects",
         "merge.coverage": "the input CRS's units squared (square metres on a metre CRS; without a CRS, source "
                           "pixels)", "files": "paths as written (removed: paths deleted after the run)"}


@dataclass
class RunReport:
    version: str = __version__
    inputs: list = field(default_factory=list)
    output: str | None = None
    backend: str = ""
    model: str = ""
    parameters: dict = field(default_factory=dict)
    tiles: int = 0
    done: int = 0
    resumed: int = 0
    skipped: int = 0  # every skipped tile; per reason in `skipped_by`
    failed: int = 0
    saturated: int = 0
    failed_tiles: list = field(default_factory=list)  # [{"source", "tile", "row", "col", "error"}]
    saturated_tiles: list = field(default_factory=list)
    # tiles skipped per reason (`tiling.selection`: outside the area, no tissue, all nodata)
    skipped_by: dict = field(default_factory=dict)
    # the area of interest: aoi (as given), clip, tiles_grown, objects_outside (not written), objects_clipped;
    # edge: a note per input the area only touches or overlaps in a sliver; tissue: a note per slide (its share,
    # or why none was skipped)
    area: dict = field(default_factory=dict)
    objects: int = 0
    objects_by_prompt: dict = field(default_factory=dict)
    unusable_prompts: list = field(default_factory=list)
    boxes_outside: int = 0
    # --box-scope image: in_place, no_room, over_bound (tile-exemplar pairs), pasted, dropped, clipped (detections)
    exemplars: dict = field(default_factory=dict)
    # per prompt label: given, in_place, pasted (margin, padding, strip), dropped, clipped (exemplars.report_by_prompt)
    exemplars_by_prompt: dict = field(default_factory=dict)
    exemplar_notes: list = field(default_factory=list)
    # a prompt's decoder passes past its first in a tile (more example boxes than the decoder's box slots):
    # extra (passes), folded (their detections of an object another pass had found: one answer a tile)
    decoder_passes: dict = field(default_factory=dict)
    output_notes: list = field(default_factory=list)  # e.g. which tools open a GeoParquet output
    # point prompts (executing.points): given (every point), positive, negative, outside (positive points in no input),
    # renamed (a point file's columns carried under another name: file's name -> output's); per status found,
    # nothing, background, failed, partial; encodes = home_tiles + follow_encodes
    points: dict = field(default_factory=dict)
    # the maps the inputs form (issue 38: `run.planning.maps.map_facts`, when several files), and files kept apart
    maps: list = field(default_factory=list)
    map_notes: list = field(default_factory=list)
    input_notes: list = field(default_factory=list)  # inputs left out: a file named twice, a sidecar
    merge: dict = field(default_factory=dict)
    refine: dict = field(default_factory=dict)  # see refine.RefineStats.add_to
    checkpoint: dict = field(default_factory=dict)  # work_dir, reused (tile-prompt results), stored, partial_tiles,
    # removed (--clean: the work folder was removed after the run)
    # every path the run wrote: objects (the vector outputs), labels, previews, report, work_dir (None: not written
    # or removed); removed: what it deleted once done (--clean: the work folder)
    files: dict = field(default_factory=dict)
    seconds: dict = field(default_factory=lambda: {s: 0.0 for s in STAGES})
    wall_seconds: float = 0.0
    runtime_counters: dict = field(default_factory=dict)
    dashboard: str | None = None

    @property
    def tiles_per_second(self) -> float:
        read = self.done + self.skipped_by.get("all nodata", self.skipped if not self.skipped_by else 0)
        return read / self.wall_seconds if self.wall_seconds > 0 else 0.0

    def as_dict(self) -> dict:
        d = asdict(self)
        d["tiles_per_second"] = round(self.tiles_per_second, 3)
        d["seconds"] = {k: round(v, 3) for k, v in self.seconds.items()}
        d["wall_seconds"] = round(self.wall_seconds, 3)
        d["units"] = dict(UNITS)
        d["decoder_calls"] = self.decoder_calls
        return d

    @property
    def decoder_calls(self) -> int:
        """This run's decoder graph runs over the workers (a batched decoder: one a tile for every text prompt)."""
        return int(self.decoder_passes.get("calls", 0))

    def write_json(self, path: str | os.PathLike) -> Path:
        p = Path(path)
        with atomic_path(p) as tmp:
            tmp.write_text(json.dumps(self.as_dict(), indent=2, default=str))
        return p

    def _provider_lines(self) -> list[str]:
        """The onnxruntime providers each graph ran on, per distinct placement over the workers."""
        seen = {}
        for counters in self.runtime_counters.values():
            for backend, c in (counters or {}).items():
                for graph, used in (c.get("providers") or {}).items() if isinstance(c, dict) else ():
                    seen.setdefault((backend, graph, used), None)
        return [f"providers ({b}, {g}): {u}" for b, g, u in seen]

    def _layout_lines(self) -> list[str]:
        """The model layout that ran, its score threshold and the queries that fell under it (summed over workers)."""
        seen: dict = {}
        for counters in self.runtime_counters.values():
            for backend, c in (counters or {}).items():
                if isinstance(c, dict) and c.get("layout"):
                    key = (backend, c["layout"], c.get("score_threshold"))
                    seen[key] = seen.get(key, 0) + int(c.get("queries_under_threshold", 0))
        d = self.decoder_calls
        return [f"model layout ({b}): {lay}; score threshold {t:g}: {n} quer{'y' if n == 1 else 'ies'} fell under it; "
                f"{d} decoder call{'s' if d != 1 else ''}" for (b, lay, t), n in seen.items()]

    def _skipped_why(self) -> str:
        """'no data' when every skipped tile was found all nodata (as before areas and tissue); else per reason."""
        why = {reason: n for reason, n in self.skipped_by.items() if n}
        if set(why) <= {"all nodata"}:
            return "no data"
        return ", ".join(f"{n} {reason}" for reason, n in why.items())

    def _area_lines(self) -> list[str]:
        a = self.area
        out = []
        if "aoi" in a:
            out.append(f"area of interest {a['aoi']}: grown into {a.get('tiles_grown', 0)} skipped tile(s) where an "
                       f"object crossed its edge; {a.get('objects_outside', 0)} object(s) outside it not written"
                       + (f", {a.get('objects_clipped', 0)} clipped to it" if a.get("clip") else ""))
        out += [f"area: {t}" for t in a.get("edge", [])]
        out += [f"tissue: {t}" for t in a.get("tissue", [])]
        return out

    def _map_lines(self) -> list[str]:
        """The maps several input files formed: mosaics with their tiles against one file at a time."""
        if not any(m.get("mosaic") for m in self.maps) and not self.map_notes and len(self.maps) < 2:
            return []
        crss = list(dict.fromkeys(str(m.get("crs")) for m in self.maps))
        out = [f"maps: {len(self.maps)} from {sum(m.get('files', 1) for m in self.maps)} files"
               + (f", in {len(crss)} CRSs ({', '.join(crss[:4])})" if len(crss) > 1 else "")]
        for m in self.maps:
            if m.get("mosaic"):
                out.append(f"  {m['map']}: {m['tiles']} tiles ({m['tiles_one_at_a_time']} one file at a "
                           f"time), holes {m['holes']:.1%}, overlaps {m['overlaps']:.1%} of its area")
                out += lattice_lines(m, "    ")
        return out + [f"  kept apart: {n}" for n in self.map_notes]

    def _points_lines(self) -> list[str]:
        p = self.points
        if not p:
            return []
        return [f"points: {p.get('given', 0)} given ({p.get('positive', 0)} positive, {p.get('negative', 0)} "
                f"negative); {p.get('found', 0)} found, "
                f"not found: {p.get('nothing', 0)} nothing there, {p.get('background', 0)} background"
                + (f", {p['failed']} failed" if p.get("failed") else "")
                + (f", {p['outside']} outside every input" if p.get("outside") else "")
                + f"; {p.get('encodes', 0)} encodes ({p.get('home_tiles', 0)} tiles holding points, "
                f"{p.get('follow_encodes', 0)} following objects past them)"]

    def _reuse_lines(self) -> list[str]:
        """An incremental run (issue 52): how many tiles came from the work folder's earlier runs, how many were
        computed."""
        if not self.resumed:
            return []
        return [f"incremental: {self.resumed} tile(s) reused from checkpoints, {self.done} computed"]

    def summary(self) -> str:
        """A few lines for the terminal, in a user's words (every quantity with its unit); the last lines
        say where the work folder is and list every file written with its size."""
        lines = [*(f"inputs: {n}" for n in self.input_notes), *self._map_lines(),
            f"tiles: {self.tiles} in all: {self.done} done, {self.resumed} resumed from checkpoints, {self.skipped} "
            f"skipped ({self._skipped_why()}), {self.failed} failed, {self.saturated} saturated (hit SAM 3's "
            "200-object cap)",
            *self._reuse_lines(),
            f"objects: {self.objects}" + (" (" + ", ".join(f"{k}: {v}" for k, v in self.objects_by_prompt.items())
                                          + ")" if self.objects_by_prompt else ""),
        ]
        if self.merge:
            lines.append(self._merge_line())
        lines += self._area_lines()
        r = self.refine
        if r.get("refined"):
            per = ", ".join(f"depth {k}: {v} tile(s) -> {r['sub_tiles'].get(str(int(k) + 1), 0)} sub-tiles"
                            for k, v in r["refined"].items())
            lines.append(f"refined (zoomed in where a prompt hit the 200-object cap): {per}; "
                         f"{r.get('extra_encodes', 0)} extra encodes; "
                         f"{r.get('saturated_at_max_depth', 0)} still saturated at depth {r.get('depth')}")
        secs = ", ".join(f"{k} {v:.2f} s" for k, v in self.seconds.items() if round(v, 2) > 0)
        lines.append(f"time: {self.wall_seconds:.2f} s ({self.tiles_per_second:.2f} tiles/s)"
                     + (f"; by stage {secs}" if secs else "")
                     + (" (read, encode, decode, vectorize summed over tiles)" if self.tiles > 1 and secs else ""))
        if self.dashboard:
            lines.append(f"dask dashboard: {self.dashboard}")
        lines += self._provider_lines()
        lines += self._layout_lines()
        for t in self.failed_tiles[:10]:
            lines.append(f"failed tile {t.get('tile')} of {t.get('source')}: {t.get('error')}")
        for p in self.unusable_prompts:
            lines.append(f"prompt finds nothing: {p}")
        e = self.exemplars
        if e.get("pasted") or e.get("dropped") or e.get("extra_tiles"):
            lines.append(f"exemplars: {e.get('pasted', 0)} pasted into tiles ({e.get('margin', 0)} margin, "
                         f"{e.get('padding', 0)} padding, {e.get('strip', 0)} strip), {e.get('in_place', 0)} "
                         f"used where they lie; {e.get('dropped', 0)} detections on pastes dropped, "
                         f"{e.get('clipped', 0)} clipped"
                         + (f"; the {e['strip_px']} px strip cost +{e['extra_tiles']} tiles (encodes)"
                            if e.get("extra_tiles") else ""))
            for label, r in self.exemplars_by_prompt.items():
                lines.append(f"  {label}: {r['given']} exemplar(s) given, pasted {r['pasted']} times ({r['margin']} "
                             f"margin, {r['padding']} padding, {r['strip']} strip), {r['in_place']} in place; "
                             f"{r['dropped']} detections on pastes dropped, {r['clipped']} clipped")
        d = self.decoder_passes
        if d.get("extra"):
            lines.append(f"decoder passes: {d['extra']} more than one a prompt and tile (example boxes beyond the "
                         f"decoder's box slots); {d.get('folded', 0)} detections of an object another pass had found "
                         "were folded into it")
        lines += self._points_lines()
        lines.extend(self.exemplar_notes)
        lines.extend(self.output_notes)
        if self.boxes_outside:
            lines.append(f"{self.boxes_outside} example box(es) lie outside every tile and were not used")
        return "\n".join([*lines, *self.files_lines()])

    def _merge_line(self) -> str:
        """The merge in a user's words; its internals (links, groups, coverage) are in the JSON."""
        m = self.merge
        line = (f"merge: {_n(m.get('crossed_seams', 0), 'object')} crossed tile seams (joined from the tiles that "
                f"saw them), {_n(m.get('duplicates_dropped', 0), 'duplicate')} removed")
        if m.get("slivers_dropped"):
            line += f", {_n(m['slivers_dropped'], 'sliver')} (thin cut edges) removed"
        if m.get("rule_violations"):
            line += (f"; {_n(m['rule_violations'], 'part')} cut at a seam that no neighbouring tile saw "
                     "(merge.rule_violations in the report)")
        return line

    def files_lines(self) -> list[str]:
        """The work folder (what it is for, when it may go) and every file written, with its size."""
        f, lines = self.files, []
        work = f.get("work_dir")
        lines += [spoken(f"work folder {gone}: removed after the run ({opt('clean')})")
                  for gone in f.get("removed") or ()]
        if work and os.path.isdir(work):
            lines.append(spoken(f"work folder {work} ({human_size(_size(work))}): checkpoints, so that a rerun resumes "
                                f"where this one stopped; delete it once you no longer need to rerun "
                                f"({opt('clean')} deletes it after a run that had no failed tile)"))
        outs = list(f.get("objects") or ([self.output] if self.output else []))
        n = f"{self.objects} object{'' if self.objects == 1 else 's'}"
        lines.append(f"wrote {n} to {self.output}" if self.output else f"found {n} (no output file)")
        paths = [*outs, *(f.get("previews") or []), *([f["labels"]] if f.get("labels") else []),
                 *([f["report"]] if f.get("report") else [])]
        lines += [f"  {p}  {human_size(_size(p))}" for p in paths if os.path.exists(p)]
        return lines


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _size(path: str | os.PathLike) -> int:
    """Bytes of a file, or of every file under a folder (a dataset, an OME-Zarr, the work folder)."""
    p = Path(path)
    if p.is_dir():
        return sum(q.stat().st_size for q in p.rglob("*") if q.is_file())
    return p.stat().st_size if p.exists() else 0


def human_size(n: int) -> str:
    """Bytes as a person reads them: 830 B, 12.4 kB, 3.1 MB, 2.5 GB (powers of 1000)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def lattice_lines(facts: dict, indent: str = "  ") -> list[str]:
    """The lines of the plan and the report on a map's lattice and the files warped onto it."""
    if not facts.get("mosaic"):
        return []
    warped = facts.get("warped", [])
    out = [f"{indent}lattice: {facts['lattice']}; objects in {facts['crs']} (the map's CRS)"] \
        if facts.get("lattice") else []
    out += [f"{indent}warped: {os.path.basename(source_name(w['file']))}: {w['how']}"
            for w in warped[:MAX_WARPED_LINES]]
    if len(warped) > MAX_WARPED_LINES:
        out.append(f"{indent}... and {len(warped) - MAX_WARPED_LINES} more files warped")
    return out
