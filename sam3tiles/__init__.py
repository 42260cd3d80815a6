"""sam3tiles: SAM 3 on images far larger than its 1008x1008 view.

Aspect-preserving overlapping tiles, one image embedding per tile, text, example-box or point prompts, masks
merged across seams into polygons in the source CRS. See `sam3tiles.segment`.
"""

from .run.planning.limits import ease_reservations

ease_reservations()  # under `ulimit -v`: before pyarrow loads (it reads its allocator's settings then)

from .api import segment, segment_report
from .options import Options
from .prompts.points import GeoPoint
from .prompts.prompt import GeoBox
from .version import __version__

__all__ = ["segment", "segment_report", "Options", "GeoBox", "GeoPoint", "__version__"]
