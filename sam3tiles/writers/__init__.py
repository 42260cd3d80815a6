"""Writers: vector formats (GeoPackage, GeoParquet, FlatGeobuf, GeoJSON / QuPath), label images, and the
atomic write and lock every output goes through."""

from .atomic import DRIVERS, atomic_path, check_output, output_lock
from .labels import check_labels, write_labels
from .vector import NO_CRS_NOTE, write_vector

__all__ = ["DRIVERS", "NO_CRS_NOTE", "atomic_path", "check_labels", "check_output", "output_lock", "write_labels",
           "write_vector"]
