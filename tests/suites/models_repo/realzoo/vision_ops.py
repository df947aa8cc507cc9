"""Import torchvision where its C++ operators cannot load: PyPI's x86-64 torchvision wheels are built against CUDA
torch, so beside a CPU torch `torchvision/_C.so` fails to load (libc10_cuda.so) and torchvision's import then stops
on registering a fake kernel for an operator that was never defined ("operator torchvision::nms does not exist").

Defining those schemas (nms and qnms are the two it registers unconditionally) lets the import finish; the model
classes are pure Python. Detection operators (nms, roi_align) stay unavailable and none of these models calls them.
Where the extension loads (a CUDA torch, or torchvision's own CPU build), nothing is defined here."""

import importlib
import sys

import torch

_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
)
_library = None


def import_torchvision():
    global _library
    try:
        return importlib.import_module("torchvision")
    except RuntimeError as exc:
        if "operator torchvision::" not in str(exc) or "does not exist" not in str(exc):
            raise
    for name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
        del sys.modules[name]
    _library = torch.library.Library("torchvision", "FRAGMENT")  # kept alive: the schema lives as long as it
    for schema in _SCHEMAS:
        _library.define(schema)
    return importlib.import_module("torchvision")
