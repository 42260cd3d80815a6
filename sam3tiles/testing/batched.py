"""Contract graphs of the batched FP16 layout (greenjava/sam3-onnx, 644 px): they segment by colour as
`sam3tiles.testing.graphs` does, for `nc` text prompts in one decoder call.

The layout (../shared/sam3-contract.md; names marked *inferred* are not published and are ours):

* vision encoder: `image` (*inferred* name) float16 [1,3,S,S] (S = 644), normalised (x/255-0.5)/0.5
  (*inferred*, as the split exports); outputs `backbone_fpn_0/1/2` [1,256,M|M/2|M/4] and `vision_pos_enc_2`
  [1,256,M/4] (*inferred* names), float16, M = S x 288/1008 = 184 (one mask cell is 3.5 px, as at 1008).
* text encoder: `tokens` (*inferred*) int64 [nc,32] -> `text_features` [32,nc,256], `text_mask` bool [nc,32].
* decoder: the four vision tensors, `text_features` [32,nc,256], `text_mask` [nc,32], `text_ids` int64 [nc]
  (row i of the answer is prompt text_ids[i]) -> raw over 200 queries: `pred_boxes` [nc,200,4] (xyxy in [0,1]
  of the S input: *inferred*), `pred_logits` [nc,200,1], `pred_masks` [nc,200,M,M] (logits),
  `presence_logits` [nc,1]; score = sigmoid(logit) x sigmoid(presence), mask = logit > 0.

What the colour decoder computes per prompt: query 0 is every mask cell whose colour lies within
`COLOUR_TOLERANCE` of the prompt's colour word, logit log(count / `MIN_PIXELS`) (so its score is the seed colour
decoder's count / (count + 16) with `grid=1`), box its extent; the other 199 queries score ~0.
`precision="float32"` writes the same graphs in float32 (for the FP16 tolerance test).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto

from .graphs import COLOUR_TOLERANCE, MASK_LOGIT, MIN_PIXELS, PRESENCE_LOGIT, QUERIES, _G, _save, _vi, colour_table

#: The batched export's image side and its mask grid (3.5 px a cell, as the seed's 1008 / 288)
SIDE = 644
F32, I64 = TensorProto.FLOAT, TensorProto.INT64
_ELEM = {"float16": TensorProto.FLOAT16, "float32": F32}
#: The seed's file names, and the names the C++ exports give (the layout is told by the graphs, not these)
FILES = {"image_encoder": "sam3_image_encoder.onnx", "language_encoder": "sam3_language_encoder.onnx",
         "decoder": "sam3_decoder.onnx"}
EXPORT_FILES = {"image_encoder": "vision-encoder-fp16.onnx", "language_encoder": "text-encoder-fp16.onnx",
                "decoder": "decoder-fp16.onnx"}


def mask_side(side: int) -> int:
    return side * 288 // 1008


def vision_encoder(side: int = SIDE, precision: str = "float16") -> onnx.ModelProto:
    g, m = _G(), mask_side(side)
    x = g.op("Cast", "image", to=F32)
    sizes = (m, m // 2, m // 4)
    for level, size in enumerate(sizes):
        small = g.op("Resize", x, "", "", g.const([1, 3, size, size], np.int64), mode="linear")
        padded = g.op("Pad", small, g.const([0, 0, 0, 0, 0, 253, 0, 0], np.int64))
        scaled = g.op("Mul", padded, g.const(np.ones((1, 256, 1, 1), np.float32), name=f"fpn_scale_{level}"))
        g.op("Cast", scaled, to=_ELEM[precision], out=f"backbone_fpn_{level}")
    pos = g.const(np.linspace(-1, 1, 256, dtype=np.float32).reshape(1, 256, 1, 1), name="pos_embed")
    pos = g.op("Expand", pos, g.const([1, 256, sizes[2], sizes[2]], np.int64))
    g.op("Cast", pos, to=_ELEM[precision], out="vision_pos_enc_2")
    e = _ELEM[precision]
    outputs = [_vi(f"backbone_fpn_{i}", e, [1, 256, s, s]) for i, s in enumerate(sizes)]
    outputs.append(_vi("vision_pos_enc_2", e, [1, 256, sizes[2], sizes[2]]))
    return g.model("vision_encoder", [_vi("image", e, [1, 3, side, side])], outputs)


def text_encoder(precision: str = "float16") -> onnx.ModelProto:
    g = _G()
    table = colour_table()
    g.op("Equal", "tokens", g.const(0, np.int64), out="text_mask")
    feat = g.op("Gather", g.const(table, name="colour_table"), "tokens", axis=0)  # [nc,32,4]
    feat = g.op("Transpose", feat, perm=[1, 0, 2])  # [32,nc,4]
    feat = g.op("Pad", feat, g.const([0, 0, 0, 0, 0, 252], np.int64))
    g.op("Cast", feat, to=_ELEM[precision], out="text_features")
    outputs = [_vi("text_features", _ELEM[precision], [32, "nc", 256]), _vi("text_mask", TensorProto.BOOL, ["nc", 32])]
    return g.model("text_encoder", [_vi("tokens", I64, ["nc", 32])], outputs)


def _prompt_colours(g: _G) -> tuple[str, str]:
    """(colour [nc,3], present bool [nc,1]) of the prompts the decoder's rows ask for (`text_ids`)."""
    one = g.const([1], np.int64)
    feats = g.op("Gather", g.op("Cast", "text_features", to=F32), "text_ids", axis=1)  # [32,nc,256]
    mask = g.op("Gather", "text_mask", "text_ids", axis=0)  # [nc,32]
    col = g.op("Slice", feats, g.const([0], np.int64), g.const([3], np.int64), g.const([2], np.int64), one)
    flag = g.op("Slice", feats, g.const([3], np.int64), g.const([4], np.int64), g.const([2], np.int64), one)
    real = g.op("Cast", g.op("Not", g.op("Unsqueeze", g.op("Transpose", mask, perm=[1, 0]),
                                         g.const([2], np.int64))), to=F32)  # [32,nc,1]
    w = g.op("Mul", flag, real)
    total = g.op("ReduceSum", g.op("Mul", col, w), g.const([0], np.int64), keepdims=0)  # [nc,3]
    n = g.op("ReduceSum", w, g.const([0], np.int64), keepdims=0)  # [nc,1]
    colour = g.op("Div", total, g.op("Max", n, g.const(1e-6, np.float32)))
    return colour, g.op("Greater", n, g.const(0.0, np.float32))


def batched_decoder(side: int = SIDE, precision: str = "float16") -> onnx.ModelProto:
    g, m, e = _G(), mask_side(side), _ELEM[precision]
    colour, present = _prompt_colours(g)
    rgb = g.op("Slice", g.op("Cast", "backbone_fpn_0", to=F32), g.const([0], np.int64), g.const([3], np.int64),
               g.const([1], np.int64))  # [1,3,M,M]
    diff = g.op("Sub", rgb, g.op("Reshape", colour, g.const([-1, 3, 1, 1], np.int64)))  # [nc,3,M,M]
    d2 = g.op("ReduceSum", g.op("Mul", diff, diff), g.const([1], np.int64), keepdims=1)  # [nc,1,M,M]
    match = g.op("Cast", g.op("Less", d2, g.const(COLOUR_TOLERANCE, np.float32)), to=F32)
    count = g.op("ReduceSum", match, g.const([2, 3], np.int64), keepdims=0)  # [nc,1]
    # logit log(count / MIN_PIXELS): score count / (count + MIN_PIXELS), the seed colour decoder's (grid 1)
    logit = g.op("Log", g.op("Max", g.op("Div", count, g.const(MIN_PIXELS, np.float32)), g.const(1e-6, np.float32)))
    any_x = g.op("ReduceMax", match, g.const([2], np.int64), keepdims=0)  # [nc,1,M]
    any_y = g.op("ReduceMax", match, g.const([3], np.int64), keepdims=0)
    ends = []
    for a in (any_x, any_y):
        ends.append((g.op("ArgMax", a, axis=2, keepdims=1),
                     g.op("Add", g.op("ArgMax", a, axis=2, keepdims=1, select_last_index=1), g.const(1, np.int64))))
    xyxy = g.op("Concat", ends[0][0], ends[1][0], ends[0][1], ends[1][1], axis=2)  # [nc,1,4]
    xyxy = g.op("Div", g.op("Cast", xyxy, to=F32), g.const(float(m), np.float32))
    pad = QUERIES - 1

    def padded(x: str, rank: int, value: float, out: str) -> None:
        pads = g.const([0, 0] + [0] * (rank - 2) + [0, pad] + [0] * (rank - 2), np.int64)
        g.op("Cast", g.op("Pad", x, pads, g.const(value, np.float32)), to=e, out=out)

    padded(xyxy, 3, 0.0, "pred_boxes")
    padded(g.op("Unsqueeze", logit, g.const([2], np.int64)), 3, -PRESENCE_LOGIT, "pred_logits")
    cells = g.op("Mul", g.op("Sub", g.op("Mul", match, g.const(2.0, np.float32)), g.const(1.0, np.float32)),
                 g.const(MASK_LOGIT, np.float32))  # [nc,1,M,M]
    padded(cells, 4, -MASK_LOGIT, "pred_masks")
    presence = g.op("Where", present, g.const(PRESENCE_LOGIT, np.float32), g.const(-PRESENCE_LOGIT, np.float32))
    g.op("Cast", presence, to=e, out="presence_logits")
    q = m // 4
    inputs = [_vi(f"backbone_fpn_{i}", e, [1, 256, s, s]) for i, s in enumerate((m, m // 2, q))]
    inputs += [_vi("vision_pos_enc_2", e, [1, 256, q, q]), _vi("text_features", e, [32, "nc", 256]),
               _vi("text_mask", TensorProto.BOOL, ["nc", 32]), _vi("text_ids", I64, ["nc"])]
    outputs = [_vi("pred_boxes", e, ["nc", QUERIES, 4]), _vi("pred_logits", e, ["nc", QUERIES, 1]),
               _vi("pred_masks", e, ["nc", QUERIES, m, m]), _vi("presence_logits", e, ["nc", 1])]
    return g.model("decoder", inputs, outputs)


def build_batched_models(directory: str | Path, *, side: int = SIDE, precision: str = "float16",
                         export_names: bool = False) -> Path:
    """A model folder in the batched layout (vision encoder, text encoder, batched decoder) that segments by
    colour; `precision` "float16" (the export's) or "float32"; `export_names`: the files named as the C++
    exports name them (`EXPORT_FILES`), weights inside each graph (no .data). Returns the directory."""
    if precision not in _ELEM:
        raise ValueError(f"precision must be 'float16' or 'float32', got {precision!r}")
    if side * 288 % 1008 or mask_side(side) % 4:
        raise ValueError(f"side must keep 3.5 px mask cells and a mask side divisible by 4, got {side}")
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    names = EXPORT_FILES if export_names else FILES
    _save(vision_encoder(side, precision), d / names["image_encoder"], external=not export_names)
    _save(text_encoder(precision), d / names["language_encoder"], external=not export_names)
    _save(batched_decoder(side, precision), d / names["decoder"], external=False)
    return d
