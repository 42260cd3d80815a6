"""Per-tile time on graphs of the real SAM 3 image encoder's size and shape, with random weights.

    python -m benchmarks.bench_gpu_encoder --device cuda [--precisions fp32 tf32 fp16] [--blocks 32] [--repeat 10]

Builds (at run time, never committed: ~1.3 GB of float32 weights) a ViT of SAM 3's encoder size, a
32-block, 1024-wide transformer over 72x72 tokens of 14x14 px patches of the 1008x1008 input, with the
contract's input (uint8 [3,1008,1008]) and six outputs (vision_pos_enc_0..2, backbone_fpn_0..2 at
288/144/72), then times through sam3tiles's own OnnxRuntime path: encode (I/O binding on CUDA, only the
four outputs the decoder reads) and decode with a contract-faithful test decoder. It prints ms per tile
and the achieved TFLOP/s against the device's peak, i.e. how far a tile is from the GPU's limit.
On a GPU it times fp32 (CUDA, TF32 off), tf32 (CUDA, TF32 on) and fp16 (TensorRT, engine cache beside the
model) in one run and compares each decode's masks (> 0.5) with fp32's (IoU): random weights, so the IoU
says how many mask cells the arithmetic flips on tensors of SAM 3's shapes, not SAM 3's own accuracy.
On a CPU, `--blocks 1` checks the script in a minute; `--smoke` (no block) in seconds.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from sam3tiles.model.onnx import OnnxRuntime
from sam3tiles.model.runtime import TileImage
from sam3tiles.testing.graphs import build_contract_models

WIDTH, TOKENS_SIDE, PATCH = 1024, 72, 14  # SAM 3: 16 heads of 64, MLP 4 x width


def build_encoder(path: Path, blocks: int, seed: int = 0, width: int = WIDTH):
    """Write the encoder graph (`width` channels, `blocks` transformer blocks) to `path`; returns its
    FLOPs per tile."""
    heads, mlp = max(1, width // 64), 4 * width
    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def w(name, *shape, scale=0.02):
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def c(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def n(op, ins, out, **kw):
        nodes.append(helper.make_node(op, ins, [out], **kw))
        return out

    n("Cast", ["image"], "x8", to=TensorProto.FLOAT)
    n("Div", ["x8", c("c255", np.float32(255))], "x01")
    n("Sub", ["x01", c("half", np.float32(0.5))], "xc")
    n("Div", ["xc", "half"], "xn")
    n("Unsqueeze", ["xn", c("ax0", np.array([0], np.int64))], "xb")
    n("Conv", ["xb", w("patch_w", width, 3, PATCH, PATCH), w("patch_b", width)], "pe", strides=[PATCH, PATCH])
    n("Reshape", ["pe", c("tok_shape", np.array([1, width, TOKENS_SIDE * TOKENS_SIDE], np.int64))], "pe2")
    x = n("Transpose", ["pe2"], "tok0", perm=[0, 2, 1])  # [1, 5184, 1024]
    L = TOKENS_SIDE * TOKENS_SIDE
    hd = width // heads
    ones, zeros = c("ln_g", np.ones(width, np.float32)), c("ln_b", np.zeros(width, np.float32))
    heads_shape = c("heads_shape", np.array([1, L, 3, heads, hd], np.int64))
    back_shape = c("back_shape", np.array([1, L, width], np.int64))
    scale = c("attn_scale", np.float32(1 / np.sqrt(hd)))
    for i in range(blocks):
        p = f"b{i}_"
        h = n("LayerNormalization", [x, ones, zeros], p + "ln1", axis=-1)
        qkv = n("MatMul", [h, w(p + "qkv", width, 3 * width)], p + "qkv_o")
        qkv = n("Reshape", [qkv, heads_shape], p + "qkv_r")
        qkv = n("Transpose", [qkv], p + "qkv_t", perm=[2, 0, 3, 1, 4])  # [3, 1, H, L, hd]
        q = n("Gather", [qkv, c(p + "i0", np.int64(0))], p + "q", axis=0)
        k = n("Gather", [qkv, c(p + "i1", np.int64(1))], p + "k", axis=0)
        v = n("Gather", [qkv, c(p + "i2", np.int64(2))], p + "v", axis=0)
        kt = n("Transpose", [k], p + "kt", perm=[0, 1, 3, 2])
        a = n("MatMul", [q, kt], p + "a")
        a = n("Mul", [a, scale], p + "as")
        a = n("Softmax", [a], p + "sm", axis=-1)
        o = n("MatMul", [a, v], p + "o")  # [1, H, L, hd]
        o = n("Transpose", [o], p + "ot", perm=[0, 2, 1, 3])
        o = n("Reshape", [o, back_shape], p + "or")
        o = n("MatMul", [o, w(p + "proj", width, width)], p + "proj_o")
        x = n("Add", [x, o], p + "res1")
        h = n("LayerNormalization", [x, ones, zeros], p + "ln2", axis=-1)
        h = n("MatMul", [h, w(p + "fc1", width, mlp)], p + "fc1_o")
        h = n("Gelu", [h], p + "gelu")
        h = n("MatMul", [h, w(p + "fc2", mlp, width)], p + "fc2_o")
        x = n("Add", [x, h], p + "res2")
    n("Transpose", [x], "tok_t", perm=[0, 2, 1])
    n("Reshape", ["tok_t", c("grid_shape", np.array([1, width, TOKENS_SIDE, TOKENS_SIDE], np.int64))], "feat")
    outputs = []
    for lvl, side in enumerate((288, 144, 72)):
        f = n("Conv", ["feat", w(f"neck{lvl}", 256, width, 1, 1)], f"neck{lvl}_o")
        if side != 72:
            f = n("Resize", [f, "", "", c(f"sz{lvl}", np.array([1, 256, side, side], np.int64))], f"up{lvl}",
                  mode="linear")
        n("Identity", [f], f"backbone_fpn_{lvl}")
        n("Add", [f, w(f"pos{lvl}", 1, 256, 1, 1)], f"vision_pos_enc_{lvl}")
    for name in [f"vision_pos_enc_{i}" for i in range(3)] + [f"backbone_fpn_{i}" for i in range(3)]:
        side = {"0": 288, "1": 144, "2": 72}[name[-1]]
        outputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, 256, side, side]))
    graph = helper.make_graph(nodes, "sam3_image_encoder_bench",
                              [helper.make_tensor_value_info("image", TensorProto.UINT8, [3, 1008, 1008])],
                              outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
              location=path.name + ".data")
    flops = 2 * (PATCH * PATCH * 3 * width * L) + blocks * 2 * (
        L * width * 3 * width + 2 * L * L * width + L * width * width + 2 * L * width * mlp)
    return flops


def time_one(d: Path, device: str, precision: str, repeat: int, img: TileImage) -> dict:
    """Encode + decode `repeat` times through sam3tiles's OnnxRuntime on `device` at `precision`: median
    ms, the providers each graph ran on, and the last decode's masks (> 0.5) and scores."""
    rt = OnnxRuntime(d, device=device, precision=precision)
    prompt = rt.prepare_prompt("red")
    emb = rt.encode(img)  # warm-up (TensorRT builds its engines here the first time)
    rt.decode(emb, prompt)
    enc, dec = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        emb = rt.encode(img)
        t1 = time.perf_counter()
        det = rt.decode(emb, prompt)
        t2 = time.perf_counter()
        enc.append(t1 - t0)
        dec.append(t2 - t1)
    return {"precision": precision, "device": device, "providers": rt.session_providers,
            "encode_ms": 1000 * float(np.median(enc)), "decode_ms": 1000 * float(np.median(dec)),
            "masks": np.asarray(det.masks)[:, 0] > 0.5, "scores": np.asarray(det.scores)}


def mask_iou(a: np.ndarray, b: np.ndarray) -> float:
    """IoU of two decodes' masks (all instances together; 1.0 when both are empty)."""
    if a.shape != b.shape:
        return 0.0
    union = (a | b).sum()
    return float((a & b).sum() / union) if union else 1.0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda", "tensorrt"])
    ap.add_argument("--precisions", nargs="+", default=None, choices=["auto", "fp32", "tf32", "fp16"],
                    help="one timing each, in one run, masks compared with the first (default on a GPU: "
                         "fp32 tf32 fp16; fp16 runs on --device tensorrt)")
    ap.add_argument("--blocks", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--peak-tflops", type=float, default=67.0, help="device fp32 peak (H200: ~67 non-tensor)")
    ap.add_argument("--width", type=int, default=WIDTH, help="channels (SAM 3: 1024)")
    ap.add_argument("--dir", default=None, help="where to build the graphs (default: a temp dir)")
    ap.add_argument("--smoke", action="store_true", help="one 64-wide block, one repeat, CPU (checks the code)")
    args = ap.parse_args(argv)
    if args.smoke:
        args.blocks, args.repeat, args.device, args.width = 1, 1, "cpu", 64
    import onnxruntime as ort

    gpu = args.device != "cpu" and "CUDAExecutionProvider" in ort.get_available_providers()
    precisions = args.precisions or (["fp32", "tf32", "fp16"] if gpu else ["auto"])
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        d = Path(d)
        build_contract_models(d, decoder="colour", grid=4)  # language encoder + decoder of the contract
        t0 = time.perf_counter()
        flops = build_encoder(d / "sam3_image_encoder.onnx", args.blocks, width=args.width)
        print(f"built a {args.blocks}-block encoder ({flops / 1e12:.2f} TFLOP per tile) in "
              f"{time.perf_counter() - t0:.0f} s", flush=True)
        rng = np.random.default_rng(0)
        img = TileImage(rng.integers(0, 255, (3, 1008, 1008), dtype=np.uint8), np.ones((1008, 1008), bool))
        rows = []
        for p in precisions:
            device = "tensorrt" if p == "fp16" else args.device
            r = time_one(d, device, p, args.repeat, img)
            ref = rows[0] if rows else r
            e, dm = r["encode_ms"] / 1000, r["decode_ms"] / 1000
            print(f"{p:5s} on {device}: encode {r['encode_ms']:.1f} ms/tile (median of {args.repeat}), decode "
                  f"(test decoder) {r['decode_ms']:.1f} ms; {flops / e / 1e12:.1f} TFLOP/s = "
                  f"{100 * flops / e / 1e12 / args.peak_tflops:.0f}% of {args.peak_tflops:g}; "
                  f"{1 / (e + dm):.1f} tiles/s; masks IoU vs {ref['precision']}: "
                  f"{mask_iou(r['masks'], ref['masks']):.4f}"
                  f"; providers: {r['providers']}", flush=True)
            rows.append(r)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
