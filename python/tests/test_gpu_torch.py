"""GPU cases (torch + CUDA; skipped elsewhere): zero-copy views, torch
bodies captured in EXACT, LADDER and DYNAMIC replayed bit-identical to
eager, device ids from a CUDA tensor, temporaries in the private pool, and
mdr's calls inside torch.cuda.graph (mode (b)).

    PYTHONPATH=python python3 -m pytest -q python/tests/test_gpu_torch.py
"""
import os
import random

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import mdr  # noqa: E402

mdr_torch = pytest.importorskip("mdr.torch")

DEV = int(os.environ.get("MDR_TEST_DEVICE", "0"))
M = 64
CFG = dict(hidden_size=256, intermediate_size=512, vocab_size=1024, num_attention_heads=4,
           num_key_value_heads=2, head_dim=64)


@pytest.fixture(scope="module")
def backend():
    try:
        b = mdr.Backend.cuda(DEV)
    except mdr.Error as e:
        pytest.skip("no CUDA backend in this libmdr: %s" % e)
    yield b
    b.close()


def arena_of(b):
    return mdr.Arena(b, CFG, max_batch_tokens=M, max_seq_len=1024, kv_block_size=16,
                     max_batch_size=8)


class Model:
    """An embedding lookup, two matmuls and an elementwise op, writing
    hidden_states and residual; the input is the step's token ids."""

    def __init__(self, arena, seed=0):
        g = torch.Generator(device="cpu").manual_seed(seed)
        h, i, v = CFG["hidden_size"], CFG["intermediate_size"], CFG["vocab_size"]
        dev = torch.device("cuda", DEV)
        self.emb = (torch.randn(v, h, generator=g) * 0.5).to(dev, torch.bfloat16)
        self.w1 = (torch.randn(h, i, generator=g) / h ** 0.5).to(dev, torch.bfloat16)
        self.w2 = (torch.randn(i, h, generator=g) / i ** 0.5).to(dev, torch.bfloat16)
        self.ids = torch.from_dlpack(arena["token_ids"])[:M].view(torch.int32)
        self.hs = torch.from_dlpack(arena["hidden_states"])
        self.res = torch.from_dlpack(arena["residual"])

    def __call__(self, stream, rows):
        x = self.emb[self.ids[:rows].long()]                 # temporaries, from the pool
        y = torch.nn.functional.silu(x @ self.w1) @ self.w2
        self.hs[:rows].copy_(x)
        self.res[:rows].copy_(y + x)

    def dynamic(self, stream, count_ptr, max_tokens):
        self(stream, max_tokens)  # every row; the first `count` are the step's


def test_zero_copy_views(backend):
    a = arena_of(backend)
    for name in ("hidden_states", "residual", "token_ids", "logits", "gate_logits_f32"):
        v = a[name]
        t = torch.from_dlpack(v)
        assert t.data_ptr() == v.ptr
        assert tuple(t.shape) == v.shape and t.device == torch.device("cuda", DEV)
        assert str(t.dtype).replace("torch.", "") == v.dtype
    t = torch.from_dlpack(a["hidden_states"])
    assert t.dtype == torch.bfloat16 and tuple(t.shape) == (M, CFG["hidden_size"])
    t.fill_(1.0)
    torch.cuda.synchronize()
    assert a["hidden_states"].read()[:2] == b"\x80\x3f"
    cai = a["hidden_states"].__cuda_array_interface__
    assert cai["data"][0] == t.data_ptr() and cai["version"] == 3
    s = backend.stream()
    assert s.__cuda_stream__() == (0, s.handle)
    ts = mdr_torch.external_stream(s)
    assert ts.cuda_stream == s.handle
    a.close()
    t.add_(1)  # the tensor keeps the memory
    torch.cuda.synchronize()
    del t
    try:
        import cupy
        a2 = arena_of(backend)
        c = cupy.asarray(a2["residual"])
        assert c.data.ptr == a2["residual"].ptr
    except ImportError:
        pass


def _eager_cache(arena, stream, mode, fn, dynamic):
    os.environ["MDR_DISABLE_GRAPHS"] = "1"
    try:
        if dynamic:
            return mdr_torch.GraphCache(arena, stream, mode=mode, zero="fused", body_dynamic=fn)
        return mdr_torch.GraphCache(arena, stream, mode=mode, zero="fused", body=fn)
    finally:
        del os.environ["MDR_DISABLE_GRAPHS"]


@pytest.mark.parametrize("mode", ["exact", "ladder", "dynamic"])
def test_torch_body_bit_identical_to_eager(backend, mode):
    ag, ae = arena_of(backend), arena_of(backend)
    sg, se = backend.stream(), backend.stream()
    mg, me = Model(ag), Model(ae)
    dyn = mode == "dynamic"
    cg = mdr_torch.GraphCache(ag, sg, mode=mode, zero="fused",
                              body_dynamic=mg.dynamic if dyn else None,
                              body=None if dyn else mg)
    ce = _eager_cache(ae, se, mode, me.dynamic if dyn else me, dyn)
    assert ce.stats().graphs_disabled
    cg.warmup([1, 8, M])
    rng = random.Random(1)
    counts = [rng.choice([1, 2, 3, 5, 8, 13, 31, 64]) for _ in range(240)]
    for k, n in enumerate(counts):
        ids = [rng.randrange(CFG["vocab_size"]) for _ in range(n)]
        cg.step(ids)
        ce.step(ids)
        sg.synchronize()
        se.synchronize()
        assert torch.equal(mg.res[:n], me.res[:n]), "step %d (%d tokens)" % (k, n)
        assert torch.equal(mg.hs[:n], me.hs[:n])
    st = cg.stats()
    assert st.steps == 240 and st.eager_fallbacks == 0 and st.eager_steps == 0
    assert st.hits >= 240 - 8
    for c in (cg, ce):
        c.close()


def test_device_ids_from_a_cuda_tensor(backend):
    a = arena_of(backend)
    s = backend.stream()
    model = Model(a)
    c = mdr_torch.GraphCache(a, s, mode="exact", zero="fused", body=model)
    c.warmup([4])
    ids = torch.tensor([3, 1, 4, 1], dtype=torch.int32, device=torch.device("cuda", DEV))
    c.step(ids)
    s.synchronize()
    assert model.ids[:4].tolist() == [3, 1, 4, 1]
    assert c.stats().device_steps == 1
    ids.copy_(torch.tensor([2, 7, 1, 8], dtype=torch.int32))
    torch.cuda.synchronize()
    c.step(ids)  # same address: the same graph
    s.synchronize()
    assert model.ids[:4].tolist() == [2, 7, 1, 8] and c.stats().hits == 1
    with pytest.raises(mdr.InvalidArgumentError):
        c.step(ids.long())
    c.close()


def _pool_segments(pool_id):
    out = []
    for seg in torch.cuda.memory_snapshot():
        if tuple(seg.get("segment_pool_id", (0, 0))) == tuple(pool_id):
            out.append((seg["address"], seg["address"] + seg["total_size"]))
    return out


def test_temporaries_memory_stable_and_no_alias(backend):
    a = arena_of(backend)
    s = backend.stream()
    model = Model(a)
    c = mdr_torch.GraphCache(a, s, mode="exact", zero="fused", body=model)
    c.warmup([1, 8, 32])
    c.prepare([1, 8, 32])
    pool = c._pool
    assert pool is not None and pool.begins == 3
    assert pool.live_ok()  # no tensor from the body outlives it
    s.synchronize()
    torch.cuda.synchronize()
    alloc0, reserved0 = torch.cuda.memory_allocated(DEV), torch.cuda.memory_reserved(DEV)
    ids = torch.zeros(M, dtype=torch.int32).pin_memory()
    for i in range(10000):
        c.step(ids, (1, 8, 32)[i % 3])
    s.synchronize()
    assert torch.cuda.memory_allocated(DEV) == alloc0
    assert torch.cuda.memory_reserved(DEV) == reserved0
    assert c.stats().captures == 3 and c.stats().hits == 10000
    segs = _pool_segments(pool.id)
    others = [torch.empty(1 << k, device=torch.device("cuda", DEV)) for k in range(4, 22)]
    for t in others:
        p = t.data_ptr()
        assert not any(lo <= p < hi for lo, hi in segs), "a tensor outside the body is in the pool"
    c.close()
    assert c._pool is None  # released with the cache


def _pool_reserved(pool_id):
    return sum(hi - lo for lo, hi in _pool_segments(pool_id))


def test_a_shared_pool_holds_the_cache_and_a_torch_graph(backend):
    """pool=: the cache captures into a handle a torch graph shares; the
    torch graph, captured on the cache's stream, reuses the memory the
    cache's body freed (the pool does not grow, where a pool of the torch
    graph's own does), both
    replay correctly in turn, and closing the cache leaves the pool to the
    torch graph."""
    a = arena_of(backend)
    s = backend.stream()
    model = Model(a)
    h = torch.cuda.graph_pool_handle()
    c = mdr_torch.GraphCache(a, s, mode="exact", zero="fused", body=model, pool=h)
    assert tuple(c.pool) == tuple(h)
    n = 32
    c.warmup([n])
    c.prepare([n])
    s.synchronize()
    shared0 = _pool_reserved(h)
    assert shared0 > 0, "the cache's capture did not allocate from the shared pool"

    ids = torch.zeros(M, dtype=torch.int32, device=torch.device("cuda", DEV))
    out_hs = torch.empty_like(model.hs[:n])
    out_res = torch.empty_like(model.res[:n])

    def torch_body():
        x = model.emb[ids[:n].long()]
        y = torch.nn.functional.silu(x @ model.w1) @ model.w2
        out_hs.copy_(x)
        out_res.copy_(y + x)

    side = torch.cuda.Stream(DEV)
    side.wait_stream(torch.cuda.current_stream(DEV))
    with torch.cuda.stream(side):
        torch_body()  # warm-up off the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, pool=c.pool, stream=c.torch_stream):  # the stream that freed them
        torch_body()
    torch.cuda.synchronize()
    assert _pool_reserved(h) == shared0, "the torch graph's temporaries did not reuse the shared pool"
    g_own = torch.cuda.CUDAGraph()  # the control: a pool of its own grows
    own0 = torch.cuda.memory_reserved(DEV)
    with torch.cuda.graph(g_own, stream=c.torch_stream):
        torch_body()
    torch.cuda.synchronize()
    assert torch.cuda.memory_reserved(DEV) > own0
    del g_own

    def expected():
        x = model.emb[ids[:n].long()]
        return x, torch.nn.functional.silu(x @ model.w1) @ model.w2 + x

    gen = torch.Generator(device="cpu").manual_seed(5)
    for k in range(20):  # in turn, never overlapping: the shared pool's rule
        ids.copy_(torch.randint(0, CFG["vocab_size"], (M,), generator=gen, dtype=torch.int32))
        torch.cuda.synchronize()
        c.step(ids[:n].cpu())  # staged: the body reads the arena's token_ids
        s.synchronize()
        out_hs.fill_(-1.0)
        out_res.fill_(-1.0)
        g.replay()            # reads `ids`, the tensor it captured
        torch.cuda.synchronize()
        x, ref = expected()
        assert torch.equal(model.hs[:n], x) and torch.equal(out_hs, x), "round %d" % k
        torch.testing.assert_close(model.res[:n], ref, rtol=2e-2, atol=2e-2)
        torch.testing.assert_close(out_res, ref, rtol=2e-2, atol=2e-2)
    st = c.stats()
    assert st.captures == 1 and st.hits == 20 and st.eager_steps == 0
    c.close()
    with pytest.raises(mdr.ClosedError):
        c.pool
    assert _pool_reserved(h) == shared0, "closing the cache freed a pool the torch graph still holds"
    ids.copy_(torch.randint(0, CFG["vocab_size"], (M,), generator=gen, dtype=torch.int32))
    out_res.fill_(-1.0)
    g.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out_res, expected()[1], rtol=2e-2, atol=2e-2)
    del g
    a.close()


@pytest.mark.parametrize("bad", [(0, 0), "pool", (1, 2, 3), (1.0, 2), (True, 1), 7])
def test_a_pool_that_is_not_a_handle_is_refused(backend, bad):
    a = arena_of(backend)
    s = backend.stream()
    with pytest.raises(mdr.InvalidArgumentError, match="pool"):
        mdr_torch.GraphCache(a, s, mode="exact", zero="fused", body=Model(a), pool=bad)
    c = mdr_torch.GraphCache(a, s, mode="exact", zero="fused", body=Model(a))  # the arena is untouched
    c.step([1, 2, 3])
    s.synchronize()
    c.close()
    a.close()


def _active_default_blocks():
    """(address, size) of every allocated block of torch's default pool on DEV."""
    out = set()
    for seg in torch.cuda.memory_snapshot():
        if seg.get("device", DEV) != DEV or tuple(seg.get("segment_pool_id", (0, 0))) != (0, 0):
            continue
        for b in seg["blocks"]:
            if b["state"] == "active_allocated":
                out.add((b["address"], b["size"]))
    return out


def test_captured_gemms_keep_no_cublas_workspace_outside_the_pool(backend):
    """A GEMM captured by mdr.torch must not use the cuBLAS workspace an
    eager warmup left in torch's default pool: torch frees it whenever its
    workspaces are cleared (torch.compile's CUDA graphs do so each time they
    record), and the replays would then write into memory that is someone
    else's. Warmup (the workspace made eagerly on mdr's stream), capture,
    then the clear torch.compile does: the warmup's workspace must already
    be free after the capture, and a tensor given its bytes keeps them over
    the replays, whose results stay those of eager."""
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is None:
        pytest.skip("this torch cannot clear its cuBLAS workspaces")
    a = arena_of(backend)
    s = backend.stream()
    dev = torch.device("cuda", DEV)
    rows, k, n = 16, 8192, 4096  # decode-shaped: few rows, a long K
    g = torch.Generator(device="cpu").manual_seed(5)
    w = (torch.randn(k, n, generator=g) / k ** 0.5).to(dev, torch.bfloat16)
    x = torch.randn(rows, k, generator=g).to(dev, torch.bfloat16)
    out = torch.zeros(rows, n, device=dev, dtype=torch.bfloat16)

    def body(stream, t):
        out[:t].copy_(x[:t] @ w)

    c = mdr_torch.GraphCache(a, s, mode="exact", zero="fused", body=body)
    clear()
    torch.cuda.synchronize()
    before = _active_default_blocks()
    c.warmup([rows])
    torch.cuda.synchronize()
    ws = _active_default_blocks() - before  # what the warmup kept: the workspace(s) on mdr's stream
    eager = out.clone()
    assert ws, "the eager GEMM kept no block: nothing to check against"
    c.prepare([rows])
    s.synchronize()
    held = ws & _active_default_blocks()
    assert not held, "the warmup's cuBLAS workspace is still held after the capture: %s" % sorted(held)
    clear()
    torch.cuda.synchronize()
    # the freed bytes to tensors of a known pattern (a block of the same
    # size comes back first), then the replays
    poison = [torch.full((size,), 0x5A, dtype=torch.uint8, device=dev) for _, size in sorted(ws)]
    torch.cuda.synchronize()
    out.zero_()
    ids = torch.zeros(M, dtype=torch.int32).pin_memory()
    for _ in range(50):
        c.step(ids, rows)
    s.synchronize()
    for t in poison:
        assert bool((t == 0x5A).all()), "a replay wrote into memory freed from torch's cuBLAS workspace"
    assert torch.equal(out, eager)
    c.close()


def test_rng_in_a_captured_body_is_refused(backend):
    a = arena_of(backend)
    s = backend.stream()
    hs = torch.from_dlpack(a["hidden_states"])

    def body(stream, tokens):
        hs[:tokens].copy_(torch.rand(tokens, hs.shape[1], device=hs.device))

    c = mdr_torch.GraphCache(a, s, mode="exact", zero="fused", body=body)
    with pytest.raises(mdr_torch.RNGInCaptureError):
        c.step([1, 2])
    s.synchronize()
    c.step([3, 4])  # that count is eager now: correct random numbers
    st = c.stats()
    assert st.eager_fallbacks == 1 and st.uncapturable == 1 and st.graphs == 0
    c.close()


def test_mode_b_inside_torch_cuda_graph(backend):
    a = arena_of(backend)
    hs = torch.from_dlpack(a["hidden_states"])
    res = torch.from_dlpack(a["residual"])
    side = torch.cuda.Stream(DEV)
    g = torch.cuda.CUDAGraph()
    n = 5
    with torch.cuda.stream(side):
        torch.cuda.synchronize()
        with torch.cuda.graph(g, stream=side):
            cur = torch.cuda.current_stream(DEV)
            a.zero_all_rows(cur, n)                    # mdr, recorded by torch
            backend.memset_async(a["token_ids"], 0, 4 * n, cur)
            res[:n].copy_(hs[:n] + 1)                   # torch
    hs.fill_(3.0)
    res.fill_(7.0)
    torch.cuda.synchronize()
    g.replay()
    torch.cuda.synchronize()
    assert (hs[:n] == 0).all() and (hs[n:] == 3).all()  # zeroed by mdr's node, in torch's graph
    assert (res[:n] == 1).all()
    hs.fill_(3.0)
    torch.cuda.synchronize()
    g.replay()
    torch.cuda.synchronize()
    assert (hs[:n] == 0).all()


def test_mode_b_all_reduce_inside_torch_cuda_graph(backend):
    if not mdr.Comm.nccl_available():
        pytest.skip("libmdr built without NCCL")
    n = 5
    side = torch.cuda.Stream(DEV)
    comm = mdr.Comm.local([backend])[0]
    ar = mdr.Arena.on_comms([comm], CFG, max_batch_tokens=M)[0]
    x = torch.from_dlpack(ar["hidden_states"])
    g2 = torch.cuda.CUDAGraph()
    with torch.cuda.stream(side):
        with torch.cuda.graph(g2, stream=side):
            ar.all_reduce("hidden_states", n, torch.cuda.current_stream(DEV))
    x.fill_(2.0)
    torch.cuda.synchronize()
    g2.replay()
    torch.cuda.synchronize()
    assert (x[:n] == 2).all()  # one rank: the sum is itself
    ar.close()
    comm.close()
