"""The graphs as CoreML loads them: Gemm weights transposed in memory (`--device coreml`).

The v0.6.0 export stores every Gemm weight `{K, N}` with `transB=0` (onnxruntime's WebGPU provider runs
`transB=1` at half speed). onnxruntime's CoreML provider compiles a Gemm only when B is a constant
initializer with `transA=0` and `alpha=beta=1`, and the write-up reports CoreML taking minutes to load the
`transB=0` form, so the published loader transposes the weights back in memory for CoreML. This does the
same, without touching the files and without loading the weights through the `onnx` package:

* the graph (a few MB: the weights live in `.onnx.data`) is read with its weights left external;
* each eligible Gemm (B a rank-2 float initializer, `transA=0`, `transB=0`, `alpha=beta=1`) gets `transB=1`
  and B stored `{N, K}`: A @ B is then computed as A @ (B^T)^T, the same products (`exact` in the tests: the
  transformed graph's outputs equal the untransformed graph's on the CPU provider). A weight shared with
  other nodes is transposed into a copy of its own name;
* a transposed weight that lives in the `.data` file is read from it (memory-mapped), transposed, and handed
  to onnxruntime as an external initializer from memory (`SessionOptions.add_external_initializers`); the
  others are read from the `.data` file beside the graph as usual
  (`session.model_external_initializers_file_folder_path`).

Frames: none (graphs and arrays).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ModelError
from ..wording import opt

#: The onnxruntime session option that says where a graph loaded from memory finds its external data.
EXTERNAL_FOLDER = "session.model_external_initializers_file_folder_path"


@dataclass
class CoreMLGraph:
    """A graph ready for CoreML: its bytes, the transposed external weights to hand over, and how many Gemms
    were changed."""

    model: bytes
    folder: Path
    overrides: dict[str, np.ndarray] = field(default_factory=dict)
    transposed: int = 0

    def options(self, ort: Any, base: Any) -> Any:
        """`base` session options (threads, arena) plus the external data's folder and the transposed weights.
        The arrays must outlive the session: `self` holds them."""
        base.add_session_config_entry(EXTERNAL_FOLDER, str(self.folder))
        if self.overrides:
            base.add_external_initializers(list(self.overrides),
                                           [ort.OrtValue.ortvalue_from_numpy(a) for a in self.overrides.values()])
        return base


def _attr(node, name: str, default):
    for a in node.attribute:
        if a.name == name:
            return a.f if a.type == 1 else a.i
    return default


def _set_trans_b(node) -> None:
    from onnx import helper

    for a in node.attribute:
        if a.name == "transB":
            a.i = 1
            return
    node.attribute.append(helper.make_attribute("transB", 1))


def _eligible(node, inits: dict) -> bool:
    """A Gemm CoreML would compile once B is stored {N, K}: B a rank-2 float initializer, transA=0,
    transB=0, alpha=beta=1."""
    if node.op_type != "Gemm" or len(node.input) < 2 or node.input[1] not in inits:
        return False
    b = inits[node.input[1]]
    return (len(b.dims) == 2 and b.data_type == 1 and _attr(node, "transA", 0) == 0 and _attr(node, "transB", 0) == 0
            and _attr(node, "alpha", 1.0) == 1.0 and _attr(node, "beta", 1.0) == 1.0)


def _read(tensor, folder: Path) -> np.ndarray:
    """An initializer's values, from the .data file (memory-mapped) when external."""
    from onnx import numpy_helper

    if tensor.data_location != 1:  # TensorProto.EXTERNAL
        return numpy_helper.to_array(tensor)
    info = {e.key: e.value for e in tensor.external_data}
    shape = tuple(int(d) for d in tensor.dims)
    return np.memmap(folder / info["location"], dtype=np.float32, mode="r", offset=int(info.get("offset", 0)),
                     shape=shape)


def _users(graph) -> Counter:
    """How many node inputs name each value, subgraphs included (a weight may be read inside an If)."""
    n: Counter = Counter()
    for node in graph.node:
        n.update(node.input)
        for a in node.attribute:
            for g in ([a.g] if a.type == 5 else list(a.graphs) if a.type == 10 else []):
                n.update(_users(g))
    return n


def transpose_gemm_weights(model: Any, folder: Path) -> tuple[int, dict[str, np.ndarray]]:
    """In place on `model` (an onnx ModelProto read with its weights left external): every eligible Gemm
    (`_eligible`) gets transB=1 and its weight stored {N, K}. Returns the Gemms changed and the transposed
    weights that must be handed over from memory (those stored in the .data file), by initializer name."""
    from onnx import numpy_helper

    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    users = _users(graph)
    done: dict[str, str] = {}  # weight -> its transposed initializer's name
    overrides: dict[str, np.ndarray] = {}
    count = 0
    for node in graph.node:
        if not _eligible(node, inits):
            continue
        name = node.input[1]
        if name not in done:
            tensor = inits[name]
            values = np.ascontiguousarray(_read(tensor, folder).T)
            new = name if users[name] == 1 else f"{name}__transposed"
            if new != name:  # shared with other nodes: a copy of its own
                copy = graph.initializer.add()
                copy.CopyFrom(tensor)
                copy.name = new
                tensor = inits[new] = copy
            if tensor.data_location == 1:
                del tensor.dims[:]
                tensor.dims.extend(values.shape)
                overrides[new] = values
            else:
                tensor.CopyFrom(numpy_helper.from_array(values, new))
            done[name] = new
        node.input[1] = done[name]
        _set_trans_b(node)
        count += 1
    return count, overrides


def coreml_graph(path: str | Path) -> CoreMLGraph:
    """`path`'s graph with its Gemm weights transposed in memory (`transpose_gemm_weights`), as bytes for
    `onnxruntime.InferenceSession`; the files are not changed."""
    try:
        import onnx
    except ImportError:
        raise ModelError(f"{opt('device', 'coreml')} transposes the graphs' Gemm weights in memory with the "
                         "onnx package, which is not installed: pip install onnx "
                         "(or pip install 'sam3tiles[coreml]')") from None
    path = Path(path)
    model = onnx.load(str(path), load_external_data=False)
    count, overrides = transpose_gemm_weights(model, path.parent)
    return CoreMLGraph(model.SerializeToString(), path.parent, overrides, count)
