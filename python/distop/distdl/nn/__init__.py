"""DistDL's distributed layers over distop: the primitives (Broadcast, SumReduce, AllSumReduce,
Repartition / DistributedTranspose, HaloExchange), each in DistDL's module."""

from . import all_sum_reduce, broadcast, halo_exchange, mixins, module, repartition  # noqa: F401
from . import sum_reduce, transpose  # noqa: F401
from .all_sum_reduce import AllSumReduce
from .broadcast import Broadcast
from .halo_exchange import HaloExchange
from .module import Module
from .repartition import Repartition
from .sum_reduce import SumReduce
from .transpose import DistributedTranspose

__all__ = ["AllSumReduce", "Broadcast", "DistributedTranspose", "HaloExchange", "Module",
           "Repartition", "SumReduce"]
