"""Small SAM 3 ONNX graphs that keep the published contract and really segment, by colour.

`build_contract_models(directory)` writes the three files a sam3tiles model directory holds, with the
exact names, opset 21, the exact input/output names, dtypes, shapes and output order of
../shared/sam3-contract.md (beside the repository), external weights in ``*.onnx.data`` for the two
encoders and none for the decoder. They run in milliseconds on a CPU.

What they compute (normalised colour = (x/255 - 0.5)/0.5, as the real encoder does):

* image encoder: the 1008 RGB image resized (linear) to 288/144/72, put in channels 0-2 of
  ``backbone_fpn_0/1/2`` (the other 253 channels zero, everything times a per-channel scale of ones
  stored in the .data file); ``vision_pos_enc_*`` are constants from the .data file.
* language encoder: ``text_attention_mask`` = token == 0; ``text_memory[t, 0, 0:4]`` = (r, g, b, 1)
  for the colour words of `COLOURS` (a 49408x4 table in the .data file), zero otherwise.
* decoder "colour": the prompt colour is the mean colour of the colour words in the text; a text with
  no colour word ("visual") takes the mean image colour inside the active positive example boxes. The
  288 map is cut into `grid` x `grid` query cells; a query's mask is the pixels of its cell whose
  colour lies within `COLOUR_TOLERANCE` of the prompt colour, its score is count / (count +
  `MIN_PIXELS`) (so > 0.5 with more than `MIN_PIXELS` matching mask pixels), its box the mask's extent
  (x0, y0, x1, y1) / 288. Only queries with score > 0.5 come out (NonZero): N = 0 happens.
* decoder "box-echo": one detection per active box slot, in slot order: box = the given box as
  normalised xyxy, mask = the 288 cells whose centre lies inside it, score 0.9 (positive) or 0.7
  (negative). Proves boxes reach the decoder in the normalised cxcywh frame of the 1008 input.

`box_slots=16` gives the later 16-slot decoder interface (``box_coords [16,1,4]`` ...);
`build_four_graph_models` the whole four-graph layout of the v0.6.0 write-up: a nine-output image encoder
(its Gemm weights stored {K, N} with transB=0, as v0.6.0 stores them), the 16-slot decoder and a point
decoder that segments the colour under the clicks (`point_decoder`: the interface is inferred, see
docs/points.md).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 21
IR_VERSION = 10
MODEL = 1008
MASK = 288
#: Colour words (single CLIP tokens) the test language encoder knows, and their RGB.
COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (255, 0, 0),
    "green": (0, 255, 0),
    "blue": (0, 0, 255),
    "yellow": (255, 255, 0),
    "white": (255, 255, 255),
    "magenta": (255, 0, 255),
}
#: Their CLIP ids (checked against sam3tiles.model.tokenizer in the tests).
COLOUR_IDS = {"red": 736, "green": 1901, "blue": 1746, "yellow": 4481, "white": 1579, "magenta": 38091}
#: Squared distance in normalised colour space under which a pixel matches (0.5 -> ~64 grey levels).
COLOUR_TOLERANCE = 0.25
#: Matching mask pixels a query needs for a score of 0.5 (and must exceed to come out).
MIN_PIXELS = 16.0
DEFAULT_GRID = 4

F32 = TensorProto.FLOAT
I64 = TensorProto.INT64


def _norm(rgb: tuple[int, int, int]) -> np.ndarray:
    return (np.asarray(rgb, np.float32) / 255.0 - 0.5) / 0.5


class _G:
    """A tiny graph builder: nodes, initializers and unique names."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._n = 0

    def const(self, value, dtype=None, name: str | None = None) -> str:
        arr = np.asarray(value, dtype=dtype)
        self._n += 1
        name = name or f"c{self._n}"
        self.inits.append(numpy_helper.from_array(arr, name))
        return name

    def op(self, op_type: str, *inputs: str, out: str | None = None, **attrs) -> str:
        self._n += 1
        out = out or f"t{self._n}_{op_type.lower()}"
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], **attrs))
        return out

    def model(self, name: str, inputs, outputs) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, initializer=self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name="sam3tiles-tests")
        model.ir_version = IR_VERSION
        onnx.checker.check_model(model)
        return model


def _vi(name: str, elem: int, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _save(model: onnx.ModelProto, path: Path, external: bool) -> None:
    if external:
        data = path.name + ".data"
        (path.parent / data).unlink(missing_ok=True)  # onnx appends to an existing data file
        onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                        location=data, size_threshold=512)  # shapes stay inline
    else:
        onnx.save_model(model, str(path))


def image_encoder() -> onnx.ModelProto:
    g = _G()
    x = g.op("Cast", "image", to=F32)
    x = g.op("Unsqueeze", x, g.const([0], np.int64))
    x = g.op("Div", x, g.const(255.0, np.float32))
    x = g.op("Sub", x, g.const(0.5, np.float32))
    x = g.op("Div", x, g.const(0.5, np.float32))
    outs = {}
    for level, size in enumerate((288, 144, 72)):
        small = g.op("Resize", x, "", "", g.const([1, 3, size, size], np.int64), mode="linear")
        padded = g.op("Pad", small, g.const([0, 0, 0, 0, 0, 253, 0, 0], np.int64))
        scale = g.const(np.ones((1, 256, 1, 1), np.float32), name=f"fpn_scale_{level}")
        outs[f"backbone_fpn_{level}"] = g.op("Mul", padded, scale, out=f"backbone_fpn_{level}")
        pos = g.const(np.linspace(-1, 1, 256, dtype=np.float32).reshape(1, 256, 1, 1) * (level + 1),
                      name=f"pos_embed_{level}")
        outs[f"vision_pos_enc_{level}"] = g.op("Expand", pos, g.const([1, 256, size, size], np.int64),
                                               out=f"vision_pos_enc_{level}")
    outputs = [_vi(f"vision_pos_enc_{i}", F32, [1, 256, s, s]) for i, s in enumerate((288, 144, 72))]
    outputs += [_vi(f"backbone_fpn_{i}", F32, [1, 256, s, s]) for i, s in enumerate((288, 144, 72))]
    return g.model("sam3_image_encoder", [_vi("image", TensorProto.UINT8, [3, MODEL, MODEL])], outputs)


def colour_table() -> np.ndarray:
    """The text encoders' embedding table: a colour word's token -> its normalised RGB and a 1 (others 0)."""
    table = np.zeros((49408, 4), np.float32)
    for word, rgb in COLOURS.items():
        table[COLOUR_IDS[word]] = (*_norm(rgb), 1.0)
    return table


def language_encoder() -> onnx.ModelProto:
    g = _G()
    table = colour_table()
    g.op("Equal", "tokens", g.const(0, np.int64), out="text_attention_mask")
    ids = g.op("Squeeze", "tokens", g.const([0], np.int64))
    feat = g.op("Gather", g.const(table, name="colour_table"), ids, axis=0)  # [32,4]
    mem = g.op("Pad", feat, g.const([0, 0, 0, 252], np.int64))
    g.op("Unsqueeze", mem, g.const([1], np.int64), out="text_memory")
    emb = g.op("Pad", feat, g.const([0, 0, 0, 1020], np.int64))
    g.op("Unsqueeze", emb, g.const([1], np.int64), out="text_embeds")
    outputs = [_vi("text_attention_mask", TensorProto.BOOL, [1, 32]), _vi("text_memory", F32, [32, 1, 256]),
               _vi("text_embeds", F32, [32, 1, 1024])]
    return g.model("sam3_language_encoder", [_vi("tokens", I64, [1, 32])], outputs)


def _decoder_inputs(box_slots: int) -> list[onnx.ValueInfoProto]:
    return [
        _vi("vision_pos_enc_2", F32, [1, 256, 72, 72]),
        _vi("backbone_fpn_0", F32, [1, 256, 288, 288]),
        _vi("backbone_fpn_1", F32, [1, 256, 144, 144]),
        _vi("backbone_fpn_2", F32, [1, 256, 72, 72]),
        _vi("language_mask", TensorProto.BOOL, [1, 32]),
        _vi("language_features", F32, [32, 1, 256]),
        _vi("box_coords", F32, [box_slots, 1, 4]),
        _vi("box_labels", I64, [box_slots, 1]),
        _vi("box_masks", TensorProto.BOOL, [1, box_slots]),
    ]


def _decoder_outputs() -> list[onnx.ValueInfoProto]:
    return [_vi("boxes", F32, ["N", 4]), _vi("scores", F32, ["N"]), _vi("masks", F32, ["N", 1, MASK, MASK])]


def _box_masks(g: _G, box_slots: int) -> tuple[str, str, str]:
    """(xyxy [B,4], cell masks float [B,1,288,288], active bool [B]) from the box inputs."""
    coords = g.op("Reshape", "box_coords", g.const([box_slots, 4], np.int64))
    centre = g.op("Slice", coords, g.const([0], np.int64), g.const([2], np.int64), g.const([1], np.int64))
    size = g.op("Slice", coords, g.const([2], np.int64), g.const([4], np.int64), g.const([1], np.int64))
    half = g.op("Div", size, g.const(2.0, np.float32))
    lo = g.op("Sub", centre, half)  # [B,2] x0,y0
    hi = g.op("Add", centre, half)
    xyxy = g.op("Concat", lo, hi, axis=1)
    centres = g.const(((np.arange(MASK, dtype=np.float32) + 0.5) / MASK).reshape(1, MASK))

    def inside(axis: int) -> str:
        a = g.op("Slice", lo, g.const([axis], np.int64), g.const([axis + 1], np.int64), g.const([1], np.int64))
        b = g.op("Slice", hi, g.const([axis], np.int64), g.const([axis + 1], np.int64), g.const([1], np.int64))
        return g.op("And", g.op("GreaterOrEqual", centres, a), g.op("LessOrEqual", centres, b))  # [B,288]

    in_x = g.op("Unsqueeze", inside(0), g.const([1], np.int64))  # [B,1,288]
    in_y = g.op("Unsqueeze", inside(1), g.const([2], np.int64))  # [B,288,1]
    cells = g.op("Cast", g.op("And", in_y, in_x), to=F32)  # [B,288,288]
    cells = g.op("Unsqueeze", cells, g.const([1], np.int64))  # [B,1,288,288]
    active = g.op("Not", g.op("Reshape", "box_masks", g.const([box_slots], np.int64)))
    return xyxy, cells, active


def _select(g: _G, keep: str, boxes: str, scores: str, masks: str) -> None:
    idx = g.op("Reshape", g.op("NonZero", keep), g.const([-1], np.int64))
    g.op("Gather", boxes, idx, axis=0, out="boxes")
    g.op("Gather", scores, idx, axis=0, out="scores")
    g.op("Gather", masks, idx, axis=0, out="masks")


def box_echo_decoder(box_slots: int = 1) -> onnx.ModelProto:
    g = _G()
    xyxy, cells, active = _box_masks(g, box_slots)
    labels = g.op("Reshape", "box_labels", g.const([box_slots], np.int64))
    positive = g.op("Equal", labels, g.const(1, np.int64))
    scores = g.op("Where", positive, g.const(0.9, np.float32), g.const(0.7, np.float32))
    _select(g, active, xyxy, scores, cells)
    return g.model("sam3_decoder", _decoder_inputs(box_slots), _decoder_outputs())


def colour_decoder(box_slots: int = 1, grid: int = DEFAULT_GRID) -> onnx.ModelProto:
    g = _G()
    boxes_all, score, masks_all = _colour_queries(g, box_slots, grid)
    keep = g.op("Greater", score, g.const(0.5, np.float32))
    _select(g, keep, boxes_all, score, masks_all)
    return g.model("sam3_decoder", _decoder_inputs(box_slots), _decoder_outputs())


def _colour_queries(g: _G, box_slots: int, grid: int) -> tuple[str, str, str]:
    """Every query of the colour decoder: (boxes xyxy [Q,4], scores [Q], masks [Q,1,288,288]), Q = grid^2."""
    if MASK % grid:
        raise ValueError(f"grid must divide {MASK}")
    one = g.const([1], np.int64)
    # prompt colour from the text: mean of colour-word rows, padding excluded
    feats = g.op("Reshape", "language_features", g.const([32, 256], np.int64))
    col = g.op("Slice", feats, g.const([0], np.int64), g.const([3], np.int64), one)  # [32,3]
    flag = g.op("Slice", feats, g.const([3], np.int64), g.const([4], np.int64), one)  # [32,1]
    real = g.op("Cast", g.op("Not", g.op("Reshape", "language_mask", g.const([32, 1], np.int64))), to=F32)
    w = g.op("Mul", flag, real)
    text_sum = g.op("ReduceSum", g.op("Mul", col, w), g.const([0], np.int64), keepdims=1)  # [1,3]
    text_n = g.op("ReduceSum", w, g.const([0], np.int64), keepdims=1)  # [1,1]
    eps = g.const(1e-6, np.float32)
    text_colour = g.op("Div", text_sum, g.op("Max", text_n, eps))
    rgb = g.op("Slice", "backbone_fpn_0", g.const([0], np.int64), g.const([3], np.int64), one)  # [1,3,288,288]
    # prompt colour from the active positive example boxes (used when the text names no colour)
    _, cells, active = _box_masks(g, box_slots)
    labels = g.op("Reshape", "box_labels", g.const([box_slots], np.int64))
    use = g.op("Cast", g.op("And", active, g.op("Equal", labels, g.const(1, np.int64))), to=F32)
    weighted = g.op("Mul", cells, g.op("Reshape", use, g.const([box_slots, 1, 1, 1], np.int64)))
    union = g.op("ReduceMax", weighted, g.const([0], np.int64), keepdims=1)  # [1,1,288,288]
    box_sum = g.op("Reshape", g.op("ReduceSum", g.op("Mul", rgb, union), g.const([2, 3], np.int64),
                                   keepdims=0), g.const([1, 3], np.int64))
    box_n = g.op("Reshape", g.op("ReduceSum", union, keepdims=0), g.const([1, 1], np.int64))
    box_colour = g.op("Div", box_sum, g.op("Max", box_n, eps))
    has_text = g.op("Greater", text_n, g.const(0.0, np.float32))
    colour = g.op("Where", has_text, text_colour, box_colour)  # [1,3]
    present = g.op("Cast", g.op("Or", has_text, g.op("Greater", box_n, g.const(0.0, np.float32))), to=F32)
    # pixels of that colour
    diff = g.op("Sub", rgb, g.op("Reshape", colour, g.const([1, 3, 1, 1], np.int64)))
    d2 = g.op("ReduceSum", g.op("Mul", diff, diff), g.const([1], np.int64), keepdims=1)  # [1,1,288,288]
    match = g.op("Cast", g.op("Less", d2, g.const(COLOUR_TOLERANCE, np.float32)), to=F32)
    # query regions: a grid of cells
    cell = MASK // grid
    rows = g.const((np.arange(MASK) // cell).astype(np.int64).reshape(1, 1, MASK, 1) * grid)
    cols = g.const((np.arange(MASK) // cell).astype(np.int64).reshape(1, 1, 1, MASK))
    region_id = g.op("Add", rows, cols)  # [1,1,288,288]
    queries = g.const(np.arange(grid * grid, dtype=np.int64).reshape(-1, 1, 1, 1))
    regions = g.op("Cast", g.op("Equal", region_id, queries), to=F32)  # [Q,1,288,288]
    masks_all = g.op("Mul", regions, match)
    count = g.op("ReduceSum", masks_all, g.const([1, 2, 3], np.int64), keepdims=0)  # [Q]
    score = g.op("Div", count, g.op("Add", count, g.const(MIN_PIXELS, np.float32)))
    score = g.op("Mul", score, g.op("Reshape", present, g.const([1], np.int64)))
    q = grid * grid
    col_any = g.op("Reshape", g.op("ReduceMax", masks_all, g.const([2], np.int64), keepdims=0),
                   g.const([q, MASK], np.int64))
    row_any = g.op("Reshape", g.op("ReduceMax", masks_all, g.const([3], np.int64), keepdims=0),
                   g.const([q, MASK], np.int64))
    x0 = g.op("ArgMax", col_any, axis=1, keepdims=1)
    x1 = g.op("Add", g.op("ArgMax", col_any, axis=1, keepdims=1, select_last_index=1), g.const(1, np.int64))
    y0 = g.op("ArgMax", row_any, axis=1, keepdims=1)
    y1 = g.op("Add", g.op("ArgMax", row_any, axis=1, keepdims=1, select_last_index=1), g.const(1, np.int64))
    boxes_all = g.op("Div", g.op("Cast", g.op("Concat", x0, y0, x1, y1, axis=1), to=F32),
                     g.const(float(MASK), np.float32))
    return boxes_all, score, masks_all


#: samexporter's query count: its raw decoder answers every one of them
QUERIES = 200
#: Logit magnitudes of the raw (samexporter) colour decoder: presence, and mask cells inside / outside
PRESENCE_LOGIT = 30.0
MASK_LOGIT = 10.0
#: The inputs a simplified samexporter decoder keeps (the others are read by nothing and dropped)
SIMPLIFIED_INPUTS = ("vision_pos_enc_2", "backbone_fpn_0", "backbone_fpn_1", "backbone_fpn_2", "language_mask",
                     "language_features", "box_coords", "box_labels", "box_masks")


def _samexporter_inputs(box_slots: int, simplified: bool) -> list[onnx.ValueInfoProto]:
    sizes = (288, 144, 72)
    inputs = [_vi("original_height", I64, []), _vi("original_width", I64, [])]
    inputs += [_vi(f"vision_pos_enc_{i}", F32, [1, 256, s, s]) for i, s in enumerate(sizes)]
    inputs += [_vi(f"backbone_fpn_{i}", F32, [1, 256, s, s]) for i, s in enumerate(sizes)]
    inputs += [_vi("language_mask", TensorProto.BOOL, [1, 32]), _vi("language_features", F32, [32, 1, 256]),
               _vi("language_embeds", F32, [32, 1, 1024])]
    inputs += _decoder_inputs(box_slots)[-3:]
    return [i for i in inputs if not simplified or i.name in SIMPLIFIED_INPUTS]


def samexporter_decoder(box_slots: int = 4, grid: int = DEFAULT_GRID, *, outputs: str = "raw",
                        simplified: bool = False) -> onnx.ModelProto:
    """The colour decoder behind samexporter 0.5.0's interface: 14 inputs (`simplified`: the 9 it reads), and
    `outputs` "raw" (every one of `QUERIES` queries: `pred_boxes` cxcywh, `pred_logits` = logit of the colour
    decoder's score, `pred_masks` logits, `presence_logit_dec`; so sigmoid(logit) x sigmoid(presence) is the seed
    graph's score, unfiltered) or "filtered" (boxes, scores, masks over 0.5, as its older exports)."""
    g = _G()
    boxes_all, score, masks_all = _colour_queries(g, box_slots, grid)
    if outputs == "filtered":
        _select(g, g.op("Greater", score, g.const(0.5, np.float32)), boxes_all, score, masks_all)
        return g.model("sam3_decoder", _samexporter_inputs(box_slots, simplified), _decoder_outputs())
    if outputs != "raw":
        raise ValueError(f"outputs must be 'raw' or 'filtered', got {outputs!r}")
    q = grid * grid
    pad = QUERIES - q

    def padded(x: str, rank: int, value: float, out: str) -> str:
        pads = g.const([0] * rank + [pad] + [0] * (rank - 1), np.int64)
        return g.op("Unsqueeze", g.op("Pad", x, pads, g.const(value, np.float32)), g.const([0], np.int64), out=out)

    two = g.const([2], np.int64)
    lo = g.op("Slice", boxes_all, g.const([0], np.int64), two, g.const([1], np.int64))
    hi = g.op("Slice", boxes_all, two, g.const([4], np.int64), g.const([1], np.int64))
    centre = g.op("Div", g.op("Add", lo, hi), g.const(2.0, np.float32))
    cxcywh = g.op("Concat", centre, g.op("Sub", hi, lo), axis=1)  # [Q,4]
    padded(cxcywh, 2, 0.0, "pred_boxes")
    present = g.op("Greater", g.op("ReduceMax", score, keepdims=1), g.const(0.0, np.float32))
    count = g.op("Div", score, g.op("Max", g.op("Sub", g.const(1.0, np.float32), score), g.const(1e-6, np.float32)))
    logit = g.op("Log", g.op("Max", count, g.const(1e-6, np.float32)))  # score = c/(c+M): logit = log(c/M)
    padded(g.op("Unsqueeze", logit, g.const([1], np.int64)), 2, -PRESENCE_LOGIT, "pred_logits")
    cells = g.op("Mul", g.op("Sub", g.op("Mul", masks_all, g.const(2.0, np.float32)), g.const(1.0, np.float32)),
                 g.const(MASK_LOGIT, np.float32))
    padded(g.op("Reshape", cells, g.const([q, MASK, MASK], np.int64)), 3, -MASK_LOGIT, "pred_masks")
    g.op("Reshape", g.op("Where", present, g.const([PRESENCE_LOGIT], np.float32),
                         g.const([-PRESENCE_LOGIT], np.float32)), g.const([1, 1], np.int64), out="presence_logit_dec")
    outs = [_vi("pred_boxes", F32, [1, QUERIES, 4]), _vi("pred_logits", F32, [1, QUERIES, 1]),
            _vi("pred_masks", F32, [1, QUERIES, MASK, MASK]), _vi("presence_logit_dec", F32, [1, 1])]
    return g.model("sam3_decoder", _samexporter_inputs(box_slots, simplified), outs)


def float_image_encoder() -> onnx.ModelProto:
    """samexporter's older image encoder: `image` float32 [1,3,H,W] already normalised (x/255-0.5)/0.5; the same
    outputs as `image_encoder`."""
    model = image_encoder()
    # drop Cast, Unsqueeze and the three normalising steps (the caller did them): their consumers read `image`
    normalised = model.graph.node[4].output[0]
    del model.graph.node[:5]
    for node in model.graph.node:
        node.input[:] = ["image" if name == normalised else name for name in node.input]
    used = {name for node in model.graph.node for name in node.input}
    kept = [t for t in model.graph.initializer if t.name in used]
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept)
    del model.graph.input[:]
    model.graph.input.append(_vi("image", F32, [1, 3, "height", "width"]))
    onnx.checker.check_model(model)
    return model


def build_samexporter_models(directory: str | Path, box_slots: int = 4, *, image: str = "uint8",
                             outputs: str = "raw", grid: int = DEFAULT_GRID, simplified: bool = False) -> Path:
    """A model folder in samexporter 0.5.0's layout that segments by colour as `build_contract_models` does:
    `image` "uint8" (the seed's image encoder) or "float32" (`float_image_encoder`), the seed's language encoder,
    `samexporter_decoder`. Returns the directory."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    if image not in ("uint8", "float32"):
        raise ValueError(f"image must be 'uint8' or 'float32', got {image!r}")
    _save(image_encoder() if image == "uint8" else float_image_encoder(), d / "sam3_image_encoder.onnx", True)
    _save(language_encoder(), d / "sam3_language_encoder.onnx", external=True)
    _save(samexporter_decoder(box_slots, grid, outputs=outputs, simplified=simplified), d / "sam3_decoder.onnx",
          external=False)
    return d


#: The four-graph layout's extra encoder outputs (their shapes are ours: the real ones are not published).
POINT_FEATURES = {"image_embeddings": [1, 256, 72, 72], "high_res_features1": [1, 32, 288, 288],
                  "high_res_features2": [1, 64, 144, 144]}
#: The point decoder's candidate masks and their predicted IoUs, in an order that is not quality order
#: (as the write-up says of the real one): 0 a part of the object (left of the click), 1 the object, 2 the
#: whole window. The second pass (a mask fed back) answers the object with IoU 0.95, the first with 0.9.
CLICK_IOUS = (0.55, 0.9, 0.7)
SECOND_PASS_IOU = 0.95
#: Logits of the contract point decoder's masks (inside / outside).
CLICK_LOGIT = 6.0


def signed_permutation(n: int, seed: int) -> np.ndarray:
    """An n x n matrix of one +-1 a row and column: exact in float arithmetic, its inverse its transpose."""
    rng = np.random.default_rng(seed)
    w = np.zeros((n, n), np.float32)
    w[np.arange(n), rng.permutation(n)] = rng.choice(np.asarray([-1.0, 1.0], np.float32), n)
    return w


#: The Gemm weights of the four-graph contract graphs, stored {K, N} with transB=0 as v0.6.0 stores every
#: Gemm weight: a signed permutation carries the colour into `high_res_features1` (the point decoder undoes
#: it with its transpose), a dense matrix makes `image_embeddings` (so a transform that moved one weight
#: wrongly would change outputs).
HIGH_RES_MIX = signed_permutation(32, 1)
EMBED_MIX = (np.random.default_rng(2).normal(0, 0.1, (256, 256))).astype(np.float32)


def _pixels_gemm(g: _G, x: str, channels: int, size: int, weight: np.ndarray, name: str, out: str) -> str:
    """out [1, C, size, size] = x's C channels mixed per pixel by `weight` [C, C] (a Gemm, transB=0)."""
    flat = g.op("Transpose", g.op("Reshape", x, g.const([channels, size * size], np.int64)), perm=[1, 0])
    mixed = g.op("Gemm", flat, g.const(weight, name=name), transB=0)
    back = g.op("Transpose", mixed, perm=[1, 0])
    return g.op("Reshape", back, g.const([1, channels, size, size], np.int64), out=out)


def nine_output_encoder() -> onnx.ModelProto:
    """The four-graph layout's image encoder: the six published outputs, then `image_embeddings`,
    `high_res_features1`, `high_res_features2` for the point decoder, two of them through Gemms stored
    {K, N}, transB=0."""
    model = image_encoder()
    g = _G()
    g.nodes, g.inits = list(model.graph.node), list(model.graph.initializer)
    g._n = 10_000
    _pixels_gemm(g, "backbone_fpn_2", 256, 72, EMBED_MIX, "embed_mix", "image_embeddings")
    first32 = g.op("Slice", "backbone_fpn_0", g.const([0], np.int64), g.const([32], np.int64), g.const([1], np.int64))
    _pixels_gemm(g, first32, 32, 288, HIGH_RES_MIX, "high_res_mix", "high_res_features1")
    g.op("Slice", "backbone_fpn_1", g.const([0], np.int64), g.const([64], np.int64), g.const([1], np.int64),
         out="high_res_features2")
    outputs = list(model.graph.output) + [_vi(k, F32, v) for k, v in POINT_FEATURES.items()]
    return g.model("sam3_image_encoder", list(model.graph.input), outputs)


def _click_cells(g: _G) -> tuple[str, str, str, str]:
    """(one-hot rows [N,288], one-hot columns [N,288], positive [N], negative [N]) of the clicks."""
    coords = g.op("Reshape", "point_coords", g.const([-1, 2], np.int64))  # [N,2] model-input pixels
    cells = g.op("Floor", g.op("Div", coords, g.const(MODEL / MASK, np.float32)))
    cells = g.op("Clip", cells, g.const(0.0, np.float32), g.const(float(MASK - 1), np.float32))
    at = g.const(np.arange(MASK, dtype=np.float32).reshape(1, MASK))

    def one_hot(axis: int) -> str:
        c = g.op("Slice", cells, g.const([axis], np.int64), g.const([axis + 1], np.int64), g.const([1], np.int64))
        return g.op("Cast", g.op("Equal", at, c), to=F32)  # [N,288]

    labels = g.op("Reshape", "point_labels", g.const([-1], np.int64))
    pos = g.op("Cast", g.op("Equal", labels, g.const(1.0, np.float32)), to=F32)
    neg = g.op("Cast", g.op("Equal", labels, g.const(0.0, np.float32)), to=F32)
    return one_hot(1), one_hot(0), pos, neg


def point_decoder() -> onnx.ModelProto:
    """A point decoder with the inferred interface (the same author's SAM 2 export: `point_coords` [1,N,2]
    model-input pixels, `point_labels` [1,N] 1/0, `mask_input` [1,1,288,288], `has_mask_input` [1]) that
    segments the colour under the positive clicks: cells of that colour (within `COLOUR_TOLERANCE`) and nearer
    it than any negative click's colour. Three candidates in `CLICK_IOUS`' order; with a mask fed back, the
    object candidate is that mask (so feeding back the wrong candidate shows) and its IoU `SECOND_PASS_IOU`.
    Outputs as SAM 2's: `masks` [1,3,1008,1008], `iou_predictions` [1,3], `low_res_masks` [1,3,288,288]."""
    g = _G()
    feats = g.op("Transpose", g.op("Reshape", "high_res_features1", g.const([32, MASK * MASK], np.int64)), perm=[1, 0])
    unmixed = g.op("Gemm", feats, g.const(np.ascontiguousarray(HIGH_RES_MIX.T), name="high_res_unmix"), transB=0)
    rgb = g.op("Reshape", g.op("Transpose", g.op("Slice", unmixed, g.const([0], np.int64), g.const([3], np.int64),
                                                 g.const([1], np.int64)), perm=[1, 0]),
               g.const([1, 3, MASK, MASK], np.int64))
    rows, cols, pos, neg = _click_cells(g)
    colours = g.op("Einsum", rows, g.op("Reshape", rgb, g.const([3, MASK, MASK], np.int64)), cols,
                   equation="ny,cyx,nx->nc")  # [N,3]: the colour under each click
    eps = g.const(1e-6, np.float32)
    n_pos = g.op("ReduceSum", pos, keepdims=1)  # [1]
    pos_colour = g.op("Div", g.op("ReduceSum", g.op("Mul", colours, g.op("Unsqueeze", pos, g.const([1], np.int64))),
                                  g.const([0], np.int64), keepdims=1), g.op("Max", n_pos, eps))  # [1,3]

    def distance(colour: str) -> str:  # [K,3] -> squared distances [K,288,288]
        diff = g.op("Sub", rgb, g.op("Unsqueeze", colour, g.const([2, 3], np.int64)))
        return g.op("ReduceSum", g.op("Mul", diff, diff), g.const([1], np.int64), keepdims=0)

    d_pos = distance(pos_colour)  # [1,288,288]
    d_neg = g.op("ReduceMin", g.op("Add", distance(colours), g.op("Reshape", g.op("Mul", g.op(
        "Sub", g.const(1.0, np.float32), neg), g.const(1e6, np.float32)), g.const([-1, 1, 1], np.int64))),
        g.const([0], np.int64), keepdims=1)  # nearest negative colour (1e6 without one)
    match = g.op("And", g.op("And", g.op("Less", d_pos, g.const(COLOUR_TOLERANCE, np.float32)),
                             g.op("Less", d_pos, d_neg)), g.op("Greater", n_pos, g.const(0.0, np.float32)))
    match = g.op("Unsqueeze", match, g.const([0], np.int64))  # [1,1,288,288]
    inside, outside = g.const(CLICK_LOGIT, np.float32), g.const(-CLICK_LOGIT, np.float32)
    fed = g.op("Greater", g.op("Reshape", "has_mask_input", g.const([1, 1, 1, 1], np.int64)), g.const(0.5, np.float32))
    obj = g.op("Or", g.op("And", fed, g.op("Greater", "mask_input", g.const(0.0, np.float32))),
               g.op("And", g.op("Not", fed), match))
    click_col = g.op("ReduceSum", g.op("Mul", g.op("ArgMax", cols, axis=1, keepdims=0), g.op("Cast", pos, to=I64)),
                     keepdims=1)  # the (first) positive click's column, to cut the "part" candidate
    left = g.op("Less", g.const(np.arange(MASK, dtype=np.int64).reshape(1, 1, 1, MASK)),
                g.op("Reshape", click_col, g.const([1, 1, 1, 1], np.int64)))
    part = g.op("Where", g.op("And", match, left), inside, outside)
    whole = g.op("Expand", inside, g.const([1, 1, MASK, MASK], np.int64))
    low = g.op("Concat", part, g.op("Where", obj, inside, outside), whole, axis=1, out="low_res_masks")
    g.op("Resize", low, "", "", g.const([1, 3, MODEL, MODEL], np.int64), mode="linear", out="masks")
    second = g.op("Reshape", g.op("Cast", fed, to=F32), g.const([1], np.int64))
    obj_iou = g.op("Add", g.const([CLICK_IOUS[1]], np.float32),
                   g.op("Mul", second, g.const([SECOND_PASS_IOU - CLICK_IOUS[1]], np.float32)))
    used = g.op("Mul", g.op("ReduceSum", "image_embeddings", keepdims=0), g.const(0.0, np.float32))  # fed, unused
    used = g.op("Add", used, g.op("Mul", g.op("ReduceSum", "high_res_features2", keepdims=0), g.const(0.0, np.float32)))
    ious = g.op("Concat", g.const([CLICK_IOUS[0]], np.float32), obj_iou, g.const([CLICK_IOUS[2]], np.float32), axis=0)
    g.op("Reshape", g.op("Add", ious, used), g.const([1, 3], np.int64), out="iou_predictions")
    inputs = [_vi(k, F32, v) for k, v in POINT_FEATURES.items()] + [
        _vi("point_coords", F32, [1, "num_points", 2]), _vi("point_labels", F32, [1, "num_points"]),
        _vi("mask_input", F32, [1, 1, MASK, MASK]), _vi("has_mask_input", F32, [1])]
    outputs = [_vi("masks", F32, [1, 3, MODEL, MODEL]), _vi("iou_predictions", F32, [1, 3]),
               _vi("low_res_masks", F32, [1, 3, MASK, MASK])]
    return g.model("sam3_point_decoder", inputs, outputs)


_ELEM = {"float32": F32, "int64": I64, "bool": TensorProto.BOOL, "uint8": TensorProto.UINT8,
         "float16": TensorProto.FLOAT16, "int32": TensorProto.INT32}


def interface_graph(name: str, inputs: list[tuple[str, str, list]], outputs: list[tuple[str, str, list]]
                    ) -> onnx.ModelProto:
    """A graph with exactly the given interface ((name, dtype, shape) each) that loads in onnxruntime.

    Inputs are unused; each output is a zero tensor of its shape (symbolic dims become 0). For graphs
    that do not fit the contract on purpose.
    """
    g = _G()
    for out_name, dtype, shape in outputs:
        dims = [d if isinstance(d, int) else 0 for d in shape]
        value = helper.make_tensor("value", _ELEM[dtype], [1], [0])
        g.op("ConstantOfShape", g.const(dims, np.int64), value=value, out=out_name)
    return g.model(name, [_vi(n, _ELEM[t], s) for n, t, s in inputs],
                   [_vi(n, _ELEM[t], s) for n, t, s in outputs])


def write_graph(model: onnx.ModelProto, path: str | Path, external: bool = False) -> Path:
    """Save `model` at `path` (weights in ``<path>.data`` when `external`)."""
    path = Path(path)
    _save(model, path, external)
    return path


def contract_interface(graph: str, box_slots: int = 1) -> tuple[list, list]:
    """The contract's (inputs, outputs) of a graph as lists of [name, dtype, shape], to edit in tests."""
    from sam3tiles.model.contract import CONTRACT

    _, ins, outs = CONTRACT[graph]

    def dims(shape):
        return [box_slots if d == "B" else d for d in shape]

    return ([[t.name, t.dtype, dims(t.shape)] for t in ins], [[t.name, t.dtype, dims(t.shape)] for t in outs])


def build_contract_models(directory: str | Path, box_slots: int = 1, decoder: str = "colour", *,
                          grid: int = DEFAULT_GRID, with_point_decoder: bool = False) -> Path:
    """Write sam3_image_encoder.onnx(+.data), sam3_language_encoder.onnx(+.data), sam3_decoder.onnx.

    `decoder`: "colour" (segments by the prompt's colour word or the example boxes' colour) or
    "box-echo" (returns the given boxes). `with_point_decoder`: the four-graph layout's nine-output encoder
    and sam3_point_decoder.onnx (`point_decoder`) too. Returns the directory.
    """
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    encoder = nine_output_encoder() if with_point_decoder else image_encoder()
    _save(encoder, d / "sam3_image_encoder.onnx", external=True)
    _save(language_encoder(), d / "sam3_language_encoder.onnx", external=True)
    if decoder == "colour":
        dec = colour_decoder(box_slots, grid)
    elif decoder == "box-echo":
        dec = box_echo_decoder(box_slots)
    else:
        raise ValueError(f"decoder must be 'colour' or 'box-echo', got {decoder!r}")
    _save(dec, d / "sam3_decoder.onnx", external=False)
    if with_point_decoder:
        _save(point_decoder(), d / "sam3_point_decoder.onnx", external=False)
    return d


def build_four_graph_models(directory: str | Path, *, grid: int = 1, point: str = "colour") -> Path:
    """The four-graph layout (as the v0.6.0 write-up describes it): the nine-output encoder, the language
    encoder, the 16-slot colour decoder and the point decoder. `point`: "colour" (`point_decoder`) or
    "differs" (a point decoder whose inputs are not the ones sam3tiles can feed: `point_labels` int64 and an
    `orig_im_size` input, as some SAM exports have)."""
    d = build_contract_models(directory, box_slots=16, grid=grid, with_point_decoder=True)
    if point == "differs":
        inputs = [[k, "float32", v] for k, v in POINT_FEATURES.items()] + [
            ["point_coords", "float32", [1, "num_points", 2]], ["point_labels", "int64", [1, "num_points"]],
            ["mask_input", "float32", [1, 1, MASK, MASK]], ["has_mask_input", "float32", [1]],
            ["orig_im_size", "int64", [2]]]
        outputs = [["masks", "float32", [1, 3, MODEL, MODEL]], ["iou_predictions", "float32", [1, 3]],
                   ["low_res_masks", "float32", [1, 3, MASK, MASK]]]
        _save(interface_graph("sam3_point_decoder", inputs, outputs), d / "sam3_point_decoder.onnx", external=False)
    elif point != "colour":
        raise ValueError(f"point must be 'colour' or 'differs', got {point!r}")
    return d


def paint(rgb: np.ndarray, x0: int, y0: int, x1: int, y1: int, colour: str | tuple[int, int, int]) -> None:
    """Fill pixels [y0:y1, x0:x1] of a [3,H,W] uint8 image with a colour word's RGB (in place)."""
    value = COLOURS[colour] if isinstance(colour, str) else colour
    rgb[:, y0:y1, x0:x1] = np.asarray(value, np.uint8).reshape(3, 1, 1)


def blank_tile() -> np.ndarray:
    """A [3,1008,1008] uint8 mid-grey image (matches no colour word)."""
    return np.full((3, MODEL, MODEL), 128, np.uint8)
