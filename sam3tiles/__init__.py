"""sam3tiles: SAM 3 on images far larger than its 1008x1008 view.

Aspect-preserving overlapping tiles, one image embedding per tile, text, example-box or point prompts, masks
merged across seams into polygons in the source CRS. See `sam3tiles.segment`.

The public names load on first use (PEP 562): importing a submodule alone (napari's plugin discovery
imports `sam3tiles.integrations` at every napari start) does not load the run's machinery (Dask, the model,
the readers: ~2 s).
"""

from .run.planning.limits import ease_reservations

ease_reservations()  # under `ulimit -v`: before pyarrow loads (it reads its allocator's settings then)

from typing import TYPE_CHECKING  # noqa: E402

from .version import __version__  # noqa: E402

if TYPE_CHECKING:  # type checkers see the names themselves (their signatures), the run loads them on first use
    from .api import segment, segment_report
    from .options import Options
    from .prompts.points import GeoPoint
    from .prompts.prompt import GeoBox

__all__ = ["segment", "segment_report", "Options", "GeoBox", "GeoPoint", "__version__"]
_HOMES = {"segment": "api", "segment_report": "api", "Options": "options", "GeoBox": "prompts.prompt",
          "GeoPoint": "prompts.points"}


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module 'sam3tiles' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
