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

`box_slots=16` gives the later 16-slot decoder interface (``box_coords [16,1,4]`` ...).
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


def language_encoder() -> onnx.ModelProto:
    g = _G()
    table = np.zeros((49408, 4), np.float32)
    for word, rgb in COLOURS.items():
        table[COLOUR_IDS[word], :3] = _norm(rgb)
        table[COLOUR_IDS[word], 3] = 1.0
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
    if MASK % grid:
        raise ValueError(f"grid must divide {MASK}")
    g = _G()
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
    keep = g.op("Greater", score, g.const(0.5, np.float32))
    _select(g, keep, boxes_all, score, masks_all)
    return g.model("sam3_decoder", _decoder_inputs(box_slots), _decoder_outputs())


def point_decoder() -> onnx.ModelProto:
    """A stand-in for the later layout's point decoder (only its presence matters to sam3tiles)."""
    g = _G()
    g.op("Identity", "point_coords", out="point_coords_out")
    return g.model("sam3_point_decoder", [_vi("point_coords", F32, [1, "num_points", 2])],
                   [_vi("point_coords_out", F32, [1, "num_points", 2])])


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
    "box-echo" (returns the given boxes). Returns the directory.
    """
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    _save(image_encoder(), d / "sam3_image_encoder.onnx", external=True)
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


def paint(rgb: np.ndarray, x0: int, y0: int, x1: int, y1: int, colour: str | tuple[int, int, int]) -> None:
    """Fill pixels [y0:y1, x0:x1] of a [3,H,W] uint8 image with a colour word's RGB (in place)."""
    value = COLOURS[colour] if isinstance(colour, str) else colour
    rgb[:, y0:y1, x0:x1] = np.asarray(value, np.uint8).reshape(3, 1, 1)


def blank_tile() -> np.ndarray:
    """A [3,1008,1008] uint8 mid-grey image (matches no colour word)."""
    return np.full((3, MODEL, MODEL), 128, np.uint8)
