"""What a merge did: `MergeStats`, its counts and its coverage figures (areas in CRS units squared)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

COVERAGE_KEYS = ("owned", "out", "duplicates", "slivers", "blended")


@dataclass
class MergeStats:
    pieces: int = 0
    objects: int = 0
    band_pieces: int = 0  # parts that lie in an overlap band (compared)
    pairs_compared: int = 0
    links: int = 0  # links between parts
    merged_groups: int = 0  # components of 2+ parts
    stitched: int = 0  # objects unioned from cut parts
    duplicates_dropped: int = 0  # parts dropped as another view of a kept object
    largest_group: int = 0
    slivers_dropped: int = 0  # cut parts outside their tile's core, beside an object another tile owns
    parts_split: int = 0  # pieces whose separate regions became separate parts (rule 0)
    disagreements: int = 0  # components where one tile gave 2+ parts (split, fused): settled by ownership
    unlinked_cut_pieces: int = 0  # rule violation: a part cut at a seam that no neighbour saw
    #: per prompt: {"owned", "out", "duplicates", "slivers", "blended"} areas in CRS units squared (see the
    #: module; "blended": owned area the smoothed outline gave up, `sam3tiles.merge.smooth`)
    coverage: dict = field(default_factory=dict, compare=False)

    @property
    def rule_violations(self) -> int:
        return self.unlinked_cut_pieces

    def as_dict(self) -> dict:
        d = asdict(self)
        d["rule_violations"] = self.rule_violations
        d["coverage"] = {str(k): {n: round(float(v), 6) for n, v in c.items()} for k, c in self.coverage.items()}
        return d

    def add(self, other: "MergeStats") -> None:
        for k, v in asdict(other).items():
            if k == "largest_group":
                self.largest_group = max(self.largest_group, v)
            elif k == "coverage":
                for p, c in other.coverage.items():
                    mine = self.coverage.setdefault(p, dict.fromkeys(COVERAGE_KEYS, 0.0))
                    for n in COVERAGE_KEYS:
                        mine[n] += c.get(n, 0.0)
            else:
                setattr(self, k, getattr(self, k) + v)

    def count(self, prompt, name: str, area: float) -> None:
        """Add `area` to the coverage figure `name` of `prompt`."""
        c = self.coverage.setdefault(prompt, dict.fromkeys(COVERAGE_KEYS, 0.0))
        c[name] += float(area)



def count_by_prompt(stats: MergeStats, name: str, prompts: np.ndarray, areas: np.ndarray) -> None:
    """Add `areas` to the coverage figure `name`, per prompt."""
    if not len(prompts):
        return
    keys, inv = np.unique(prompts, return_inverse=True)
    sums = np.bincount(inv.ravel(), weights=areas, minlength=len(keys))
    for k, s in zip(keys.tolist(), sums.tolist()):
        stats.count(k, name, s)
