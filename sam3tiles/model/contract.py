"""The SAM 3 ONNX graph contract: the inputs and outputs each published graph must have, the check of a
graph against it (`check_io`), and `read_graph_io`, which reads a graph's inputs and outputs straight from the
``.onnx`` protobuf (no ``onnx`` package, weights never loaded). The layouts of other exports, and which one a
folder holds, are in `layouts`; ``sam3tiles model info`` reports (`layouts.info`)."""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import ContractError, ModelError
from .files import DECODER, IMAGE_ENCODER, LANGUAGE_ENCODER, POINT_DECODER, fetch_command


# --------------------------------------------------------------------------------------------------
# the contract

#: A dimension: an int is fixed, "B" is the box slot count (one value per graph), other strings are free.
Dim = int | str | None


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: str  # numpy-style: float32, uint8, int64, bool, ...
    shape: tuple[Dim, ...]

    def describe(self) -> str:
        dims = ",".join("?" if d is None else str(d) for d in self.shape)
        return f"{self.name} {self.dtype} [{dims}]"


def _spec(name: str, dtype: str, *shape: Dim) -> TensorSpec:
    return TensorSpec(name, dtype, tuple(shape))


_F = "float32"
#: Graph key -> (file name, inputs, outputs in the published order), as in the SAM 3 ONNX contract.
CONTRACT: dict[str, tuple[str, tuple[TensorSpec, ...], tuple[TensorSpec, ...]]] = {
    "image_encoder": (IMAGE_ENCODER, (
        _spec("image", "uint8", 3, 1008, 1008),
    ), (
        _spec("vision_pos_enc_0", _F, 1, 256, 288, 288),
        _spec("vision_pos_enc_1", _F, 1, 256, 144, 144),
        _spec("vision_pos_enc_2", _F, 1, 256, 72, 72),
        _spec("backbone_fpn_0", _F, 1, 256, 288, 288),
        _spec("backbone_fpn_1", _F, 1, 256, 144, 144),
        _spec("backbone_fpn_2", _F, 1, 256, 72, 72),
    )),
    "language_encoder": (LANGUAGE_ENCODER, (
        _spec("tokens", "int64", 1, 32),
    ), (
        _spec("text_attention_mask", "bool", 1, 32),
        _spec("text_memory", _F, 32, 1, 256),
        _spec("text_embeds", _F, 32, 1, 1024),
    )),
    "decoder": (DECODER, (
        _spec("vision_pos_enc_2", _F, 1, 256, 72, 72),
        _spec("backbone_fpn_0", _F, 1, 256, 288, 288),
        _spec("backbone_fpn_1", _F, 1, 256, 144, 144),
        _spec("backbone_fpn_2", _F, 1, 256, 72, 72),
        _spec("language_mask", "bool", 1, 32),
        _spec("language_features", _F, 32, 1, 256),
        _spec("box_coords", _F, "B", 1, 4),
        _spec("box_labels", "int64", "B", 1),
        _spec("box_masks", "bool", 1, "B"),
    ), (
        _spec("boxes", _F, "N", 4),
        _spec("scores", _F, "N"),
        _spec("masks", _F, "N", 1, 288, 288),
    )),
}
#: The encoder outputs the decoder reads (the only ones `encode` asks for).
EMBEDDING_OUTPUTS = ("vision_pos_enc_2", "backbone_fpn_0", "backbone_fpn_1", "backbone_fpn_2")
#: Extra image-encoder outputs of the four-graph layout (v0.6.0): what the point decoder reads besides the clicks.
LATER_ENCODER_OUTPUTS = ("image_embeddings", "high_res_features1", "high_res_features2")
#: The click inputs sam3tiles feeds a point decoder. Inferred, not known (no source we can read has the real
#: names): the same author's SAM 2 export takes `point_coords` float32 [1, N, 2] in model-input pixels,
#: `point_labels` float32 [1, N] (1 positive, 0 negative), `mask_input` float32 [1, 1, M, M] (a mask's logits fed
#: back) and `has_mask_input` float32 [1]. "N" is the clicks (the only dynamic axis), "M" the mask grid.
POINT_CLICK_INPUTS = (
    _spec("point_coords", _F, 1, "N", 2),
    _spec("point_labels", _F, 1, "N"),
    _spec("mask_input", _F, 1, 1, "M", "M"),
    _spec("has_mask_input", _F, 1),
)

_ORT_DTYPES = {"float": "float32", "double": "float64", "float16": "float16", "bfloat16": "bfloat16"}


def normalise_dtype(dtype: str) -> str:
    """numpy-style name for an onnxruntime type string ("tensor(float)" -> "float32")."""
    if dtype.startswith("tensor(") and dtype.endswith(")"):
        inner = dtype[7:-1]
        return _ORT_DTYPES.get(inner, inner)
    return dtype


@dataclass
class ContractCheck:
    """The result of checking one graph: every difference, and the box slot count it implies."""

    graph: str
    differences: list[str]
    box_slots: int | None = None


def check_graph(graph: str, inputs: Iterable[TensorSpec], outputs: Iterable[TensorSpec]) -> ContractCheck:
    """Compare a graph's inputs and outputs with `CONTRACT[graph]` (the seed layout); list every difference."""
    file_name, want_in, want_out = CONTRACT[graph]
    return check_io(graph, file_name, want_in, want_out, inputs, outputs)


def check_io(graph: str, file_name: str, want_in: Sequence[TensorSpec], want_out: Sequence[TensorSpec],
             inputs: Iterable[TensorSpec], outputs: Iterable[TensorSpec],
             optional: Iterable[str] = ()) -> ContractCheck:
    """Compare a graph's inputs and outputs with the wanted ones; list every difference.

    Inputs must match exactly by name, except `optional` ones, which may be absent (a simplified export drops
    inputs it does not read); an extra input would go unfed. Outputs must include the wanted ones (extra
    outputs are allowed). Dtypes and ranks must match; fixed sizes must match where the graph states a number
    (a symbolic dimension is accepted). "B" must be one number in the graph.
    """
    got_in = {t.name: t for t in inputs}
    got_out = {t.name: t for t in outputs}
    optional = set(optional)
    diffs: list[str] = []
    slots: dict[str, int] = {}

    def compare(kind: str, want: TensorSpec, got: TensorSpec) -> None:
        where = f"{file_name}: {kind} {want.name!r}"
        if normalise_dtype(got.dtype) != want.dtype:
            diffs.append(f"{where} is {normalise_dtype(got.dtype)}, the contract says {want.dtype}")
        if len(got.shape) != len(want.shape):
            diffs.append(f"{where} has rank {len(got.shape)} {list(got.shape)}, the contract says rank "
                         f"{len(want.shape)} {list(want.shape)}")
            return
        for axis, (w, g) in enumerate(zip(want.shape, got.shape)):
            if isinstance(w, int) and isinstance(g, int) and w != g:
                diffs.append(f"{where} has size {g} on axis {axis}, the contract says {w}")
            elif w == "B" and isinstance(g, int):
                slots[f"{want.name}[{axis}]"] = g

    for want in want_in:
        if want.name in got_in:
            compare("input", want, got_in[want.name])
        elif want.name not in optional:
            diffs.append(f"{file_name}: input {want.name!r} is missing (the graph's inputs are "
                         f"{', '.join(got_in) or 'none'})")
    expected_names = {w.name for w in want_in}
    for name in got_in:
        if name not in expected_names:
            diffs.append(f"{file_name}: unexpected input {name!r}, which the contract does not have")
    for want in want_out:
        if want.name in got_out:
            compare("output", want, got_out[want.name])
        else:
            diffs.append(f"{file_name}: output {want.name!r} is missing (the graph's outputs are "
                         f"{', '.join(got_out) or 'none'})")
    return ContractCheck(graph, diffs, _slot_count(file_name, slots, diffs))


def _slot_count(file_name: str, slots: dict[str, int], diffs: list[str]) -> int | None:
    """The one box slot count the "B" axes agree on (a difference appended when they do not)."""
    if not slots:
        return None
    values = set(slots.values())
    if len(values) > 1:
        diffs.append(f"{file_name}: the box slot count differs between inputs: "
                     + ", ".join(f"{k}={v}" for k, v in slots.items()))
    elif min(values) < 1:
        diffs.append(f"{file_name}: the box slot count is {min(values)}, it must be at least 1")
    else:
        return values.pop()
    return None


def raise_for_differences(checks: Sequence[ContractCheck], directory: Path) -> None:
    """One ContractError listing every difference of every graph, if there is any."""
    diffs = [d for c in checks for d in c.differences]
    if diffs:
        raise ContractError(
            f"the model in {directory} does not fit the SAM 3 ONNX contract ({len(diffs)} "
            f"difference{'s' if len(diffs) != 1 else ''}):\n  - " + "\n  - ".join(diffs) +
            f"\nsam3tiles runs the published sam3-onnx files unchanged: check them with `sam3tiles model "
            f"verify {shlex.quote(str(directory))}` and download them again with `{fetch_command(directory)}`")


# --------------------------------------------------------------------------------------------------
# the point decoder (four-graph layout): its interface is read, never assumed


@dataclass(frozen=True)
class PointInterface:
    """How sam3tiles drives a point decoder: the output of M x M mask logits it feeds back as `mask_input` and
    reads (`mask_output`), the predicted IoUs (`iou_output`), candidates per pass (`candidates`)."""

    mask_output: str
    iou_output: str
    mask_size: int
    candidates: int


def _point_input_problems(got: dict[str, TensorSpec], encoder: dict[str, TensorSpec]) -> tuple[list[str], int | None]:
    """Differences of a point decoder's inputs from what sam3tiles feeds, and the mask grid M of `mask_input`."""
    diffs, m = [], None
    for name in LATER_ENCODER_OUTPUTS:
        t = got.get(name)
        if t is None:
            continue
        enc = encoder.get(name)
        if enc is None:
            diffs.append(f"{POINT_DECODER}: input {name!r} is an image-encoder output, but {IMAGE_ENCODER} has no "
                         f"{name!r} (a v0.3.0 encoder: clicks need the nine-output encoder of the four-graph layout)")
        elif normalise_dtype(t.dtype) != normalise_dtype(enc.dtype) or len(t.shape) != len(enc.shape) or any(
                isinstance(a, int) and isinstance(b, int) and a != b for a, b in zip(t.shape, enc.shape)):
            diffs.append(f"{POINT_DECODER}: input {t.describe()} does not take the image encoder's {enc.describe()}")
    for want in POINT_CLICK_INPUTS:
        t = got.get(want.name)
        if t is None:
            continue
        dims = [d for w, d in zip(want.shape, t.shape) if w == "M"]
        ok = (normalise_dtype(t.dtype) == want.dtype and len(t.shape) == len(want.shape)
              and all(not (isinstance(w, int) and isinstance(d, int) and w != d) for w, d in zip(want.shape, t.shape))
              and all(isinstance(d, int) for d in dims) and len(set(dims)) <= 1)
        if not ok:
            diffs.append(f"{POINT_DECODER}: input {t.describe()}, where sam3tiles feeds {want.describe()}"
                         + (" (M a fixed size)" if dims else ""))
        elif dims:
            m = dims[0]
    return diffs, m


def check_point_graph(inputs: Iterable[TensorSpec], outputs: Iterable[TensorSpec],
                      encoder_outputs: Iterable[TensorSpec]) -> tuple[PointInterface | None, list[str]]:
    """A point decoder's interface against what sam3tiles can feed and read: (its `PointInterface`, []) or
    (None, every difference). Inputs: exactly `LATER_ENCODER_OUTPUTS` (shaped as the encoder's outputs of
    those names) and `POINT_CLICK_INPUTS`. Outputs: predicted IoUs float32 [1, K] and K candidate masks
    float32 [1, K, M, M] (the grid of `mask_input`, fed back on the second pass); other outputs are ignored."""
    got = {t.name: t for t in inputs}
    want = set(LATER_ENCODER_OUTPUTS) | {t.name for t in POINT_CLICK_INPUTS}
    diffs = [f"{POINT_DECODER}: input {n!r} is missing" for n in (*LATER_ENCODER_OUTPUTS, *(t.name for t in
                                                                   POINT_CLICK_INPUTS)) if n not in got]
    diffs += [f"{POINT_DECODER}: unexpected input {got[n].describe()}, which sam3tiles cannot feed"
              for n in got if n not in want]
    more, m = _point_input_problems(got, {t.name: t for t in encoder_outputs})
    diffs += more
    outs = [t for t in outputs if normalise_dtype(t.dtype) == "float32"]
    ious = sorted((t for t in outs if len(t.shape) == 2 and t.shape[0] in (1, None)),
                  key=lambda t: "iou" not in t.name.lower())
    k = ious[0].shape[1] if ious and isinstance(ious[0].shape[1], int) else None
    masks = [t for t in outs if len(t.shape) == 4 and m is not None and tuple(t.shape[2:]) == (m, m)
             and (k is None or t.shape[1] in (k, None))]
    masks.sort(key=lambda t: "low" not in t.name.lower())
    if not ious:
        diffs.append(f"{POINT_DECODER}: no output of predicted IoUs float32 [1,K] (the graph's outputs are "
                     f"{', '.join(t.describe() for t in outputs) or 'none'})")
    elif m is not None and not masks:
        diffs.append(f"{POINT_DECODER}: no output of candidate masks float32 [1,K,{m},{m}] to feed back as "
                     f"mask_input (the graph's outputs are {', '.join(t.describe() for t in outputs)})")
    if diffs or m is None:
        return None, diffs
    k = k or (masks[0].shape[1] if isinstance(masks[0].shape[1], int) else 3)
    return PointInterface(masks[0].name, ious[0].name, m, k), []


def point_refusal(differences: Sequence[str], inputs: Iterable[TensorSpec], directory: Path) -> str:
    """A model error's message: the point decoder's interface is not the one sam3tiles can drive; the
    differences and the graph's inputs, printed, never guessed around."""
    listed = ", ".join(t.describe() for t in inputs) or "none"
    return (f"clicks cannot run: {directory / POINT_DECODER} has an interface sam3tiles cannot drive "
            f"({len(differences)} difference{'s' if len(differences) != 1 else ''}):\n  - " + "\n  - ".join(differences)
            + f"\nIts inputs are: {listed}. sam3tiles feeds the encoder's {', '.join(LATER_ENCODER_OUTPUTS)} and "
            + ", ".join(t.describe() for t in POINT_CLICK_INPUTS) + " (inferred from the SAM 2 export of the same "
            f"author: docs/points.md); `sam3tiles model info {shlex.quote(str(directory))}` prints every graph. "
            "Text prompts and example boxes still run with these files")


# --------------------------------------------------------------------------------------------------
# reading a graph's interface from the protobuf (no onnx package, external weights untouched)

_ONNX_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64",
                8: "string", 9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64",
                14: "complex64", 15: "complex128", 16: "bfloat16"}


@dataclass
class GraphIO:
    path: Path
    ir_version: int | None
    opsets: dict[str, int]
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]


def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 70:
            raise ValueError("bad varint")


def _fields(buf: memoryview):
    """(field number, wire type, value) of one protobuf message; length-delimited values as views."""
    pos = 0
    n = len(buf)
    while pos < n:
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            value, pos = bytes(buf[pos:pos + 8]), pos + 8
        elif wire == 2:
            length, pos = _varint(buf, pos)
            if pos + length > n:
                raise ValueError("truncated field")
            value, pos = buf[pos:pos + length], pos + length
        elif wire == 5:
            value, pos = bytes(buf[pos:pos + 4]), pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        if pos > n:
            raise ValueError("truncated message")
        yield number, wire, value


def _value_info(buf: memoryview) -> TensorSpec:
    name, dtype, shape = "", "undefined", []
    for number, _, value in _fields(buf):
        if number == 1:
            name = bytes(value).decode("utf-8")
        elif number == 2:  # TypeProto
            for tn, _, tv in _fields(value):
                if tn != 1:  # only tensor types
                    continue
                for fn, _, fv in _fields(tv):
                    if fn == 1:
                        dtype = _ONNX_DTYPES.get(fv, f"onnx-type-{fv}")
                    elif fn == 2:  # TensorShapeProto
                        for sn, _, sv in _fields(fv):
                            if sn != 1:
                                continue
                            dim: Dim = None
                            for dn, _, dv in _fields(sv):
                                if dn == 1:
                                    dim = dv
                                elif dn == 2:
                                    dim = bytes(dv).decode("utf-8")
                            shape.append(dim)
    return TensorSpec(name, dtype, tuple(shape))


def read_graph_io(path: str | os.PathLike[str]) -> GraphIO:
    """A graph's inputs (initializers excluded), outputs, IR version and opsets, from the .onnx file."""
    path = Path(path)
    try:
        # Graphs with external weights are small (the published ones are a few MB), so read it whole.
        return _parse_model(path, memoryview(path.read_bytes()))
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise ModelError(f"cannot read {path}: {exc}. The file is missing, truncated or not an ONNX "
                         f"graph: check it with `sam3tiles model verify` and download it again with "
                         f"`{fetch_command(path.parent)}`") from exc


def _parse_model(path: Path, buf: memoryview) -> GraphIO:
    ir_version = None
    opsets: dict[str, int] = {}
    inputs: list[TensorSpec] = []
    outputs: list[TensorSpec] = []
    initializers: set[str] = set()
    seen_graph = False
    for number, wire, value in _fields(buf):
        if number == 1 and wire == 0:
            ir_version = value
        elif number == 8 and wire == 2:
            domain, version = "", 0
            for on, _, ov in _fields(value):
                if on == 1:
                    domain = bytes(ov).decode("utf-8")
                elif on == 2:
                    version = ov
            opsets[domain or "ai.onnx"] = version
        elif number == 7 and wire == 2:
            seen_graph = True
            for gn, gw, gv in _fields(value):
                if gn == 11 and gw == 2:
                    inputs.append(_value_info(gv))
                elif gn == 12 and gw == 2:
                    outputs.append(_value_info(gv))
                elif gn == 5 and gw == 2:  # TensorProto: name is field 8
                    for tn, _, tv in _fields(gv):
                        if tn == 8:
                            initializers.add(bytes(tv).decode("utf-8"))
    if not seen_graph:
        raise ValueError("no graph in the file")
    inputs = [t for t in inputs if t.name not in initializers]
    return GraphIO(path, ir_version, opsets, inputs, outputs)
