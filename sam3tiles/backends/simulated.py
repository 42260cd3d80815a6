"""A simulated GPU: the reference backend plus fixed sleeps per encode and decode.

`time.sleep` releases the GIL as a GPU call does, so this measures how well the pipeline keeps a GPU
busy (benchmarks, cluster dry runs) without a GPU.
"""

from __future__ import annotations

import time
from typing import Sequence

from ..runtime import Detections, ExampleBox, PreparedPrompt, TileImage
from .reference import ReferenceRuntime


class SimulatedGpuRuntime(ReferenceRuntime):
    name = "simulated"

    def __init__(self, encode_seconds: float = 0.1, decode_seconds: float = 0.01) -> None:
        super().__init__()
        self.encode_seconds = encode_seconds
        self.decode_seconds = decode_seconds

    @property
    def identity(self) -> str:
        return f"simulated:{self.encode_seconds}:{self.decode_seconds}:" + super().identity

    def encode(self, image: TileImage) -> TileImage:
        time.sleep(self.encode_seconds)
        return super().encode(image)

    def decode(self, embedding: TileImage, prompt: PreparedPrompt,
               boxes: Sequence[ExampleBox] = ()) -> Detections:
        time.sleep(self.decode_seconds)
        return super().decode(embedding, prompt, boxes)
