"""A simulated GPU: the reference backend's answers, each encode and decode lasting a fixed time.

`time.sleep` releases the GIL as a GPU call does, so this measures how well the pipeline keeps a GPU
busy (benchmarks, cluster dry runs) without a GPU. The reference backend's own computation (colour
matching, about 10 ms of CPU per prompt and tile) stands in for the GPU's answer: it is done inside the
encode's time budget for every text prompt prepared so far, so that a tile costs `encode_seconds` plus
`decode_seconds` per prompt, as on a GPU, and not that plus the stand-in's CPU time. (A decode with example
boxes, or a budget smaller than the computation, takes the computation's time.)
"""

from __future__ import annotations

import time
from typing import Sequence

from .runtime import Detections, ExampleBox, PreparedPrompt, TileImage
from .reference import ReferenceRuntime


class _Embedding:
    """The simulated image embedding: the image, and the answers already computed for text prompts."""

    __slots__ = ("image", "answers")

    def __init__(self, image: TileImage, answers: dict) -> None:
        self.image = image
        self.answers = answers


class SimulatedGpuRuntime(ReferenceRuntime):
    name = "simulated"

    def __init__(self, encode_seconds: float = 0.1, decode_seconds: float = 0.01) -> None:
        super().__init__()
        self.encode_seconds = encode_seconds
        self.decode_seconds = decode_seconds
        self._texts: dict[str, PreparedPrompt] = {}

    @property
    def identity(self) -> str:
        return f"simulated:{self.encode_seconds}:{self.decode_seconds}:" + super().identity

    def prepare_prompt(self, text: str) -> PreparedPrompt:
        p = super().prepare_prompt(text)
        if p.usable and p.payload is not None:
            self._texts[text] = p
        return p

    def encode(self, image: TileImage) -> _Embedding:
        t0 = time.perf_counter()
        image = super().encode(image)
        answers = {}
        for text, p in list(self._texts.items()):
            answers[text] = super().decode(image, p)
            self.counters["decodes"] -= 1  # counted when a decode asks for it
        time.sleep(max(0.0, self.encode_seconds - (time.perf_counter() - t0)))
        return _Embedding(image, answers)

    def decode(self, embedding: _Embedding, prompt: PreparedPrompt,
               boxes: Sequence[ExampleBox] = ()) -> Detections:
        t0 = time.perf_counter()
        answer = embedding.answers.get(prompt.text) if not boxes else None
        if answer is not None:
            self.counters["decodes"] += 1
        else:
            answer = super().decode(embedding.image, prompt, boxes)
        time.sleep(max(0.0, self.decode_seconds - (time.perf_counter() - t0)))
        return answer
