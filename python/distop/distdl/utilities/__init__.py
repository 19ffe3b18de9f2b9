"""DistDL's utilities: ``torch`` (zero-volume tensors, padding) and ``slicing`` (balanced blocks)."""

from . import slicing, torch  # noqa: F401
