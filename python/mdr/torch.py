"""mdr.torch: PyTorch and mdr's graphs, both ways.

(a) mdr owns the capture: GraphCache(arena, stream, mode=..., body=fn) runs
    a torch body on mdr's stream (torch.cuda.ExternalStream, made current
    for the body), and while mdr captures it routes torch's caching
    allocator to a private pool of the cache. Temporaries the body allocates
    are captured from that pool; the pool is never handed to other work
    while the cache's graphs live, and is released when the cache is closed.
    cuBLAS's workspace too: torch keeps one per stream, outside any pool,
    made by the first GEMM on that stream (an eager warmup, say); a graph
    captured with it would write into it on every replay after torch frees
    it, which torch.compile's CUDA graphs (cudagraph trees) do whenever they
    record. So around each capture mdr clears torch's cuBLAS workspaces, as
    cudagraph trees do: the body's GEMMs take a new workspace from the
    cache's pool, and torch keeps no reference to it after the capture.
    Torch RNG ops (torch.rand, dropout, multinomial, ...) are REFUSED under
    capture: torch refuses a generator that no torch graph registered, and
    mdr re-raises that as mdr.torch.RNGInCaptureError; the step runs
    eagerly, and that token count stays eager (correct random numbers, no
    graph). (The generator's state cannot be read under capture: torch
    asserts against it, so the refusal rests on torch's own check.)

(b) torch owns the capture: every stream-ordered mdr call (arena.zero_all,
    zero_all_rows, zero_prefill_essentials, backend.memset_async,
    arena.all_reduce) takes a torch stream, so it can be recorded inside
    `with torch.cuda.graph(g):` on torch's current stream:

        with torch.cuda.graph(g):
            arena.zero_all_rows(torch.cuda.current_stream(), n)
            out.copy_(model(x))

The private allocator entry points this needs are feature-detected (see
pool_api()); a torch without them gives mdr.torch.PoolUnavailable when a
capture needs them.
"""
import re
import warnings

import torch as _torch

import mdr as _mdr
from mdr._core import GraphCache as _GraphCache
from mdr._core import Stream as _Stream

__all__ = ["GraphCache", "PoolUnavailable", "RNGInCaptureError", "pool_api", "current_stream",
           "external_stream", "tensor"]


class PoolUnavailable(_mdr.UnsupportedError):
    """This torch lacks the private allocator entry points a capture needs."""


class RNGInCaptureError(_mdr.UnsupportedError):
    """A torch RNG op ran in a body under mdr's capture (refused)."""


def _first(names):
    C = _torch._C
    for n in names:
        f = getattr(C, n, None)
        if f is not None:
            return n, f
    return None, None


def pool_api():
    """The torch entry points used to route allocations to a private pool:
    a dict with 'handle', 'begin', 'end', 'release' (name, function) or
    None for what is missing."""
    h = getattr(_torch.cuda, "graph_pool_handle", None)
    return {
        "handle": ("torch.cuda.graph_pool_handle", h) if h else (None, None),
        # the capturing stream only; else the calling thread; else every stream
        "begin": _first(("_cuda_beginAllocateCurrentStreamToPool",
                         "_cuda_beginAllocateCurrentThreadToPool",
                         "_cuda_beginAllocateToPool")),
        "end": _first(("_cuda_endAllocateToPool", "_cuda_endAllocateCurrentStreamToPool")),
        "release": _first(("_cuda_releasePool",)),
    }


def _pool_id(pool):
    """A torch graph pool handle as torch's allocator takes it: a pair of
    ints (torch.cuda.graph_pool_handle(), CUDAGraph.pool());
    mdr.InvalidArgumentError (a ValueError) for anything else."""
    try:
        pair = tuple(pool)
    except TypeError:
        pair = ()
    if len(pair) != 2 or not all(isinstance(x, int) and not isinstance(x, bool) for x in pair) \
            or pair == (0, 0):
        raise _mdr.InvalidArgumentError(
            "pool must be a torch graph pool handle (torch.cuda.graph_pool_handle() or a "
            "CUDAGraph's pool()), a pair of ints other than (0, 0), not %r" % (pool,),
            "mdr.torch.GraphCache")
    return pair


class _Pool:
    """The pool the graphs of one cache capture into: a private one, or a
    handle shared with other graphs (`pool`). Each capture holds one use of
    it in torch's allocator (as a torch graph's capture does); release()
    gives back this cache's uses only, so a shared pool lives on while any
    other graph holds it."""

    def __init__(self, device, pool=None):
        api = pool_api()
        missing = [k for k, (n, f) in api.items() if f is None]
        if missing:
            raise PoolUnavailable(
                "torch %s has no %s; mdr.torch cannot route a capture's allocations to a "
                "private pool (use mode (b), torch.cuda.graph, or another torch)"
                % (_torch.__version__, ", ".join(missing)), "mdr.torch")
        self.api = api
        self.device = device
        self.shared = pool is not None
        self.id = tuple(pool) if self.shared else api["handle"][1]()
        self.begins = 0
        self.routing = False

    def begin(self):
        self.api["begin"][1](self.device, self.id)
        self.begins += 1
        self.routing = True

    def end(self):
        if not self.routing:
            return
        self.routing = False
        f = self.api["end"][1]
        try:
            f(self.device, self.id)
        except TypeError:  # older torch: _cuda_endAllocateCurrentStreamToPool(device)
            f(self.device)

    def live_ok(self):
        chk = getattr(_torch._C, "_cuda_checkPoolLiveAllocations", None)
        if chk is None:
            return True
        try:
            return bool(chk(self.device, self.id, set()))
        except Exception:
            return True

    def release(self):
        self.end()
        rel = self.api["release"][1]
        while self.begins:
            self.begins -= 1
            try:
                rel(self.device, self.id)
            except Exception:
                pass


def _clear_blas_workspaces():
    """Drop torch's cached cuBLAS (and cuBLASLt) workspaces, every stream's:
    the next GEMM on a stream allocates a new one (torch's own
    _cuda_clearCublasWorkspaces; nothing where this torch has none)."""
    f = getattr(_torch._C, "_cuda_clearCublasWorkspaces", None)
    if f is not None:
        f()


_RNG_TEXT = re.compile(r"generator|philox|\bRNG\b|random", re.I)


def external_stream(stream, device=None):
    """A torch.cuda.ExternalStream over an mdr.Stream (or an int handle)."""
    h = stream.handle if isinstance(stream, _Stream) else int(stream)
    if device is None and isinstance(stream, _Stream):
        device = stream.backend.device
    return _torch.cuda.ExternalStream(h, device=_torch.device("cuda", device or 0))


def current_stream(backend):
    """Torch's current stream as an mdr.Stream of `backend` (borrowed)."""
    return _Stream.wrap(backend, _torch.cuda.current_stream(backend.device))


def tensor(view):
    """A torch tensor sharing a buffer view's memory (torch.from_dlpack)."""
    return _torch.utils.dlpack.from_dlpack(view) if not hasattr(_torch, "from_dlpack") \
        else _torch.from_dlpack(view)


class GraphCache(_GraphCache):
    """mdr.GraphCache for torch bodies (mode (a)). The body is called as in
    mdr.GraphCache — fn(stream, tokens), or fn(stream, count_ptr, max_tokens)
    for "dynamic" — with mdr's stream current in torch and, under capture,
    torch's allocator routed to the cache's private pool. `stream` may be
    None (a new stream of the arena's backend). Call warmup(counts) before
    the first steps when the body has lazy initialisation (cuBLAS
    workspaces, autotuning), as with torch.cuda.graph.

    `pool`: a torch graph pool handle (torch.cuda.graph_pool_handle(), or a
    torch.cuda.CUDAGraph's pool()) to capture into instead of a pool of the
    cache's own, as torch.cuda.graph(g, pool=...) shares one: the body's
    temporaries reuse the memory other graphs of that pool freed at the end
    of their captures, so the graphs of several caches (and torch's own)
    take the memory of the largest, not the sum. Torch's allocator reuses a
    freed block only on the stream that freed it, so capture the graphs that
    share on one stream: torch.cuda.graph(g, pool=cache.pool,
    stream=cache.torch_stream), or a cache made on torch's capture stream
    (mdr.torch.current_stream). The rule is torch's: graphs
    that share a pool must never run at the same time (one stream, or
    synchronised); a tensor a capture leaves alive keeps its memory (torch
    does not hand it to a later capture). `cache.pool` is the handle either
    way, so a torch graph can share the cache's."""

    def __init__(self, arena, stream=None, mode="exact", zero=None, body=None, *,
                 body_dynamic=None, check_leaks=True, pool=None, **kw):
        backend = arena.backend
        if not backend.is_cuda:
            raise _mdr.UnsupportedError("mdr.torch needs a CUDA backend", "mdr.torch.GraphCache")
        pool_id = _pool_id(pool) if pool is not None else None
        if stream is None:
            stream = backend.stream()
        dev = backend.device
        self._tstream = external_stream(stream if isinstance(stream, _Stream)
                                        else _Stream.wrap(backend, stream), dev)
        self._pool = None
        self._pool_shared = pool_id
        self._dev = dev
        self._check_leaks = check_leaks
        self.torch_body = body if body is not None else body_dynamic
        fn = body if body is not None else body_dynamic
        wrapped = self._wrap(fn) if fn is not None else None
        if body is not None:
            super().__init__(arena, stream, mode, zero, wrapped, **kw)
        else:
            super().__init__(arena, stream, mode, zero, None, body_dynamic=wrapped, **kw)
        h = self._h
        pool_box = self

        # the pool goes with the native cache (after its graphs)
        destroy = h.destroy

        def destroy_then_release(p, destroy=destroy):
            try:
                destroy(p)
            finally:
                if pool_box._pool is not None:
                    pool_box._pool.release()
                    pool_box._pool = None
        h.destroy = destroy_then_release

    @property
    def torch_stream(self):
        """The torch.cuda.Stream over the cache's stream: the one bodies run
        on, to make torch work wait for or follow the cache's steps."""
        return self._tstream

    @property
    def pool(self):
        """The torch graph pool handle this cache captures into (the one
        given as `pool`, or the cache's own, made here if no capture made it
        yet): pass it to torch.cuda.graph(g, pool=cache.pool) to share it.
        mdr.ClosedError once the cache is closed."""
        self._ptr()  # refuses a closed cache
        return self._take_pool().id

    def _take_pool(self):
        if self._pool is None:
            self._pool = _Pool(self._dev, self._pool_shared)
        return self._pool

    def _wrap(self, fn):
        tstream = self._tstream
        dev = self._dev

        def body(stream, *args):
            with _torch.cuda.device(dev), _torch.cuda.stream(tstream):
                if not _torch.cuda.is_current_stream_capturing():
                    return fn(stream, *args)
                pool = self._take_pool()
                pool.begin()
                _clear_blas_workspaces()  # the body's workspace comes from the pool
                try:
                    r = fn(stream, *args)
                except Exception as e:
                    if _RNG_TEXT.search(str(e)):
                        raise RNGInCaptureError(
                            "a torch RNG op ran under mdr's capture (%s); RNG ops are refused in "
                            "captured bodies: this step ran eagerly and this token count stays "
                            "eager" % str(e).splitlines()[0], "mdr.torch body") from e
                    raise
                finally:
                    _clear_blas_workspaces()  # torch keeps none of the pool's after the capture
                    pool.end()
                if self._check_leaks and not pool.live_ok():
                    warnings.warn("mdr.torch: tensors allocated under capture are still alive "
                                  "after the body (they alias graph memory that every replay "
                                  "rewrites); keep results in arena buffers, and call warmup() "
                                  "before capturing bodies with lazy workspaces",
                                  RuntimeWarning, stacklevel=2)
                return r
        return body

    def warmup(self, counts, iters=1):
        """Run the body eagerly (no capture) at these token counts, on mdr's
        stream, then wait: lazy initialisation happens outside any graph."""
        fn = self.torch_body
        if fn is None:
            return
        m = self.arena.max_batch_tokens
        with _torch.cuda.device(self._dev), _torch.cuda.stream(self._tstream):
            for _ in range(iters):
                for t in ([counts] if isinstance(counts, int) else counts):
                    if self._body is not None:
                        fn(self.stream, t)
                    else:
                        fn(self.stream, self.count_ptr, m if self.mode == "dynamic" else t)
        self.stream.synchronize()
