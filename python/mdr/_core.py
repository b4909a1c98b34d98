"""The objects: Backend, Stream, Arena, BufferView, GraphCache, Comm."""
import ctypes
import dataclasses
import gc
import threading
from ctypes import byref, c_size_t, c_uint32, c_void_p

from . import _dlpack, _errors
from ._errors import (ClosedError, InvalidArgumentError, OutOfRangeError,
                      UnsupportedError, error_for)
from ._lib import (BUF_COUNT, BUFFER_NAMES, CAPTURE_DYNAMIC_FN, CAPTURE_FN, AllReduceDescC,
                   GraphCacheOptionsC, GraphInfoC, GraphStatsC, LimitsC, ModelConfigC, SegmentC,
                   SizesC, SizesOptionsC, StepInputC, StepInputInfoC, has, lib)

# ---- lifetimes ------------------------------------------------------------------
#
# Every native object sits in a _Handle. A handle counts its users: the
# handles made from it (an arena uses its backend, a cache its arena and
# stream) and the DLPack exports of its memory. close() marks it closed (the
# Python object then refuses every use) and destroys the native object once
# no user is left; the last user to go destroys it. So the C order (cache,
# then arena and stream, then backend) holds whatever order Python closes or
# collects the objects in, and memory a consumer still holds is never freed.

_lock = threading.RLock()


class _Handle:
    __slots__ = ("ptr", "destroy", "parents", "users", "closed", "keep", "what", "__weakref__")

    def __init__(self, ptr, destroy, parents=(), what="object"):
        self.ptr = ptr
        self.destroy = destroy
        self.users = 0
        self.closed = False
        self.keep = None  # what the native object points at (callbacks)
        self.what = what
        with _lock:
            for p in parents:
                p.users += 1
        self.parents = tuple(parents)

    def acquire(self):
        with _lock:
            if self.closed:
                raise ClosedError("the %s is closed" % self.what)
            self.users += 1

    def release(self):
        with _lock:
            self.users -= 1
            if self.closed and self.users == 0:
                self._destroy()

    def close(self):
        with _lock:
            if self.closed:
                return
            self.closed = True
            if self.users == 0:
                self._destroy()

    def _destroy(self):
        ptr, self.ptr = self.ptr, None
        try:
            if ptr is not None and self.destroy is not None:
                self.destroy(ptr)
        finally:
            self.keep = None
            for p in self.parents:
                p.release()

    @property
    def alive(self):
        return not self.closed


class _BodyHold:
    """A body's hold on a cache handle that the body closed (GraphCache
    _make_thunk), released by the call that ran the body once C returns."""
    __slots__ = ("h",)

    def __init__(self, h):
        self.h = h


class _Object:
    """close(), context manager, and a finalizer that closes."""
    _h = None

    def close(self):
        """Release the object. Using it afterwards raises mdr.ClosedError. The
        native object goes once the objects made from it and any DLPack
        export of its memory are gone too."""
        if self._h is not None:
            self._h.close()

    @property
    def closed(self):
        """True once close() was called (the native object may live on while
        objects made from it do)."""
        return self._h is None or self._h.closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def _ptr(self):
        h = self._h
        if h is None or h.closed:
            raise ClosedError("the %s is closed" % type(self).__name__, type(self).__name__)
        return h.ptr


def _text(b):
    return b.decode(errors="replace") if b else ""


def _check(status, call, backend_ptr=None):
    if status:
        text = _text(lib.mdr_backend_last_error(backend_ptr)) if backend_ptr else ""
        raise error_for(status, text, call)


def _bad(text, call=None):
    return InvalidArgumentError(text, call)


def _as_int(x, what):
    if isinstance(x, bool) or not hasattr(x, "__index__"):
        raise _bad("%s must be an integer, not %s" % (what, type(x).__name__))
    return x.__index__()


def _as_size(x, what):
    v = _as_int(x, what)
    if v < 0:
        raise OutOfRangeError("%s must be >= 0 (got %d)" % (what, v))
    if v >= 1 << 64:
        raise OutOfRangeError("%s too large (got %d)" % (what, v))
    return v


# ---- version and presets --------------------------------------------------------

def version():
    """The library's version, "major.minor.patch" (mdr_version_string)."""
    return _text(lib.mdr_version_string())


def version_number():
    """major*10000 + minor*100 + patch (mdr_version_number)."""
    return int(lib.mdr_version_number())


# The mdr_feature bits (include/mdr/version.h), in bit order.
FEATURES = {"cuda": 1, "nccl": 2, "nccl-device": 4, "nvtx": 8}


def build_features():
    """The optional parts this libmdr was compiled with, as a tuple of words
    in bit order ("cuda", "nccl", "nccl-device", "nvtx"; () for a host-only
    build): mdr_build_features_string. A feature compiled in may still be
    unavailable at run time (no GPU, no driver)."""
    return tuple(_text(lib.mdr_build_features_string()).split())


def build_features_bits():
    """The same as mdr_build_features(): the mdr.FEATURES bits OR-ed."""
    return int(lib.mdr_build_features())


FAMILIES = ("other", "qwen3_next", "glm5_next", "nemotron_h", "deepseek_v4")
_CONFIG_FIELDS = tuple(n for n, _ in ModelConfigC._fields_)


@dataclasses.dataclass
class ModelConfig:
    """mdr_model_config (include/mdr/config.h): every field of the sizing.
    `family` is one of mdr.FAMILIES or its index."""
    family: object = "other"
    hidden_size: int = 0
    intermediate_size: int = 0
    vocab_size: int = 0
    num_attention_heads: int = 0
    num_key_value_heads: int = 0
    head_dim: int = 0
    attn_gated: bool = False
    linear_num_key_heads: int = 0
    linear_key_head_dim: int = 0
    linear_num_value_heads: int = 0
    linear_value_head_dim: int = 0
    num_experts: int = 0
    num_experts_per_tok: int = 0
    zero_expert_num: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    moe_latent_size: int = 0
    mamba_num_heads: int = 0
    mamba_head_dim: int = 0
    ssm_state_size: int = 0
    n_groups: int = 0
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    o_groups: int = 0
    o_lora_rank: int = 0
    hc_mult: int = 0
    hc_lowrank: int = 0
    index_n_heads: int = 0
    index_head_dim: int = 0
    index_topk: int = 0
    index_compress_ratio: int = 0
    adapter_max_rank: int = 0
    mrope_interleaved: bool = False
    num_ssm_layers: int = 0

    def _to_c(self):
        c = ModelConfigC()
        fam = self.family
        if isinstance(fam, str):
            if fam not in FAMILIES:
                raise _bad("unknown family %r (one of %s)" % (fam, ", ".join(FAMILIES)))
            fam = FAMILIES.index(fam)
        fam = _as_int(fam, "family")
        if not 0 <= fam < len(FAMILIES):
            raise _bad("unknown family %d" % fam)
        c.family = fam
        for n in _CONFIG_FIELDS[1:]:
            v = getattr(self, n)
            if n in ("attn_gated", "mrope_interleaved"):
                setattr(c, n, bool(v))
            else:
                setattr(c, n, _as_size(v, n))
        return c

    @classmethod
    def _from_c(cls, c):
        kw = {n: getattr(c, n) for n in _CONFIG_FIELDS[1:]}
        f = c.family
        return cls(family=FAMILIES[f] if 0 <= f < len(FAMILIES) else f, **kw)


def presets():
    """The preset names, in the library's order."""
    return [_text(lib.mdr_model_preset_name(i)) for i in range(lib.mdr_model_preset_count())]


def preset(name):
    """The ModelConfig of a named preset (mdr.presets())."""
    if not isinstance(name, str):
        raise _bad("a preset name is a str, not %s" % type(name).__name__, "mdr_model_preset")
    c = ModelConfigC()
    st = lib.mdr_model_preset(name.encode(), byref(c))
    if st:
        raise error_for(st, "unknown preset %r (one of %s)" % (name, ", ".join(presets())),
                        "mdr_model_preset")
    return ModelConfig._from_c(c)


def _config_c(config):
    if isinstance(config, str):
        return preset(config)._to_c()
    if isinstance(config, ModelConfig):
        return config._to_c()
    if isinstance(config, dict):
        unknown = set(config) - set(_CONFIG_FIELDS)
        if unknown:
            raise _bad("unknown config fields: %s" % ", ".join(sorted(unknown)))
        return ModelConfig(**config)._to_c()
    raise _bad("config must be a preset name, an mdr.ModelConfig or a dict, not %s"
               % type(config).__name__)


def sizes(config, max_batch_tokens, max_seq_len=4096, kv_block_size=16, max_batch_size=None,
          glm_trim=False, splitk_sm_count=None):
    """Every buffer's bytes for a config and serve limits (mdr_sizes_from_config_ex):
    a dict name -> bytes, plus "max_batch_tokens" and "logits_rows" under
    mdr.Sizes attributes."""
    return Sizes._compute(config, max_batch_tokens, max_seq_len, kv_block_size, max_batch_size,
                          glm_trim, splitk_sm_count)


class Sizes:
    """mdr_sizes: .bytes (dict name -> bytes), .max_batch_tokens, .logits_rows."""

    def __init__(self, c, mla=False):
        self._c = c
        self.mla = bool(mla)  # kv_lora_rank > 0 (SIZES.md §2.2): buffer dtypes differ
        self.bytes = {BUFFER_NAMES[i]: int(c.bytes[i]) for i in range(BUF_COUNT)}
        self.max_batch_tokens = int(c.max_batch_tokens)
        self.logits_rows = int(c.logits_rows)

    @classmethod
    def _compute(cls, config, max_batch_tokens, max_seq_len, kv_block_size, max_batch_size,
                 glm_trim, splitk_sm_count):
        if max_batch_tokens is None:
            raise _bad("max_batch_tokens is required")
        cfg = _config_c(config)
        m = _as_size(max_batch_tokens, "max_batch_tokens")
        lim = LimitsC(m, _as_size(max_seq_len, "max_seq_len"),
                      _as_size(kv_block_size, "kv_block_size"),
                      _as_size(m if max_batch_size is None else max_batch_size, "max_batch_size"))
        o = SizesOptionsC()
        lib.mdr_sizes_options_default(byref(o))
        o.glm_trim = bool(glm_trim)
        if splitk_sm_count is not None:
            o.splitk_sm_count = _as_size(splitk_sm_count, "splitk_sm_count")
        s = SizesC()
        st = lib.mdr_sizes_from_config_ex(byref(cfg), byref(lim), byref(o), byref(s))
        if st:
            why = {1: "splitk_sm_count must be >= 1", 2: "max_batch_tokens must be >= 1",
                   3: "a size overflows size_t"}.get(st, "")
            raise error_for(st, why, "mdr_sizes_from_config_ex")
        return cls(s, mla=cfg.kv_lora_rank > 0)

    def total_bytes(self):
        """The seed's total_bytes: the sum of every entry but o_latent and
        norm_unit_w (mdr_sizes_total_bytes). mdr.SizeOverflowError when the sum
        overflows."""
        n = c_size_t()
        _check(lib.mdr_sizes_total_bytes(byref(self._c), byref(n)), "mdr_sizes_total_bytes")
        return n.value


# ---- backend and streams ---------------------------------------------------------

class Backend(_Object):
    """Where device memory, streams and graphs come from: Backend.cuda(device),
    Backend.host() or Backend.default()."""

    def __init__(self, *a, **k):
        raise TypeError("use mdr.Backend.cuda(device), .host() or .default()")

    @classmethod
    def _make(cls, ptr, device):
        self = object.__new__(cls)
        self._h = _Handle(ptr, lib.mdr_backend_destroy, what="backend")
        self.name = _text(lib.mdr_backend_name(ptr))
        self.device = device if self.name == "cuda" else -1
        return self

    @classmethod
    def cuda(cls, device=0):
        """The CUDA backend on `device` (mdr_backend_cuda_create): every call
        through it runs on that device. mdr.NoDeviceError without a driver or
        that device, mdr.UnsupportedError in a build without CUDA."""
        d = _as_int(device, "device")
        p = c_void_p()
        st = lib.mdr_backend_cuda_create(d, byref(p))
        if st:
            raise error_for(st, {5: "no CUDA driver or no device %d" % d,
                                 8: "this libmdr was built without CUDA",
                                 1: "bad device %d" % d}.get(st, ""), "mdr_backend_cuda_create")
        return cls._make(p.value, d)

    @classmethod
    def host(cls):
        """The host backend: the CPU runs what the GPU would, graphs
        included, so everything above the backend runs without a GPU."""
        p = c_void_p()
        _check(lib.mdr_backend_host_create(byref(p)), "mdr_backend_host_create")
        return cls._make(p.value, -1)

    @classmethod
    def default(cls):
        """The CUDA backend on device 0 when one is present, else the host
        backend (mdr_backend_create_default). Never fails for lack of a GPU."""
        p = c_void_p()
        _check(lib.mdr_backend_create_default(byref(p)), "mdr_backend_create_default")
        return cls._make(p.value, 0)

    @property
    def is_cuda(self):
        """True for the CUDA backend, False for the host backend."""
        return self.name == "cuda"

    @property
    def last_error(self):
        """The latest failure this backend recorded in the calling thread."""
        return _text(lib.mdr_backend_last_error(self._ptr()))

    def _check(self, st, call):
        if st:
            raise error_for(st, _text(lib.mdr_backend_last_error(self._h.ptr)), call)

    def stream(self):
        """A new stream of this backend (CUDA: non-blocking)."""
        b = self._ptr()
        s = c_void_p()
        self._check(lib.mdr_backend_stream_create(b, byref(s)), "mdr_backend_stream_create")
        return Stream._make(self, s.value, owned=True)

    def synchronize(self, stream):
        """Block until everything enqueued on `stream` has run: an mdr.Stream
        of this backend, or on the CUDA backend an engine's own stream (a
        torch stream or a cudaStream_t as an int). Not capture-safe."""
        b = self._ptr()
        self._check(lib.mdr_backend_synchronize(b, _stream_ptr(stream, self)),
                    "mdr_backend_synchronize")

    def alloc(self, nbytes):
        """Device memory outside any arena (mdr_backend_alloc), freed by close()."""
        return DeviceMemory(self, nbytes)

    def copy_h2d(self, dst, src):
        """Blocking copy of a bytes-like `src` to device address `dst`."""
        b = self._ptr()
        mv = memoryview(src).cast("B")
        n = mv.nbytes
        buf = (ctypes.c_char * n).from_buffer_copy(mv) if n else None
        self._check(lib.mdr_backend_copy_h2d(b, _addr(dst), buf, n), "mdr_backend_copy_h2d")

    def copy_d2h(self, src, nbytes):
        """Blocking copy of `nbytes` from device address `src`; returns bytes."""
        b = self._ptr()
        n = _as_size(nbytes, "nbytes")
        buf = ctypes.create_string_buffer(n)
        self._check(lib.mdr_backend_copy_d2h(b, buf, _addr(src), n), "mdr_backend_copy_d2h")
        return buf.raw

    def fill(self, dst, value, nbytes):
        """Set `nbytes` bytes at device address `dst` (an int, a BufferView
        or a DeviceMemory) to the byte `value` (its low 8 bits), blocking: for
        tests, tools and setup, not capture-safe. nbytes == 0 does nothing."""
        b = self._ptr()
        self._check(lib.mdr_backend_fill(b, _addr(dst), _as_int(value, "value") & 0xFF,
                                         _as_size(nbytes, "nbytes")), "mdr_backend_fill")

    def memset_async(self, dst, value, nbytes, stream):
        """Enqueue a memset on `stream` (capture-safe: what a body may use)."""
        b = self._ptr()
        self._check(lib.mdr_backend_memset_async(b, _addr(dst), _as_int(value, "value") & 0xFF,
                                                 _as_size(nbytes, "nbytes"),
                                                 _stream_ptr(stream, self)),
                    "mdr_backend_memset_async")

    def __repr__(self):
        return "<mdr.Backend %s%s%s>" % (self.name, ":%d" % self.device if self.is_cuda else "",
                                         " closed" if self.closed else "")


def _addr(x):
    if isinstance(x, (BufferView, DeviceMemory)):
        return x.ptr
    return _as_size(x, "address")


class DeviceMemory(_Object):
    """Memory from mdr_backend_alloc: .ptr, .nbytes; DLPack like a buffer
    view (uint8, or the dtype given to view())."""

    def __init__(self, backend, nbytes):
        b = backend._ptr()
        n = _as_size(nbytes, "nbytes")
        p = ctypes.c_uint64()
        backend._check(lib.mdr_backend_alloc(b, n, byref(p)), "mdr_backend_alloc")
        self.backend = backend
        self.ptr = p.value
        self.nbytes = n
        self._h = _Handle(p.value, lambda q, b=b: lib.mdr_backend_free(b, q), (backend._h,),
                          what="device memory")

    def view(self, dtype="uint8", shape=None):
        """A BufferView of this memory as `dtype` (one of mdr.DTYPES), shaped
        `shape` (default: 1-D, every whole element), for DLPack and
        __cuda_array_interface__ consumers."""
        return BufferView._raw(self, "device_memory", self.ptr, self.nbytes, self.backend,
                               dtype, shape)


class Stream(_Object):
    """A stream: one made by Backend.stream() (owned, destroyed by close()),
    or an engine's own (Stream.wrap: a torch.cuda.Stream, anything with
    __cuda_stream__ or .cuda_stream, or a raw cudaStream_t int), borrowed."""

    def __init__(self, *a, **k):
        raise TypeError("use backend.stream() or mdr.Stream.wrap(backend, stream)")

    @classmethod
    def _make(cls, backend, handle, owned):
        self = object.__new__(cls)
        self.backend = backend
        self.handle = int(handle or 0)
        self.owned = owned
        b = backend._h.ptr
        destroy = (lambda s, b=b: lib.mdr_backend_stream_destroy(b, s)) if owned else None
        self._h = _Handle(self.handle, destroy, (backend._h,), what="stream")
        return self

    @classmethod
    def wrap(cls, backend, stream):
        """Borrow an engine's stream (CUDA backend): never destroyed by mdr."""
        if isinstance(stream, Stream):
            return stream
        backend._ptr()
        if not backend.is_cuda:
            raise _bad("only a CUDA backend takes a foreign stream; use backend.stream()",
                       "Stream.wrap")
        return cls._make(backend, _foreign_stream(stream), owned=False)

    @property
    def ptr(self):
        """The native stream (a cudaStream_t on the CUDA backend) as an int.
        mdr.ClosedError once the stream is closed."""
        return self._ptr()

    def synchronize(self):
        """Block until everything enqueued on the stream has run."""
        s = self._ptr()
        self.backend._check(lib.mdr_backend_synchronize(self.backend._ptr(), s),
                            "mdr_backend_synchronize")

    def __cuda_stream__(self):
        """The CUDA stream protocol: (version 0, cudaStream_t as int)."""
        if not self.backend.is_cuda:
            raise UnsupportedError("a host-backend stream is not a CUDA stream")
        return (0, self._ptr())

    def __int__(self):
        return self._ptr()

    def __repr__(self):
        return "<mdr.Stream 0x%x on %s%s>" % (self.handle, self.backend.name,
                                               " closed" if self.closed else "")


def _foreign_stream(obj):
    if isinstance(obj, bool):
        raise _bad("a stream is not a bool")
    if hasattr(obj, "__index__"):
        return obj.__index__()
    cs = getattr(obj, "__cuda_stream__", None)
    if cs is not None:
        v = cs() if callable(cs) else cs
        return int(v[1] if isinstance(v, tuple) else v)
    cs = getattr(obj, "cuda_stream", None)
    if cs is not None:
        return int(cs)
    raise _bad("not a stream: %r (an mdr.Stream, a torch.cuda.Stream, an object with "
               "__cuda_stream__, or a cudaStream_t int)" % (obj,))


def _stream_ptr(stream, backend):
    if isinstance(stream, Stream):
        if stream.backend is not backend and stream.backend._h is not backend._h:
            raise _bad("the stream belongs to another backend")
        return stream._ptr()
    if stream is None:
        raise _bad("a stream is required (backend.stream(), or the engine's own)")
    if not backend.is_cuda:
        raise _bad("on the host backend a stream comes from backend.stream() only")
    return _foreign_stream(stream)


# ---- the arena --------------------------------------------------------------------

# Element type and row extent of each buffer (docs/SIZES.md §4; the comments
# of MDR_BUFFER_LIST in include/mdr/sizes.h). Rows: "M" token-major,
# "Mp" ceil16(M), "Mk" ceil16(max(M, 3)), "logits" logits_rows, "M1" one
# element per token (a flat view; ids at [0:M]), None: not
# token-major / mixed widths (a flat view). The exported element type is the
# one DLPack consumers know: FP8 and opaque "4-byte" scales go as uint8 and
# uint32 bit containers (view() reinterprets). MLA models (kv_lora_rank > 0)
# re-use ssm_conv_out_f32 for BF16 per-head RoPE rows: BUFFER_LAYOUT_MLA.
BUFFER_LAYOUT = {
    "hidden_states": ("bfloat16", "M", "BF16"),
    "residual": ("bfloat16", "M", "BF16"),
    "norm_output": ("bfloat16", "M", "BF16"),
    "qkv_output": ("bfloat16", "Mp", "BF16"),
    "attn_output": ("bfloat16", "M", "BF16"),
    "gate_logits": ("bfloat16", "M", "BF16"),
    "gate_logits_f32": ("float32", "M", "F32"),
    "moe_router_in_f32": ("float32", "M", "F32"),
    "moe_output": ("bfloat16", "Mp", "BF16"),
    "logits": ("bfloat16", "logits", "BF16"),
    "ssm_qkvz": ("bfloat16", None, "BF16, rows of mixed widths"),
    "ssm_ba": ("bfloat16", "M", "BF16"),
    "ssm_deinterleaved": ("bfloat16", None, "BF16, rows of mixed widths"),
    "ssm_gates": ("float32", "M", "F32"),
    "ssm_conv_out_f32": ("float32", "M", "F32 (MLA: BF16 rope rows)"),
    "scratch": ("uint8", None, "bytes"),
    "ssd_scratch": ("float32", None, "F32"),
    "token_ids": ("uint32", "M1", "u32, one per token (M, 256-byte floor)"),
    "expert_gate_out": ("bfloat16", "Mk", "BF16"),
    "expert_up_out": ("bfloat16", "Mk", "BF16"),
    "expert_down_out": ("bfloat16", "Mk", "BF16"),
    "splitk_workspace": ("float32", None, "F32"),
    "gdn_fla_scratch": ("uint8", None, "BF16/F32"),
    "ffn_act_q8": ("uint8", None, "bytes, M rows + 1 MiB"),
    "ffn_act_a": ("int8", "Mp", "int8"),
    "ffn_act_scale": ("uint32", "Mp", "4-byte"),
    "ffn_gate_up_fused": ("bfloat16", None, "BF16"),
    "ffn_act_scale_kmajor": ("float32", "Mp", "F32"),
    "fp8_act": ("uint8", "Mp", "FP8"),
    "fp8_act_scale": ("float32", "Mp", "F32"),
    "fp8_act_scale_kmajor": ("float32", "Mp", "F32"),
    "q2_dequant_scratch": ("bfloat16", None, "BF16"),
    "q2_act_q8": ("uint8", "M", "bytes"),
    "o_latent": ("bfloat16", "M", "BF16"),
    "norm_unit_w": ("bfloat16", None, "BF16"),
    "hc_streams": ("float32", "M", "F32"),
    "hc_lowrank_scratch": ("uint8", None, "F32/BF16"),
    "qsa_select_scratch": ("uint8", None, "mixed"),
    "hc_post": ("float32", "M", "F32"),
    "hc_comb": ("float32", "M", "F32"),
    "lora_xa": ("bfloat16", "M", "BF16"),
    "lora_delta": ("bfloat16", "M", "BF16"),
    "lora_hact": ("bfloat16", "M", "BF16"),
    "lora_seq_slot": ("int32", "M1", "i32, one per token"),
    "moe_fp8_scratch": ("uint8", None, "bytes"),
    "ssm_rowwise_w_bf16": ("bfloat16", None, "BF16"),
}

BUFFER_LAYOUT_MLA = {
    "ssm_conv_out_f32": ("bfloat16", "M", "BF16 rope rows (MLA)"),
}

ITEMSIZE = {n: b // 8 for n, (_, b) in _dlpack.DL_DTYPES.items()}
_CAI_TYPESTR = {"int8": "|i1", "int16": "<i2", "int32": "<i4", "int64": "<i8", "uint8": "|u1",
                "uint16": "<u2", "uint32": "<u4", "uint64": "<u8", "float16": "<f2",
                "float32": "<f4", "float64": "<f8",
                # no typestr for these: their bit containers
                "bfloat16": "<u2", "float8_e4m3fn": "|u1", "float8_e5m2": "|u1"}
_ZERO = {"memset": 0, "fused": 1}
_ROWS = {"seed": 0, "all": 1}
_MODES = {"exact": 0, "ladder": 1, "dynamic": 2}
_DYN_IMPL = {"node_update": 0, "device_count": 1}
DTYPES = {"bf16": 0, "bfloat16": 0, "fp16": 1, "float16": 1, "fp32": 2, "float32": 2}
ALGOS = {"auto": 0, "nccl": 1, "one_shot": 2, "one-shot": 2, "two_shot": 3, "two-shot": 3}


def _ceil16(x):
    return (x + 15) // 16 * 16


def _shape_for(nbytes, dtype, rows):
    it = ITEMSIZE[dtype]
    if nbytes == 0:
        return dtype, (0,)
    if rows and nbytes % (rows * it) == 0:
        return dtype, (rows, nbytes // (rows * it))
    if nbytes % it == 0:
        return dtype, (nbytes // it,)
    return "uint8", (nbytes,)


class Arena(_Object):
    """Every activation buffer of a decode step in one allocation.

        arena = mdr.Arena(backend, "qwen3-next-80b", max_batch_tokens=64,
                          max_seq_len=4096, kv_block_size=16, max_batch_size=4)
        h = arena["hidden_states"]          # a BufferView: (M, hidden) bfloat16
    """

    def __init__(self, backend, config, max_batch_tokens=None, max_seq_len=4096, kv_block_size=16,
                 max_batch_size=None, glm_trim=False, splitk_sm_count=None):
        if not isinstance(backend, Backend):
            raise _bad("backend must be an mdr.Backend, not %s" % type(backend).__name__,
                       "Arena")
        sz = config if isinstance(config, Sizes) else Sizes._compute(
            config, max_batch_tokens, max_seq_len, kv_block_size, max_batch_size, glm_trim,
            splitk_sm_count)
        b = backend._ptr()
        p = c_void_p()
        backend._check(lib.mdr_arena_create(b, byref(sz._c), byref(p)), "mdr_arena_create")
        self._init(backend, p.value, (backend._h,), None, sz)

    def _init(self, backend, ptr, parents, comm, mla_of=None):
        self.backend = backend
        self.comm = comm
        self._h = _Handle(ptr, lib.mdr_arena_destroy, parents, what="arena")
        s = lib.mdr_arena_sizes(ptr).contents
        self.sizes = Sizes(SizesC.from_buffer_copy(s), getattr(mla_of, "mla", False))
        self.max_batch_tokens = int(lib.mdr_arena_max_batch_tokens(ptr))
        self.logits_rows = self.sizes.logits_rows
        self.slab_bytes = int(lib.mdr_arena_slab_bytes(ptr))
        self._views = {}

    @classmethod
    def on_comms(cls, comms, config, max_batch_tokens=None, max_seq_len=4096, kv_block_size=16,
                 max_batch_size=None, glm_trim=False, splitk_sm_count=None):
        """The arenas of n ranks driven from one thread (mdr_arena_create_on_comms):
        comms[i] gets the i-th arena."""
        comms = list(comms)
        if not comms or not all(isinstance(c, Comm) for c in comms):
            raise _bad("comms must be a non-empty list of mdr.Comm", "Arena.on_comms")
        sz = config if isinstance(config, Sizes) else Sizes._compute(
            config, max_batch_tokens, max_seq_len, kv_block_size, max_batch_size, glm_trim,
            splitk_sm_count)
        n = len(comms)
        arr = (c_void_p * n)(*[c._ptr() for c in comms])
        out = (c_void_p * n)()
        st = lib.mdr_arena_create_on_comms(arr, n, byref(sz._c), out)
        if st:
            raise error_for(st, _text(lib.mdr_backend_last_error(comms[0].backend._h.ptr)),
                            "mdr_arena_create_on_comms")
        res = []
        for i, c in enumerate(comms):
            a = object.__new__(cls)
            a._init(c.backend, out[i], (c._h,), c, sz)
            res.append(a)
        return res

    @classmethod
    def on_comm(cls, comm, config, max_batch_tokens=None, max_seq_len=4096, kv_block_size=16,
                max_batch_size=None, glm_trim=False, splitk_sm_count=None):
        """The arena of one rank (collective: every rank calls it, each from its
        own thread or process)."""
        if not isinstance(comm, Comm):
            raise _bad("comm must be an mdr.Comm", "Arena.on_comm")
        sz = config if isinstance(config, Sizes) else Sizes._compute(
            config, max_batch_tokens, max_seq_len, kv_block_size, max_batch_size, glm_trim,
            splitk_sm_count)
        p = c_void_p()
        st = lib.mdr_arena_create_on_comm(comm._ptr(), byref(sz._c), byref(p))
        comm.backend._check(st, "mdr_arena_create_on_comm")
        a = object.__new__(cls)
        a._init(comm.backend, p.value, (comm._h,), comm, sz)
        return a

    # -- buffers
    def names(self):
        """The seed's buffer names, in the arena's order (mdr.BUFFER_NAMES)."""
        return list(BUFFER_NAMES)

    def buffer(self, name):
        """The BufferView of buffer `name` (its seed name, e.g. "hidden_states")."""
        self._ptr()
        v = self._views.get(name)
        if v is None:
            if not isinstance(name, str):
                raise _bad("a buffer name is a str, not %s" % type(name).__name__,
                           "Arena.buffer")
            if name not in BUFFER_NAMES:
                raise _bad("unknown buffer %r" % name, "mdr_buffer_from_name")
            v = BufferView._of_arena(self, BUFFER_NAMES.index(name))
            self._views[name] = v
        return v

    __getitem__ = buffer

    def __contains__(self, name):
        return name in BUFFER_NAMES

    def __iter__(self):
        return iter(BUFFER_NAMES)

    def buffers(self):
        """Every buffer's BufferView, by name."""
        return {n: self.buffer(n) for n in BUFFER_NAMES}

    # -- zeroing
    def _chk(self, st, call):
        if st:
            raise error_for(st, _text(lib.mdr_backend_last_error(self.backend._h.ptr)), call)

    def zero_all(self, stream):
        """Enqueue the seed's zero_all on `stream`: 18 buffers, whole, as
        per-buffer memsets or one fused kernel (zero_strategy). Asynchronous
        and capture-safe."""
        a = self._ptr()
        self._chk(lib.mdr_arena_zero_all(a, _stream_ptr(stream, self.backend)),
                  "mdr_arena_zero_all")

    def zero_all_rows(self, stream, tokens):
        """Enqueue the seed's zero_all_rows(tokens) on `stream`: splitk_workspace,
        logits and scratch whole, the other 15 buffers for the rows of `tokens`
        tokens (under rows_policy "all", logits too only for its first
        min(tokens, logits_rows) rows). Asynchronous and capture-safe."""
        a = self._ptr()
        self._chk(lib.mdr_arena_zero_all_rows(a, _stream_ptr(stream, self.backend),
                                              _as_size(tokens, "tokens")),
                  "mdr_arena_zero_all_rows")

    def zero_prefill_essentials(self, stream):
        """Enqueue the seed's zero_prefill_essentials on `stream`: 7 buffers,
        whole. Asynchronous and capture-safe."""
        a = self._ptr()
        self._chk(lib.mdr_arena_zero_prefill_essentials(a, _stream_ptr(stream, self.backend)),
                  "mdr_arena_zero_prefill_essentials")

    def zero_plan(self, tokens):
        """The segments zero_all_rows(tokens) clears: a list of (ptr, bytes)."""
        a = self._ptr()
        n = c_size_t()
        t = _as_size(tokens, "tokens")
        self._chk(lib.mdr_arena_zero_plan(a, t, None, 0, byref(n)), "mdr_arena_zero_plan")
        segs = (SegmentC * max(n.value, 1))()
        self._chk(lib.mdr_arena_zero_plan(a, t, segs, n.value, byref(n)), "mdr_arena_zero_plan")
        return [(segs[i].ptr, segs[i].bytes) for i in range(n.value)]

    @property
    def zero_strategy(self):
        """How the zeroing helpers clear memory: "memset" (one per buffer,
        the default) or "fused" (one kernel); settable. Setting "fused" on a
        backend without the fused kernel raises mdr.UnsupportedError and
        leaves it unchanged."""
        return {0: "memset", 1: "fused"}.get(lib.mdr_arena_zero_strategy(self._ptr()))

    @zero_strategy.setter
    def zero_strategy(self, value):
        if value not in _ZERO:
            raise _bad("zero strategy is 'memset' or 'fused', not %r" % (value,))
        self._chk(lib.mdr_arena_set_zero_strategy(self._ptr(), _ZERO[value]),
                  "mdr_arena_set_zero_strategy")

    @property
    def rows_policy(self):
        """The row policy of zero_all_rows: "seed" (the seed's coverage, the
        default) or "all" (logits too only for the rows in use); settable."""
        return {0: "seed", 1: "all"}.get(lib.mdr_arena_rows_policy(self._ptr()))

    @rows_policy.setter
    def rows_policy(self, value):
        if value not in _ROWS:
            raise _bad("rows policy is 'seed' or 'all', not %r" % (value,))
        self._chk(lib.mdr_arena_set_rows_policy(self._ptr(), _ROWS[value]),
                  "mdr_arena_set_rows_policy")

    @property
    def poison(self):
        """Poison mode (settable; default off, MDR_POISON=1 at create turns it
        on): zero_all_rows also fills what it leaves of each row-trimmed
        buffer with 0xFF bytes (a NaN in bf16, fp16 and fp32), so a kernel
        that reads rows it never wrote shows up. A debugging aid."""
        return bool(lib.mdr_arena_poison(self._ptr()))

    @poison.setter
    def poison(self, on):
        self._chk(lib.mdr_arena_set_poison(self._ptr(), 1 if on else 0), "mdr_arena_set_poison")

    # -- tensor parallelism
    @property
    def window(self):
        """The arena's window kind on its communicator: "none" (not on one),
        "symmetric" (an NCCL symmetric window, registered once), "plain"
        (device memory, no window) or "host" (a host communicator)."""
        if not has("mdr_arena_window"):
            return "none"
        return _text(lib.mdr_window_name(lib.mdr_arena_window(self._ptr())))

    def _desc(self, buf, dtype, tokens, count_ptr, residual, algo, norm_output=None, norm_weight=0,
              norm_eps=0.0):
        if buf not in BUFFER_NAMES:
            raise _bad("unknown buffer %r" % (buf,), "mdr_all_reduce")
        if dtype not in DTYPES:
            raise _bad("dtype is one of %s, not %r" % (", ".join(DTYPES), dtype), "mdr_all_reduce")
        if algo not in ALGOS:
            raise _bad("algo is one of %s, not %r" % (", ".join(ALGOS), algo), "mdr_all_reduce")
        if residual is not None and residual not in BUFFER_NAMES:
            raise _bad("unknown residual buffer %r" % (residual,), "mdr_all_reduce")
        if norm_output is not None and norm_output not in BUFFER_NAMES:
            raise _bad("unknown norm_output buffer %r" % (norm_output,), "mdr_all_reduce")
        return AllReduceDescC(BUFFER_NAMES.index(buf), DTYPES[dtype], _as_size(tokens, "tokens"),
                              _as_size(count_ptr or 0, "count_ptr"),
                              BUF_COUNT if residual is None else BUFFER_NAMES.index(residual),
                              ALGOS[algo],
                              BUF_COUNT if norm_output is None else BUFFER_NAMES.index(norm_output),
                              _as_size(norm_weight or 0, "norm_weight"), float(norm_eps))

    def all_reduce(self, buf, tokens, stream, dtype="bf16", count_ptr=0, residual=None, algo="auto",
                   norm_output=None, norm_weight=0, norm_eps=0.0):
        """mdr_all_reduce: sum in place, across the ranks of the arena's
        communicator, the first `tokens` rows of buffer `buf` (collective;
        capture-safe, so a body may call it). With `residual`, the sum is
        added into it; with `norm_output` (a buffer name), `norm_weight`
        (device address of one row of weights) and `norm_eps`, the fused
        RMSNorm of the updated residual is written there (bf16, fp16)."""
        if not has("mdr_all_reduce"):
            raise UnsupportedError("this libmdr has no mdr_all_reduce", "mdr_all_reduce")
        a = self._ptr()
        d = self._desc(buf, dtype, tokens, count_ptr, residual, algo, norm_output, norm_weight, norm_eps)
        self._chk(lib.mdr_all_reduce(a, byref(d), _stream_ptr(stream, self.backend)),
                  "mdr_all_reduce")

    def all_reduce_choice(self, buf, tokens, dtype="bf16", count_ptr=0, residual=None, algo="auto",
                          norm_output=None, norm_weight=0, norm_eps=0.0):
        """What all_reduce would run: "nccl", "one-shot", "two-shot", "auto"
        (chosen on the device), or None when it would be refused."""
        a = self._ptr()
        d = self._desc(buf, dtype, tokens, count_ptr, residual, algo, norm_output, norm_weight, norm_eps)
        r = lib.mdr_all_reduce_choice(a, byref(d))
        return None if r >= 4 else _text(lib.mdr_all_reduce_algo_name(r))

    def all_reduce_norm_fused(self, buf, tokens, dtype="bf16", count_ptr=0, residual=None, algo="auto",
                              norm_output=None, norm_weight=0, norm_eps=0.0):
        """Where all_reduce would run the RMSNorm: True in the all-reduce's
        own kernel, False in a kernel of its own after it (mdr's two-shot,
        one-shots over 512 KiB, MDR_AR_NORM_FUSE=never, NCCL), None without
        norm_output or when the call would be refused."""
        if not has("mdr_all_reduce_norm_fused"):
            raise UnsupportedError("this libmdr has no mdr_all_reduce_norm_fused", "mdr_all_reduce_norm_fused")
        a = self._ptr()
        d = self._desc(buf, dtype, tokens, count_ptr, residual, algo, norm_output, norm_weight, norm_eps)
        r = lib.mdr_all_reduce_norm_fused(a, byref(d))
        return None if r < 0 else bool(r)

    @property
    def all_reduce_kernels(self):
        """True when mdr's own all-reduce kernels can run on this arena (a
        symmetric window, ranks in one NVLink domain, the NCCL mdr was built
        with; a host communicator: True). Else its all-reduce goes through
        NCCL."""
        return bool(lib.mdr_all_reduce_kernels(self._ptr()))

    def __repr__(self):
        return "<mdr.Arena M=%d slab=%d bytes on %s%s>" % (
            self.max_batch_tokens, self.slab_bytes, self.backend.name,
            " closed" if self.closed else "")


class BufferView:
    """One buffer of an arena: .name, .ptr, .nbytes, .dtype, .shape, .device;
    zero-copy through DLPack (__dlpack__, __dlpack_device__) and, on CUDA,
    __cuda_array_interface__ (v3). The view keeps its arena open; a DLPack
    export keeps the arena's memory until the consumer releases it."""

    __slots__ = ("owner", "name", "index", "ptr", "nbytes", "dtype", "shape", "declared", "rows",
                 "_backend")

    @classmethod
    def _of_arena(cls, arena, i):
        a = arena._h.ptr
        name = BUFFER_NAMES[i]
        dtype, rows_kind, declared = BUFFER_LAYOUT.get(name, ("uint8", None, "bytes"))
        if arena.sizes.mla:
            dtype, rows_kind, declared = BUFFER_LAYOUT_MLA.get(name, (dtype, rows_kind, declared))
        m = arena.max_batch_tokens
        rows = {"M": m, "Mp": _ceil16(m), "Mk": _ceil16(max(m, 3)),
                "logits": arena.logits_rows, "M1": None, None: None}[rows_kind]
        nbytes = int(lib.mdr_arena_bytes(a, i))
        v = cls._raw(arena, name, int(lib.mdr_arena_ptr(a, i)), nbytes, arena.backend, dtype,
                     None, rows)
        v.index = i
        v.declared = declared
        return v

    @classmethod
    def _raw(cls, owner, name, ptr, nbytes, backend, dtype="uint8", shape=None, rows=None):
        if dtype not in ITEMSIZE:
            raise _bad("dtype is one of %s, not %r" % (", ".join(sorted(ITEMSIZE)), dtype))
        v = object.__new__(cls)
        v.owner = owner
        v.name = name
        v.index = None
        v.ptr = ptr
        v.nbytes = nbytes
        v._backend = backend
        v.declared = dtype
        v.rows = rows
        if shape is None:
            v.dtype, v.shape = _shape_for(nbytes, dtype, rows)
        else:
            shape = tuple(_as_size(d, "shape") for d in shape)
            n = 1
            for d in shape:
                n *= d
            if n * ITEMSIZE[dtype] > nbytes:
                raise OutOfRangeError("shape %s of %s needs %d bytes; the buffer has %d"
                                      % (shape, dtype, n * ITEMSIZE[dtype], nbytes))
            v.dtype, v.shape = dtype, shape
        return v

    @property
    def itemsize(self):
        """Bytes per element of the view's dtype."""
        return ITEMSIZE[self.dtype]

    @property
    def size(self):
        """Elements in the view (the product of its shape)."""
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def device(self):
        """("cpu", 0) on the host backend, ("cuda", device) on a GPU."""
        b = self._backend
        return ("cuda", b.device) if b.is_cuda else ("cpu", 0)

    def _alive(self):
        self.owner._ptr()

    def raw(self):
        """The same memory as a flat uint8 view of all nbytes."""
        return self.view("uint8", (self.nbytes,))

    def view(self, dtype, shape=None):
        """The same memory as another element type (bfloat16, float16,
        float32, uint16, int32, uint32, uint8, int8, float8_e4m3fn, ...),
        optionally with a shape (C order, at most nbytes). Without a shape the
        rows are kept when they divide."""
        self._alive()
        v = BufferView._raw(self.owner, self.name, self.ptr, self.nbytes, self._backend, dtype,
                            shape, self.rows)
        v.index = self.index
        return v

    # -- DLPack
    def __dlpack_device__(self):
        b = self._backend
        return (_dlpack.KDLCUDA, b.device) if b.is_cuda else (_dlpack.KDLCPU, 0)

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        """A DLPack capsule of this view; versioned (DLPack 1.0) when the
        consumer's max_version allows it, legacy otherwise. `stream` is
        accepted and not acted on: mdr's buffers have no producing stream;
        order your stream with the one that wrote them."""
        if copy:
            raise BufferError("mdr views are zero-copy; copy=True is not supported")
        dev = self.__dlpack_device__()
        if dl_device is not None and tuple(dl_device) != dev:
            raise BufferError("the buffer is on device %s, not %s" % (dev, tuple(dl_device)))
        h = self.owner._h
        h.acquire()  # raises ClosedError on a closed arena; released by the deleter
        versioned = max_version is not None and int(max_version[0]) >= 1
        try:
            return _dlpack.make_capsule(self.ptr, dev, self.dtype, self.shape, h.release,
                                        versioned)
        except BaseException:
            h.release()
            raise

    @property
    def __cuda_array_interface__(self):
        if not self._backend.is_cuda:
            raise AttributeError("__cuda_array_interface__: the buffer is host memory "
                                 "(host backend); use DLPack")
        self._alive()
        return {"shape": self.shape, "typestr": _CAI_TYPESTR[self.dtype],
                "data": (self.ptr, False), "version": 3, "strides": None, "stream": None}

    # -- helpers
    def numpy(self):
        """A writable numpy array over this memory (host backend only). numpy
        has no bfloat16 or fp8: those views come as their uint16 / uint8 bits
        (view them with ml_dtypes, say). The array keeps the arena's memory
        until it is gone, as a DLPack export does. (numpy.from_dlpack works
        too, but numpy < 2 marks such arrays read-only.)"""
        import numpy as np
        if self._backend.is_cuda:
            raise UnsupportedError("the buffer is device memory; use DLPack (torch, cupy)",
                                   "BufferView.numpy")
        if not self.ptr or not self.nbytes:  # a NULL buffer (size 0)
            self._alive()
            return np.empty(self.shape, dtype=np.dtype(_CAI_TYPESTR[self.dtype]))
        h = self.owner._h
        h.acquire()
        pin = _Pin(h, {"shape": self.shape, "typestr": _CAI_TYPESTR[self.dtype],
                       "data": (self.ptr, False), "version": 3})
        return np.asarray(pin)

    def read(self):
        """The buffer's bytes (a blocking copy)."""
        self._alive()
        return self._backend.copy_d2h(self.ptr, self.nbytes)

    def write(self, data, offset=0):
        """Copy bytes-like `data` into the buffer at byte `offset` (blocking)."""
        self._alive()
        n = memoryview(data).nbytes
        off = _as_size(offset, "offset")
        if off + n > self.nbytes:
            raise OutOfRangeError("%d bytes at offset %d overrun the %d-byte buffer %s"
                                  % (n, off, self.nbytes, self.name))
        self._backend.copy_h2d(self.ptr + off, data)

    def __repr__(self):
        return "<mdr.BufferView %s %s%s 0x%x %d bytes>" % (self.name, self.dtype, self.shape,
                                                           self.ptr, self.nbytes)


class _Pin:
    """An __array_interface__ that holds a handle until numpy lets it go."""
    __slots__ = ("_h", "__array_interface__")

    def __init__(self, h, iface):
        self._h = h
        self.__array_interface__ = iface

    def __del__(self):
        h, self._h = self._h, None
        if h is not None:
            h.release()


# ---- step inputs ---------------------------------------------------------------------

_SHAPES = {"token": 0, "sequence": 1, "fixed": 2}
_SHAPE_NAMES = {v: k for k, v in _SHAPES.items()}
# element types of step inputs: name -> (bytes, numpy dtype name); "bfloat16"
# values are float (converted, round to nearest even) or their uint16 bits.
INPUT_DTYPES = {"int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4,
                "int64": 8, "uint64": 8, "float16": 2, "bfloat16": 2, "float32": 4,
                "float64": 8}


@dataclasses.dataclass
class StepInput:
    """A per-step input besides the ids (mdr_step_input, include/mdr/graph.h):
    its values travel in the ids' staging slot and the staged launch copies
    them to `dest` every step.

    name: unique, not "token_ids". dtype: one of mdr.INPUT_DTYPES (or None
    with elem_size 1, 2, 4 or 8: raw elements). shape: "token" (one row per
    token), "sequence" (one row per sequence) or "fixed" (max_rows rows
    every step). width: elements per row. max_rows: 0 means
    max_batch_tokens ("token") or max_sequences ("sequence"); required for
    "fixed". pad: the value of padded rows (EXACT and LADDER graphs pad up
    to their bound), a number in dtype (an int: its low bytes). dest: an
    arena buffer name (with `offset` bytes into it, 16-byte aligned), or
    device memory the engine owns (an address, mdr.DeviceMemory, a
    BufferView, a CUDA tensor); it shares no byte with a buffer the step's
    zeroing clears (scratch, say), token_ids or another input (the C
    header's mdr_step_input_dest). device: False: the values come from the
    host each step (cache.step_inputs); True: the engine's kernels write
    them at dest themselves (only the pad is written); else the device
    memory they are in (address, DeviceMemory, BufferView, CUDA tensor):
    copied device to device."""
    name: str
    dtype: object = None
    shape: str = "token"
    width: int = 1
    max_rows: int = 0
    pad: object = 0
    dest: object = None
    offset: int = 0
    device: object = False
    elem_size: object = None


@dataclasses.dataclass
class StepInputInfo:
    """One input as the cache resolved it (mdr_step_input_info); index 0 is
    the token ids. `dtype` is the declared one (None: raw elements)."""
    index: int
    name: str
    elem_bytes: int
    shape: str
    width: int
    max_rows: int
    row_bytes: int
    max_bytes: int
    dst: int
    device_src: int
    slot_offset: int
    pad: int
    dtype: object = None


def _device_addr(x, what):
    """An address from an int, a BufferView, DeviceMemory or a tensor."""
    if isinstance(x, (BufferView, DeviceMemory)):
        return x.ptr
    if hasattr(x, "data_ptr"):
        return int(x.data_ptr())
    if isinstance(x, bool) or not hasattr(x, "__index__"):
        raise _bad("%s: an address, mdr.DeviceMemory, a BufferView or a CUDA tensor, not %s"
                   % (what, type(x).__name__), "GraphCache")
    return _as_size(x, what)


_FLOATS = ("float16", "float32", "float64", "bfloat16")


def _pad_bits(pad, dtype, e, what):
    import struct
    if dtype in _FLOATS:
        if isinstance(pad, bool) or not hasattr(pad, "__float__"):
            raise _bad("%s.pad: a number, not %s" % (what, type(pad).__name__), "GraphCache")
        f = float(pad)
        if dtype == "bfloat16":
            return _bf16_bits(f)
        fmt = {"float16": ("<e", "<H"), "float32": ("<f", "<I"), "float64": ("<d", "<Q")}[dtype]
        return struct.unpack(fmt[1], struct.pack(fmt[0], f))[0]
    v = _as_int(pad, what + ".pad")
    if not -(1 << (8 * e - 1)) <= v < (1 << (8 * e)):
        raise OutOfRangeError("%s.pad: %d does not fit in %d bytes" % (what, v, e), "GraphCache")
    return v & ((1 << (8 * e)) - 1)


def _bf16_bits(f):
    import struct
    b = struct.unpack("<I", struct.pack("<f", f))[0]
    if (b & 0x7F800000) == 0x7F800000 and b & 0x7FFFFF:  # NaN stays NaN
        return (b >> 16) | 0x40
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF


def _input_c(arena, i, inp):
    """(StepInputC, name bytes, declared dtype) of one StepInput."""
    if not isinstance(inp, StepInput):
        raise _bad("inputs[%d]: an mdr.StepInput, not %s" % (i, type(inp).__name__),
                   "GraphCache")
    what = "inputs[%d] (%r)" % (i, inp.name)
    if not isinstance(inp.name, str):
        raise _bad("%s.name: a str, not %s" % (what, type(inp.name).__name__), "GraphCache")
    dtype, e = inp.dtype, inp.elem_size
    if dtype is not None:
        dtype = getattr(dtype, "name", None) if not isinstance(dtype, str) else dtype
        dtype = str(dtype).replace("torch.", "")
        if dtype not in INPUT_DTYPES:
            raise _bad("%s.dtype: one of %s, not %r" % (what, ", ".join(INPUT_DTYPES), inp.dtype),
                       "GraphCache")
        if e is not None and _as_int(e, what + ".elem_size") != INPUT_DTYPES[dtype]:
            raise _bad("%s.elem_size: %s, but dtype %s has %d-byte elements"
                       % (what, e, dtype, INPUT_DTYPES[dtype]), "GraphCache")
        e = INPUT_DTYPES[dtype]
    elif e is None:
        raise _bad("%s.dtype: give a dtype (or elem_size)" % what, "GraphCache")
    else:
        e = _as_size(e, what + ".elem_size")  # the library checks 1, 2, 4 or 8
    if inp.shape not in _SHAPES:
        raise _bad("%s.shape: 'token', 'sequence' or 'fixed', not %r" % (what, inp.shape),
                   "GraphCache")
    c = StepInputC()
    name = inp.name.encode()
    c.name = name
    c.elem_bytes = e
    c.shape = _SHAPES[inp.shape]
    c.width = _as_size(inp.width, what + ".width")
    c.max_rows = _as_size(inp.max_rows, what + ".max_rows")
    c.pad = _pad_bits(inp.pad, dtype, e if e in (1, 2, 4, 8) else 8, what)
    off = _as_size(inp.offset, what + ".offset")
    d = inp.dest
    if isinstance(d, str) or (isinstance(d, BufferView) and d.owner is arena
                              and d.index is not None):
        if isinstance(d, str) and d not in BUFFER_NAMES:
            raise _bad("%s.dest: no arena buffer %r" % (what, d), "GraphCache")
        c.dest = 1  # MDR_INPUT_TO_ARENA
        c.buffer = BUFFER_NAMES.index(d) if isinstance(d, str) else d.index
        c.offset = off
    elif d is None:
        raise _bad("%s.dest: an arena buffer name or device memory" % what, "GraphCache")
    else:
        c.dest = 0  # MDR_INPUT_TO_DEVICE
        c.address = _device_addr(d, what + ".dest") + off
    src = inp.device
    if src is True:
        c.device_src = c.address if c.dest == 0 else (
            int(lib.mdr_arena_ptr(arena._h.ptr, c.buffer)) + off)
    elif src is not False and src is not None and src != 0:
        c.device_src = _device_addr(src, what + ".device")
    return c, name, dtype


def _count(v):
    """Elements of a list, numpy array or tensor."""
    if hasattr(v, "numel"):
        return int(v.numel())
    sz = getattr(v, "size", None)
    if isinstance(sz, int):
        return sz
    return len(v)


def _np():
    try:
        import numpy
    except ImportError:  # pragma: no cover
        raise UnsupportedError("cache.step_inputs needs numpy", "step_inputs")
    return numpy


_NDARRAY = None


def _ndarray_type():
    """numpy.ndarray (numpy imported at the first call)."""
    global _NDARRAY
    if _NDARRAY is None:
        _NDARRAY = _np().ndarray
    return _NDARRAY


def _exact_dtype(info):
    """The numpy dtype whose arrays an input takes without conversion (None:
    bfloat16 or raw elements, which go through the checks); cached on info."""
    nd = info.__dict__.get("_np_dtype", False)
    if nd is False:
        np = _np()
        dt = info.dtype
        nd = np.dtype(dt) if dt is not None and dt != "bfloat16" else None
        if nd is not None and nd.itemsize != info.elem_bytes:
            nd = None
        info.__dict__["_np_dtype"] = nd
    return nd


def _host_values(info, v, rows, what):
    """A C-contiguous numpy array of info's element type with >= rows * width
    elements (the first ones are the step's), from a list, a numpy array or a
    CPU tensor. `what` names the value in errors: a str, or a callable that
    makes it (formatted only when an error needs it)."""
    want = rows * info.width
    nd = info.__dict__.get("_np_dtype", False)
    if nd is False:
        nd = _exact_dtype(info)
    if (nd is not None and type(v) is _ndarray_type() and v.dtype == nd and v.ndim == 1
            and v.flags.c_contiguous and v.size >= want):
        return v  # already the input's elements, flat: used as is (the common case, per step)
    if callable(what):
        what = what()
    np = _np()
    if hasattr(v, "data_ptr") and hasattr(v, "is_cuda"):  # torch
        if v.is_cuda:
            raise _bad("%s: a CUDA tensor; host values are staged from host memory (declare "
                       "the input with device=... for values already on the device)" % what,
                       "step_inputs")
        v = v.detach()
        if str(v.dtype) == "torch.bfloat16":
            import torch
            v = v.view(torch.uint16) if hasattr(torch, "uint16") else v.view(torch.int16)
        v = v.contiguous().numpy()
    try:
        a = np.asarray(v)
    except (TypeError, ValueError, OverflowError) as ex:
        raise _bad("%s: not an array of numbers (%s)" % (what, ex), "step_inputs")
    dt, e = info.dtype, info.elem_bytes
    k = a.dtype.kind
    if dt is None:  # raw elements: any array of that item size, or integers
        if k in "iub" and a.dtype.itemsize != e or k == "O":
            if k not in "iubO":
                raise _bad("%s: %s elements; this input takes %d-byte elements"
                           % (what, a.dtype, e), "step_inputs")
            if a.size and (int(a.min()) < -(1 << (8 * e - 1)) or int(a.max()) >= 1 << (8 * e)):
                raise OutOfRangeError("%s: a value does not fit in %d bytes" % (what, e),
                                      "step_inputs")
            out = a.astype("u%d" % e, casting="unsafe")
        elif a.dtype.itemsize == e:
            out = np.ascontiguousarray(a).view("u%d" % e)
        else:
            raise _bad("%s: %s elements; this input takes %d-byte elements"
                       % (what, a.dtype, e), "step_inputs")
    elif dt == "bfloat16":
        if a.dtype.name == "bfloat16" or (k == "u" and a.dtype.itemsize == 2):
            out = a.view("u2")
        elif k in "iuf":
            f = np.ascontiguousarray(a, dtype=np.float32)
            b = f.view(np.uint32).astype(np.uint64)
            r = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)
            nan = np.isnan(f)
            if nan.any():
                r[nan] = 0x7FC0
            out = r
        else:
            raise _bad("%s: %s elements for a bfloat16 input" % (what, a.dtype), "step_inputs")
    else:
        nd = np.dtype(dt)
        if a.dtype != nd:
            if nd.kind in "iu":
                if k not in "iub":
                    raise _bad("%s: %s elements for an %s input" % (what, a.dtype, dt),
                               "step_inputs")
                if a.size:
                    ii = np.iinfo(nd)
                    if int(a.min()) < ii.min or int(a.max()) > ii.max:
                        raise OutOfRangeError("%s: a value does not fit in %s" % (what, dt),
                                              "step_inputs")
            elif k not in "iubf":
                raise _bad("%s: %s elements for a %s input" % (what, a.dtype, dt),
                           "step_inputs")
            out = a.astype(nd)
        else:
            out = a
    out = np.ascontiguousarray(out).reshape(-1)
    if out.size < want:
        raise _bad("%s: %d elements; the step needs %d (%d rows of width %d)"
                   % (what, out.size, want, rows, info.width), "step_inputs")
    return out


# ---- the graph cache -----------------------------------------------------------------

@dataclasses.dataclass
class GraphStats:
    """mdr_graph_stats (include/mdr/graph.h)."""
    steps: int
    hits: int
    misses: int
    captures: int
    evictions: int
    eager_fallbacks: int
    padded_tokens: int
    capture_us: float
    graphs: int
    eager_steps: int
    uncapturable: int
    graphs_disabled: bool
    device_steps: int
    graph_bytes: int
    graph_nodes: int
    poison: bool
    memory_measured: bool
    inline_steps: int = 0  # steps whose slot image travelled in the launch's parameters (docs/GRAPHS.md)


@dataclasses.dataclass
class GraphInfo:
    """mdr_graph_info: what the graph serving a count holds."""
    graph_tokens: int
    cached: bool
    bytes: int
    nodes: int
    device_cached: bool
    device_bytes: int
    device_nodes: int


_STATUS_BODY_FAILED = _errors.BACKEND


class GraphCache(_Object):
    """Graphs of a decode step per token count, replayed by step().

        cache = mdr.GraphCache(arena, stream, mode="exact", zero="fused", body=fn)
        cache.step(ids)

    mode: "exact" | "ladder" | "dynamic". zero: "fused" | "memset" | None
    (None: the arena's strategy; "fused" for "dynamic"). rows: "seed" |
    "all" | None (the arena's). body: fn(stream, tokens) for exact and
    ladder, fn(stream, count_ptr, max_tokens) for dynamic; body_dynamic:
    the 3-argument form in any mode. The body only enqueues work on
    `stream` (an mdr.Stream); an exception in it aborts the capture, the
    step runs eagerly, and the exception is raised from step()."""

    def __init__(self, arena, stream, mode="exact", zero=None, body=None, *, body_dynamic=None,
                 rows=None, ladder=None, max_graphs=0, pad_token_id=0, dynamic_impl="node_update",
                 poison=False, max_graph_bytes=0, inputs=(), max_sequences=0):
        if not isinstance(arena, Arena):
            raise _bad("arena must be an mdr.Arena, not %s" % type(arena).__name__,
                       "GraphCache")
        a = arena._ptr()
        if mode not in _MODES:
            raise _bad("mode is 'exact', 'ladder' or 'dynamic', not %r" % (mode,), "GraphCache")
        if zero is None:
            zero = "fused" if mode == "dynamic" else "arena"
        if zero not in ("memset", "fused", "arena"):
            raise _bad("zero is 'fused', 'memset' or None, not %r" % (zero,), "GraphCache")
        if rows not in (None, "arena", "seed", "all"):
            raise _bad("rows is 'seed', 'all' or None, not %r" % (rows,), "GraphCache")
        if dynamic_impl not in _DYN_IMPL:
            raise _bad("dynamic_impl is 'node_update' or 'device_count', not %r"
                       % (dynamic_impl,), "GraphCache")
        if body is not None and body_dynamic is not None:
            raise _bad("give body or body_dynamic, not both", "GraphCache")
        for f in (body, body_dynamic):
            if f is not None and not callable(f):
                raise _bad("the body must be callable", "GraphCache")
        if mode == "dynamic" and body is not None:
            body, body_dynamic = None, body
        backend = arena.backend
        self.arena = arena
        self.backend = backend
        if isinstance(stream, Stream):
            stream._ptr()
            self.stream = stream
        else:
            self.stream = Stream.wrap(backend, stream) if stream is not None else None
            if self.stream is None:
                raise _bad("a stream is required", "GraphCache")
        s = _stream_ptr(self.stream, backend)
        self.mode = mode
        self._excs = []
        self._hold = [None]  # the handle, once made: what a body's call holds (_make_thunk)
        o = GraphCacheOptionsC()
        lib.mdr_graph_cache_options_default(byref(o))
        o.mode = _MODES[mode]
        o.zero = -1 if zero == "arena" else _ZERO[zero]
        o.rows = -1 if rows in (None, "arena") else _ROWS[rows]
        o.max_graphs = _as_size(max_graphs, "max_graphs")
        pad = _as_int(pad_token_id, "pad_token_id")
        if not 0 <= pad <= 0xFFFFFFFF:
            raise OutOfRangeError("pad_token_id must fit in uint32 (got %d)" % pad)
        o.pad_token_id = pad
        o.dynamic_impl = _DYN_IMPL[dynamic_impl]
        o.poison = 1 if poison else 0
        o.max_graph_bytes = _as_size(max_graph_bytes, "max_graph_bytes")
        keep = []
        if ladder is not None:
            rungs = [_as_size(x, "ladder rung") for x in ladder]
            arr = (c_size_t * max(len(rungs), 1))(*rungs)
            keep.append(arr)
            o.ladder = ctypes.cast(arr, ctypes.POINTER(c_size_t))
            o.ladder_len = len(rungs)
        inputs = list(inputs or ())
        o.max_sequences = _as_size(max_sequences, "max_sequences")
        dtypes = [None]
        if inputs:
            arr_in = (StepInputC * len(inputs))()
            for i, inp in enumerate(inputs):
                c_in, name, dt = _input_c(arena, i, inp)
                arr_in[i] = c_in
                keep.append(name)
                dtypes.append(dt)
            keep.append(arr_in)
            o.inputs = arr_in
            o.n_inputs = len(inputs)
        self._body = body
        self._body_dynamic = body_dynamic
        if body is not None:
            thunk = CAPTURE_FN(self._make_thunk(body, False))
            o.body = ctypes.cast(thunk, c_void_p)
            keep.append(thunk)
        if body_dynamic is not None:
            thunk = CAPTURE_DYNAMIC_FN(self._make_thunk(body_dynamic, True))
            o.body_dynamic = ctypes.cast(thunk, c_void_p)
            keep.append(thunk)
        p = c_void_p()
        st = lib.mdr_graph_cache_create(a, s, byref(o), byref(p))
        if st:
            raise error_for(st, _text(lib.mdr_backend_last_error(backend._h.ptr)),
                            "mdr_graph_cache_create")
        self._h = _Handle(p.value, lib.mdr_graph_cache_destroy, (arena._h, self.stream._h),
                          what="graph cache")
        self._h.keep = keep  # the callbacks live as long as the native cache
        self._hold[0] = self._h
        self._cptr = p.value
        self._last_ids = None
        self._last = None
        self.count_ptr = int(lib.mdr_graph_cache_count_ptr(p.value))
        self.sequences_ptr = int(lib.mdr_graph_cache_sequences_ptr(p.value))
        self.slot_bytes = int(lib.mdr_graph_cache_slot_bytes(p.value))
        self._meta = self._query_meta(dtypes)
        self.max_sequences = self.sequence_bound(arena.max_batch_tokens)  # the resolved one
        n = len(self._meta)
        self._values = (c_void_p * n)()
        self._host_inputs = [m for m in self._meta[1:] if not m.device_src]
        self._host_index = [m.index for m in self._host_inputs]
        self._seq_inputs = [m for m in self._meta[1:] if m.shape == "sequence"]
        self._index = {m.name: m.index for m in self._meta}
        self._addrs = {}  # id -> (array, address): _address_of

    def _query_meta(self, dtypes):
        c = self._h.ptr
        n = int(lib.mdr_graph_cache_step_input_count(c))
        out = []
        for i in range(n):
            info = StepInputInfoC()
            _check(lib.mdr_graph_cache_step_input_info(c, i, byref(info)),
                   "mdr_graph_cache_step_input_info", self.backend._h.ptr)
            out.append(StepInputInfo(
                i, _text(info.name), int(info.elem_bytes),
                _SHAPE_NAMES.get(info.shape, info.shape), int(info.width), int(info.max_rows),
                int(info.row_bytes), int(info.max_bytes), int(info.dst), int(info.device_src),
                int(info.slot_offset), int(info.pad),
                "uint32" if i == 0 else (dtypes[i] if i < len(dtypes) else None)))
        return out

    def _make_thunk(self, fn, dynamic):
        """The C callback around a body. While the body runs it holds the
        cache's handle, so a body that closes its own cache does not destroy
        the native cache under the C call that is running it: the hold goes
        into the exception list, and the call that ran the body (step,
        prepare, ...) releases it once C has returned (_fail), which is
        when the native cache goes. The closure holds no reference to the
        cache object, only to its handle."""
        excs = self._excs
        stream = self.stream
        hold = self._hold

        def run(call):
            # No cyclic collection while a body runs: the body may be under
            # capture, and a collected object's finalizer (an arena's free,
            # a stream's destroy, another library's) would make a call that
            # capture forbids on this thread, failing or invalidating it.
            gc_on = gc.isenabled()
            if gc_on:
                gc.disable()
            h = hold[0]
            if h is not None:
                with _lock:
                    h.users += 1
            try:
                r = call()
                return 0 if r is None else int(r)
            except BaseException as e:  # noqa: B902 - re-raised from step
                excs.append(e)
                return _STATUS_BODY_FAILED
            finally:
                if gc_on:
                    gc.enable()
                if h is not None:
                    if h.closed:  # closed by the body: released after C returns
                        excs.append(_BodyHold(h))
                    else:
                        h.release()
        if dynamic:
            def thunk(user, s, count_ptr, max_tokens):
                return run(lambda: fn(stream, count_ptr, max_tokens))
        else:
            def thunk(user, s, tokens):
                return run(lambda: fn(stream, tokens))
        return thunk

    def _fail(self, st, call):
        excs = self._excs
        if excs:
            holds = [x for x in excs if isinstance(x, _BodyHold)]
            errs = [x for x in excs if not isinstance(x, _BodyHold)]
            del excs[:]
            for x in holds:  # C has returned: a cache its body closed goes now
                x.h.release()
            if errs:
                raise errs[0]
        if st:
            raise error_for(st, _text(lib.mdr_backend_last_error(self.backend._h.ptr)), call)

    def _c(self):
        h = self._h
        if h is None or h.closed:
            raise ClosedError("the graph cache is closed", "GraphCache")
        return h.ptr

    # -- ids
    def _resolve(self, ids):
        """(address, available count, on_device, keepalive) for ids."""
        if hasattr(ids, "data_ptr") and hasattr(ids, "is_cuda"):  # a torch tensor
            dt = str(ids.dtype)
            if dt not in ("torch.int32", "torch.uint32"):
                if ids.is_cuda:
                    raise _bad("device ids must be a contiguous int32 or uint32 tensor "
                               "(got %s); convert with ids.to(torch.int32)" % dt, "step")
                if ids.numel() and int(ids.min()) < 0:
                    raise OutOfRangeError("token ids must be >= 0")
                import torch
                ids = ids.to(torch.int32).contiguous()
            if not ids.is_contiguous():
                raise _bad("the ids tensor must be contiguous", "step")
            return None, None, bool(ids.is_cuda), ids
        ai = getattr(ids, "__array_interface__", None)
        if ai is not None:
            ok = ai["typestr"] in ("<u4", "<i4", "=u4", "=i4") and ai.get("strides") is None
            if ok and ai["typestr"][1] == "i" and ids.size and int(ids.min()) < 0:
                raise OutOfRangeError("token ids must be >= 0")
            if not ok:
                import numpy as np
                a = np.asarray(ids)
                if a.dtype.kind not in "iu":
                    raise _bad("token ids must be integers, not %s" % a.dtype, "step")
                if a.size and (int(a.min()) < 0 or int(a.max()) > 0xFFFFFFFF):
                    raise OutOfRangeError("token ids must fit in uint32")
                ids = np.ascontiguousarray(a.reshape(-1), dtype=np.uint32)
                ai = ids.__array_interface__
            n = 1
            for d in ai["shape"]:
                n *= d
            return ai["data"][0], n, False, ids
        if isinstance(ids, (str, bytes)) or not hasattr(ids, "__len__"):
            raise _bad("ids must be a list of ints, a numpy array or a torch tensor, not %s"
                       % type(ids).__name__, "step")
        vals = []
        for x in ids:
            v = _as_int(x, "a token id")
            if not 0 <= v <= 0xFFFFFFFF:
                raise OutOfRangeError("token id %d does not fit in uint32" % v)
            vals.append(v)
        arr = (c_uint32 * max(len(vals), 1))(*vals)
        return ctypes.addressof(arr), len(vals), False, arr

    def step(self, ids, tokens=None):
        """One decode step. `ids`: a list, a numpy array (uint32/int32 taken
        as is, other integer types converted), a torch tensor (CPU: staged;
        CUDA: the device-id path, no host copy). `tokens`: how many of them
        (default: all)."""
        c = self._h.ptr if not self._h.closed else self._c()
        if ids is self._last_ids:  # the same array again: its address is known
            addr, n, dev = self._last
            if addr is None:
                addr, n = ids.data_ptr(), ids.numel()
        else:
            addr, n, dev, keep = self._resolve(ids)
            if keep is ids and (addr is None or hasattr(ids, "__array_interface__")):
                self._last_ids, self._last = ids, (addr, n, dev)
            if addr is None:
                addr, n = keep.data_ptr(), keep.numel()
        if tokens is not None:
            t = tokens.__index__() if not isinstance(tokens, bool) else -1
            if t < 0 or t > n:
                raise OutOfRangeError("tokens=%r but the ids hold %d" % (tokens, n), "step")
            n = t
        if dev:
            st = lib.mdr_graph_cache_step_device(c, addr, n)
        else:
            st = lib.mdr_graph_cache_step(c, addr, n)
        if st or self._excs:
            self._fail(st, "mdr_graph_cache_step_device" if dev else "mdr_graph_cache_step")

    def step_device(self, ids_ptr, tokens):
        """A step whose ids are in device memory at `ids_ptr` (an address, a
        BufferView, DeviceMemory or a CUDA tensor), or 0: already in
        token_ids. Ids in a buffer the step's zeroing clears (scratch, say),
        in an input's destination or partly over token_ids raise
        mdr.InvalidArgumentError: the step's launch writes those as it
        reads them."""
        c = self._c()
        if hasattr(ids_ptr, "data_ptr"):
            addr = ids_ptr.data_ptr()
        else:
            addr = _addr(ids_ptr) if ids_ptr else 0
        st = lib.mdr_graph_cache_step_device(c, addr, _as_size(tokens, "tokens"))
        if st or self._excs:
            self._fail(st, "mdr_graph_cache_step_device")

    # -- step inputs
    def decode_meta(self):
        """The step's input layout (mdr_graph_cache_step_input_info of every
        input): a list of mdr.StepInputInfo, the token ids first."""
        self._c()
        return [dataclasses.replace(m) for m in self._meta]

    def step_input_index(self, name):
        """The index of input `name` ("token_ids": 0) (mdr_graph_cache_step_input_find)."""
        c = self._c()
        if not isinstance(name, str):
            raise _bad("a step input name is a str, not %s" % type(name).__name__,
                       "mdr_graph_cache_step_input_find")
        out = c_size_t()
        self._fail(lib.mdr_graph_cache_step_input_find(c, name.encode(), byref(out)),
                   "mdr_graph_cache_step_input_find")
        return out.value

    def sequence_bound(self, tokens):
        """The per-sequence rows of the graph serving `tokens`
        (mdr_graph_cache_sequence_bound): min(graph tokens, max_sequences) in
        EXACT and LADDER, max_sequences in DYNAMIC."""
        c = self._c()
        out = c_size_t()
        self._fail(lib.mdr_graph_cache_sequence_bound(c, _as_size(tokens, "tokens"), byref(out)),
                   "mdr_graph_cache_sequence_bound")
        return out.value

    def step_inputs(self, ids, values=None, tokens=None, sequences=None):
        """One decode step with its step inputs (mdr_graph_cache_step_inputs).

        ids: as for step() (a CUDA int32 tensor, a device address given as
        mdr.DeviceMemory, or None for ids already in token_ids, take the
        device-id path; `tokens` is then required unless a tensor says it;
        the step copies device ids and the inputs in no set order, so such
        ids must not overlap an input's destination).
        values: {name: values} (or a sequence in declaration order) for every
        input that takes host values; each a list, a numpy array or a CPU
        tensor, flat or (rows, width), converted to the input's dtype (ints
        range-checked): "token" inputs carry `tokens` rows, "sequence" inputs
        `sequences` rows, "fixed" inputs max_rows rows (extra elements past
        those are ignored). sequences: 1 .. min(tokens, max_sequences);
        default: the rows of the first "sequence" input given, else
        min(tokens, max_sequences). Everything is copied into the staging
        slot before the call returns. A flat C-contiguous numpy array of the
        input's own dtype is read as it is, and its address remembered while
        the cache holds it (the per-step path of an engine that fills the same
        arrays every step); resizing such an array in place with
        refcheck=False is as unsafe here as for any other view of it."""
        c = self._c()
        if ids is None:
            addr, n, dev, keep = 0, None, True, None
        elif isinstance(ids, DeviceMemory):
            addr, n, dev, keep = ids.ptr, None, True, ids
        else:
            addr, n, dev, keep = self._resolve(ids)
            if addr is None:
                addr, n = keep.data_ptr(), keep.numel()
        if tokens is None:
            if n is None:
                raise _bad("tokens is required with device ids given by address", "step_inputs")
            t = n
        else:
            t = _as_size(tokens, "tokens")
            if n is not None and t > n:
                raise OutOfRangeError("tokens=%d but the ids hold %d" % (t, n), "step_inputs")
        meta = self._meta
        if values is None:
            values = {}
        if isinstance(values, dict):
            given = {}
            for k, v in values.items():
                i = self._index.get(k) if isinstance(k, str) else None
                if i is None or i == 0:
                    raise _bad("values[%r]: %s (the inputs: %s)" % (
                        k, "the ids go in `ids`" if i == 0 else "no step input of that name",
                        ", ".join(m.name for m in meta[1:]) or "none declared"), "step_inputs")
                given[i] = v
        elif isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
            raise _bad("values: a dict {name: values} or a sequence in input order, not %s"
                       % type(values).__name__, "step_inputs")
        else:
            if len(values) != len(meta) - 1:
                raise _bad("values: %d entries for %d declared inputs"
                           % (len(values), len(meta) - 1), "step_inputs")
            given = {i + 1: v for i, v in enumerate(values) if v is not None}
        if len(given) != len(self._host_inputs) or any(i not in given for i in self._host_index):
            for m in meta[1:]:
                if m.device_src and m.index in given:
                    raise _bad("values[%r]: this input's values are in device memory (device=...); "
                               "give none" % m.name, "step_inputs")
                if not m.device_src and m.index not in given:
                    raise _bad("values[%r]: missing (the input takes host values every step)"
                               % m.name, "step_inputs")
        if sequences is None:
            s = None
            for m in self._seq_inputs:
                if m.index in given:
                    v = given[m.index]
                    sh = getattr(v, "shape", None)
                    if sh is not None and len(sh) >= 2:
                        s = int(sh[0])
                    else:
                        s = _count(v) // m.width
                    break
            if s is None:
                s = min(t, self.max_sequences)
        else:
            s = _as_size(sequences, "sequences")
        # counts first (as the library checks them), then the values' lengths
        if not 1 <= t <= self.arena.max_batch_tokens:
            raise OutOfRangeError("tokens: %d (1 .. %d)" % (t, self.arena.max_batch_tokens),
                                  "step_inputs")
        if not 1 <= s <= min(t, self.max_sequences):
            raise OutOfRangeError("sequences: %d (1 .. min(tokens %d, max_sequences %d))"
                                  % (s, t, self.max_sequences), "step_inputs")
        vals = self._values
        held = []
        for m in meta[1:]:
            if m.device_src:
                vals[m.index] = None
                continue
            rows = t if m.shape == "token" else s if m.shape == "sequence" else m.max_rows
            v = given[m.index]
            a = _host_values(m, v, rows, lambda m=m: "values[%r]" % m.name)
            held.append(a)
            vals[m.index] = self._address_of(a) if a is v else a.ctypes.data
        if dev:
            vals[0] = None
            st = lib.mdr_graph_cache_step_inputs_device(c, addr, vals, len(meta), t, s)
        else:
            vals[0] = addr
            st = lib.mdr_graph_cache_step_inputs(c, vals, len(meta), t, s)
        del held, keep
        if st or self._excs:
            self._fail(st, "mdr_graph_cache_step_inputs_device" if dev
                       else "mdr_graph_cache_step_inputs")

    def _address_of(self, a):
        """The data address of the caller's numpy array `a`, remembered by
        identity (the array is held while remembered, so its id and buffer
        stay its own): an engine passes the same arrays step after step, and
        asking numpy costs about a microsecond a call."""
        hit = self._addrs.get(id(a))
        if hit is not None and hit[0] is a:
            return hit[1]
        if len(self._addrs) >= 512:
            self._addrs.clear()
        addr = a.ctypes.data
        self._addrs[id(a)] = (a, addr)
        return addr

    def step_ptr(self, addr, tokens):
        """The lowest-cost step: host ids at address `addr` (uint32[tokens])."""
        st = lib.mdr_graph_cache_step(self._h.ptr if not self._h.closed else self._c(), addr,
                                      tokens)
        if st or self._excs:
            self._fail(st, "mdr_graph_cache_step")

    def prepare(self, counts, device_ids=None):
        """Capture ahead of time the graphs serving these token counts (for
        device steps with ids at `device_ids` when given; 0: token_ids).
        Garbage is collected first, and no cyclic collection runs during
        the captures (a finalizer's CUDA call would break them)."""
        c = self._c()
        if isinstance(counts, int):
            counts = [counts]
        vals = [_as_size(x, "a count") for x in counts]
        arr = (c_size_t * max(len(vals), 1))(*vals)
        addr = None
        if device_ids is not None:
            addr = device_ids.data_ptr() if hasattr(device_ids, "data_ptr") else (
                _addr(device_ids) if device_ids else 0)
        gc.collect()
        gc_on = gc.isenabled()
        if gc_on:
            gc.disable()
        try:
            if addr is None:
                st = lib.mdr_graph_cache_prepare(c, arr, len(vals))
            else:
                st = lib.mdr_graph_cache_prepare_device(c, addr, arr, len(vals))
        finally:
            if gc_on:
                gc.enable()
        if st or self._excs:
            self._fail(st, "mdr_graph_cache_prepare")

    def stats(self):
        """The cache's counters as a GraphStats (steps, hits, misses,
        captures, evictions, eager steps and fallbacks, inline and device-id
        steps, graph bytes and nodes, ...), copied now."""
        c = self._c()
        s = GraphStatsC()
        _check(lib.mdr_graph_cache_stats(c, byref(s)), "mdr_graph_cache_stats")
        return GraphStats(s.steps, s.hits, s.misses, s.captures, s.evictions, s.eager_fallbacks,
                          s.padded_tokens, s.capture_us, s.graphs, s.eager_steps, s.uncapturable,
                          bool(s.graphs_disabled), s.device_steps, s.graph_bytes, s.graph_nodes,
                          bool(s.poison), bool(s.memory_measured), s.inline_steps)

    def graph_tokens(self, tokens):
        """The graph token count that serves a step of `tokens` tokens (EXACT:
        tokens; LADDER: its rung; DYNAMIC: max_batch_tokens).
        mdr.OutOfRangeError past max_batch_tokens or at 0."""
        c = self._c()
        out = c_size_t()
        self._fail(lib.mdr_graph_cache_graph_tokens(c, _as_size(tokens, "tokens"), byref(out)),
                   "mdr_graph_cache_graph_tokens")
        return out.value

    def graph_info(self, tokens):
        """A GraphInfo for the graph serving `tokens`: its token count,
        whether it is cached (host-id and device-id graphs apart), its bytes
        and nodes. Reads the cache only; errors as graph_tokens."""
        c = self._c()
        i = GraphInfoC()
        self._fail(lib.mdr_graph_cache_graph_info(c, _as_size(tokens, "tokens"), byref(i)),
                   "mdr_graph_cache_graph_info")
        return GraphInfo(i.graph_tokens, bool(i.cached), i.bytes, i.nodes, bool(i.device_cached),
                         i.device_bytes, i.device_nodes)

    @property
    def zero_strategy(self):
        """The zero strategy the cache's graphs use ("memset" or "fused"),
        resolved at create."""
        return {0: "memset", 1: "fused"}.get(lib.mdr_graph_cache_zero_strategy(self._c()))

    @property
    def rows_policy(self):
        """The row policy the cache's graphs use ("seed" or "all"), resolved
        at create."""
        return {0: "seed", 1: "all"}.get(lib.mdr_graph_cache_rows_policy(self._c()))

    def close(self):
        """Wait for the cache's stream, then free its graphs (deferred while
        a step is running)."""
        self._last_ids = self._last = None
        self._addrs = {}  # the arrays step_inputs remembered are the caller's again
        if self._h is not None:
            self._h.close()

    def __repr__(self):
        return "<mdr.GraphCache %s%s>" % (self.mode, " closed" if self.closed else "")


# ---- communicators ---------------------------------------------------------------

class Comm(_Object):
    """A communicator rank (include/mdr/comm.h). Comm.host(backends) makes
    host ranks (threads of this process); Comm.local(backends) NCCL ranks of
    local GPUs; Comm.adopt_nccl(backend, ncclComm_t) an engine's."""

    def __init__(self, *a, **k):
        raise TypeError("use mdr.Comm.host(backends), .local(backends) or .adopt_nccl(...)")

    @classmethod
    def _make(cls, backend, ptr):
        self = object.__new__(cls)
        self.backend = backend
        self._h = _Handle(ptr, lib.mdr_comm_destroy, (backend._h,), what="communicator")
        self.rank = int(lib.mdr_comm_rank(ptr))
        self.size = int(lib.mdr_comm_size(ptr))
        self.device = int(lib.mdr_comm_device(ptr))
        return self

    @classmethod
    def _many(cls, fn, call, backends):
        backends = list(backends)
        if not backends or not all(isinstance(b, Backend) for b in backends):
            raise _bad("backends must be a non-empty list of mdr.Backend", call)
        n = len(backends)
        arr = (c_void_p * n)(*[b._ptr() for b in backends])
        out = (c_void_p * n)()
        st = fn(arr, n, out)
        if st:
            raise error_for(st, _text(lib.mdr_backend_last_error(backends[0]._h.ptr)), call)
        return [cls._make(b, out[i]) for i, b in enumerate(backends)]

    @classmethod
    def host(cls, backends):
        """Host communicators, one rank per host backend of `backends` (ranks
        as threads of this process): their all-reduce runs the protocol of
        mdr's kernels through shared host memory. A list of Comm, rank i on
        backends[i]."""
        return cls._many(lib.mdr_comm_create_host, "mdr_comm_create_host", backends)

    @classmethod
    def local(cls, backends):
        """The NCCL communicators of the local GPUs of `backends` (CUDA
        backends on distinct devices, one process driving them all), made
        and owned by mdr. A list of Comm, rank i on backends[i].
        mdr.UnsupportedError without NCCL."""
        return cls._many(lib.mdr_comm_create_local, "mdr_comm_create_local", backends)

    @classmethod
    def adopt_nccl(cls, backend, nccl_comm):
        """Adopt an engine's NCCL communicator (`nccl_comm`: its ncclComm_t as
        an int) for the rank on CUDA backend `backend`. Borrowed: it must
        outlive the Comm, and closing the Comm leaves it alone."""
        p = c_void_p()
        st = lib.mdr_comm_adopt_nccl(backend._ptr(), c_void_p(_as_size(nccl_comm, "nccl_comm")),
                                     byref(p))
        backend._check(st, "mdr_comm_adopt_nccl")
        return cls._make(backend, p.value)

    @staticmethod
    def nccl_available():
        """True when this build of libmdr has NCCL."""
        return bool(lib.mdr_comm_nccl_available())

    def abort(self):
        """Mark the communicator failed on every rank of this process:
        collectives waiting on it, and every later one, fail with
        mdr.StateError; mdr's spinning all-reduce kernels leave at once and
        the streams stay usable. A communicator mdr made over NCCL is
        aborted too; an adopted one is the engine's to abort. Thread-safe."""
        lib.mdr_comm_abort(self._ptr())

    def __repr__(self):
        return "<mdr.Comm rank %d of %d%s>" % (self.rank, self.size,
                                               " closed" if self.closed else "")
