"""DistDL's layer mixins: the halo arithmetic of window layers (convolution, pooling)."""

from . import conv_mixin, halo_mixin, pooling_mixin  # noqa: F401
