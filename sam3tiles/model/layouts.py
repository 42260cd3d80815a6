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
* ``batched fp16`` (greenjava/sam3-onnx, C++): a float16 [1,3,644,644] normalised image (the tile side is the
  model's: 644, mask grid 184, the same 3.5 px cell), a text encoder [nc,32] and a decoder that answers `nc`
  text prompts in one call (`text_features` [32,nc,256], `text_mask` [nc,32], `text_ids` [nc]) with raw outputs
  [nc,200,...] and `presence_logits` [nc,1]; no box inputs (text only). Names the public facts do not give are
  inferred (image input `image`, the encoders' outputs as the seed's, `tokens`, boxes xyxy): see
  docs/model-exports.md.

A model whose side S is under 1008 runs in sam3tiles' 1008 frame: tiles are at most S px, the model gets the
top-left S x S of the tile's input, and its S x 288/1008 mask grid is the top-left of the 288 grid (one cell is
3.5 px in every known layout), so reading, vectorizing and merging are unchanged. `Fit.image_side` is the side.

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
from .files import (DECODER, IMAGE_ENCODER, LANGUAGE_ENCODER, POINT_DECODER, fetch_command, graph_path,
                    resolve_model_dir)
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
    #: a raw decoder's box format: "cxcywh" (samexporter) or "xyxy", in [0,1] of the model input
    box_format: str = "cxcywh"
    #: the language encoder's (mask, features) outputs the decoder reads
    prompt_outputs: tuple[str, str] = ("text_attention_mask", "text_memory")


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


def _batched_graphs() -> dict[str, GraphSpec]:
    """The batched layout's graphs, in float16 (the export) or float32: sides symbolic ("S" image, "M" masks)
    and read from the graph (`Fit.image_side`)."""
    def both(make) -> tuple[Variant, ...]:
        return tuple(Variant(p, make(p)) for p in ("float16", _F))

    def vision(p: str) -> tuple[TensorSpec, ...]:
        return (*(_s(f"backbone_fpn_{i}", p, 1, 256, f"M{i}", f"M{i}") for i in range(3)),
                _s("vision_pos_enc_2", p, 1, 256, "M2", "M2"))

    return {
        "image_encoder": GraphSpec(IMAGE_ENCODER, both(lambda p: (_s("image", p, 1, 3, "S", "S"),)), both(vision)),
        "language_encoder": GraphSpec(LANGUAGE_ENCODER, (Variant("", (_s("tokens", "int64", "nc", 32),)),),
                                      both(lambda p: (_s("text_features", p, 32, "nc", 256),
                                                      _s("text_mask", "bool", "nc", 32)))),
        "decoder": GraphSpec(DECODER, both(lambda p: (*vision(p), _s("text_features", p, 32, "nc", 256),
                                                      _s("text_mask", "bool", "nc", 32),
                                                      _s("text_ids", "int64", "nc"))),
                             both(lambda p: (_s("pred_boxes", p, "nc", "Q", 4), _s("pred_logits", p, "nc", "Q", 1),
                                             _s("pred_masks", p, "nc", "Q", "M", "M"),
                                             _s("presence_logits", p, "nc", 1)))),
    }


BATCHED = Layout("batched-fp16", "batched fp16 (greenjava/sam3-onnx)", _batched_graphs(),
                 "FP16 C++ exports: 644 px image, every text prompt in one decoder call, raw outputs",
                 box_format="xyxy", prompt_outputs=("text_mask", "text_features"))
#: Every layout sam3tiles knows, the seed first (the nearest on a tie).
LAYOUTS: tuple[Layout, ...] = (SEED, SAMEXPORTER, BATCHED)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return (1.0 / (1.0 + np.exp(-np.clip(x.astype(np.float32), -60, 60)))).astype(np.float32)


@dataclass
class Fit:
    """How one folder's graphs fit one layout: every difference, and what sam3tiles feeds and reads."""

    layout: Layout
    checks: list[ContractCheck]
    variants: dict[str, tuple[str, str]]  # graph -> (input variant, output variant)
    inputs: dict[str, tuple[str, ...]]  # graph -> the input names the graph has
    #: graph -> name -> the graph's own TensorSpec of each input and output (sides, dtypes)
    specs: dict[str, dict[str, TensorSpec]] = field(default_factory=dict)

    @property
    def differences(self) -> list[str]:
        return [d for c in self.checks for d in c.differences]

    @property
    def box_slots(self) -> int | None:
        return next((c.box_slots for c in self.checks if c.graph == "decoder"), None)

    @property
    def raw_scores(self) -> bool:
        return "pred_logits" in self.decoder_outputs

    @property
    def image_input(self) -> str:
        return self.variants.get("image_encoder", ("uint8", ""))[0]

    @property
    def image_side(self) -> int:
        """The model's input side, the run's largest tile: the image input's last axis (1008 when symbolic)."""
        image = self.specs.get("image_encoder", {}).get("image")
        side = image.shape[-1] if image is not None and image.shape else None
        return side if isinstance(side, int) else MODEL_SIZE

    @property
    def mask_side(self) -> int:
        """The decoder's mask grid side: 3.5 px a cell, as the seed's 288 over 1008."""
        return self.image_side * MASK_SIZE // MODEL_SIZE

    @property
    def precision(self) -> str:
        image = self.specs.get("image_encoder", {}).get("image")
        return "float16" if image is not None and image.dtype == "float16" else "float32"

    @property
    def batched(self) -> bool:
        """One decoder call answers every text prompt of a tile (`text_ids`)."""
        return "text_ids" in self.inputs.get("decoder", ())

    @property
    def takes_boxes(self) -> bool:
        return "box_coords" in self.inputs.get("decoder", ("box_coords",))

    @property
    def embedding_outputs(self) -> tuple[str, ...]:
        """The encoder outputs the decoder reads (the only ones `encode` asks for), in the encoder's order."""
        fed = set(self.inputs.get("decoder", ()))
        names = [t.name for v in self.layout.graphs["image_encoder"].outputs[:1] for t in v.specs]
        return tuple(n for n in names if n in fed)

    @property
    def wants_text_embeds(self) -> bool:
        return "language_embeds" in self.inputs.get("decoder", ())

    def describe(self) -> str:
        """One line: layout, tile side, box slots, scores, image input, precision."""
        slots = self.box_slots
        boxes = f"{slots} box slot{'s' if slots != 1 else ''}" if slots is not None else "no box slots (text only)"
        scores = ("raw (sam3tiles applies the score threshold)" if self.raw_scores
                  else f"filtered at {SCORE_THRESHOLD} inside the graph")
        batched = ", every text prompt of a tile in one decoder call" if self.batched else ""
        return (f"{self.layout.title}: tile side {self.image_side} (mask grid {self.mask_side}), {boxes}, "
                f"scores {scores}, image {self.image_input}, precision {self.precision}{batched}")

    def image_feed(self, rgb: np.ndarray) -> dict[str, np.ndarray]:
        """The image encoder's feed for a uint8 [3,1008,1008] tile input: its top-left `image_side` square."""
        s = self.image_side
        rgb = rgb[:, :s, :s]
        if self.image_input == "uint8":
            return {"image": np.ascontiguousarray(rgb)}
        # the float variants take the normalisation the uint8 graphs do inside: (x/255 - 0.5)/0.5
        x = rgb.astype(np.float32) * np.float32(2.0 / 255.0) - np.float32(1.0)
        return {"image": np.ascontiguousarray(x[None].astype(self.precision))}

    def decoder_feeds(self, candidates: dict) -> dict:
        """Of every value sam3tiles can give the decoder, those its graph has (a simplified one lacks some), numpy
        floats in the graph's own float dtype (float16 graphs get float16)."""
        specs = self.specs.get("decoder", {})
        out = {}
        for k, v in candidates.items():
            if k not in specs:
                continue
            want = specs[k].dtype
            if isinstance(v, np.ndarray) and v.dtype.kind == "f" and want in ("float16", "float32") and v.dtype != want:
                v = v.astype(want)
            out[k] = v
        return out

    @property
    def decoder_outputs(self) -> tuple[str, ...]:
        label = self.variants.get("decoder", ("", FILTERED))[1]
        spec = self.layout.graphs["decoder"]
        variant = next((v for v in spec.outputs if v.label == label), spec.outputs[0])
        return tuple(t.name for t in variant.specs)

    def detections(self, outputs: Sequence[np.ndarray], threshold: float) -> tuple[Detections, int]:
        """(`Detections` over `threshold`, how many queries fell under it) from the decoder's outputs for one
        prompt (`detections_rows` for a batched decoder's every prompt)."""
        return self.detections_rows(outputs, threshold)[0]

    def detections_rows(self, outputs: Sequence[np.ndarray], threshold: float) -> list[tuple[Detections, int]]:
        """Per prompt row: (`Detections` over `threshold` in the 1008 frame, how many queries fell under it).

        Filtered outputs come as they are (the graph dropped what scored under 0.5; a threshold above it drops
        more). Raw: score = sigmoid(logit) x sigmoid(presence), masks as probabilities sigmoid(logit) (so
        > 0.5 is logit > 0, the published mask rule), boxes turned xyxy; a model side under 1008 has its boxes
        scaled and its mask grid placed top-left in the 288 grid (`_to_frame`)."""
        if not self.raw_scores:
            boxes, scores, masks = outputs
            keep = np.flatnonzero(np.asarray(scores) > threshold) if threshold > SCORE_THRESHOLD else None
            if keep is None:
                return [(Detections(boxes=boxes, scores=scores, masks=masks), 0)]
            return [(Detections(boxes[keep], scores[keep], masks[keep]), len(scores) - len(keep))]
        boxes, logits, masks, presence = (np.asarray(o) for o in outputs)
        m = self.mask_side
        rows = presence.reshape(-1).shape[0]
        out = []
        for r in range(rows):
            scores = _sigmoid(logits[r].reshape(-1)) * _sigmoid(presence.reshape(-1)[r:r + 1])
            keep = np.flatnonzero(scores > threshold)
            b = boxes[r].reshape(-1, 4)[keep].astype(np.float32)
            if self.layout.box_format == "cxcywh":
                b = np.concatenate([b[:, :2] - b[:, 2:] / 2, b[:, :2] + b[:, 2:] / 2], axis=1)
            probs = _sigmoid(masks[r].reshape(-1, m, m)[keep])[:, None]
            out.append((self._to_frame(b.astype(np.float32), scores[keep].astype(np.float32), probs),
                        int(len(scores) - len(keep))))
        return out

    def _to_frame(self, xyxy: np.ndarray, scores: np.ndarray, probs: np.ndarray) -> Detections:
        """Detections of a side-S model in the 1008 frame: boxes x S/1008, the S x 2/7 grid the top-left of 288."""
        s, m = self.image_side, self.mask_side
        if s == MODEL_SIZE:
            return Detections(xyxy, scores, probs)
        full = np.zeros((len(probs), 1, MASK_SIZE, MASK_SIZE), np.float32)
        full[:, :, :m, :m] = probs
        return Detections((xyxy * np.float32(s / MODEL_SIZE)).astype(np.float32), scores, full)


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


def _image_size(spec: GraphSpec, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]) -> list[str]:
    """A model side sam3tiles cannot run: not square, over 1008, or with a mask grid whose cell is not 3.5 px."""
    image = next((t for t in inputs if t.name == "image"), None)
    if image is None or len(image.shape) < 3:
        return []
    h, w = image.shape[-2:]
    if not all(isinstance(d, int) for d in (h, w)):
        return []
    where = f"{spec.file}: input 'image' takes {h}x{w}"
    if h != w or h > MODEL_SIZE or h * MASK_SIZE % MODEL_SIZE:
        return [f"{where}; sam3tiles runs square inputs of at most {MODEL_SIZE} px whose mask grid has 3.5 px cells "
                f"(1008/288, 924/264, 644/184)"]
    return []


def _mask_side(file_name: str, side: int, outputs: Sequence[TensorSpec]) -> list[str]:
    masks = next((t for t in outputs if t.name in ("pred_masks", "masks", "backbone_fpn_0")), None)
    got = masks.shape[-1] if masks is not None and masks.shape else None
    want = side * MASK_SIZE // MODEL_SIZE
    if isinstance(got, int) and got != want:
        return [f"{file_name}: output {masks.name!r} has a {got} mask grid; a {side} px input needs {want} "
                f"(3.5 px a cell)"]
    return []


def fit(layout: Layout, ios: Mapping[str, tuple[Sequence[TensorSpec], Sequence[TensorSpec]]]) -> Fit:
    """How the graphs `ios` (graph key -> (inputs, outputs)) fit `layout`."""
    checks, variants = [], {}
    for graph, spec in layout.graphs.items():
        if graph not in ios:
            continue
        check, labels = _best(spec.file, graph, spec, ios[graph])
        if graph == "image_encoder":
            check.differences.extend(_image_size(spec, *ios[graph]))
        checks.append(check)
        variants[graph] = labels
    inputs = {g: tuple(t.name for t in io[0]) for g, io in ios.items()}
    specs = {g: {t.name: t for t in (*io[0], *io[1])} for g, io in ios.items()}
    result = Fit(layout, checks, variants, inputs, specs)
    for check in checks:  # the encoder's finest map and the decoder's masks: 3.5 px cells of the input side
        check.differences.extend(_mask_side(layout.graphs[check.graph].file, result.image_side, ios[check.graph][1]))
    return result


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
            st = graph_path(d, spec.file).stat()
            stamp.append((st.st_size, st.st_mtime_ns))
        except OSError:
            return None
    return _folder_fit(str(d), tuple(stamp))


@functools.lru_cache(maxsize=32)
def _folder_fit(directory: str, _stamp: tuple) -> Fit | None:
    d = Path(directory)
    try:
        ios = {k: _io(read_graph_io(graph_path(d, spec.file))) for k, spec in SEED.graphs.items()}
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
        if self.fit is not None and self.fit.layout is not SEED and "decoder" in self.fit.inputs:
            slots = (f"{self.box_slots} box slot{'s' if self.box_slots != 1 else ''}" if self.box_slots is not None
                     else "text only")
            kind = f"{self.fit.layout.title} layout: tile side {self.fit.image_side}, {slots}"
        elif self.box_slots is None:
            return "unknown (no readable decoder)"
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
        path = graph_path(d, spec.file)
        if not path.is_file():
            missing.append(spec.file)
            continue
        graphs[path.name] = read_graph_io(path)
        ios[key] = _io(graphs[path.name])
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
