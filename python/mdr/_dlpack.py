"""DLPack capsules made with ctypes: DLManagedTensor (legacy, capsule name
"dltensor") and DLManagedTensorVersioned (DLPack 1.0, "dltensor_versioned").

Each export pins its owner (an arena) until the consumer calls the deleter,
or until the capsule is destroyed unconsumed."""
import ctypes
import threading
from ctypes import CFUNCTYPE, POINTER, Structure, c_int32, c_int64, c_uint8, c_uint16, c_uint32, c_uint64, c_void_p

KDLCPU = 1
KDLCUDA = 2

# dtype name -> (DLDataTypeCode, bits)
DL_DTYPES = {
    "int8": (0, 8), "int16": (0, 16), "int32": (0, 32), "int64": (0, 64),
    "uint8": (1, 8), "uint16": (1, 16), "uint32": (1, 32), "uint64": (1, 64),
    "float16": (2, 16), "float32": (2, 32), "float64": (2, 64),
    "bfloat16": (4, 16),
    "float8_e4m3fn": (10, 8), "float8_e5m2": (12, 8),
}


class DLDevice(Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLTensor(Structure):
    _fields_ = [("data", c_void_p), ("device", DLDevice), ("ndim", c_int32), ("dtype", DLDataType),
                ("shape", POINTER(c_int64)), ("strides", POINTER(c_int64)), ("byte_offset", c_uint64)]


DELETER = CFUNCTYPE(None, c_void_p)


class DLManagedTensor(Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", c_void_p), ("deleter", DELETER)]


class DLPackVersion(Structure):
    _fields_ = [("major", c_uint32), ("minor", c_uint32)]


class DLManagedTensorVersioned(Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", c_void_p), ("deleter", DELETER),
                ("flags", c_uint64), ("dl_tensor", DLTensor)]


# A private handle on the Python API: other code setting argtypes on
# ctypes.pythonapi's shared function objects cannot break ours.
_api = ctypes.PyDLL(ctypes.pythonapi._name, handle=ctypes.pythonapi._handle)
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [c_void_p, ctypes.c_char_p, c_void_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [c_void_p, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = c_void_p
_api.PyCapsule_GetPointer.argtypes = [c_void_p, ctypes.c_char_p]

# Names live as long as the module (a capsule keeps only the pointer).
_NAME = b"dltensor"
_NAME_V = b"dltensor_versioned"

# address of the managed struct -> (struct, shape, strides, release callable)
_live = {}
_lock = threading.Lock()


def _release(addr):
    with _lock:
        entry = _live.pop(addr, None)
    if entry is not None:
        try:
            entry[3]()
        except Exception:  # never raise into the consumer
            pass


@DELETER
def _deleter(addr):  # called by the consumer (any thread; ctypes takes the GIL)
    _release(addr)


_CAPSULE_DESTRUCTOR = CFUNCTYPE(None, c_void_p)


@_CAPSULE_DESTRUCTOR
def _capsule_destructor(capsule):
    # Unconsumed capsule (its name is still ours): nobody took ownership, so
    # release here. A consumer renames it "used_dltensor[_versioned]".
    for name in (_NAME, _NAME_V):
        if _api.PyCapsule_IsValid(capsule, name):
            addr = _api.PyCapsule_GetPointer(capsule, name)
            if addr:
                _release(addr)
            return


def live_exports():
    """Exports whose consumer has not released them yet."""
    with _lock:
        return len(_live)


def make_capsule(data, device, dtype, shape, release, versioned, read_only=False):
    """A capsule over `data` (an int address) of `shape` (a tuple, C order)
    and `dtype` (a DL_DTYPES key) on `device` ((type, id)). `release()` is
    called exactly once, when the consumer is done (or the capsule dies
    unconsumed)."""
    code, bits = DL_DTYPES[dtype]
    ndim = len(shape)
    shp = (c_int64 * max(ndim, 1))(*shape)
    strides = []
    acc = 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= max(int(d), 1)
    std = (c_int64 * max(ndim, 1))(*reversed(strides))
    m = DLManagedTensorVersioned() if versioned else DLManagedTensor()
    t = m.dl_tensor
    t.data = data or None
    t.device = DLDevice(device[0], device[1])
    t.ndim = ndim
    t.dtype = DLDataType(code, bits, 1)
    t.shape = ctypes.cast(shp, POINTER(c_int64))
    t.strides = ctypes.cast(std, POINTER(c_int64))
    t.byte_offset = 0
    addr = ctypes.addressof(m)
    m.manager_ctx = addr
    m.deleter = _deleter
    if versioned:
        m.version = DLPackVersion(1, 0)
        m.flags = 1 if read_only else 0
    with _lock:
        _live[addr] = (m, shp, std, release)
    try:
        return _api.PyCapsule_New(addr, _NAME_V if versioned else _NAME,
                                  ctypes.cast(_capsule_destructor, c_void_p))
    except BaseException:
        _release(addr)
        raise
