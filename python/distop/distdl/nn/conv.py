"""DistDL's DistributedConv{1,2,3}d: one name for its three distributed convolutions, the class
chosen from the partitions given."""

import numpy as np

from .conv_channel import (DistributedChannelConv1d, DistributedChannelConv2d,
                           DistributedChannelConv3d)
from .conv_feature import (DistributedFeatureConv1d, DistributedFeatureConv2d,
                           DistributedFeatureConv3d)
from .conv_general import (DistributedGeneralConv1d, DistributedGeneralConv2d,
                           DistributedGeneralConv3d)


class DistributedConvSelector:
    """Makes (and returns) the convolution the partitions call for, as DistDL chooses it:

    - only P_x: the feature-partitioned convolution (P_x = [1, 1, *S]);
    - P_y and P_w, and neither P_x nor P_y splits a spatial axis: the channel-partitioned one;
    - P_y and P_w otherwise: the general one;
    - P_y or P_w alone: ValueError.

    The other arguments go to the chosen class (`buffer_manager` to the feature and general
    ones; DistDL's channel convolution does not take it)."""

    DistributedChannelConvType = None
    DistributedFeatureConvType = None
    DistributedGeneralConvType = None

    def __new__(cls, P_x, P_y=None, P_w=None, buffer_manager=None, *args, **kwargs):
        if P_y is None and P_w is None:
            return cls.DistributedFeatureConvType(P_x, *args, buffer_manager=buffer_manager,
                                                  **kwargs)
        if P_y is not None and P_w is not None:
            if np.all(np.asarray(P_x.shape[2:]) == 1) and np.all(np.asarray(P_y.shape[2:]) == 1):
                return cls.DistributedChannelConvType(P_x, P_y, P_w, *args, **kwargs)
            return cls.DistributedGeneralConvType(P_x, P_y, P_w, *args,
                                                  buffer_manager=buffer_manager, **kwargs)
        given = "P_y" if P_y is not None else "P_w"
        raise ValueError("Cannot determine valid matching class: a distributed convolution takes "
                         "P_x alone (feature partitioning) or P_x, P_y and P_w (channel or "
                         f"general partitioning), not P_x and {given} alone.")


class DistributedConv1d(DistributedConvSelector):
    """DistDL's 1-d distributed convolution (feature, channel or general)."""
    DistributedChannelConvType = DistributedChannelConv1d
    DistributedFeatureConvType = DistributedFeatureConv1d
    DistributedGeneralConvType = DistributedGeneralConv1d


class DistributedConv2d(DistributedConvSelector):
    """DistDL's 2-d distributed convolution (feature, channel or general)."""
    DistributedChannelConvType = DistributedChannelConv2d
    DistributedFeatureConvType = DistributedFeatureConv2d
    DistributedGeneralConvType = DistributedGeneralConv2d


class DistributedConv3d(DistributedConvSelector):
    """DistDL's 3-d distributed convolution (feature, channel or general)."""
    DistributedChannelConvType = DistributedChannelConv3d
    DistributedFeatureConvType = DistributedFeatureConv3d
    DistributedGeneralConvType = DistributedGeneralConv3d


__all__ = ["DistributedConvSelector", "DistributedConv1d", "DistributedConv2d",
           "DistributedConv3d"]
