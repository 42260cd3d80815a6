"""Moved to `sam3tiles.testing.graphs` (benchmarks use it too); kept for tests written before the move.
Delete once no test imports `onnx_graphs`."""

from sam3tiles.testing.graphs import *  # noqa: F401,F403
from sam3tiles.testing.graphs import COLOUR_IDS, build_contract_models  # noqa: F401
