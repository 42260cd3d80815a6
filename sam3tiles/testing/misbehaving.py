"""A backend that misbehaves the way a real SAM 3 does, around any other backend (tests, benchmarks).

The reference backend returns the same clean, connected instance for an object in every tile; a real
SAM 3 does not (../shared/model-behaviour.md). `MisbehavingRuntime` wraps any `ModelRuntime` and, per
switch of `Behaviour`, changes the inner backend's detections on the 288 mask grid:

* `cap`: at most this many instances per decoder pass (SAM 3's 200 object queries);
* `miss`: an instance dropped; `false_pos`: spurious blobs per tile and prompt (expected count);
* `split`: an instance returned as two halves (two queries each took half);
* `fused`: an instance fused with a neighbour within `FUSE_CELLS` cells into one mask;
* `multipart`: an instance returned as one mask in two parts (an occluder one cell wide across it);
* `grouped`: an instance sharing one mask with another instance farther away (a concept answer);
* `semantic`: each prompt answered with ONE mask holding every match (as SAM 3 answers "water");
* `grow`: an instance grown or shrunk by one mask cell (the mask's boundary moved by 3.5 px);
* `short`: an instance that reaches the edge of the tile's content stops 1-2 cells short of it (cut);
* `edge_score`: scores lowered toward the tile's edges by up to this much (below 0.5: not returned);
* `score_jitter`: the standard deviation of a per-tile score offset (calibration depends on context).

Rates are per instance (probabilities) unless named otherwise. Everything is seeded per tile from the
tile's content (and the prompt's text), so a run repeats exactly, and two runs over one image agree.

Use it as any backend object or callable: `segment(path, ["red"], backend=functools.partial(
MisbehavingRuntime, ReferenceRuntime(), "semantic"))`; `benchmarks/bench_merge_quality.py` runs every preset.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields, replace
from typing import Any, Sequence

import numpy as np
from scipy import ndimage

from ..model.runtime import (MASK_SIZE, MAX_QUERIES, MODEL_SIZE, Detections, ExampleBox, PreparedPrompt,
                             TileImage)

#: Neighbours whose masks come within this many cells of each other can be fused.
FUSE_CELLS = 3
#: "Distant" for `grouped`: the other instance lies at least this many cells away.
DISTANT_CELLS = 12


@dataclass(frozen=True)
class Behaviour:
    """Switches of `MisbehavingRuntime`: rates per instance (0 = off) unless named otherwise."""

    cap: int = MAX_QUERIES
    miss: float = 0.0
    false_pos: float = 0.0  # expected spurious blobs per tile and prompt
    split: float = 0.0
    fused: float = 0.0
    multipart: float = 0.0
    grouped: float = 0.0
    semantic: bool = False
    grow: float = 0.0
    short: float = 0.0
    edge_score: float = 0.0  # largest score reduction, at the tile's edge
    score_jitter: float = 0.0  # std of the per-tile score offset
    wobble: float = 0.0  # amplitude (mask cells) of a smooth boundary displacement, drawn per tile and instance
    wobble_len: int = 12  # its correlation length along the boundary, mask cells

    def describe(self) -> str:
        d = Behaviour()
        on = [f"{f.name}={getattr(self, f.name)}" for f in fields(self) if getattr(self, f.name) != getattr(d, f.name)]
        return ", ".join(on) or "reference"


#: One preset per behaviour of model-behaviour.md (rates as seen in the issue), and all of them together.
BEHAVIOURS: dict[str, Behaviour] = {
    "reference": Behaviour(),
    "cap": Behaviour(cap=20),
    "multipart": Behaviour(multipart=0.1),
    "grouped": Behaviour(grouped=0.05),
    "semantic": Behaviour(semantic=True),
    "split": Behaviour(split=0.05),
    "fused": Behaviour(fused=0.05),
    "grow": Behaviour(grow=0.5),
    "short": Behaviour(short=1.0),
    "edge_score": Behaviour(edge_score=0.3),
    "miss": Behaviour(miss=0.05),
    "false_pos": Behaviour(false_pos=0.5),
    "score_jitter": Behaviour(score_jitter=0.15),
    "wobble": Behaviour(wobble=1.0),
}
BEHAVIOURS["all"] = Behaviour(miss=0.03, false_pos=0.3, split=0.05, fused=0.05, multipart=0.05, grouped=0.05,
                              grow=0.5, short=1.0, edge_score=0.3, score_jitter=0.15)


def behaviour(name: str) -> Behaviour:
    """A preset by name (`BEHAVIOURS`), `key=value,...` switches, e.g. `split=0.1,short=1`, or several of
    either joined by `+` (each one's switches together: `grow+miss`, a fault beside another fault)."""
    if name in BEHAVIOURS:
        return BEHAVIOURS[name]
    if "+" in name:
        d, out = Behaviour(), Behaviour()
        for part in name.split("+"):
            b = behaviour(part)
            changed = {f.name: getattr(b, f.name) for f in fields(b) if getattr(b, f.name) != getattr(d, f.name)}
            out = replace(out, **changed)
        return out
    out = Behaviour()
    for item in filter(None, name.split(",")):
        key, _, value = item.partition("=")
        if key not in {f.name for f in fields(Behaviour)}:
            raise ValueError(f"unknown behaviour {key!r}: choose from {', '.join(BEHAVIOURS)} or "
                             f"{', '.join(f.name for f in fields(Behaviour))}=VALUE")
        cur = getattr(out, key)
        out = replace(out, **{key: (value.lower() in ("1", "true", "yes")) if isinstance(cur, bool)
                              else type(cur)(value)})
    return out


@dataclass
class _Embedding:
    inner: Any
    seed: bytes
    cells: tuple[int, int]  # the tile content's extent on the 288 grid (cols, rows)


@dataclass
class _Inst:
    mask: np.ndarray  # float32 [288, 288]
    score: float


class MisbehavingRuntime:
    """`inner`'s answers, changed per `behaviour` (see the module docstring); seeded per tile."""

    def __init__(self, inner, behaviour: Behaviour | str = "all") -> None:
        self.inner = inner
        self.behaviour = globals()["behaviour"](behaviour) if isinstance(behaviour, str) else behaviour
        self.name = f"misbehaving-{inner.name}"
        self.box_slots = inner.box_slots
        self.counters = getattr(inner, "counters", {})

    @property
    def identity(self) -> str:
        return f"misbehaving[{self.behaviour.describe()}]:{self.inner.identity}"

    def encode(self, image: TileImage) -> _Embedding:
        seed = hashlib.sha256(image.rgb[:, ::4, ::4].tobytes() + np.packbits(image.valid).tobytes()).digest()
        rows = np.flatnonzero(image.valid.any(axis=1))
        cols = np.flatnonzero(image.valid.any(axis=0))
        vw = cols[-1] + 1 if len(cols) else MODEL_SIZE
        vh = rows[-1] + 1 if len(rows) else MODEL_SIZE
        cells = (int(round(vw * MASK_SIZE / MODEL_SIZE)), int(round(vh * MASK_SIZE / MODEL_SIZE)))
        return _Embedding(self.inner.encode(image), seed, cells)

    def prepare_prompt(self, text: str) -> PreparedPrompt:
        return self.inner.prepare_prompt(text)

    def decode(self, embedding: _Embedding, prompt: PreparedPrompt, boxes: Sequence[ExampleBox] = ()) -> Detections:
        det = self.inner.decode(embedding.inner, prompt, boxes)
        h = hashlib.sha256(embedding.seed + prompt.text.encode() + repr([b.cxcywh for b in boxes]).encode())
        rng = np.random.default_rng(int.from_bytes(h.digest()[:8], "little"))
        insts = [_Inst(det.masks[i, 0].astype(np.float32), float(det.scores[i])) for i in range(len(det))]
        insts = misbehave(insts, self.behaviour, rng, embedding.cells)
        return _detections(insts)


def misbehave(insts: list[_Inst], b: Behaviour, rng: np.random.Generator, cells: tuple[int, int]) -> list[_Inst]:
    """Apply every switch of `b` to one decoder pass's instances (288-grid masks)."""
    if b.miss:
        insts = [x for x in insts if rng.random() >= b.miss]
    if b.fused:
        insts = _fuse(insts, b.fused, rng)
    if b.split:
        insts = [h for x in insts for h in (_split(x, rng) if rng.random() < b.split else [x])]
    if b.grow:  # before the occluder: a grown or shrunk mask does not change the occluder's width
        insts = [_grow(x, rng) if rng.random() < b.grow else x for x in insts]
    if b.wobble:
        insts = [_wobble(x, rng, b.wobble, b.wobble_len) for x in insts]
    if b.multipart:
        insts = [_occlude(x, rng) if rng.random() < b.multipart else x for x in insts]
    if b.short:
        insts = [_short(x, rng, cells) if rng.random() < b.short else x for x in insts]
    if b.grouped:
        insts = _group(insts, b.grouped, rng)
    if b.semantic and insts:
        insts = [_Inst(np.max([x.mask for x in insts], axis=0), float(np.mean([x.score for x in insts])))]
    if b.false_pos:
        insts += [_blob(rng, cells) for _ in range(rng.poisson(b.false_pos))]
    offset = rng.normal(0, b.score_jitter) if b.score_jitter else 0.0
    out = []
    for x in insts:
        s = x.score + offset
        if b.edge_score:
            s -= b.edge_score * max(0.0, 1 - _edge_cells(x.mask, cells) / (MASK_SIZE / 8))
        x.score = float(min(s, 1.0))
        if x.score > 0.5 and (x.mask > 0.5).any():
            out.append(x)
    return out[: b.cap]


def _extent(mask: np.ndarray):
    r = np.flatnonzero((mask > 0.5).any(axis=1))
    c = np.flatnonzero((mask > 0.5).any(axis=0))
    if not len(r):
        return None
    return r[0], r[-1] + 1, c[0], c[-1] + 1


def _edge_cells(mask: np.ndarray, cells: tuple[int, int]) -> float:
    e = _extent(mask)
    if e is None:
        return 0.0
    r0, r1, c0, c1 = e
    return float(min(r0, c0, cells[1] - r1, cells[0] - c1))


def _split(x: _Inst, rng) -> list[_Inst]:
    e = _extent(x.mask)
    if e is None:
        return [x]
    r0, r1, c0, c1 = e
    axis = 0 if r1 - r0 >= c1 - c0 else 1
    lo, hi = (r0, r1) if axis == 0 else (c0, c1)
    if hi - lo < 4:
        return [x]
    cut = int(round(lo + (hi - lo) * rng.uniform(0.35, 0.65)))
    a, b = x.mask.copy(), x.mask.copy()
    if axis == 0:
        a[cut:], b[:cut] = 0, 0
    else:
        a[:, cut:], b[:, :cut] = 0, 0
    return [_Inst(a, x.score), _Inst(b, x.score)]


def _occlude(x: _Inst, rng) -> _Inst:
    """One cell-wide stripe across the instance's longer axis: one mask, two parts."""
    e = _extent(x.mask)
    if e is None:
        return x
    r0, r1, c0, c1 = e
    m = x.mask.copy()
    if r1 - r0 >= c1 - c0 and r1 - r0 >= 5:
        m[int(rng.integers(r0 + 2, r1 - 2))] = 0
    elif c1 - c0 >= 5:
        m[:, int(rng.integers(c0 + 2, c1 - 2))] = 0
    return _Inst(m, x.score)


def _grow(x: _Inst, rng) -> _Inst:
    """Grown or shrunk by one cell in width and height (a 2x2 grey dilation or erosion)."""
    op = ndimage.grey_dilation if rng.random() < 0.5 else ndimage.grey_erosion
    return _Inst(op(x.mask, size=(2, 2)).astype(np.float32), x.score)


def _wobble(x: _Inst, rng, amp: float, length: int = 12) -> _Inst:
    """The boundary moved in and out by up to 2 x `amp` mask cells (standard deviation `amp`), smoothly along
    it (a random field correlated over `length` mask cells), drawn anew for every instance of every tile: a
    real SAM 3 answers a changed context with a changed boundary, independently per tile."""
    m = x.mask > 0.5
    if not m.any():
        return x
    sd = np.where(m, ndimage.distance_transform_edt(m) - 0.5, 0.5 - ndimage.distance_transform_edt(~m))
    n = MASK_SIZE // length + 3
    field = ndimage.zoom(rng.normal(0, 1, (n, n)), length, order=3)[:MASK_SIZE, :MASK_SIZE]
    field = np.clip(field / max(field.std(), 1e-6), -2, 2) * amp
    new = sd + field > 0
    return _Inst(np.where(new & m, x.mask, np.where(new, 0.9, 0.0)).astype(np.float32), x.score)


def _short(x: _Inst, rng, cells: tuple[int, int]) -> _Inst:
    """A mask that reaches an edge of the tile's content stops 1 or 2 cells short of that edge."""
    e = _extent(x.mask)
    if e is None:
        return x
    r0, r1, c0, c1 = e
    cw, ch = cells
    k = int(rng.integers(1, 3))
    m = x.mask.copy()
    if r0 <= 0:
        m[:k] = 0
    if c0 <= 0:
        m[:, :k] = 0
    if r1 >= ch:
        m[ch - k:] = 0
    if c1 >= cw:
        m[:, cw - k:] = 0
    return _Inst(m, x.score)


def _near(a: np.ndarray, b: np.ndarray, d: int) -> bool:
    return bool((ndimage.binary_dilation(a > 0.5, iterations=d) & (b > 0.5)).any())


def _fuse(insts: list[_Inst], rate: float, rng) -> list[_Inst]:
    out, used = [], set()
    for i, x in enumerate(insts):
        if i in used:
            continue
        if rng.random() < rate:
            for j in range(i + 1, len(insts)):
                if j not in used and _boxes_near(x.mask, insts[j].mask, FUSE_CELLS) and \
                        _near(x.mask, insts[j].mask, FUSE_CELLS):
                    used.add(j)
                    x = _Inst(np.maximum(x.mask, insts[j].mask), max(x.score, insts[j].score))
                    break
        out.append(x)
    return out


def _boxes_near(a: np.ndarray, b: np.ndarray, d: int) -> bool:
    ea, eb = _extent(a), _extent(b)
    if ea is None or eb is None:
        return False
    return ea[0] - d < eb[1] and eb[0] - d < ea[1] and ea[2] - d < eb[3] and eb[2] - d < ea[3]


def _group(insts: list[_Inst], rate: float, rng) -> list[_Inst]:
    out, used = [], set()
    for i, x in enumerate(insts):
        if i in used:
            continue
        if rng.random() < rate:
            far = [j for j in range(len(insts)) if j != i and j not in used
                   and not _boxes_near(x.mask, insts[j].mask, DISTANT_CELLS)]
            if far:
                j = far[int(rng.integers(len(far)))]
                used.add(j)
                x = _Inst(np.maximum(x.mask, insts[j].mask), max(x.score, insts[j].score))
        used.add(i)
        out.append(x)
    return out


def _blob(rng, cells: tuple[int, int]) -> _Inst:
    m = np.zeros((MASK_SIZE, MASK_SIZE), np.float32)
    w, h = (int(v) for v in rng.integers(2, 7, 2))
    c = int(rng.integers(0, max(1, cells[0] - w)))
    r = int(rng.integers(0, max(1, cells[1] - h)))
    m[r:r + h, c:c + w] = 0.9
    return _Inst(m, float(rng.uniform(0.55, 0.9)))


def _detections(insts: list[_Inst]) -> Detections:
    if not insts:
        return Detections.empty()
    boxes, masks = [], []
    for x in insts:
        r0, r1, c0, c1 = _extent(x.mask)
        boxes.append([c0 / MASK_SIZE, r0 / MASK_SIZE, c1 / MASK_SIZE, r1 / MASK_SIZE])
        masks.append(x.mask[None])
    return Detections(np.asarray(boxes, np.float32), np.asarray([x.score for x in insts], np.float32),
                      np.stack(masks).astype(np.float32))
