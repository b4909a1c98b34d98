"""Loading libmdr and declaring its functions (ctypes, argtypes/restype on
every one). Internal: the public objects are in mdr._core.

Where the library comes from, first match wins:
  1. $MDR_LIBRARY (a path to libmdr.so);
  2. the copy bundled in the package (mdr/_lib/libmdr.so*, put there by
     `pip install ./python`);
  3. next to the package (the folder holding mdr/, and ../lib of it);
  4. the repository's build folders when running from the source tree
     (python/mdr -> <repo>/build*/libmdr.so);
  5. the system's library path (ctypes.util.find_library("mdr")).
"""
import ctypes
import ctypes.util
import glob
import os
from ctypes import (CFUNCTYPE, POINTER, Structure, c_bool, c_char, c_char_p, c_double,
                    c_int, c_size_t, c_uint32, c_uint64, c_void_p)

_HERE = os.path.dirname(os.path.abspath(__file__))
_LIBNAMES = ("libmdr.so", "libmdr.so.0", "libmdr.dylib", "mdr.dll")


def _candidates():
    env = os.environ.get("MDR_LIBRARY")
    if env:
        return [("MDR_LIBRARY", env)]
    out = []
    for d in (os.path.join(_HERE, "_lib"), os.path.dirname(_HERE),
              os.path.join(os.path.dirname(_HERE), "lib")):
        for n in _LIBNAMES:
            out.append(("package", os.path.join(d, n)))
    repo = os.path.dirname(os.path.dirname(_HERE))  # python/mdr -> repo
    if os.path.isfile(os.path.join(repo, "include", "mdr", "mdr.h")):
        builds = [os.path.join(repo, "build")] + sorted(glob.glob(os.path.join(repo, "build*")))
        for d in builds:
            for n in _LIBNAMES:
                out.append(("source tree", os.path.join(d, n)))
    found = ctypes.util.find_library("mdr")
    if found:
        out.append(("system", found))
    return out


def _load():
    tried = []
    for origin, path in _candidates():
        if origin != "system" and origin != "MDR_LIBRARY" and not os.path.isfile(path):
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append("%s (%s): %s" % (path, origin, e))
            if origin == "MDR_LIBRARY":
                break
    msg = "libmdr not found or not loadable"
    if tried:
        msg += ":\n  " + "\n  ".join(tried)
    msg += ("\nSet MDR_LIBRARY=/path/to/libmdr.so, install the package with "
            "`pip install --no-build-isolation ./python` (it builds and bundles libmdr), "
            "or build the library in the repository (cmake -S . -B build && "
            "cmake --build build --target mdr).")
    raise ImportError(msg)


lib, path = _load()

# ---- types -------------------------------------------------------------------
status_t = c_int
dptr_t = c_uint64
stream_t = c_void_p


class ModelConfigC(Structure):
    _fields_ = [("family", c_int)] + [
        (n, c_bool if n in ("attn_gated", "mrope_interleaved") else c_size_t) for n in (
            "hidden_size", "intermediate_size", "vocab_size", "num_attention_heads",
            "num_key_value_heads", "head_dim", "attn_gated", "linear_num_key_heads",
            "linear_key_head_dim", "linear_num_value_heads", "linear_value_head_dim",
            "num_experts", "num_experts_per_tok", "zero_expert_num", "moe_intermediate_size",
            "shared_expert_intermediate_size", "moe_latent_size", "mamba_num_heads",
            "mamba_head_dim", "ssm_state_size", "n_groups", "kv_lora_rank", "q_lora_rank",
            "qk_rope_head_dim", "o_groups", "o_lora_rank", "hc_mult", "hc_lowrank",
            "index_n_heads", "index_head_dim", "index_topk", "index_compress_ratio",
            "adapter_max_rank", "mrope_interleaved", "num_ssm_layers")]


class LimitsC(Structure):
    _fields_ = [("max_batch_tokens", c_size_t), ("max_seq_len", c_size_t),
                ("kv_block_size", c_size_t), ("max_batch_size", c_size_t)]


class SizesOptionsC(Structure):
    _fields_ = [("glm_trim", c_bool), ("splitk_sm_count", c_size_t)]


class SegmentC(Structure):
    _fields_ = [("ptr", dptr_t), ("bytes", c_size_t)]


# Bodies: mdr_capture_fn and mdr_capture_dynamic_fn.
CAPTURE_FN = CFUNCTYPE(status_t, c_void_p, c_void_p, c_size_t)
CAPTURE_DYNAMIC_FN = CFUNCTYPE(status_t, c_void_p, c_void_p, dptr_t, c_size_t)

# Out-structs get trailing room: a newer library that appends fields never
# writes past our buffer.
_PAD = ("_reserved", c_char * 256)


# mdr_step_input (include/mdr/graph.h): an array element, so exactly the C
# layout, no trailing room.
class StepInputC(Structure):
    _fields_ = [("name", c_char_p), ("elem_bytes", c_size_t), ("shape", c_int),
                ("width", c_size_t), ("max_rows", c_size_t), ("pad", c_uint64), ("dest", c_int),
                ("address", dptr_t), ("buffer", c_int), ("offset", c_size_t),
                ("device_src", dptr_t)]


class StepInputInfoC(Structure):
    _fields_ = [("name", c_char_p), ("elem_bytes", c_size_t), ("shape", c_int),
                ("width", c_size_t), ("max_rows", c_size_t), ("row_bytes", c_size_t),
                ("max_bytes", c_size_t), ("dst", dptr_t), ("device_src", dptr_t),
                ("slot_offset", c_size_t), ("pad", c_uint64), _PAD]


# mdr_graph_cache_options: the C fields in order (test_mdr.py checks every
# offset against the header), then trailing room, since
# mdr_graph_cache_options_default writes the whole struct.
class GraphCacheOptionsC(Structure):
    _fields_ = [("mode", c_int), ("zero", c_int), ("ladder", POINTER(c_size_t)),
                ("ladder_len", c_size_t), ("max_graphs", c_size_t), ("pad_token_id", c_uint32),
                ("body", c_void_p), ("user", c_void_p), ("body_dynamic", c_void_p),
                ("dynamic_impl", c_int), ("rows", c_int), ("poison", c_int),
                ("max_graph_bytes", c_uint64),
                ("inputs", POINTER(StepInputC)), ("n_inputs", c_size_t), ("max_sequences", c_size_t),
                _PAD]


class GraphStatsC(Structure):
    _fields_ = [("steps", c_uint64), ("hits", c_uint64), ("misses", c_uint64),
                ("captures", c_uint64), ("evictions", c_uint64), ("eager_fallbacks", c_uint64),
                ("padded_tokens", c_uint64), ("capture_us", c_double), ("graphs", c_size_t),
                ("eager_steps", c_uint64), ("uncapturable", c_uint64), ("graphs_disabled", c_int),
                ("device_steps", c_uint64), ("graph_bytes", c_uint64), ("graph_nodes", c_size_t),
                ("poison", c_int), ("memory_measured", c_int), ("inline_steps", c_uint64), _PAD]


class GraphInfoC(Structure):
    _fields_ = [("graph_tokens", c_size_t), ("cached", c_int), ("bytes", c_uint64),
                ("nodes", c_size_t), ("device_cached", c_int), ("device_bytes", c_uint64),
                ("device_nodes", c_size_t), _PAD]


class AllReduceDescC(Structure):
    _fields_ = [("buf", c_int), ("dtype", c_int), ("tokens", c_size_t), ("count_ptr", dptr_t),
                ("residual", c_int), ("algo", c_int), ("norm_output", c_int), ("norm_weight", dptr_t),
                ("norm_eps", ctypes.c_float)]


P = c_void_p
SZ = c_size_t
_SIGS = {
    # status.h, version.h
    "mdr_status_string": (c_char_p, [c_int]),
    "mdr_version_number": (ctypes.c_uint, []),
    # backend.h
    "mdr_backend_cuda_create": (status_t, [c_int, POINTER(P)]),
    "mdr_backend_host_create": (status_t, [POINTER(P)]),
    "mdr_backend_create_default": (status_t, [POINTER(P)]),
    "mdr_backend_destroy": (None, [P]),
    "mdr_backend_name": (c_char_p, [P]),
    "mdr_backend_last_error": (c_char_p, [P]),
    "mdr_backend_stream_create": (status_t, [P, POINTER(stream_t)]),
    "mdr_backend_stream_destroy": (None, [P, stream_t]),
    "mdr_backend_synchronize": (status_t, [P, stream_t]),
    "mdr_backend_copy_h2d": (status_t, [P, dptr_t, c_void_p, SZ]),
    "mdr_backend_copy_d2h": (status_t, [P, c_void_p, dptr_t, SZ]),
    "mdr_backend_fill": (status_t, [P, dptr_t, ctypes.c_ubyte, SZ]),
    "mdr_backend_memset_async": (status_t, [P, dptr_t, ctypes.c_ubyte, SZ, stream_t]),
    "mdr_backend_alloc": (status_t, [P, SZ, POINTER(dptr_t)]),
    "mdr_backend_free": (None, [P, dptr_t]),
    # config.h, sizes.h
    "mdr_model_preset": (status_t, [c_char_p, POINTER(ModelConfigC)]),
    "mdr_model_preset_count": (SZ, []),
    "mdr_model_preset_name": (c_char_p, [SZ]),
    "mdr_buffer_name": (c_char_p, [c_int]),
    "mdr_buffer_from_name": (status_t, [c_char_p, POINTER(c_int)]),
    "mdr_sizes_options_default": (None, [POINTER(SizesOptionsC)]),
    # sizes: the struct's size depends on MDR_BUF_COUNT (set below)
    # arena.h
    "mdr_arena_destroy": (None, [P]),
    "mdr_arena_ptr": (dptr_t, [P, c_int]),
    "mdr_arena_bytes": (SZ, [P, c_int]),
    "mdr_arena_max_batch_tokens": (SZ, [P]),
    "mdr_arena_backend": (P, [P]),
    "mdr_arena_slab_bytes": (SZ, [P]),
    "mdr_arena_set_zero_strategy": (status_t, [P, c_int]),
    "mdr_arena_set_rows_policy": (status_t, [P, c_int]),
    "mdr_arena_set_poison": (status_t, [P, c_int]),
    "mdr_arena_poison": (c_int, [P]),
    "mdr_arena_zero_strategy": (c_int, [P]),
    "mdr_arena_rows_policy": (c_int, [P]),
    "mdr_arena_zero_all": (status_t, [P, stream_t]),
    "mdr_arena_zero_all_rows": (status_t, [P, stream_t, SZ]),
    "mdr_arena_zero_prefill_essentials": (status_t, [P, stream_t]),
    "mdr_arena_zero_plan": (status_t, [P, SZ, POINTER(SegmentC), SZ, POINTER(SZ)]),
    "mdr_arena_window": (c_int, [P]),
    "mdr_arena_comm": (P, [P]),
    "mdr_window_name": (c_char_p, [c_int]),
    "mdr_arena_create_on_comms": (status_t, [POINTER(P), c_int, c_void_p, POINTER(P)]),
    # graph.h
    "mdr_graph_cache_options_default": (None, [POINTER(GraphCacheOptionsC)]),
    "mdr_graph_cache_create": (status_t, [P, stream_t, POINTER(GraphCacheOptionsC), POINTER(P)]),
    "mdr_graph_cache_destroy": (None, [P]),
    "mdr_graph_cache_prepare": (status_t, [P, POINTER(SZ), SZ]),
    "mdr_graph_cache_step": (status_t, [P, c_void_p, SZ]),
    "mdr_graph_cache_step_device": (status_t, [P, dptr_t, SZ]),
    "mdr_graph_cache_prepare_device": (status_t, [P, dptr_t, POINTER(SZ), SZ]),
    "mdr_graph_cache_count_ptr": (dptr_t, [P]),
    "mdr_graph_cache_zero_strategy": (c_int, [P]),
    "mdr_graph_cache_rows_policy": (c_int, [P]),
    "mdr_graph_cache_graph_tokens": (status_t, [P, SZ, POINTER(SZ)]),
    "mdr_graph_cache_graph_info": (status_t, [P, SZ, POINTER(GraphInfoC)]),
    "mdr_graph_cache_stats": (status_t, [P, POINTER(GraphStatsC)]),
    # graph.h: step inputs
    "mdr_graph_cache_step_inputs": (status_t, [P, POINTER(c_void_p), SZ, SZ, SZ]),
    "mdr_graph_cache_step_inputs_device": (status_t, [P, dptr_t, POINTER(c_void_p), SZ, SZ, SZ]),
    "mdr_graph_cache_step_input_count": (SZ, [P]),
    "mdr_graph_cache_step_input_info": (status_t, [P, SZ, POINTER(StepInputInfoC)]),
    "mdr_graph_cache_step_input_find": (status_t, [P, c_char_p, POINTER(SZ)]),
    "mdr_graph_cache_slot_bytes": (SZ, [P]),
    "mdr_graph_cache_sequences_ptr": (dptr_t, [P]),
    "mdr_graph_cache_sequence_bound": (status_t, [P, SZ, POINTER(SZ)]),
    # comm.h
    "mdr_comm_nccl_available": (c_int, []),
    "mdr_comm_adopt_nccl": (status_t, [P, c_void_p, POINTER(P)]),
    "mdr_comm_create_local": (status_t, [POINTER(P), c_int, POINTER(P)]),
    "mdr_comm_create_host": (status_t, [POINTER(P), c_int, POINTER(P)]),
    "mdr_comm_rank": (c_int, [P]),
    "mdr_comm_size": (c_int, [P]),
    "mdr_comm_device": (c_int, [P]),
    "mdr_comm_backend": (P, [P]),
    "mdr_comm_abort": (None, [P]),
    "mdr_comm_destroy": (None, [P]),
    "mdr_all_reduce_algo_name": (c_char_p, [c_int]),
    "mdr_all_reduce": (status_t, [P, POINTER(AllReduceDescC), stream_t]),
    "mdr_all_reduce_choice": (c_int, [P, POINTER(AllReduceDescC)]),
    "mdr_all_reduce_norm_fused": (c_int, [P, POINTER(AllReduceDescC)]),
    "mdr_all_reduce_kernels": (c_int, [P]),
    # version.h
    "mdr_version_string": (c_char_p, []),
    "mdr_build_features": (ctypes.c_uint, []),
    "mdr_build_features_string": (c_char_p, []),
}

# Functions every libmdr this package supports must have; the others are
# feature-detected (has()).
_OPTIONAL = {"mdr_all_reduce", "mdr_all_reduce_choice", "mdr_all_reduce_norm_fused", "mdr_all_reduce_kernels",
             "mdr_all_reduce_algo_name", "mdr_arena_create_on_comms", "mdr_arena_window",
             "mdr_arena_comm", "mdr_window_name"}

_missing = []
for _name, (_res, _args) in _SIGS.items():
    try:
        _f = getattr(lib, _name)
    except AttributeError:
        if _name not in _OPTIONAL:
            _missing.append(_name)
        continue
    _f.restype = _res
    _f.argtypes = _args
if _missing:
    raise ImportError("%s lacks functions this package needs: %s" % (path, ", ".join(_missing)))


def has(name):
    return hasattr(lib, name)


# The buffer list, read from the library (MDR_BUF_COUNT is its length).
BUFFER_NAMES = []
while True:
    _n = lib.mdr_buffer_name(len(BUFFER_NAMES))
    if _n is None:
        break
    BUFFER_NAMES.append(_n.decode())
BUF_COUNT = len(BUFFER_NAMES)


class SizesC(Structure):
    _fields_ = [("bytes", c_size_t * BUF_COUNT), ("max_batch_tokens", c_size_t),
                ("logits_rows", c_size_t)]


for _name, _res, _args in (
        ("mdr_sizes_from_config", status_t, [POINTER(ModelConfigC), POINTER(LimitsC), POINTER(SizesC)]),
        ("mdr_sizes_from_config_ex", status_t,
         [POINTER(ModelConfigC), POINTER(LimitsC), POINTER(SizesOptionsC), POINTER(SizesC)]),
        ("mdr_sizes_total_bytes", status_t, [POINTER(SizesC), POINTER(SZ)]),
        ("mdr_arena_create", status_t, [P, POINTER(SizesC), POINTER(P)]),
        ("mdr_arena_sizes", POINTER(SizesC), [P]),
        ("mdr_arena_create_on_comm", status_t, [P, POINTER(SizesC), POINTER(P)])):
    if hasattr(lib, _name):
        _f = getattr(lib, _name)
        _f.restype = _res
        _f.argtypes = _args
if has("mdr_arena_create_on_comms"):
    lib.mdr_arena_create_on_comms.argtypes = [POINTER(P), c_int, POINTER(SizesC), POINTER(P)]
