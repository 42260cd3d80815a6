"""Where a run writes: its output, label image, checkpoints and report (`plan.plan_run`'s `targets`).

`segment_job` takes them as keywords (`out=`, `overwrite=`, `labels=`, `work_dir=`, `checkpoint=`,
`report_path=`, as `sam3tiles.segment` does) and `Targets.split` sorts them from the keywords that set
`Options` fields.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

__all__ = ["Targets"]


@dataclass(frozen=True)
class Targets:
    """`out`: the output file, a folder (one .gpkg per input) or NAME.parquet/ (None: nothing written);
    `overwrite`: replace existing files; `labels`: also a label image; `work_dir`: the checkpoint folder
    (None: beside the output); `checkpoint`: keep checkpoints at all; `report_path`: the run report
    (None: beside the output)."""

    out: str | os.PathLike | None = None
    overwrite: bool = False
    labels: str | os.PathLike | None = None
    work_dir: str | os.PathLike | None = None
    checkpoint: bool = True
    report_path: str | os.PathLike | None = None

    def values(self) -> tuple:
        """(out, overwrite, labels, work_dir, checkpoint, report_path), not copied."""
        return tuple(getattr(self, f.name) for f in dataclasses.fields(self))

    @classmethod
    def split(cls, kwargs: dict[str, Any]) -> tuple["Targets", dict[str, Any]]:
        """The targets named in `kwargs`, and the other keywords (options, prompts, ...)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in kwargs.items() if k in names}), {k: v for k, v in kwargs.items()
                                                                          if k not in names}
