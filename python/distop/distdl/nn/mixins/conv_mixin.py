"""The input range a convolution's output index reads."""


class ConvMixin:
    """Input ranges of a convolution (stride, zero padding, dilation)."""

    def _compute_min_input_range(self, idx, kernel_size, stride, padding, dilation):
        """The first input index (of the unpadded input) the output at `idx` reads."""
        return stride * idx - padding

    def _compute_max_input_range(self, idx, kernel_size, stride, padding, dilation):
        """The last input index the output at `idx` reads."""
        return stride * idx - padding + dilation * (kernel_size - 1)
