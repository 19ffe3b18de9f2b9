"""DistDL's base class of distributed layers: a torch.nn.Module."""

import torch


class Module(torch.nn.Module):
    """Base of the layers in distop.distdl.nn (DistDL's ``distdl.nn.module.Module``)."""
