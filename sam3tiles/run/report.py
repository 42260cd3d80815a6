"""The end-of-run report: tiles done / resumed / skipped / failed / saturated, objects, seconds per stage."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..version import __version__
from ..writers import atomic_path

STAGES = ("read", "prompt", "encode", "decode", "vectorize", "merge", "write")


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
    # tissue: a note per slide (its share, or why none was skipped)
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
    merge: dict = field(default_factory=dict)
    refine: dict = field(default_factory=dict)  # see refine.RefineStats.add_to
    checkpoint: dict = field(default_factory=dict)  # work_dir, reused (tile-prompt results), stored, partial_tiles
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
        return d

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

    def _skipped_why(self) -> str:
        """'nodata' when every skipped tile was found all nodata (as before areas and tissue); else per reason."""
        why = {reason: n for reason, n in self.skipped_by.items() if n}
        if set(why) <= {"all nodata"}:
            return "nodata"
        return ", ".join(f"{n} {reason}" for reason, n in why.items())

    def _area_lines(self) -> list[str]:
        a = self.area
        out = []
        if "aoi" in a:
            out.append(f"area of interest {a['aoi']}: grown into {a.get('tiles_grown', 0)} skipped tile(s) where an "
                       f"object crossed its edge; {a.get('objects_outside', 0)} object(s) outside it not written"
                       + (f", {a.get('objects_clipped', 0)} clipped to it" if a.get("clip") else ""))
        out += [f"tissue: {t}" for t in a.get("tissue", [])]
        return out

    def summary(self) -> str:
        """A few lines for the terminal."""
        m = self.merge
        lines = [
            f"tiles: {self.tiles} total, {self.done} done, {self.resumed} resumed, {self.skipped} skipped "
            f"({self._skipped_why()}), {self.failed} failed, {self.saturated} saturated",
            "objects: " + str(self.objects) + (" (" + ", ".join(f"{k}: {v}" for k, v in self.objects_by_prompt.items())
                                               + ")" if self.objects_by_prompt else ""),
        ]
        if m:
            lines.append(f"merge: {m.get('pieces', 0)} pieces -> {m.get('objects', 0)} objects; "
                         f"{m.get('links', 0)} links, {m.get('stitched', 0)} stitched, "
                         f"{m.get('duplicates_dropped', 0)} duplicates dropped, largest group "
                         f"{m.get('largest_group', 0)}, rule violations {m.get('rule_violations', 0)}")
            for k, c in m.get("coverage", {}).items():  # areas in CRS units squared (see sam3tiles.merge)
                lines.append(f"  {k}: tiles own {c['owned']:.6g}, out {c['out']:.6g}; dropped uncovered: "
                             f"{c['duplicates']:.3g} as duplicates, {c['slivers']:.3g} as slivers")
        lines += self._area_lines()
        r = self.refine
        if r.get("refined"):
            per = ", ".join(f"depth {k}: {v} tile(s) -> {r['sub_tiles'].get(str(int(k) + 1), 0)} sub-tiles"
                            for k, v in r["refined"].items())
            lines.append(f"refined (zoomed in where a prompt hit the 200-object cap): {per}; "
                         f"{r.get('extra_encodes', 0)} extra encodes; "
                         f"{r.get('saturated_at_max_depth', 0)} still saturated at depth {r.get('depth')}")
        secs = ", ".join(f"{k} {v:.2f}" for k, v in self.seconds.items() if v > 0)
        lines.append(f"seconds: {secs or '-'}; wall {self.wall_seconds:.2f} ({self.tiles_per_second:.2f} tiles/s)"
                     + ("; read/encode/decode/vectorize are summed over tiles" if self.tiles > 1 else ""))
        if self.dashboard:
            lines.append(f"dask dashboard: {self.dashboard}")
        lines += self._provider_lines()
        for t in self.failed_tiles[:10]:
            lines.append(f"failed tile {t.get('tile')} of {t.get('source')}: {t.get('error')}")
        for p in self.unusable_prompts:
            lines.append(f"prompt finds nothing: {p}")
        e = self.exemplars
        if e.get("pasted") or e.get("dropped") or e.get("extra_tiles"):
            lines.append(f"exemplars: {e.get('pasted', 0)} pasted into tiles ({e.get('margin', 0)} margin, "
                         f"{e.get('padding', 0)} padding, {e.get('strip', 0)} strip), {e.get('in_place', 0)} used where "
                         f"they lie; {e.get('dropped', 0)} detections on pastes dropped, {e.get('clipped', 0)} clipped"
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
        lines.extend(self.exemplar_notes)
        lines.extend(self.output_notes)
        if self.boxes_outside:
            lines.append(f"{self.boxes_outside} example box(es) lie outside every tile and were not used")
        return "\n".join(lines)
