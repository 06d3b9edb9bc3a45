"""rocke_aot.torch: prebuilt kernels inside PyTorch (the optional ``[torch]`` extra; docs/torch.md).

    configure(source=None, policy="report"|"strict", lanes=None)   the process's Dispatcher
    torch.ops.rocke_aot.linear / conv2d / conv_dgrad_patch / sdpa    custom ops with fakes (ops.py)
    prebuilt(policy)        a TorchFunctionMode routing F.linear, F.conv2d, F.scaled_dot_product_attention
    route(model, policy)    the same around a module's forward
    swap(model)             the module pass: nn.Linear / nn.Conv2d forwards call the ops (no mode)
    current().summary()     calls served, fallbacks with their reasons, shapes, selects

Layers: this package sits at the top beside the CLI (it composes the runner, the service client
and the client's Fetcher: source.py is the one module that couples to the client).
"""

from rocke_aot.torch.dispatch import POLICIES, Dispatcher, LaunchPath, Unserved
from rocke_aot.torch.mode import PrebuiltMode, prebuilt, route, swap
from rocke_aot.torch.runtime import configure, current

__all__ = ["POLICIES", "Dispatcher", "LaunchPath", "PrebuiltMode", "Unserved", "configure", "current", "prebuilt",
           "route", "swap"]
