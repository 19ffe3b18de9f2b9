"""The input range a pooling window's output index reads (as a convolution's)."""

from .conv_mixin import ConvMixin


class PoolingMixin(ConvMixin):
    """Input ranges of a pooling layer: the same windows as a convolution's."""
