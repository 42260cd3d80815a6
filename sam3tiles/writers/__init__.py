"""Writers: vector formats (one table: `formats.FORMATS`), label images, and the atomic write and lock every
output goes through."""

from .atomic import atomic_path, check_output, output_lock
from .formats import FORMATS, Format, format_for
from .labels import check_labels, write_labels
from .vector import NO_CRS_NOTE, write_vector

__all__ = ["FORMATS", "NO_CRS_NOTE", "Format", "atomic_path", "check_labels", "check_output", "format_for",
           "output_lock", "write_labels", "write_vector"]
