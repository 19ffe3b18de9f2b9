"""DistDL's distributed layers over distop, each in DistDL's module: the primitives (Broadcast,
SumReduce, AllSumReduce, Repartition / DistributedTranspose, HaloExchange), the feature-partitioned
convolutions and pooling, the channel- and generally partitioned convolutions and the
DistributedConv{1,2,3}d dispatcher, batch normalisation, the linear layer, the losses and
upsampling, and the sequential Interpolate."""

from . import all_sum_reduce, broadcast, halo_exchange, mixins, module, repartition  # noqa: F401
from . import sum_reduce, transpose  # noqa: F401
from . import batchnorm, conv_channel, conv_feature, linear, loss, pooling  # noqa: F401
from . import conv, conv_general  # noqa: F401
from . import interpolate, upsampling  # noqa: F401
from .all_sum_reduce import AllSumReduce
from .batchnorm import DistributedBatchNorm
from .conv_channel import (DistributedChannelConv1d, DistributedChannelConv2d,
                           DistributedChannelConv3d)
from .conv_feature import (DistributedFeatureConv1d, DistributedFeatureConv2d,
                           DistributedFeatureConv3d)
from .conv import DistributedConv1d, DistributedConv2d, DistributedConv3d
from .conv_general import (DistributedGeneralConv1d, DistributedGeneralConv2d,
                           DistributedGeneralConv3d)
from .linear import DistributedLinear
from .loss import (DistributedBCELoss, DistributedBCEWithLogitsLoss, DistributedKLDivLoss,
                   DistributedL1Loss, DistributedMSELoss, DistributedPoissonNLLLoss)
from .pooling import (DistributedAvgPool1d, DistributedAvgPool2d, DistributedAvgPool3d,
                      DistributedMaxPool1d, DistributedMaxPool2d, DistributedMaxPool3d)
from .broadcast import Broadcast
from .halo_exchange import HaloExchange
from .interpolate import Interpolate
from .module import Module
from .repartition import Repartition
from .sum_reduce import SumReduce
from .transpose import DistributedTranspose
from .upsampling import DistributedUpsample

__all__ = ["AllSumReduce", "Broadcast", "DistributedTranspose", "HaloExchange", "Module",
           "Repartition", "SumReduce", "DistributedBatchNorm", "DistributedChannelConv1d", "DistributedChannelConv2d",
           "DistributedChannelConv3d", "DistributedFeatureConv1d",
           "DistributedFeatureConv2d", "DistributedFeatureConv3d", "DistributedLinear",
           "DistributedBCELoss", "DistributedBCEWithLogitsLoss", "DistributedKLDivLoss",
           "DistributedL1Loss", "DistributedMSELoss", "DistributedPoissonNLLLoss",
           "DistributedAvgPool1d", "DistributedAvgPool2d", "DistributedAvgPool3d",
           "DistributedMaxPool1d", "DistributedMaxPool2d", "DistributedMaxPool3d",
           "DistributedConv1d", "DistributedConv2d", "DistributedConv3d",
           "DistributedGeneralConv1d", "DistributedGeneralConv2d", "DistributedGeneralConv3d",
           "DistributedUpsample", "Interpolate"]
