"""The SAM 3 ONNX layouts sam3tiles runs, one entry of `LAYOUTS` each, and which one a model folder holds.

A layout is recognised from its graphs' input and output names, dtypes and shapes (`recognise`), never from
file names alone: the seed's files and samexporter's have the same names. Each entry says what its graphs
take and give (`GraphSpec`, with variants where one export comes in several forms) and how sam3tiles drives
it (`Fit`: the image feed, the decoder's feeds, the decoder's outputs turned into `Detections`). Adding a
layout is one entry here and, if its outputs are new, its adapter in `Fit.detections`.

* ``sam3-onnx v0.3.0`` (the seed, ../shared/sam3-contract.md): uint8 [3,1008,1008] image; a decoder that
  returns boxes, scores and masks already filtered at score 0.5 inside the graph.
* ``samexporter 0.5.0`` (AnyLabeling's exporter): the same encoders, or an image encoder taking float32
  [1,3,H,W] normalised (x/255-0.5)/0.5 (told by the input's dtype); a 14-input decoder (a simplified graph
  may lack some: only those the graph has are fed) returning raw outputs over all 200 queries: score =
  sigmoid(logit) x sigmoid(presence), mask = logit > 0. Its older exports return filtered boxes, scores and
  masks as the seed does.

`info` describes a folder (``sam3tiles model info`` / ``verify``).
"""

from __future__ import annotations

import functools
import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import ContractError
from .contract import CONTRACT, ContractCheck, GraphIO, TensorSpec, check_io, check_point_graph, read_graph_io
from .files import DECODER, IMAGE_ENCODER, POINT_DECODER, fetch_command, resolve_model_dir
from .runtime import MASK_SIZE, MODEL_SIZE, SCORE_THRESHOLD, Detections

#: The side of the box a click is sent as (normalised to the model input), as samexporter's caller sends it.
CLICK_BOX = 0.01
#: The graphs of a layout, in load order.
GRAPHS = ("image_encoder", "language_encoder", "decoder")
#: A decoder's output kinds: filtered in the graph at `SCORE_THRESHOLD`, or raw over every query.
FILTERED, RAW = "filtered", "raw"


def _s(name: str, dtype: str, *shape) -> TensorSpec:
    return TensorSpec(name, dtype, tuple(shape))


@dataclass(frozen=True)
class Variant:
    """One form of a graph's inputs or outputs: `label` names it ("uint8", "raw", ...)."""

    label: str
    specs: tuple[TensorSpec, ...]


@dataclass(frozen=True)
class GraphSpec:
    file: str
    inputs: tuple[Variant, ...]
    outputs: tuple[Variant, ...]
    #: inputs a simplified export may lack (then never fed)
    optional: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Layout:
    key: str  # short, in identities and rows: "samexporter-0.5.0"
    title: str  # in messages: "samexporter 0.5.0"
    graphs: Mapping[str, GraphSpec]
    source: str  # where the export comes from, for the refusal's list of known layouts
    #: clicks without a point decoder: each sent as a `CLICK_BOX`-wide example box with its label (samexporter)
    clicks_as_boxes: bool = False


def _seed_graph(key: str, label: str = "uint8") -> GraphSpec:
    file_name, ins, outs = CONTRACT[key]
    return GraphSpec(file_name, (Variant(label, ins),), (Variant(FILTERED if key == "decoder" else "", outs),))


_F = "float32"
_ENCODER_OUTS = CONTRACT["image_encoder"][2]
_SEED_DECODER_OUTS = CONTRACT["decoder"][2]
#: samexporter's raw decoder outputs over all queries ("Q": 200 in its exports)
_RAW_OUTS = (_s("pred_boxes", _F, 1, "Q", 4), _s("pred_logits", _F, 1, "Q", 1),
             _s("pred_masks", _F, 1, "Q", MASK_SIZE, MASK_SIZE), _s("presence_logit_dec", _F, 1, 1))
_SAMEXPORTER_DECODER_INS = (
    _s("original_height", "int64"), _s("original_width", "int64"),
    *_ENCODER_OUTS,
    _s("language_mask", "bool", 1, 32), _s("language_features", _F, 32, 1, 256),
    _s("language_embeds", _F, 32, 1, 1024),
    _s("box_coords", _F, "B", 1, 4), _s("box_labels", "int64", "B", 1), _s("box_masks", "bool", 1, "B"),
)

SEED = Layout("sam3-onnx-v0.3.0", "sam3-onnx v0.3.0", {k: _seed_graph(k) for k in GRAPHS},
              "the files `sam3tiles model fetch` gets (wkentaro/sam3-onnx)")
SAMEXPORTER = Layout("samexporter-0.5.0", "samexporter 0.5.0", {
    "image_encoder": GraphSpec(IMAGE_ENCODER, (
        Variant("uint8", CONTRACT["image_encoder"][1]),
        Variant("float32 normalised", (_s("image", _F, 1, 3, "H", "W"),))), (Variant("", _ENCODER_OUTS),)),
    "language_encoder": _seed_graph("language_encoder"),
    "decoder": GraphSpec(DECODER, (Variant("", _SAMEXPORTER_DECODER_INS),),
                         (Variant(RAW, _RAW_OUTS), Variant(FILTERED, _SEED_DECODER_OUTS)),
                         frozenset(t.name for t in _SAMEXPORTER_DECODER_INS if not t.name.startswith("box_"))
                         - {"language_features"}),
}, "AnyLabeling's exporter (samexporter), 14-input decoder with raw or filtered outputs", clicks_as_boxes=True)
#: Every layout sam3tiles knows, the seed first (the nearest on a tie).
LAYOUTS: tuple[Layout, ...] = (SEED, SAMEXPORTER)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return (1.0 / (1.0 + np.exp(-np.clip(x.astype(np.float32), -60, 60)))).astype(np.float32)


@dataclass
class Fit:
    """How one folder's graphs fit one layout: every difference, and what sam3tiles feeds and reads."""

    layout: Layout
    checks: list[ContractCheck]
    variants: dict[str, tuple[str, str]]  # graph -> (input variant, output variant)
    inputs: dict[str, tuple[str, ...]]  # graph -> the input names the graph has
    image_size: tuple = (MODEL_SIZE, MODEL_SIZE)

    @property
    def differences(self) -> list[str]:
        return [d for c in self.checks for d in c.differences]

    @property
    def box_slots(self) -> int | None:
        return next((c.box_slots for c in self.checks if c.graph == "decoder"), None)

    @property
    def raw_scores(self) -> bool:
        return self.variants.get("decoder", ("", ""))[1] == RAW

    @property
    def image_input(self) -> str:
        return self.variants.get("image_encoder", ("uint8", ""))[0]

    @property
    def precision(self) -> str:
        return "float32"  # every known layout: a float16 one (644 px batched) is not in the table yet

    @property
    def embedding_outputs(self) -> tuple[str, ...]:
        """The encoder outputs the decoder reads (the only ones `encode` asks for), in the encoder's order."""
        fed = set(self.inputs.get("decoder", ()))
        return tuple(t.name for t in _ENCODER_OUTS if t.name in fed)

    @property
    def wants_text_embeds(self) -> bool:
        return "language_embeds" in self.inputs.get("decoder", ())

    def describe(self) -> str:
        """One line: layout, box slots, scores, image input, precision."""
        slots = self.box_slots
        scores = ("raw (sam3tiles applies the score threshold)" if self.raw_scores
                  else f"filtered at {SCORE_THRESHOLD} inside the graph")
        return (f"{self.layout.title}: {slots} box slot{'s' if slots != 1 else ''}, scores {scores}, "
                f"image {self.image_input}, precision {self.precision}")

    def image_feed(self, rgb: np.ndarray) -> dict[str, np.ndarray]:
        """The image encoder's feed for a uint8 [3,1008,1008] tile."""
        if self.image_input == "uint8":
            return {"image": rgb}
        # the float variant takes the normalisation the uint8 graphs do inside: (x/255 - 0.5)/0.5
        x = rgb.astype(np.float32) * np.float32(2.0 / 255.0) - np.float32(1.0)
        return {"image": np.ascontiguousarray(x[None])}

    def decoder_feeds(self, candidates: dict) -> dict:
        """Of every value sam3tiles can give the decoder, those its graph has (a simplified one lacks some)."""
        have = set(self.inputs.get("decoder", ()))
        return {k: v for k, v in candidates.items() if k in have}

    @property
    def decoder_outputs(self) -> tuple[str, ...]:
        return tuple(t.name for t in (_RAW_OUTS if self.raw_scores else _SEED_DECODER_OUTS))

    def detections(self, outputs: Sequence[np.ndarray], threshold: float) -> tuple[Detections, int]:
        """(`Detections` over `threshold`, how many queries fell under it) from the decoder's outputs.

        Filtered outputs come as they are (the graph dropped what scored under 0.5; a threshold above it drops
        more). Raw: score = sigmoid(logit) x sigmoid(presence), masks as probabilities sigmoid(logit) (so
        > 0.5 is logit > 0, the published mask rule), boxes cxcywh turned xyxy."""
        if not self.raw_scores:
            boxes, scores, masks = outputs
            keep = np.flatnonzero(np.asarray(scores) > threshold) if threshold > SCORE_THRESHOLD else None
            if keep is None:
                return Detections(boxes=boxes, scores=scores, masks=masks), 0
            return Detections(boxes[keep], scores[keep], masks[keep]), len(scores) - len(keep)
        boxes, logits, masks, presence = outputs
        scores = _sigmoid(np.asarray(logits).reshape(-1)) * _sigmoid(np.asarray(presence).reshape(-1)[:1])
        keep = np.flatnonzero(scores > threshold)
        b = np.asarray(boxes).reshape(-1, 4)[keep]
        xyxy = np.concatenate([b[:, :2] - b[:, 2:] / 2, b[:, :2] + b[:, 2:] / 2], axis=1).astype(np.float32)
        m = _sigmoid(np.asarray(masks).reshape(-1, MASK_SIZE, MASK_SIZE)[keep])[:, None]
        return Detections(xyxy, scores[keep].astype(np.float32), m), int(len(scores) - len(keep))


def _best(file_name: str, graph: str, spec: GraphSpec, io: tuple[Sequence[TensorSpec], Sequence[TensorSpec]]
          ) -> tuple[ContractCheck, tuple[str, str]]:
    """The check of one graph against the variant pair of `spec` with the fewest differences."""
    best = None
    for vin in spec.inputs:
        for vout in spec.outputs:
            check = check_io(graph, file_name, vin.specs, vout.specs, io[0], io[1], spec.optional)
            if best is None or len(check.differences) < len(best[0].differences):
                best = (check, (vin.label, vout.label))
    assert best is not None
    return best


def _image_size(inputs: Sequence[TensorSpec]) -> list[str]:
    """A float image input of a fixed side other than 1008: the tile side from the model is not built yet."""
    image = next((t for t in inputs if t.name == "image"), None)
    if image is None or len(image.shape) != 4:
        return []
    h, w = image.shape[2:]
    if all(isinstance(d, int) for d in (h, w)) and (h, w) != (MODEL_SIZE, MODEL_SIZE):
        return [(f"{IMAGE_ENCODER}: input 'image' takes {h}x{w}; sam3tiles feeds {MODEL_SIZE}x{MODEL_SIZE} tiles "
                 "(a tile side read from the model is not supported yet)")]
    return []


def fit(layout: Layout, ios: Mapping[str, tuple[Sequence[TensorSpec], Sequence[TensorSpec]]]) -> Fit:
    """How the graphs `ios` (graph key -> (inputs, outputs)) fit `layout`."""
    checks, variants = [], {}
    for graph, spec in layout.graphs.items():
        if graph not in ios:
            continue
        check, labels = _best(spec.file, graph, spec, ios[graph])
        if graph == "image_encoder" and labels[0] != "uint8":
            check.differences.extend(_image_size(ios[graph][0]))
        checks.append(check)
        variants[graph] = labels
    inputs = {g: tuple(t.name for t in io[0]) for g, io in ios.items()}
    return Fit(layout, checks, variants, inputs)


def fits(ios: Mapping[str, tuple[Sequence[TensorSpec], Sequence[TensorSpec]]]) -> list[Fit]:
    """Every layout's fit, the nearest first (fewest differences; the table's order on a tie)."""
    return sorted((fit(layout, ios) for layout in LAYOUTS), key=lambda f: len(f.differences))


def known_layouts() -> str:
    return "; ".join(f"{lay.title} ({lay.source})" for lay in LAYOUTS)


def recognise(ios: Mapping[str, tuple[Sequence[TensorSpec], Sequence[TensorSpec]]], directory: Path) -> Fit:
    """The layout the graphs fit, or a ContractError listing the nearest layout's differences, what the decoder
    has, and the layouts sam3tiles knows."""
    best = fits(ios)[0]
    diffs = best.differences
    if not diffs:
        return best
    decoder = ios.get("decoder")
    found = ""
    if decoder is not None:
        found = (f"\nThe decoder has inputs {', '.join(t.describe() for t in decoder[0]) or 'none'}; outputs "
                 f"{', '.join(t.describe() for t in decoder[1]) or 'none'}.")
    raise ContractError(
        f"the model in {directory} fits no SAM 3 ONNX layout sam3tiles knows; nearest: {best.layout.title} "
        f"({len(diffs)} difference{'s' if len(diffs) != 1 else ''}):\n  - " + "\n  - ".join(diffs) + found +
        f"\nKnown layouts: {known_layouts()}. Check the files with `sam3tiles model verify "
        f"{shlex.quote(str(directory))}`, or download the published ones with `{fetch_command(directory)}`")


def folder_fit(directory: str | os.PathLike[str] | None) -> Fit | None:
    """The layout of a folder's graphs read from the files (no session), or None when they cannot be read or
    fit no layout: for identities and reports, remembered per folder until a graph file changes (a decoder
    with its weights inline is read whole)."""
    d = resolve_model_dir(directory)
    stamp = []
    for spec in SEED.graphs.values():
        try:
            st = (d / spec.file).stat()
            stamp.append((st.st_size, st.st_mtime_ns))
        except OSError:
            return None
    return _folder_fit(str(d), tuple(stamp))


@functools.lru_cache(maxsize=32)
def _folder_fit(directory: str, _stamp: tuple) -> Fit | None:
    d = Path(directory)
    try:
        ios = {k: _io(read_graph_io(d / spec.file)) for k, spec in SEED.graphs.items()}
    except Exception:  # noqa: BLE001 - a folder that cannot be read is told at load, not here
        return None
    best = fits(ios)[0]
    return None if best.differences else best


def _io(io: GraphIO) -> tuple[list[TensorSpec], list[TensorSpec]]:
    return io.inputs, io.outputs


# --------------------------------------------------------------------------------------------------
# info


@dataclass
class ModelInfo:
    directory: Path
    graphs: dict[str, GraphIO]
    checks: list[ContractCheck]
    box_slots: int | None
    point_decoder: bool
    missing: list[str]
    #: the point decoder's differences from what sam3tiles can drive (`check_point_graph`); [] when usable
    point_differences: list[str] = field(default_factory=list)
    #: the nearest layout (recognised when it has no difference)
    fit: Fit | None = None

    @property
    def layout(self) -> str:
        if self.box_slots is None:
            return "unknown (no readable decoder)"
        if self.fit is not None and self.fit.layout is not SEED:
            kind = f"{self.fit.layout.title} layout: {self.box_slots} box slot{'s' if self.box_slots != 1 else ''}"
        elif self.box_slots == 1:
            kind = "v0.3.0 layout: 1 box slot"
        elif self.box_slots == 16:
            kind = "16-slot layout (as in sam3-onnx v0.6.0)"
        else:
            kind = f"{self.box_slots} box slots"
        if not self.point_decoder:
            return kind
        return kind + (", point decoder: clicks refused (its interface differs, below)" if self.point_differences
                       else ", point decoder: clicks usable")

    @property
    def differences(self) -> list[str]:
        return [d for c in self.checks for d in c.differences]

    def format(self) -> str:
        lines = [f"model directory: {self.directory}", f"layout: {self.layout}"]
        if self.fit is not None and not self.differences:
            lines.append(f"runs as: {self.fit.describe()}")
        for name, io in self.graphs.items():
            opsets = ", ".join(f"{k} {v}" for k, v in io.opsets.items())
            lines.append(f"{name}  (IR {io.ir_version}, opset {opsets})")
            lines.extend(f"  input  {t.describe()}" for t in io.inputs)
            lines.extend(f"  output {t.describe()}" for t in io.outputs)
        lines.extend(f"{name}: missing" for name in self.missing)
        if self.differences:
            lines.append(f"contract differences (nearest layout: {self.fit.layout.title if self.fit else '-'}; "
                         f"known: {', '.join(lay.title for lay in LAYOUTS)}):")
            lines.extend(f"  - {d}" for d in self.differences)
        elif not self.missing:
            lines.append("contract: every graph fits")
        if self.point_differences:
            lines.append("point decoder: clicks refused, sam3tiles cannot drive its interface (inferred from the "
                         "SAM 2 export: docs/points.md):")
            lines.extend(f"  - {d}" for d in self.point_differences)
        return "\n".join(lines)


def info(directory: str | os.PathLike[str] | None = None) -> ModelInfo:
    """Each graph's inputs and outputs (dtype, shape), the layout it fits (or the nearest's differences)."""
    d = resolve_model_dir(directory)
    graphs: dict[str, GraphIO] = {}
    ios = {}
    missing: list[str] = []
    for key, spec in SEED.graphs.items():
        path = d / spec.file
        if not path.is_file():
            missing.append(spec.file)
            continue
        graphs[spec.file] = read_graph_io(path)
        ios[key] = _io(graphs[spec.file])
    best = fits(ios)[0] if ios else None
    point = d / POINT_DECODER
    point_diffs: list[str] = []
    if point.is_file():
        io = graphs[POINT_DECODER] = read_graph_io(point)
        encoder = graphs.get(IMAGE_ENCODER)
        _, point_diffs = check_point_graph(io.inputs, io.outputs, encoder.outputs if encoder else [])
    return ModelInfo(d, graphs, best.checks if best else [], best.box_slots if best else None, point.is_file(),
                     missing, point_diffs, best)


def layout_tag(directory: str | os.PathLike[str] | None, threshold: float) -> str:
    """What the model's identity adds for a layout other than the seed's, and for a score threshold other than
    the published 0.5 (results differ, so checkpoints must too): "" for the seed at 0.5."""
    f = folder_fit(directory)
    tag = "" if f is None or f.layout is SEED else f":{f.layout.key}"
    return tag + (f":t{threshold:g}" if threshold != SCORE_THRESHOLD else "")
