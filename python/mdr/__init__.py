"""mdr — the metrale decode runtime, from Python.

Pure Python over libmdr (ctypes). The objects: Backend, Stream, Arena (its
buffers as zero-copy DLPack / __cuda_array_interface__ views), GraphCache
(a decode body captured into graphs per token count), Comm. Every failure
raises mdr.Error (a subclass per status) with .status and the backend's
text. mdr.torch (imported on first use; needs torch) runs torch bodies.
"""
from . import _lib
from ._core import (ALGOS, BUFFER_LAYOUT, BUFFER_LAYOUT_MLA, DTYPES, FAMILIES, FEATURES,
                    INPUT_DTYPES, Arena, Backend, BufferView, Comm, DeviceMemory, GraphCache, GraphInfo, GraphStats,
                    ModelConfig, Sizes, StepInput, StepInputInfo, Stream, build_features,
                    build_features_bits, preset, presets, sizes, version, version_number)
from ._errors import (STATUS_NAMES, BackendError, CaptureError, ClosedError, Error,
                      InvalidArgumentError, NoDeviceError, OutOfMemoryError, OutOfRangeError,
                      SizeOverflowError, StateError, UnsupportedError, status_string)

library_path = _lib.path
BUFFER_NAMES = tuple(_lib.BUFFER_NAMES)
STAGING_SLOTS = 8  # MDR_GRAPH_STAGING_SLOTS
STEP_INPUTS_MAX = 16  # MDR_STEP_INPUTS_MAX

__all__ = ["Arena", "Backend", "BufferView", "Comm", "DeviceMemory", "GraphCache", "GraphInfo",
           "GraphStats", "ModelConfig", "Sizes", "StepInput", "StepInputInfo", "Stream", "Error", "InvalidArgumentError",
           "OutOfRangeError", "SizeOverflowError", "OutOfMemoryError", "NoDeviceError",
           "BackendError", "CaptureError", "UnsupportedError", "StateError", "ClosedError",
           "version", "version_number", "build_features", "build_features_bits", "preset", "presets", "sizes",
           "status_string", "library_path", "BUFFER_NAMES", "BUFFER_LAYOUT",
           "BUFFER_LAYOUT_MLA", "FAMILIES",
           "STATUS_NAMES", "DTYPES", "ALGOS", "FEATURES", "INPUT_DTYPES", "STAGING_SLOTS",
           "STEP_INPUTS_MAX"]


def __getattr__(name):  # PEP 562: mdr.torch loads torch only when asked for
    if name == "torch":
        import importlib
        return importlib.import_module(".torch", __name__)
    raise AttributeError("module 'mdr' has no attribute %r" % name)
