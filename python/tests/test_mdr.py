"""CI suite of the Python package: host backend, numpy + pytest.
GPU cases (torch) are in test_gpu_torch.py."""
import ctypes
import gc
import itertools
import re
import threading
import traceback

import numpy as np
import pytest

import mdr
from mdr import _dlpack, _lib

TINY = dict(hidden_size=64, intermediate_size=128, vocab_size=256, num_attention_heads=2,
            num_key_value_heads=1, head_dim=32)


@pytest.fixture
def host():
    b = mdr.Backend.host()
    s = b.stream()
    yield b, s
    s.close()
    b.close()


def tiny_arena(b, m=16):
    return mdr.Arena(b, TINY, max_batch_tokens=m, max_seq_len=256, kv_block_size=16,
                     max_batch_size=4)


# ---- names the issue lists -----------------------------------------------------------

def test_names_kept():
    assert re.fullmatch(r"\d+\.\d+\.\d+", mdr.version())
    assert mdr.version_number() == int(_lib.lib.mdr_version_number())
    assert mdr.presets() == ["qwen3-next-80b", "glm-5.3-flash-tp2", "nemotron-h",
                             "deepseek-v4-flash"]
    cfg = mdr.preset("qwen3-next-80b")
    assert isinstance(cfg, mdr.ModelConfig) and cfg.hidden_size > 0
    for f in ("host", "cuda", "default"):
        assert callable(getattr(mdr.Backend, f))
    b = mdr.Backend.host()
    s = b.stream()
    s.synchronize()
    a = mdr.Arena(b, "qwen3-next-80b", max_batch_tokens=8, max_seq_len=1024, kv_block_size=16,
                  max_batch_size=4)
    v = a["hidden_states"]
    assert v.nbytes > 0 and hasattr(v, "__dlpack__")
    a.zero_all(s)
    a.zero_all_rows(s, 3)
    a.zero_prefill_essentials(s)
    c = mdr.GraphCache(a, s, mode="exact", zero="fused", body=lambda stream, t: None)
    c.step([1, 2])
    c.prepare([1, 4])
    assert c.stats().steps == 1
    with pytest.raises(mdr.Error) as e:
        c.step([])
    assert e.value.status == 2
    c.close(), a.close(), s.close(), b.close()


def test_default_backend_and_features():
    b = mdr.Backend.default()
    assert b.name in ("host", "cuda")
    b.close()
    assert isinstance(mdr.build_features(), tuple)
    assert mdr.library_path


# ---- views ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", mdr.presets())
@pytest.mark.parametrize("m", [1, 7, 64])
def test_views_every_buffer_every_preset(host, name, m):
    b, s = host
    sz = mdr.sizes(name, m, max_seq_len=4096, kv_block_size=16, max_batch_size=4)
    a = mdr.Arena(b, name, max_batch_tokens=m, max_seq_len=4096, kv_block_size=16,
                  max_batch_size=4)
    L = _lib.lib
    assert mdr.BUFFER_NAMES == tuple(_lib.BUFFER_NAMES) and len(mdr.BUFFER_NAMES) == 46
    assert set(mdr.BUFFER_LAYOUT) == set(mdr.BUFFER_NAMES)
    for i, n in enumerate(mdr.BUFFER_NAMES):
        v = a[n]
        assert v is a.buffer(n) and v.name == n and v.index == i
        assert v.ptr == L.mdr_arena_ptr(a._h.ptr, i)
        assert v.nbytes == L.mdr_arena_bytes(a._h.ptr, i) == sz.bytes[n]
        assert v.size * v.itemsize == v.nbytes or v.nbytes == 0
        dtype, rows, _ = mdr.BUFFER_LAYOUT[n]
        if mdr.preset(name).kv_lora_rank > 0:  # MLA: BF16 rope rows in ssm_conv_out_f32
            dtype, rows, _ = mdr.BUFFER_LAYOUT_MLA.get(n, (dtype, rows, _))
        if v.nbytes:
            assert v.dtype == dtype
            want_rows = {"M": m, "Mp": (m + 15) // 16 * 16, "Mk": (max(m, 3) + 15) // 16 * 16,
                         "logits": a.logits_rows}.get(rows)
            if want_rows and v.nbytes % (want_rows * v.itemsize) == 0:
                assert v.shape == (want_rows, v.nbytes // (want_rows * v.itemsize))
            else:
                assert len(v.shape) == 1
        assert v.__dlpack_device__() == (1, 0)
        raw = np.from_dlpack(v.raw())
        assert raw.shape == (v.nbytes,) and raw.dtype == np.uint8
        if v.nbytes:
            assert raw.__array_interface__["data"][0] == v.ptr
        x = v.numpy()
        assert x.nbytes == v.nbytes and x.shape == v.shape
        if v.dtype not in ("bfloat16",):
            y = np.from_dlpack(v)
            assert y.shape == v.shape and y.dtype == np.dtype(v.dtype)
    cfg = mdr.preset(name)
    assert a["hidden_states"].shape == (m, cfg.hidden_size)
    assert a["hidden_states"].dtype == "bfloat16"
    assert a["token_ids"].shape[0] >= m and a["token_ids"].dtype == "uint32"
    assert a.sizes.mla == (cfg.kv_lora_rank > 0)
    if a.sizes.mla:
        assert a["ssm_conv_out_f32"].dtype == "bfloat16"
        assert a["ssm_conv_out_f32"].shape == (
            m, a["ssm_conv_out_f32"].nbytes // (2 * m))
    a.close()


def test_numpy_writes_seen_by_c_and_back(host):
    b, s = host
    a = tiny_arena(b)
    h = a["hidden_states"]
    x = h.numpy()
    assert x.flags.writeable and x.dtype == np.uint16
    x[:] = np.arange(x.size, dtype=np.uint16).reshape(x.shape)
    got = np.frombuffer(b.copy_d2h(h.ptr, h.nbytes), dtype=np.uint16).reshape(x.shape)
    assert np.array_equal(got, x)
    b.fill(h.ptr, 0xAB, 64)
    assert (x.view(np.uint8).reshape(-1)[:64] == 0xAB).all()
    b.memset_async(h, 0x11, h.nbytes, s)
    s.synchronize()
    assert (x.view(np.uint8) == 0x11).all()
    a.zero_all(s)
    s.synchronize()
    assert not x.any()
    f = a["gate_logits_f32"].numpy()
    f[...] = 1.5
    assert np.frombuffer(a["gate_logits_f32"].read(), np.float32)[0] == 1.5
    h.write(b"\x01\x02", offset=4)
    assert x.view(np.uint8).reshape(-1)[4:6].tolist() == [1, 2]


def test_views_reinterpret(host):
    b, s = host
    a = tiny_arena(b)
    h = a["hidden_states"]
    assert h.view("float32").shape == (16, 32)
    assert h.view("uint8", (16, 128)).shape == (16, 128)
    assert h.raw().shape == (h.nbytes,)
    with pytest.raises(mdr.OutOfRangeError):
        h.view("float32", (1000, 1000))
    with pytest.raises(mdr.InvalidArgumentError):
        h.view("complex1024")


def test_dlpack_versioned_and_legacy_capsules(host):
    b, s = host
    a = tiny_arena(b)
    v = a["hidden_states"]
    api = ctypes.PyDLL(ctypes.pythonapi._name, handle=ctypes.pythonapi._handle)
    api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
    api.PyCapsule_GetPointer.restype = ctypes.c_void_p
    api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
    gc.collect()  # exports earlier tests left to the collector are released first,
    base = _dlpack.live_exports()  # not in the middle of this count

    legacy = v.__dlpack__()
    assert api.PyCapsule_IsValid(legacy, b"dltensor")
    assert a._h.users == 1 and _dlpack.live_exports() == base + 1
    del legacy  # unconsumed: the capsule's destructor releases
    gc.collect()
    assert a._h.users == 0 and _dlpack.live_exports() == base

    cap = v.__dlpack__(max_version=(1, 3))
    assert api.PyCapsule_IsValid(cap, b"dltensor_versioned")
    # a consumer: take the struct, rename the capsule, call the deleter later
    p = api.PyCapsule_GetPointer(cap, b"dltensor_versioned")
    m = _dlpack.DLManagedTensorVersioned.from_address(p)
    assert (m.version.major, m.version.minor) == (1, 0)
    t = m.dl_tensor
    assert t.data == v.ptr and t.ndim == 2 and (t.shape[0], t.shape[1]) == v.shape
    assert (t.dtype.code, t.dtype.bits, t.dtype.lanes) == (4, 16, 1)  # bfloat16
    assert (t.strides[0], t.strides[1]) == (v.shape[1], 1)
    assert (t.device.device_type, t.device.device_id) == (1, 0)
    api.PyCapsule_SetName(cap, b"used_dltensor_versioned")
    del cap
    gc.collect()
    assert a._h.users == 1  # the consumer holds it
    a.close()
    assert a._h.ptr is not None  # closed, but memory kept for the consumer
    with pytest.raises(mdr.ClosedError):
        a["hidden_states"]
    m.deleter(p)
    assert a._h.ptr is None and _dlpack.live_exports() == base

    a2 = tiny_arena(b)
    w = a2["token_ids"]
    with pytest.raises(BufferError):
        w.__dlpack__(copy=True)
    with pytest.raises(BufferError):
        w.__dlpack__(dl_device=(2, 0))
    assert a2._h.users == 0
    assert not hasattr(w, "__cuda_array_interface__")  # host memory
    a2.close()
    with pytest.raises(mdr.ClosedError):
        w.__dlpack__()


# ---- graph caches ----------------------------------------------------------------------

def test_staged_ids_in_token_ids(host):
    b, s = host
    a = tiny_arena(b)
    c = mdr.GraphCache(a, s, mode="ladder", zero="fused", pad_token_id=7)
    tok = a["token_ids"].numpy()
    cases = [[5, 6, 7], np.array([9, 8, 7, 6, 5], dtype=np.uint32),
             np.array([1, 2, 3], dtype=np.int64), np.arange(16, dtype=np.int32)]
    for ids in cases:
        c.step(ids)
        s.synchronize()
        n = len(ids)
        assert tok[:n].tolist() == list(map(int, ids))
        g = c.graph_tokens(n)
        assert (tok[n:g] == 7).all()
    big = np.zeros(16, dtype=np.uint32)
    big[:4] = [11, 12, 13, 14]
    for _ in range(3):  # the same array: the cached address
        c.step(big, 4)
        s.synchronize()
        assert tok[:4].tolist() == big[:4].tolist()
        big[:4] += 1
    st = c.stats()
    assert st.steps == 7 and st.hits >= 2
    # device ids (host backend: "device" memory is host memory)
    d = b.alloc(64)
    d.view("uint32").numpy()[:3] = [21, 22, 23]
    c.step_device(d, 3)
    s.synchronize()
    assert tok[:3].tolist() == [21, 22, 23]
    assert c.stats().device_steps == 1
    c.close()
    d.close()


@pytest.mark.parametrize("route", ["1", "0"])
def test_inline_steps_counted(host, monkeypatch, route):
    # small host steps of an EXACT cache carry their ids in the launch's
    # parameters (MDR_STAGE_INLINE, on by default): up to 24 ids in the
    # small class, 25-32 (fused zeroing, a short plan) in the large one;
    # 36 ids have no inline layout, the ring
    b, s = host
    monkeypatch.setenv("MDR_STAGE_INLINE", route)
    a = tiny_arena(b, 40)
    tok = a["token_ids"].numpy()
    c = mdr.GraphCache(a, s, mode="exact", zero="fused")
    for n in (1, 3, 3, 28, 24, 36):
        ids = list(range(100 + n, 100 + 2 * n))
        tok[:] = 0xFFFFFFFF
        c.step(ids)
        s.synchronize()
        assert tok[:n].tolist() == ids
        assert (tok[n:] == 0xFFFFFFFF).all()
    st = c.stats()
    assert st.steps == 6 and st.eager_steps == 0
    assert st.inline_steps == (5 if route == "1" else 0)
    c.close()


def _row_bytes(view, m):
    return view.nbytes // m


@pytest.mark.parametrize("mode", ["exact", "ladder", "dynamic"])
def test_bodies_every_mode(host, mode):
    b, s = host
    m = 16
    a = tiny_arena(b, m)
    h = a["hidden_states"]
    rb = _row_bytes(h, m)
    seen = []

    if mode == "dynamic":
        def body(stream, count_ptr, max_tokens):
            assert isinstance(stream, mdr.Stream) and stream is s
            seen.append((count_ptr, max_tokens))
            b.memset_async(h, 0x5A, max_tokens * rb, stream)
    else:
        def body(stream, tokens):
            assert stream is s
            seen.append(tokens)
            b.memset_async(h, 0x5A, tokens * rb, stream)

    c = mdr.GraphCache(a, s, mode=mode, body=body)
    x = h.numpy().view(np.uint8)
    for n in [1, 3, 3, 5, 16, 1, 3]:
        x[...] = 0xFF
        c.step(list(range(n)))
        s.synchronize()
        g = c.graph_tokens(n)
        assert (x.reshape(-1)[:g * rb] == 0x5A).all()
        assert (x.reshape(-1)[g * rb:] == 0xFF).all()
        assert np.frombuffer(b.copy_d2h(c.count_ptr, 4), np.uint32)[0] == n
    st = c.stats()
    assert st.steps == 7 and st.eager_fallbacks == 0
    if mode == "dynamic":
        assert seen == [(c.count_ptr, m)] and st.captures == 1
        assert c.zero_strategy == "fused"
    elif mode == "exact":
        assert seen == [1, 3, 5, 16] and st.hits == 3
    else:
        assert seen == [1, 4, 8, 16]
    c.close()


def test_dynamic_body_in_exact_mode(host):
    b, s = host
    a = tiny_arena(b)
    got = []
    c = mdr.GraphCache(a, s, mode="exact", body_dynamic=lambda st, cp, mt: got.append((cp, mt)))
    c.step([1, 2, 3])
    assert got == [(c.count_ptr, 3)]


def test_no_cyclic_collection_while_a_body_runs(host):
    """A collected object's finalizer under capture (an arena's free)
    breaks the capture: bodies run with the collector off, and prepare
    collects first. The collector comes back after each body, also one
    that raises, and stays off where the caller had turned it off."""
    b, s = host
    a = tiny_arena(b)
    seen = []

    def body(stream, tokens):
        seen.append(gc.isenabled())
        if tokens == 3:
            raise ValueError("boom")

    c = mdr.GraphCache(a, s, mode="exact", body=body)
    assert gc.isenabled()
    c.prepare([1, 2])
    c.step([1])
    assert seen and not any(seen) and gc.isenabled()
    with pytest.raises(ValueError, match="boom"):
        c.step([1, 2, 3])
    assert gc.isenabled()

    class Cycle:
        pass
    x = Cycle()
    x.me = x  # garbage only the collector frees
    freed = []
    import weakref
    weakref.finalize(x, lambda: freed.append(1))
    del x
    c.prepare([4])
    assert freed == [1]  # collected before the capture began
    gc.disable()
    try:
        del seen[:]
        c.step([1, 2, 3, 4, 5])
        assert seen == [False] and not gc.isenabled()
    finally:
        gc.enable()
    c.close()


def test_exception_in_body_aborts_capture_runs_eagerly_and_raises(host):
    b, s = host
    a = tiny_arena(b)
    h = a["hidden_states"]
    calls = []

    def body(stream, tokens):
        calls.append(tokens)
        if len(calls) == 1:
            raise ValueError("boom in the body")
        b.memset_async(h, 0x33, h.nbytes, stream)

    c = mdr.GraphCache(a, s, mode="exact", zero="fused", body=body)
    x = h.numpy().view(np.uint8)
    with pytest.raises(ValueError, match="boom in the body") as e:
        c.step([4, 5])
    tb = "".join(traceback.format_tb(e.value.__traceback__))
    assert "in body" in tb  # the body's frame is in the traceback
    s.synchronize()
    assert (x == 0x33).all()  # the step ran eagerly
    assert a["token_ids"].numpy()[:2].tolist() == [4, 5]
    st = c.stats()
    assert st.eager_fallbacks == 1 and st.graphs == 0 and st.steps == 1
    c.step([6, 7])  # that count is now eager-only, and works
    assert c.stats().uncapturable == 1
    c.step([1, 2, 3])  # other counts still capture
    assert c.stats().captures == 1


def test_exception_every_time_and_in_prepare(host):
    b, s = host
    a = tiny_arena(b)

    def body(stream, tokens):
        raise KeyError("always")

    c = mdr.GraphCache(a, s, body=body)
    with pytest.raises(KeyError):
        c.step([1])
    with pytest.raises(KeyError):
        c.prepare([2])
    c.step_ptr  # still usable
    # a body returning a status
    c2 = mdr.GraphCache(a, s, body=lambda st, t: 9)
    with pytest.raises(mdr.Error):
        c2.step([1])
    # the cache refuses to be stepped from its own body
    holder = {}

    def reentrant(stream, tokens):
        holder["c"].step([1])

    c3 = mdr.GraphCache(a, s, body=reentrant)
    holder["c"] = c3
    with pytest.raises(mdr.StateError):
        c3.step([1])
    del holder["c"]


@pytest.mark.parametrize("when", ["capture", "eager", "prepare"])
def test_a_body_that_closes_its_own_cache(host, when, monkeypatch):
    """The native cache goes once the call that ran the body has returned,
    not under it: no crash, the step's work done, the cache closed after."""
    b, s = host
    if when == "eager":
        monkeypatch.setenv("MDR_DISABLE_GRAPHS", "1")
    a = tiny_arena(b)
    h = a["hidden_states"]
    holder = {}

    def body(stream, tokens):
        holder["c"].close()
        assert holder["c"].closed
        b.memset_async(h, 0x5A, h.nbytes, stream)

    c = mdr.GraphCache(a, s, mode="exact", zero="fused", body=body)
    holder["c"] = c
    handle = c._h
    if when == "prepare":
        c.prepare([2])
    else:
        c.step([4, 5])
        s.synchronize()
        assert (h.numpy().view(np.uint8) == 0x5A).all()  # the step ran its body
        assert a["token_ids"].numpy()[:2].tolist() == [4, 5]
    assert c.closed and handle.ptr is None  # the native cache is gone now
    with pytest.raises(mdr.ClosedError):
        c.step([1])
    del holder["c"]
    a.close()  # the arena's last user went with the cache


def test_a_body_that_closes_its_cache_and_raises(host):
    b, s = host
    a = tiny_arena(b)
    holder = {}

    def body(stream, tokens):
        holder["c"].close()
        raise ValueError("after the close")

    c = mdr.GraphCache(a, s, body=body)
    holder["c"] = c
    with pytest.raises(ValueError, match="after the close"):
        c.step([1])
    assert c.closed and c._h.ptr is None
    del holder["c"]


def test_stats_info_and_options(host):
    b, s = host
    a = tiny_arena(b)
    c = mdr.GraphCache(a, s, mode="ladder", zero="memset", rows="all", ladder=[2, 5],
                       max_graphs=2, poison=True)
    assert c.zero_strategy == "memset" and c.rows_policy == "all"
    c.prepare([1, 3])
    info = c.graph_info(1)
    assert isinstance(info, mdr.GraphInfo) and info.graph_tokens == 2 and info.cached
    assert c.graph_tokens(6) == 16
    st = c.stats()
    assert isinstance(st, mdr.GraphStats) and st.captures == 2 and st.poison
    a.zero_strategy = "fused"
    a.rows_policy = "all"
    assert (a.zero_strategy, a.rows_policy) == ("fused", "all")
    plan = a.zero_plan(3)
    assert plan and all(p and n for p, n in plan)


# ---- lifetimes -------------------------------------------------------------------------

def _world():
    b = mdr.Backend.host()
    s = b.stream()
    a = tiny_arena(b)
    h = a["hidden_states"]
    c = mdr.GraphCache(a, s, body=lambda st, t: b.memset_async(h, 1, 8, st))
    c.step([1, 2])
    x = h.numpy()
    cap = a["token_ids"].__dlpack__()
    handles = [b._h, s._h, a._h, c._h]
    return dict(backend=b, stream=s, arena=a, cache=c, array=x), cap, handles


@pytest.fixture
def frozen_heap():
    """The lifetime cases collect garbage after every step; with torch and
    transformers loaded (the GPU machine's suite), each full collection walks
    their whole heap. Objects made before the case are frozen out of it."""
    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()


@pytest.mark.parametrize("order", list(itertools.permutations(
    ["backend", "stream", "arena", "cache", "array"])))
def test_del_in_every_order(order, frozen_heap):
    objs, cap, handles = _world()
    for name in order:
        del objs[name]
        gc.collect()
    del cap
    gc.collect()
    assert all(h.ptr is None for h in handles)


@pytest.mark.parametrize("order", list(itertools.permutations(
    ["backend", "stream", "arena", "cache"])))
def test_close_in_every_order(order, frozen_heap):
    objs, cap, handles = _world()
    x = objs.pop("array")
    for name in order:
        objs[name].close()
        with pytest.raises(mdr.ClosedError) as e:
            {"backend": lambda o: o.stream(), "stream": lambda o: o.synchronize(),
             "arena": lambda o: o["residual"], "cache": lambda o: o.step([1])}[name](objs[name])
        assert e.value.status == 9
    x[...] = 3  # the exports keep the memory
    del x, cap
    gc.collect()
    assert all(h.ptr is None for h in handles)
    for o in objs.values():
        o.close()  # twice: a no-op


def test_cycles_collected_by_gc():
    b = mdr.Backend.host()
    s = b.stream()
    a = tiny_arena(b)
    box = {}

    def body(stream, tokens):
        box["cache"].stats()  # the body refers to its own cache: a cycle

    c = mdr.GraphCache(a, s, body=body)
    box["cache"] = c
    c.step([1])
    hs = [c._h, a._h, s._h, b._h]
    del c, a, s, b, body
    gc.collect()
    box.clear()
    gc.collect()
    assert all(h.ptr is None for h in hs)


def test_with_blocks():
    with mdr.Backend.host() as b, b.stream() as s, tiny_arena(b) as a, \
            mdr.GraphCache(a, s) as c:
        c.step([1])
    assert c.closed and a.closed and s.closed and b.closed


# ---- bad inputs --------------------------------------------------------------------------

def _raises(cls, status, fn, *args, **kw):
    with pytest.raises(cls) as e:
        fn(*args, **kw)
    assert isinstance(e.value, mdr.Error) and e.value.status == status
    return e.value


def test_bad_inputs_raise_the_right_error(host):
    b, s = host
    I, R = mdr.InvalidArgumentError, mdr.OutOfRangeError
    _raises(I, 1, mdr.preset, "no-such-model")
    _raises(I, 1, mdr.preset, 3)
    _raises(R, 2, mdr.Arena, b, "nemotron-h", max_batch_tokens=0)
    _raises(I, 1, mdr.Arena, b, "nemotron-h")  # no max_batch_tokens
    _raises(I, 1, mdr.Arena, b, {"hidden_sise": 4}, max_batch_tokens=4)
    _raises(I, 1, mdr.Arena, b, 42, max_batch_tokens=4)
    _raises(I, 1, mdr.Arena, "not a backend", "nemotron-h", max_batch_tokens=4)
    _raises(R, 2, mdr.Arena, b, "nemotron-h", max_batch_tokens=-1)
    _raises(I, 1, mdr.Arena, b, "nemotron-h", max_batch_tokens=4, splitk_sm_count=0)
    _raises(mdr.SizeOverflowError, 3, mdr.Arena, b, dict(TINY, hidden_size=1 << 62),
            max_batch_tokens=1 << 20)
    a = tiny_arena(b)
    _raises(I, 1, a.buffer, "no_such_buffer")
    _raises(I, 1, a.__getitem__, 0)
    _raises(R, 2, a.zero_all_rows, s, -1)
    _raises(I, 1, a.zero_all, None)
    _raises(I, 1, a.zero_all, 12345)  # a raw handle on the host backend
    other = mdr.Backend.host()
    _raises(I, 1, a.zero_all, other.stream())
    with pytest.raises(mdr.InvalidArgumentError):
        a.zero_strategy = "sideways"
    with pytest.raises(mdr.InvalidArgumentError):
        a.rows_policy = "most"
    _raises(I, 1, mdr.GraphCache, a, s, mode="bogus")
    _raises(I, 1, mdr.GraphCache, a, s, zero="bogus")
    _raises(I, 1, mdr.GraphCache, a, s, mode="dynamic", zero="memset")  # from C
    _raises(I, 1, mdr.GraphCache, a, s, mode="ladder", ladder=[4, 2])  # from C
    _raises(I, 1, mdr.GraphCache, a, s, body=3)
    _raises(I, 1, mdr.GraphCache, a, s, body=print, body_dynamic=print)
    _raises(R, 2, mdr.GraphCache, a, s, pad_token_id=1 << 32)
    _raises(I, 1, mdr.GraphCache, a, None)
    _raises(I, 1, mdr.GraphCache, "arena", s)
    c = mdr.GraphCache(a, s, mode="exact")
    _raises(R, 2, c.step, [])
    e = _raises(R, 2, c.step, list(range(17)))
    assert "17" in e.text  # the backend's text names the count
    _raises(R, 2, c.step, [-1])
    _raises(R, 2, c.step, [1 << 32])
    _raises(R, 2, c.step, np.array([-3], dtype=np.int32))
    _raises(I, 1, c.step, "abc")
    _raises(I, 1, c.step, 5)
    _raises(I, 1, c.step, [1.5])
    _raises(I, 1, c.step, np.array([1.0]))
    _raises(R, 2, c.step, [1, 2], 3)
    _raises(R, 2, c.prepare, [0])
    _raises(R, 2, c.prepare, [17])
    _raises(R, 2, c.graph_tokens, 0)
    st = mdr.Backend.cuda if "cuda" not in mdr.build_features() else None
    if st is not None:
        err = pytest.raises(mdr.Error, mdr.Backend.cuda, 0).value
        assert err.status in (5, 8)  # no device, or a build without CUDA
    _raises(I, 1, mdr.Backend.cuda, "zero")
    with pytest.raises(TypeError):
        mdr.Backend()
    c.close()
    _raises(mdr.ClosedError, 9, c.step, [1])
    _raises(mdr.ClosedError, 9, c.stats)
    assert issubclass(mdr.ClosedError, mdr.StateError)
    other.close()


def test_error_classes():
    pairs = [(mdr.InvalidArgumentError, 1), (mdr.OutOfRangeError, 2), (mdr.SizeOverflowError, 3),
             (mdr.OutOfMemoryError, 4), (mdr.NoDeviceError, 5), (mdr.BackendError, 6),
             (mdr.CaptureError, 7), (mdr.UnsupportedError, 8), (mdr.StateError, 9)]
    for cls, st in pairs:
        assert issubclass(cls, mdr.Error) and cls.status == st
        assert mdr.STATUS_NAMES[st] in cls("x").status_name
        assert mdr.status_string(st) in str(cls("why"))


# ---- tensor parallelism on the host communicator ------------------------------------------

def test_host_comm_all_reduce():
    if not _lib.has("mdr_all_reduce"):
        pytest.skip("this libmdr has no mdr_all_reduce")
    bs = [mdr.Backend.host() for _ in range(2)]
    comms = mdr.Comm.host(bs)
    assert [c.rank for c in comms] == [0, 1] and comms[0].size == 2
    arenas = mdr.Arena.on_comms(comms, TINY, max_batch_tokens=8)
    streams = [b.stream() for b in bs]
    for r, a in enumerate(arenas):
        assert a.window == "host" and a.all_reduce_kernels
        x = a["hidden_states"].numpy()
        x[...] = 0x3F80 if r == 0 else 0x4000  # bf16 1.0 and 2.0
    assert arenas[0].all_reduce_choice("hidden_states", 3) is not None
    errs = []

    def run(r):
        try:
            arenas[r].all_reduce("hidden_states", 3, streams[r], dtype="bf16")
            streams[r].synchronize()
        except Exception as e:  # pragma: no cover
            errs.append(e)

    ts = [threading.Thread(target=run, args=(r,)) for r in range(2)]
    [t.start() for t in ts]
    [t.join(60) for t in ts]
    assert not errs
    for r, a in enumerate(arenas):
        x = a["hidden_states"].numpy()
        assert (x[:3] == 0x4040).all()  # 3.0
        assert (x[3:] == (0x3F80 if r == 0 else 0x4000)).all()
    with pytest.raises(mdr.InvalidArgumentError):
        arenas[0].all_reduce("hidden_states", 3, streams[0], dtype="int4")
    b = mdr.Backend.host()
    solo = tiny_arena(b)
    _raises(mdr.InvalidArgumentError, 1, solo.all_reduce, "hidden_states", 1, b.stream())


def test_host_comm_all_reduce_fused_norm():
    if not _lib.has("mdr_all_reduce"):
        pytest.skip("this libmdr has no mdr_all_reduce")
    bs = [mdr.Backend.host() for _ in range(2)]
    comms = mdr.Comm.host(bs)
    arenas = mdr.Arena.on_comms(comms, TINY, max_batch_tokens=8)
    streams = [b.stream() for b in bs]
    for a in arenas:
        a["hidden_states"].numpy()[...] = 0  # the sum: 0
        a["residual"].numpy()[...] = 0x3F80  # bf16 1.0: the residual and the weight
        a["norm_output"].numpy()[...] = 0x7DED  # poison
    errs = []

    def run(r):
        try:
            w = arenas[r]["residual"].ptr  # one row of 1.0, 16-byte aligned
            arenas[r].all_reduce("hidden_states", 3, streams[r], dtype="bf16", residual="residual",
                                 norm_output="norm_output", norm_weight=w, norm_eps=0.0)
            streams[r].synchronize()
        except Exception as e:  # pragma: no cover
            errs.append(e)

    ts = [threading.Thread(target=run, args=(r,)) for r in range(2)]
    [t.start() for t in ts]
    [t.join(60) for t in ts]
    assert not errs, errs
    for a in arenas:
        out = a["norm_output"].numpy()
        assert (out[:3] == 0x3F80).all()  # RMSNorm of ones, weight one, eps 0: exactly 1.0
        assert (out[3:] == 0x7DED).all()  # rows past the count untouched
    # where the norm runs: a small one-shot fuses, a two-shot runs it in its own kernel
    if _lib.has("mdr_all_reduce_norm_fused"):
        w = arenas[0]["residual"].ptr
        kw = dict(dtype="bf16", residual="residual", norm_output="norm_output", norm_weight=w, norm_eps=0.0)
        assert arenas[0].all_reduce_norm_fused("hidden_states", 3, algo="one-shot", **kw) is True
        assert arenas[0].all_reduce_norm_fused("hidden_states", 3, algo="two-shot", **kw) is False
        assert arenas[0].all_reduce_norm_fused("hidden_states", 3, dtype="bf16") is None  # no norm_output
    # a refusal names its field
    with pytest.raises(mdr.InvalidArgumentError, match="norm_weight"):
        arenas[0].all_reduce("hidden_states", 3, streams[0], dtype="bf16", residual="residual",
                             norm_output="norm_output", norm_weight=0)


def test_fault_backend():
    pytest.skip("the fault backend (tests/fault_backend.c) is a static test library, not "
                "exported by libmdr: not reachable from Python")
