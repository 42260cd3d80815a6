"""DirectML's first tile checked against the CPU (`--device dml`), before its answers are trusted.

DirectML has given silently wrong SAM 3 masks on some devices (mIoU 0.0 against 0.92 on the CPU for one
export) and right ones on others, so a run on `dml` compares its first answered tile with the same tile
encoded and decoded on the CPU: the same number of objects, each CPU object matched by one of DirectML's at
mask IoU >= `PARITY_IOU` (cells of the 288 grid over 0.5) with a score within `PARITY_SCORE`. A device that
fails is refused (a model error, exit 4); one that passes is remembered beside the model (`dml-parity/`,
keyed by the model files' fingerprint and onnxruntime's version), so later runs skip the check. A tile where
neither finds anything proves nothing: it passes the run, and is not remembered.

Frames: `Detections` of one tile (the 288 grid).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .runtime import Detections

#: A DirectML object matches the CPU's at this mask IoU or more.
PARITY_IOU = 0.9
#: ... and a score this close.
PARITY_SCORE = 0.05
#: Where passed checks are remembered, beside the model files.
PARITY_DIR = "dml-parity"


def compare(device: Detections, cpu: Detections) -> str | None:
    """Why `device`'s answer is not the CPU's (a phrase), or None. Greedy one-to-one matching, best IoU first."""
    if len(device) != len(cpu):
        return f"{len(device)} object(s) where the CPU finds {len(cpu)}"
    if not len(cpu):
        return None
    a = device.masks[:, 0] > 0.5
    b = cpu.masks[:, 0] > 0.5
    inter = np.einsum("iyx,jyx->ij", a.astype(np.float32), b.astype(np.float32))
    union = a.sum(axis=(1, 2))[:, None] + b.sum(axis=(1, 2))[None, :] - inter
    iou = np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)
    used_a, used_b, worst = set(), set(), (1.0, 0.0)
    for k in np.argsort(-iou, axis=None, kind="stable"):
        i, j = divmod(int(k), iou.shape[1])
        if i in used_a or j in used_b:
            continue
        used_a.add(i)
        used_b.add(j)
        worst = (min(worst[0], float(iou[i, j])), max(worst[1], abs(float(device.scores[i]) - float(cpu.scores[j]))))
    if worst[0] < PARITY_IOU:
        return f"a mask IoU of {worst[0]:.3f} with the CPU's (at least {PARITY_IOU} needed)"
    if worst[1] > PARITY_SCORE:
        return f"scores {worst[1]:.3f} apart from the CPU's (at most {PARITY_SCORE})"
    return None


def _path(model_dir: Path, key: str) -> Path:
    return Path(model_dir) / PARITY_DIR / f"{key}.json"


def remembered(model_dir: Path, key: str) -> bool:
    """Whether these model files passed the check with this onnxruntime before."""
    return _path(model_dir, key).is_file()


def remember(model_dir: Path, key: str, detail: dict) -> None:
    """Record a passed check (a model folder that cannot be written is checked again next time)."""
    p = _path(model_dir, key)
    try:
        p.parent.mkdir(exist_ok=True)
        p.write_text(json.dumps(detail))
    except OSError:
        pass
