"""DistDL's DistributedTranspose, which is Repartition."""

from .repartition import Repartition

DistributedTranspose = Repartition
