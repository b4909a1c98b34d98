"""A real model's greedy decode driven by mdr: Hugging Face transformers'
Qwen3 (Qwen3-0.6B's or Qwen3-1.7B's dimensions, seeded random weights, bf16),
each decode step one mdr graph-cache step, checked token for token and
timed against the model's own paths in one run.

    MDR_LIBRARY=$PWD/build/libmdr.so PYTHONPATH=python \\
        python3 examples/python/hf_decode.py [--model 0.6b|1.7b] [--batch 1,4,16] \\
        [--steps 128] [--prompt 32] [--reps 3] [--no-compile] [--json out.json]
    ... --tiny --steps 4          (a few layers, small hidden: the smoke test)
    ... --no-ref-timing           (the reference checks every path, untimed)
    ... --time b,d                (the graph paths timed; each still checked)
    ... --time b,d,d0             (d0: an mdr cache with an empty body, mdr's part)
    ... --time b,b2,d,d2          (b2: (b) captured a second time, in a pool of its own,
                                   d2: (d) in a second cache and arena: how far two
                                   captures of one forward part by placement)
    ... --compile-cache own       ((c) in a static cache of its own)
    ... --compile-partition off   ((c) without inductor's graph partitions)
    ... --mdr-rows all            ((d) zeroes only the rows in use)
    ... --first d                 ((d) captured before (b): which path gets the
                                   process's first placement)
    ... --first b2 --time b,b2,d  ((b2) captured before (b): whether the fast
                                   capture is the process's first torch one)
    ... --share-pool              ((b) and (d) captured on one stream into one torch
                                   graph pool, as an engine shares one pool across its
                                   graphs: (d)'s temporaries reuse (b)'s memory, so the
                                   two differ in how a step is launched, not in where
                                   its temporaries lie; b2 and d2 keep pools of their own)
    ... --trace                   (a line before each timed run)
    ... --profile 8               (8 steps of each timed graph path under torch's
                                   profiler: kernels per step, busy and span per step,
                                   and the kernels whose time differs most from (b)'s;
                                   the CPU figures of later batch sizes in the same
                                   process carry the profiler's hooks)

With --json the results are written after each batch size ("complete":
false until the last), so a run cut short keeps what it measured.

Per batch size b: a prompt of b x 32 random ids is prefilled eagerly, then
`steps` greedy steps run on each path, every path in the same static cache
(reset and prefilled again by each), so that they differ only in how the
steps are launched:

  (ref) the same forward called eagerly step by step with a static cache:
        the reference (the same kernels as the graphs);
  (a)   model.generate(do_sample=False), its default (dynamic) cache, eager:
        per step = (time of steps+1 new tokens - time of 1) / steps;
  (b)   the forward with a static cache captured by hand with
        torch.cuda.CUDAGraph (argmax into the graph's static ids), replayed
        per step after an H2D copy of the positions;
  (c)   torch.compile(mode="reduce-overhead") of the step (compile time
        reported apart), or a line saying why not;
  (d)   mdr: mdr.torch.GraphCache (mode EXACT, mdr owns the capture) whose
        body is the forward on mdr's stream; the ids come through mdr (the
        first step staged from the host, every later one from the device:
        the body's argmax writes the arena's token_ids), the positions are a
        step input (int64, staged with the ids), the last position's logits
        go into the arena's `logits` buffer.

Checks: (d)'s logits bit-identical and its tokens identical to (ref); the
same with MDR_DISABLE_GRAPHS=1; memory unchanged over every run of (d);
(b) bit-identical too; (a) agreeing with (ref) on every row up to the first
step where (ref)'s top-2 margin is within --margin-ulps bf16 spacings (a
mismatch before that fails, and every mismatch is reported). GPU time: CUDA
events on the path's stream around the `steps` steps, enqueued back to back;
wall: the host's time for them, ending in a synchronize; CPU: the host time
of one step call (the GPU drained after each, outside the timed region),
median and p99, each path's decode in turn in a round's rotated order, and
beside (b) the paired figure: the median (p10-p90) of step k's time less
(b)'s step k in the same round; for (a) the thread's CPU time per step.
Exit status 1 when a check fails (the figures' targets are reported, not
enforced).
"""
import argparse
import json
import os
import platform
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def _deps():
    missing = []
    for m in ("numpy", "torch", "transformers"):
        try:
            __import__(m)
        except ImportError as e:
            missing.append("%s (%s)" % (m, e))
    if missing:
        sys.exit("hf_decode: missing %s" % ", ".join(missing))
    import torch
    if not torch.cuda.is_available():
        sys.exit("hf_decode: torch sees no CUDA device")


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="0.6b", choices=["0.6b", "1.7b", "tiny"])
    ap.add_argument("--tiny", action="store_true", help="the tiny config (same as --model tiny)")
    ap.add_argument("--batch", default="1,4,16", help="batch sizes, comma-separated")
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--steps", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3, help="timed runs of each path (interleaved)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--margin-ulps", type=float, default=1.0,
                    help="a reference step is ambiguous when its top-2 margin is <= this many "
                         "bf16 spacings of the top logit")
    ap.add_argument("--no-compile", action="store_true", help="skip path (c)")
    ap.add_argument("--no-generate", action="store_true", help="skip path (a)")
    ap.add_argument("--sdpa", default="default", choices=["default", "math", "efficient", "flash"],
                    help="the only scaled-dot-product-attention backend torch may pick "
                         "(default: torch's own choice)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--trace", action="store_true", help="a line before each timed run of a path")
    ap.add_argument("--no-ref-timing", action="store_true",
                    help="the eager reference checks every path but is not timed (it takes ~40 ms a step)")
    ap.add_argument("--time", default="b,c,d",
                    help="the graph paths timed, comma-separated among b, c, d (each still runs its checks), "
                         "d0: an mdr cache whose body does nothing (mdr's own part of a step), b2: (b) "
                         "captured again into a pool of its own, and d2: (d) in a second cache and arena "
                         "(the spread placement alone gives)")
    ap.add_argument("--first", default="b", choices=["b", "d", "b2"],
                    help="which graph path is captured first in the process (the first capture's "
                         "placement differs from later ones'); b2 needs b2 in --time")
    ap.add_argument("--share-pool", action="store_true",
                    help="(b) and (d) capture on one stream into one graph pool (mdr.torch.GraphCache's "
                         "pool=), so their temporaries lie at the same addresses")
    ap.add_argument("--mdr-rows", default="seed", choices=["seed", "all"],
                    help="(d)'s row policy: the seed's zeroing (logits whole), or only the rows in use")
    ap.add_argument("--compile-partition", default="default", choices=["default", "off"],
                    help="(c): inductor's graph partitions as torch sets them, or off")
    ap.add_argument("--compile-cache", default="shared", choices=["shared", "own"],
                    help="(c)'s static cache: the one every path decodes into, or one of its own")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="after the timing, N steps of each timed graph path under torch's profiler "
                         "(CUDA activity): where a path's GPU time per step goes, beside (b)'s")
    a = ap.parse_args()
    if a.tiny:
        a.model = "tiny"
    a.batches = [int(x) for x in a.batch.split(",") if x.strip()]
    a.timed = [x.strip() for x in a.time.split(",") if x.strip()]
    if any(x not in ("b", "b2", "c", "d", "d0", "d2") for x in a.timed):
        ap.error("--time takes b, b2, c, d, d0 and d2, comma-separated, not %r" % a.time)
    if a.first == "b2" and "b2" not in a.timed:
        ap.error("--first b2 captures (b2) first: name b2 in --time too")
    if a.steps < 2 or a.prompt < 1 or a.reps < 1 or not a.batches or min(a.batches) < 1:
        ap.error("need --steps >= 2, --prompt >= 1, --reps >= 1 and batch sizes >= 1")
    if a.profile < 0 or a.profile > a.steps:
        ap.error("--profile takes 0 to --steps (%d) steps, not %d" % (a.steps, a.profile))
    return a


# ---- the paths ---------------------------------------------------------------------------

class Path:
    """A decode path: start() resets its cache and prefills (eagerly, on
    torch's current stream), step(k) runs decode step k, record(k, rl, rt)
    enqueues copies of step k's logits and tokens on its stream."""
    name = "?"

    def __init__(self, run):
        self.r = run

    @property
    def stream(self):
        import torch
        return torch.cuda.current_stream()

    def sync(self):
        import torch
        torch.cuda.synchronize()


class EagerPath(Path):
    name = "ref"

    def __init__(self, run):
        super().__init__(run)
        import torch
        self.kv, run.cache_api = run.static_cache()
        self.pos = torch.zeros(run.M, dtype=torch.long, device=run.dev)

    def start(self):
        self.t0, self.prefill_logits = self.r.prefill(self.kv)
        self.ids = self.t0.view(-1, 1).clone()

    def step(self, k):
        self.pos[:self.r.b].copy_(self.r.pos_pinned[k], non_blocking=True)
        self.lg = self.r.stepper(self.kv, self.ids, self.pos)
        self.ids = self.lg.argmax(-1, keepdim=True)

    def record(self, k, rl, rt):
        rl[k].copy_(self.lg)
        rt[k].copy_(self.ids.view(-1))


class CUDAGraphPath(Path):
    """(b): torch.cuda.CUDAGraph captured by hand, gpt-fast style."""
    name = "b"

    def __init__(self, run, shared=False):
        """shared: capture on the run's shared stream into its shared pool
        (--share-pool), else torch's capture stream and a pool of its own."""
        super().__init__(run)
        import torch
        r = run
        self.kv, _ = r.static_cache()
        self.ids = torch.zeros(r.b, 1, dtype=torch.long, device=r.dev)
        self.pos = torch.full((r.M,), r.prompt_len, dtype=torch.long, device=r.dev)
        self.logits = torch.zeros(r.b, r.vocab, dtype=r.logits_dtype, device=r.dev)
        self.start()  # the cache's tensors exist (lazy init at the first update)
        side = torch.cuda.Stream(r.dev)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up (lazy cuBLAS state) off the capture
            for _ in range(2):
                r.stepper(self.kv, self.ids, self.pos)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        t = time.perf_counter()
        self.graph = torch.cuda.CUDAGraph()
        where = dict(stream=r.shared[0], pool=r.shared[1]) if shared and r.shared else {}
        with torch.cuda.graph(self.graph, **where):
            lg = r.stepper(self.kv, self.ids, self.pos)
            self.logits.copy_(lg)
            self.ids.copy_(self.logits.argmax(-1, keepdim=True))
        del lg
        torch.cuda.synchronize()
        self.captured_at = time.perf_counter()
        self.capture_s = self.captured_at - t

    def start(self):
        t0, self.prefill_logits = self.r.prefill(self.kv)
        self.ids.copy_(t0.view(-1, 1))
        self.t0 = t0

    def step(self, k):
        self.pos[:self.r.b].copy_(self.r.pos_pinned[k], non_blocking=True)
        self.graph.replay()

    def record(self, k, rl, rt):
        rl[k].copy_(self.logits)
        rt[k].copy_(self.ids.view(-1))


class CompilePath(Path):
    """(c): torch.compile(mode="reduce-overhead") of one step."""
    name = "c"

    def __init__(self, run):
        super().__init__(run)
        import torch
        r = run
        if r.args.compile_cache == "own":
            from hf_decode_lib import static_cache
            self.kv, _ = static_cache(r.model, r.b, r.max_len, r.dev)
        else:
            self.kv, _ = r.static_cache()
        kv, stepper = self.kv, r.stepper

        def one(ids, pos):
            return stepper(kv, ids, pos)

        if r.args.compile_partition == "off":
            # inductor's graph partitions (one cudagraph per partition) off:
            # one graph of the whole step, as before partitions existed
            try:
                import torch._inductor.config as cfg
            except ImportError:
                cfg = None
            if cfg is None or not hasattr(cfg, "graph_partition"):
                from hf_decode_lib import HFAPIError
                raise HFAPIError("this torch's inductor has no graph_partition setting")
            cfg.graph_partition = False
        self.fn = torch.compile(one, mode="reduce-overhead", dynamic=False)
        # distinct device tensors of the positions, made ahead (cudagraph
        # trees copy non-static inputs into the graph's own)
        self.pos = [r.pos_pinned[k].to(r.dev).clone() for k in range(r.steps)]
        self.mark = getattr(getattr(torch, "compiler", None), "cudagraph_mark_step_begin", None)
        self.start()
        t = time.perf_counter()
        ids = self.ids
        for k in range(3):  # compile, then cudagraph warm-up and recording
            self._mark()
            lg = self.fn(ids, self.pos[k])
            ids = lg.argmax(-1, keepdim=True)
        torch.cuda.synchronize()
        self.compile_s = time.perf_counter() - t

    def _mark(self):
        if self.mark is not None:
            self.mark()

    def start(self):
        self.t0, self.prefill_logits = self.r.prefill(self.kv)
        self.ids = self.t0.view(-1, 1).clone()

    def step(self, k):
        self._mark()
        self.lg = self.fn(self.ids, self.pos[k])
        self.ids = self.lg.argmax(-1, keepdim=True)

    def record(self, k, rl, rt):
        rl[k].copy_(self.lg)
        rt[k].copy_(self.ids.view(-1))


class MdrPath(Path):
    """(d): the forward as the body of an mdr.torch.GraphCache."""
    name = "d"

    def __init__(self, run, disable_graphs=False, empty=False, shared=False):
        """empty: a body that does nothing (path d0), so that a step times
        mdr's own part alone: the fused zero-and-stage kernel with the
        positions, in a graph of its own. shared: the cache runs on the
        run's shared stream and captures into its shared pool
        (--share-pool)."""
        super().__init__(run)
        import torch
        import mdr
        import mdr.torch as mt
        from hf_decode_lib import HFAPIError
        r = run
        self.name = "d-eager" if disable_graphs else "d0" if empty else "d"
        d = r.dims
        acfg = dict(hidden_size=d["hidden_size"], intermediate_size=d["intermediate_size"],
                    vocab_size=d["vocab_size"], num_attention_heads=d["num_attention_heads"],
                    num_key_value_heads=d["num_key_value_heads"], head_dim=d["head_dim"])
        self.arena = mdr.Arena(r.backend, acfg, max_batch_tokens=r.M,
                               max_seq_len=max(256, r.max_len), kv_block_size=16,
                               max_batch_size=r.M)
        share = shared and r.shared is not None
        self.mstream = mdr.Stream.wrap(r.backend, r.shared[0].cuda_stream) if share else r.backend.stream()
        self.tok = torch.from_dlpack(self.arena["token_ids"])[:r.M].view(torch.int32)
        lb = torch.from_dlpack(self.arena["logits"])
        if lb.dtype == r.logits_dtype and lb.dim() == 2 and lb.shape[0] >= r.b \
                and lb.shape[1] == r.vocab:
            self.logits, self.logits_where = lb, "arena logits %s" % (tuple(lb.shape),)
        else:  # the model's logits are not the arena's bf16 rows: a buffer of our own
            self.logits = torch.zeros(r.b, r.vocab, dtype=r.logits_dtype, device=r.dev)
            self.logits_where = ("own buffer (arena logits are %s %s, the model's %s)"
                                 % (lb.dtype, tuple(lb.shape), r.logits_dtype))
        self.pos = torch.full((r.M,), r.prompt_len, dtype=torch.long, device=r.dev)
        self.kv, _ = r.static_cache()
        kv, stepper, tok, logits, pos = self.kv, r.stepper, self.tok, self.logits, self.pos

        # The model reads mdr's int32 token_ids as they are when its
        # embedding gathers the same rows from int32 indices as from int64
        # (checked here, off the KV cache): no cast kernel per step. The
        # argmax goes into token_ids through one casting copy, as (b)'s.
        probe = torch.arange(min(8, r.vocab), device=r.dev)
        emb = r.model.get_input_embeddings()
        with torch.no_grad():
            self.ids_int32 = bool(torch.equal(emb(probe.to(torch.int32)), emb(probe)))
        ids_int32 = self.ids_int32

        def body(stream, tokens):
            if empty:
                return
            ids = tok[:tokens].view(tokens, 1)
            lg = stepper(kv, ids if ids_int32 else ids.long(), pos)
            logits[:tokens].copy_(lg)
            tok[:tokens].copy_(logits[:tokens].argmax(-1))

        inputs = [mdr.StepInput("positions", "int64", "token", pad=0, dest=self.pos)]
        old = os.environ.get("MDR_DISABLE_GRAPHS")
        if disable_graphs:
            os.environ["MDR_DISABLE_GRAPHS"] = "1"
        try:
            self.cache = mt.GraphCache(self.arena, self.mstream, mode="exact", zero="fused",
                                       rows=r.args.mdr_rows, body=body, inputs=inputs,
                                       max_sequences=r.M, pool=r.shared[1] if share else None)
        finally:
            if disable_graphs:
                if old is None:
                    del os.environ["MDR_DISABLE_GRAPHS"]
                else:
                    os.environ["MDR_DISABLE_GRAPHS"] = old
        if bool(self.cache.stats().graphs_disabled) != disable_graphs:
            raise HFAPIError("MDR_DISABLE_GRAPHS=%s not honoured by the cache" % disable_graphs)
        self.vals = [{"positions": r.pos_host[k]} for k in range(r.steps)]
        self.start()  # the KV cache's tensors exist before any capture
        self.tok[:r.b].copy_(self.t0)
        torch.cuda.synchronize()
        self.capture_warnings = []
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            self.cache.warmup([r.b])  # lazy cuBLAS state on mdr's stream, eagerly
            t = time.perf_counter()
            if not disable_graphs:
                self.cache.prepare([r.b])                  # the host-staged step's graph
                self.cache.prepare([r.b], device_ids=0)    # the device-fed step's graph
            self.captured_at = time.perf_counter()
            self.capture_s = self.captured_at - t
        self.capture_warnings = [str(x.message) for x in w]
        self.tstream = self.cache.torch_stream

    @property
    def stream(self):
        return self.tstream

    def start(self):
        self.t0, self.prefill_logits = self.r.prefill(self.kv)
        self.first_ids = self.t0.to("cpu", self.r.torch.int32).numpy().astype("uint32")

    def step(self, k):
        if k == 0:  # staged from the host
            self.cache.step_inputs(self.first_ids, self.vals[0])
        else:       # from the device: the previous body wrote token_ids
            self.cache.step_inputs(None, self.vals[k], tokens=self.r.b)

    def record(self, k, rl, rt):
        torch = self.r.torch
        with torch.cuda.stream(self.tstream):
            rl[k].copy_(self.logits[:self.r.b])
            rt[k].copy_(self.tok[:self.r.b])

    def close(self):
        self.cache.close()
        self.arena.close()
        self.mstream.close()


# ---- one batch size ----------------------------------------------------------------------

class Run:
    def __init__(self, args, model, info, stepper, backend, b):
        import numpy as np
        import torch
        self.torch = torch
        self.args = args
        self.model, self.info, self.stepper, self.backend = model, info, stepper, backend
        self.b, self.steps, self.prompt_len = b, args.steps, args.prompt
        self.dev = torch.device("cuda", args.device)
        self.dims = info["dims"]
        self.vocab = self.dims["vocab_size"]
        self.max_len = args.prompt + args.steps
        self.M = max(16, b)
        g = torch.Generator(device="cpu").manual_seed(args.seed * 1000 + b)
        self.prompt = torch.randint(0, self.vocab, (b, args.prompt), generator=g).to(self.dev)
        # step k decodes at position prompt + k
        self.pos_host = [np.full(b, args.prompt + k, dtype=np.int64) for k in range(args.steps)]
        self.pos_pinned = torch.from_numpy(np.stack(self.pos_host)).pin_memory()
        self.logits_dtype = None
        self.cache_api = None
        self._kv = None
        # --share-pool: the one capture stream and graph pool of (b) and (d)
        self.shared = (torch.cuda.Stream(self.dev), torch.cuda.graph_pool_handle()) \
            if args.share_pool else None

    def shared_pool_bytes(self):
        """Bytes of device memory the shared pool holds (its segments), or
        None without --share-pool."""
        if self.shared is None:
            return None
        pid = tuple(self.shared[1])
        return sum(seg["total_size"] for seg in self.torch.cuda.memory_snapshot()
                   if tuple(seg.get("segment_pool_id", (0, 0))) == pid)

    def static_cache(self):
        """The one static cache every path of this batch size decodes into
        (each path's start() resets it and prefills it again): the paths
        differ in how the steps are launched, never in where the cache
        lies, so a placement's effect on the time (L2, pages) is the same
        for all of them. (cache, which constructor took it)."""
        if self._kv is None:
            from hf_decode_lib import static_cache
            self._kv = static_cache(self.model, self.b, self.max_len, self.dev)
        return self._kv

    def prefill(self, kv):
        """Reset `kv`, prefill the prompt eagerly: (first ids (b,), logits)."""
        from hf_decode_lib import reset_cache
        torch = self.torch
        torch.cuda.synchronize()  # every stream: no step of an earlier run in flight
        reset_cache(kv)
        lg = self.stepper.prefill(kv, self.prompt)
        if self.logits_dtype is None:
            self.logits_dtype = lg.dtype
        t0 = lg.argmax(-1)
        torch.cuda.synchronize()
        return t0, lg.clone()

    def buffers(self):
        torch = self.torch
        return (torch.zeros(self.steps, self.b, self.vocab, dtype=self.logits_dtype, device=self.dev),
                torch.zeros(self.steps, self.b, dtype=torch.long, device=self.dev))

    def drive(self, path, rec=None, mem=None):
        """The steps back to back: (gpu ms, wall ms) of them. mem: a function
        sampling memory, called after the prefill and after the steps (the
        pair appended to mem.samples)."""
        from hf_decode_lib import Timer
        path.start()
        m0 = mem() if mem is not None else None
        with Timer(path.stream) as tm:
            for k in range(self.steps):
                path.step(k)
                if rec is not None:
                    path.record(k, *rec)
        if mem is not None:
            mem.samples.append((m0, mem()))
        return tm.gpu_ms, tm.wall_ms

    def drive_cpu(self, path):
        """Host µs of each step call, the GPU drained after each. (The paths
        of a batch size decode into one static cache, so their decodes run
        one after another, never interleaved.)"""
        clock = time.perf_counter_ns
        path.start()
        out = []
        for k in range(self.steps):
            t = clock()
            path.step(k)
            out.append((clock() - t) / 1000.0)
            path.sync()
        return out


def generate(run, logits):
    """model.generate, greedy, its default cache: (new ids (steps+1, b),
    per-step logits or None)."""
    torch = run.torch
    kw = dict(attention_mask=torch.ones_like(run.prompt), do_sample=False,
              max_new_tokens=run.steps + 1, pad_token_id=0)
    if logits:
        kw.update(output_logits=True, return_dict_in_generate=True)
    out = run.model.generate(run.prompt, **kw)
    seq = out.sequences if logits else out
    new = seq[:, run.prompt_len:]
    if new.shape[1] != run.steps + 1:
        from hf_decode_lib import HFAPIError
        raise HFAPIError("generate returned %d new tokens, not %d (stopped early?)"
                         % (new.shape[1], run.steps + 1))
    return new.t().contiguous(), (out.logits if logits else None)


def first_difference(x, ref):
    """The first decode step whose logits differ from ref's (None: none)."""
    import torch
    for k in range(ref.shape[0]):
        if not torch.equal(x[k], ref[k]):
            return k
    return None


def set_sdpa(which):
    """Leave torch one scaled-dot-product-attention backend (or its own choice)."""
    import torch
    if which == "default":
        return
    b = torch.backends.cuda
    b.enable_flash_sdp(which == "flash")
    b.enable_mem_efficient_sdp(which == "efficient")
    b.enable_math_sdp(which == "math")
    if hasattr(b, "enable_cudnn_sdp"):
        b.enable_cudnn_sdp(False)


def run_batch(args, model, info, stepper, backend, save=None):
    """Every batch size of args.batches: a result dict each. save(results so
    far) is called after each batch size, so a run cut short keeps them."""
    import torch
    from hf_decode_lib import agreement, cache_lengths, median, pct, top2_margins
    res_all = []
    for b in args.batches:
        r = Run(args, model, info, stepper, backend, b)
        res = {"batch": b, "prompt": args.prompt, "steps": args.steps, "paths": {}, "checks": {},
               "notes": []}
        print("\n== batch %d: prompt %d, %d greedy steps" % (b, args.prompt, args.steps), flush=True)

        # -- the reference: eager static-cache step loop
        ref = EagerPath(r)
        res["cache_api"] = r.cache_api
        ref.start()  # the logits' dtype
        rl, rt = r.buffers()
        r.drive(ref, (rl, rt))
        ref_t0, ref_pl = ref.t0.clone(), ref.prefill_logits
        # the reference again: whether the eager loop repeats itself bit for bit
        # (a kernel whose sums depend on timing would part every path from it)
        rl2, rt2 = r.buffers()
        r.drive(ref, (rl2, rt2))
        res["compare"] = {"ref_repeats_bit_identical": bool(torch.equal(rl2, rl) and torch.equal(rt2, rt))}
        res["first_logits_difference"] = {"ref_again": first_difference(rl2, rl)}
        if not res["compare"]["ref_repeats_bit_identical"]:
            res["notes"].append(
                "the eager reference does not repeat itself with SDPA backend %s (its logits part from its own "
                "first run at step %s): no path can be bit-identical to it; --sdpa math pins a backend that "
                "repeats" % (args.sdpa, res["first_logits_difference"]["ref_again"]))
        del rl2, rt2
        ref_tokens = torch.cat([ref_t0.view(1, -1), rt]).cpu()          # (steps+1, b)
        margins = [top2_margins(ref_pl)] + [top2_margins(rl[k]) for k in range(r.steps)]
        margins = [(m.cpu().tolist(), u.cpu().tolist()) for m, u in margins]
        kv_len_ref = cache_lengths(ref.kv)
        res["kv_position_tracking"] = ("cache_position argument" if info["forward_has_cache_position"]
                                       else "the cache's device counter" if kv_len_ref is not None
                                       else "unknown")
        if kv_len_ref is not None:
            res["checks"]["ref_kv_length"] = all(x == r.max_len for x in kv_len_ref)
        amb_steps = [k for k in range(r.steps + 1)
                     if any(m <= args.margin_ulps * u for m, u in zip(*margins[k]))]
        res["ref_ambiguous_steps"] = amb_steps[:32]

        # -- (a) generate: agreement with the reference
        if not args.no_generate:
            gen_tokens, gen_logits = generate(r, logits=True)
            rows = agreement(ref_tokens, margins, gen_tokens.cpu(), args.margin_ulps)
            # Where a row parts from the reference: how far generate's logits
            # are from the reference's at that step (both saw the same tokens
            # until then: the difference is the kernels', accumulated through
            # the KV cache), beside the reference's top-2 margin there. A
            # margin within twice that difference is a tie those kernels may
            # break either way; the check above still counts bf16 spacings.
            for x in rows:
                k = x["first_mismatch"]
                if k is None:
                    continue
                ref_k = ref_pl if k == 0 else rl[k - 1]
                d = float((gen_logits[k][x["row"]].float() - ref_k[x["row"]].float()).abs().max())
                x["logits_diff_at_mismatch"] = d
                x["ref_margin_at_mismatch"] = margins[k][0][x["row"]]
                x["within_kernel_difference"] = margins[k][0][x["row"]] <= 2.0 * d
            res["generate_agreement"] = rows
            res["checks"]["generate_agrees_until_ambiguous"] = all(x["ok"] for x in rows)
            res["generate_prefill_logits_max_abs_diff"] = float(
                (gen_logits[0].float() - ref_pl.float()).abs().max())
            del gen_logits

        # -- (b) torch.cuda.CUDAGraph; with --first d (or b2), (d) (or (b2)) is
        # captured before it, so that each can be timed as the process's first
        # capture (of all, or of torch's)
        pool_bytes = {}  # --share-pool: the shared pool's bytes after each capture into it
        pd_first = MdrPath(r, shared=True) if args.first == "d" else None
        if pd_first is not None and r.shared:
            pool_bytes["after_d"] = r.shared_pool_bytes()
        pb2_first = CUDAGraphPath(r) if args.first == "b2" else None
        pb = CUDAGraphPath(r, shared=True)
        if r.shared:
            pool_bytes["after_b"] = r.shared_pool_bytes()
        bl, bt = r.buffers()
        r.drive(pb, (bl, bt))
        res["checks"]["b_logits_bit_identical"] = bool(torch.equal(bl, rl))
        res["first_logits_difference"]["b"] = first_difference(bl, rl)
        res["checks"]["b_tokens_identical"] = bool(torch.equal(bt, rt))
        res["paths"]["b"] = {"capture_s": pb.capture_s}
        order = [(pb.captured_at, "b"), (pd_first.captured_at if pd_first is not None else float("inf"), "d")]
        if pb2_first is not None:
            order.append((pb2_first.captured_at, "b2"))
        res["capture_order"] = [n for _, n in sorted(order)]
        res["pool"] = ("(b) and (d): one capture stream, one graph pool (--share-pool)" if r.shared
                       else "each graph path a pool of its own")

        # -- (d) mdr, and mdr with graphs disabled
        pd = pd_first if pd_first is not None else MdrPath(r, shared=True)
        if r.shared and "after_d" not in pool_bytes:
            pool_bytes["after_d"] = r.shared_pool_bytes()
        if pool_bytes:
            res["shared_pool_bytes"] = pool_bytes
        res["logits_buffer"] = pd.logits_where
        res["d_ids"] = "token_ids as int32" if pd.ids_int32 else "token_ids cast to int64 per step"
        res["capture_warnings"] = pd.capture_warnings

        def mem_sample():
            torch.cuda.synchronize()
            st = pd.cache.stats()
            return (torch.cuda.memory_allocated(r.dev), torch.cuda.memory_reserved(r.dev),
                    torch.cuda.mem_get_info(r.dev)[0], st.graphs, st.graph_bytes, st.captures)
        mem_sample.samples = []
        mem = mem_sample.samples

        dl, dt = r.buffers()
        r.drive(pd, (dl, dt), mem=mem_sample)
        res["checks"]["d_prefill_identical"] = bool(torch.equal(pd.prefill_logits, ref_pl))
        res["checks"]["d_logits_bit_identical"] = bool(torch.equal(dl, rl))
        # beside the checks: where the graphs (torch's and mdr's) part from
        # the eager loops, and whether they part from each other
        res["first_logits_difference"]["d"] = first_difference(dl, rl)
        res["compare"].update({"d_logits_equal_b": bool(torch.equal(dl, bl)),
                               "d_tokens_equal_b": bool(torch.equal(dt, bt))})
        res["checks"]["d_tokens_identical"] = bool(torch.equal(dt, rt))
        if not res["checks"]["d_tokens_identical"]:
            k = next(k for k in range(r.steps) if not torch.equal(dt[k], rt[k]))
            res["notes"].append("mdr's tokens differ from the reference from step %d" % (k + 1))
        kv_len_d = cache_lengths(pd.kv)
        if kv_len_d is not None:
            res["checks"]["d_kv_length"] = all(x == r.max_len for x in kv_len_d)
        pe = MdrPath(r, disable_graphs=True)
        el, et = r.buffers()
        r.drive(pe, (el, et))
        res["checks"]["d_disable_graphs_identical"] = bool(torch.equal(el, dl) and torch.equal(et, dt))
        res["compare"]["d_eager_logits_equal_ref"] = bool(torch.equal(el, rl))
        res["first_logits_difference"]["d_eager"] = first_difference(el, rl)
        st = pe.cache.stats()
        res["checks"]["d_disable_graphs_ran_eager"] = bool(st.graphs == 0 and st.graphs_disabled)
        pe.close()
        del el, et, bl, bt, dl, dt

        # -- (c) torch.compile
        pc, why = None, None
        if args.no_compile:
            why = "skipped (--no-compile)"
        else:
            try:
                torch._dynamo.reset()
                pc = CompilePath(r)
                cl, ct = r.buffers()
                r.drive(pc, (cl, ct))
                ctok = torch.cat([pc.t0.view(1, -1), ct]).cpu()
                rows = agreement(ref_tokens, margins, ctok, args.margin_ulps)
                res["paths"]["c"] = {"compile_s": pc.compile_s,
                                     "logits_bit_identical": bool(torch.equal(cl, rl)),
                                     "logits_max_abs_diff": float((cl.float() - rl.float()).abs().max()),
                                     "agreement": rows,
                                     # informational: other kernels (inductor's fusions)
                                     "agrees_until_ambiguous": all(x["ok"] for x in rows)}
                del cl, ct
            except Exception as e:  # noqa: BLE001 — reported, path (c) left out
                why = "%s: %s" % (type(e).__name__, str(e).strip().splitlines()[0][:300]
                                  if str(e).strip() else "")
                pc = None
        if why:
            res["paths"]["c"] = {"unavailable": why}
            print("(c) torch.compile: %s" % why, flush=True)

        # -- timing, interleaved rounds
        fixed = [] if args.no_ref_timing else [("ref", ref)]
        p0 = MdrPath(r, empty=True) if "d0" in args.timed else None
        def again(name, make, tokens, made=None):
            """A path captured a second time (its own pool, or cache and
            arena; made: already captured, with --first b2), checked against
            the reference, timed beside the first."""
            if name not in args.timed:
                return None
            p = made if made is not None else make(r)
            p.name = name
            l2, t2 = r.buffers()
            r.drive(p, (l2, t2))
            res["checks"][name + "_logits_bit_identical"] = bool(torch.equal(l2, rl))
            if tokens:
                res["checks"][name + "_tokens_identical"] = bool(torch.equal(t2, rt))
            return p
        pb2 = again("b2", CUDAGraphPath, tokens=False, made=pb2_first)
        pd2 = again("d2", MdrPath, tokens=True)
        rotated = [(n, p) for n, p in [("b", pb), ("b2", pb2), ("c", pc), ("d", pd), ("d2", pd2),
                                       ("d0", p0)]
                   if p is not None and n in args.timed]
        paths = fixed + rotated
        T = {n: {"gpu": [], "wall": [], "cpu": [], "cpu_minus_b": []} for n, _ in paths}
        A = {"gpu": [], "wall": [], "cpu": []}
        for rep in range(args.reps):
            if not args.no_generate:
                per = {}
                for n_new in (1, r.steps + 1):
                    torch.cuda.synchronize()
                    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    c0, w0 = time.thread_time(), time.perf_counter()
                    e0.record()
                    o = r.model.generate(r.prompt, attention_mask=torch.ones_like(r.prompt),
                                         do_sample=False, max_new_tokens=n_new, pad_token_id=0)
                    e1.record()
                    if o.shape[1] != r.prompt_len + n_new:
                        from hf_decode_lib import HFAPIError
                        raise HFAPIError("generate stopped after %d of %d tokens"
                                         % (o.shape[1] - r.prompt_len, n_new))
                    e1.synchronize()
                    per[n_new] = (e0.elapsed_time(e1), (time.perf_counter() - w0) * 1e3,
                                  (time.thread_time() - c0) * 1e6)
                lo, hi = per[1], per[r.steps + 1]
                A["gpu"].append((hi[0] - lo[0]) / r.steps)
                A["wall"].append((hi[1] - lo[1]) / r.steps)
                A["cpu"].append((hi[2] - lo[2]) / r.steps)
            # the graph paths in a rotated order each round, so that no path
            # always runs right after another (the reference, when timed,
            # stays first)
            k = rep % len(rotated) if rotated else 0
            for n, p in fixed + rotated[k:] + rotated[:k]:
                if args.trace:
                    print("timing round %d: path %s" % (rep, n), flush=True)
                try:
                    g_ms, w_ms = r.drive(p, mem=mem_sample if n == "d" else None)
                except Exception as e:
                    raise RuntimeError("timing round %d, path %s: %s" % (rep, n, e)) from e
                T[n]["gpu"].append(g_ms / r.steps)
                T[n]["wall"].append(w_ms / r.steps)
            # host time: each path's decode in turn, in the round's order
            cpu = {n: r.drive_cpu(p) for n, p in fixed + rotated[k:] + rotated[:k]}
            for n, _ in paths:
                T[n]["cpu"].extend(cpu[n])
                if "b" in cpu and n != "b":  # paired: path n's step k less (b)'s step k of this round
                    T[n]["cpu_minus_b"].extend(x - y for x, y in zip(cpu[n], cpu["b"]))
        for n, _ in paths:
            t = T[n]
            res["paths"].setdefault(n, {}).update(
                {"gpu_ms": median(t["gpu"]), "wall_ms": median(t["wall"]),
                 "cpu_us": median(t["cpu"]), "cpu_us_p99": pct(t["cpu"], 99),
                 "gpu_ms_runs": t["gpu"], "wall_ms_runs": t["wall"]})
            if t["cpu_minus_b"]:
                res["paths"][n].update({"cpu_us_minus_b": median(t["cpu_minus_b"]),
                                        "cpu_us_minus_b_p10": pct(t["cpu_minus_b"], 10),
                                        "cpu_us_minus_b_p90": pct(t["cpu_minus_b"], 90)})
        if not args.no_generate:
            res["paths"]["a"] = {"gpu_ms": median(A["gpu"]), "wall_ms": median(A["wall"]),
                                 "cpu_us": median(A["cpu"]), "cpu_us_p99": None,
                                 "gpu_ms_runs": A["gpu"], "wall_ms_runs": A["wall"]}
        del rl, rt
        if args.profile:
            if res_all:  # the profiler of an earlier batch size ran in this process
                res["notes"].append(
                    "CPU figures inflated: torch's profiler ran for an earlier batch size in this process "
                    "and its CUPTI hooks stay in every launch after it (GPU figures unaffected); run one "
                    "batch size per process with --profile for CPU figures")
            res["profile"] = profile_paths(r, rotated, args.profile)
        st = pd.cache.stats()
        res["mdr_stats"] = {k: (v if isinstance(v, (int, float, bool)) else str(v))
                            for k, v in vars(st).items()}
        res["paths"].setdefault("d", {})["capture_s"] = pd.capture_s
        res["checks"]["d_no_eager_steps"] = bool(st.eager_steps == 0 and st.eager_fallbacks == 0
                                                 and st.captures == 2)
        # (allocated, reserved, device free, graphs, graph bytes, captures)
        # before and after each run of (d): torch's counters and the
        # device's free memory unchanged over every timed run (the first
        # run, which records, may load kernels lazily), mdr's graphs the
        # same after every run
        res["memory_samples"] = [list(a) + list(z) for a, z in mem]
        res["memory"] = {
            "timed_runs": len(mem) - 1,
            "torch_unchanged": all(a[:2] == z[:2] for a, z in mem[1:]),
            "device_free_unchanged": all(a[2] == z[2] for a, z in mem[1:]),
            "graphs_unchanged": len({z[3:] for _, z in mem}) == 1}
        if "d" in args.timed:  # (without timed runs of (d) there is nothing to compare)
            res["checks"]["d_memory_stable"] = len(mem) > 1 and all(
                v for k, v in res["memory"].items() if k != "timed_runs")

        P = res["paths"]
        tg = {}
        timed_d = "gpu_ms" in P.get("d", {})
        if timed_d and "gpu_ms" in P.get("b", {}):
            tg["d_gpu_le_b"] = P["d"]["gpu_ms"] <= P["b"]["gpu_ms"]
            # the paired figure (step k of (d) less step k of (b) in the
            # same round) where both were timed
            tg["d_cpu_le_b_plus_3us"] = P["d"].get("cpu_us_minus_b",
                                                   P["d"]["cpu_us"] - P["b"]["cpu_us"]) <= 3.0
        if timed_d and "a" in P:
            tg["d_wall_le_half_a"] = P["d"]["wall_ms"] <= 0.5 * P["a"]["wall_ms"]
        res["targets"] = tg
        if all("gpu_ms" in P.get(n, {}) for n in ("b", "b2", "d", "d2")):
            # beside the target: two captures of each, so the spread that
            # placement alone gives stands next to the difference of the pairs
            g = {n: P[n]["gpu_ms"] * 1000.0 for n in ("b", "b2", "d", "d2")}
            res["compare"]["placement_us"] = {
                "b2_minus_b": g["b2"] - g["b"], "d2_minus_d": g["d2"] - g["d"],
                "d_pair_minus_b_pair": (g["d"] + g["d2"] - g["b"] - g["b2"]) / 2.0}
        report(res)
        for p in (pd, pd2, p0):
            if p is not None:
                p.close()
        del ref, pb, pb2, pc, pd, pd2, p0
        torch.cuda.empty_cache()
        res_all.append(res)
        if save is not None:
            save(res_all)
    return res_all


def profile_paths(run, paths, n):
    """Steps 0..n-1 of each path under torch's profiler (CUDA activity
    only): per path, kernels (and copies) per step, their summed time per
    step (busy) and first start to last end per step (span), and per
    kernel name its count and µs per step. Beside (b), the names whose time
    per step differs most. Printed and returned."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    out = {}
    for name, p in paths:
        p.start()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for k in range(n):
                p.step(k)
            torch.cuda.synchronize()
        evs = [e for e in prof.events()
               if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA]
        if not evs:
            out[name] = {"error": "no CUDA activity recorded"}
            continue
        by = {}
        for e in evs:
            c, t = by.get(e.name, (0, 0.0))
            by[e.name] = (c + 1, t + (e.time_range.end - e.time_range.start))
        span = max(e.time_range.end for e in evs) - min(e.time_range.start for e in evs)
        out[name] = {"events_per_step": len(evs) / n,
                     "busy_us_per_step": sum(t for _, t in by.values()) / n,
                     "span_us_per_step": span / n,
                     "by_name": {k: [c / n, t / n] for k, (c, t) in by.items()}}
    print("profile, %d steps each: path  events/step  busy us/step  span us/step" % n)
    for name, v in out.items():
        if "error" in v:
            print("  %-3s %s" % (name, v["error"]))
        else:
            print("  %-3s %10.1f %12.1f %12.1f" % (name, v["events_per_step"], v["busy_us_per_step"],
                                                   v["span_us_per_step"]))
    base = out.get("b", {}).get("by_name")
    for name, v in out.items():
        if name == "b" or base is None or "by_name" not in v:
            continue
        keys = set(base) | set(v["by_name"])
        diff = sorted(((v["by_name"].get(k, [0, 0.0])[1] - base.get(k, [0, 0.0])[1],
                        v["by_name"].get(k, [0, 0])[0] - base.get(k, [0, 0])[0], k) for k in keys),
                      key=lambda x: -abs(x[0]))
        v["vs_b"] = [{"name": k, "us_per_step": round(d, 3), "count_per_step": c}
                     for d, c, k in diff[:20]]
        print("  %s - b, by kernel (us/step, count/step):" % name)
        for d, c, k in diff[:12]:
            print("    %+8.2f %+6.1f  %s" % (d, c, k[:110]))
    return out


LABELS = [("a", "(a) generate, default cache, eager"),
          ("ref", "(ref) eager static-cache step loop"),
          ("b", "(b) static cache + torch.cuda.CUDAGraph"),
          ("b2", "(b2) the same, captured again"),
          ("c", "(c) torch.compile reduce-overhead"),
          ("d", "(d) mdr graph cache (mdr.torch)"),
          ("d2", "(d2) the same, a second cache"),
          ("d0", "(d0) mdr's own part: the same, empty body")]


def report(res):
    P = res["paths"]
    print("%-42s %12s %13s %16s" % ("path", "GPU ms/step", "wall ms/step", "CPU us/step"))
    for k, label in LABELS:
        p = P.get(k)
        if p is None:
            continue
        if "gpu_ms" not in p:
            print("%-42s %s" % (label, p.get("unavailable", "not run")))
            continue
        cpu = "%.1f" % p["cpu_us"] + (" (p99 %.1f)" % p["cpu_us_p99"] if p.get("cpu_us_p99") else "")
        extra = ""
        if "cpu_us_minus_b" in p:
            extra = "  CPU - (b) paired %+.1f [%+.1f, %+.1f]" % (
                p["cpu_us_minus_b"], p["cpu_us_minus_b_p10"], p["cpu_us_minus_b_p90"])
        if k == "c":
            extra += "  compile %.1f s" % p["compile_s"]
        print("%-42s %12.3f %13.3f %16s%s" % (label, p["gpu_ms"], p["wall_ms"], cpu, extra))
    print("capture order %s; pools: %s%s" % (
        ", ".join(res.get("capture_order", [])), res.get("pool", "?"),
        "" if "shared_pool_bytes" not in res else " (its bytes after each capture: %s)" % ", ".join(
            "%s %.1f MiB" % (k, v / 2 ** 20) for k, v in res["shared_pool_bytes"].items())))
    print("checks: " + ", ".join("%s %s" % (k, "PASS" if v else "FAIL")
                                 for k, v in res["checks"].items()))
    if "generate_agreement" in res:
        rows = res["generate_agreement"]
        print("generate vs reference, per row (agree until / first ambiguous / first mismatch): "
              + "; ".join("%d: %s/%s/%s" % (x["row"], x["agree_until"], x["first_ambiguous"],
                                            x["first_mismatch"]) for x in rows[:16])
              + (" ..." if len(rows) > 16 else ""))
        for x in rows:
            if not x["ok"]:
                print("generate parts from the reference in row %d at step %d, before its first ambiguous step "
                      "(%s): there the reference's top-2 margin is %.4g and generate's logits differ from the "
                      "reference's by up to %.4g (%s)"
                      % (x["row"], x["first_mismatch"], x["first_ambiguous"], x["ref_margin_at_mismatch"],
                         x["logits_diff_at_mismatch"],
                         "a tie within the kernels' difference" if x["within_kernel_difference"]
                         else "more than the kernels' difference"))
    print("targets: " + ", ".join("%s %s" % (k, "PASS" if v else "FAIL")
                                  for k, v in res["targets"].items()))
    if "compare" in res:
        print("beside the checks: " + ", ".join("%s %s" % (k, v) for k, v in res["compare"].items())
              + "; first step whose logits differ from the reference: "
              + ", ".join("%s %s" % (k, v) for k, v in res.get("first_logits_difference", {}).items()))
    for n in res["notes"]:
        print("note: " + n)
    if res.get("capture_warnings"):
        print("capture warnings: " + " | ".join(res["capture_warnings"]))
    sys.stdout.flush()


def main():
    args = parse()
    _deps()
    import torch
    import mdr
    import mdr.torch  # noqa: F401 — fails here, clearly, when the pool API is missing
    from hf_decode_lib import Stepper, build_model, versions
    dev = torch.device("cuda", args.device)
    torch.cuda.set_device(dev)
    backend = mdr.Backend.cuda(args.device)
    set_sdpa(args.sdpa)
    model, info = build_model(args.model, args.seed, dev)
    gc = getattr(model, "generation_config", None)
    if gc is not None:  # no early stop: every path decodes all the steps
        gc.eos_token_id = None
    stepper = Stepper(model, info)
    out = {"issue": 26, "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
           "machine": {"gpu": torch.cuda.get_device_name(dev), "host": platform.node(),
                       "python": platform.python_version()},
           "versions": dict(versions(), mdr=mdr.version()), "model": info,
           "margin_ulps": args.margin_ulps, "sdpa": args.sdpa}
    print("Qwen3 %s (%d parameters, seeded random, bf16, %s attention, SDPA backend %s) on %s; torch %s, "
          "transformers %s, mdr %s" % (args.model, info["params"], info["attn_implementation"], args.sdpa,
                                       out["machine"]["gpu"], out["versions"]["torch"],
                                       out["versions"]["transformers"], out["versions"]["mdr"]))
    print("forward keywords: cache_position %s, logits_to_keep %s"
          % ("yes" if info["forward_has_cache_position"] else "no (the cache keeps its position)",
             "yes" if info["forward_has_logits_to_keep"] else "no"), flush=True)

    def save(batches, complete=False):
        """The JSON as it stands: after each batch size, then complete."""
        out["batches"] = batches
        out["complete"] = complete
        if not args.json:
            return
        if os.path.dirname(args.json):
            os.makedirs(os.path.dirname(args.json), exist_ok=True)
        with open(args.json + ".part", "w") as f:
            json.dump(out, f, indent=1)
        os.replace(args.json + ".part", args.json)

    batches = run_batch(args, model, info, stepper, backend, save)
    ok = all(all(b["checks"].values()) for b in batches)
    out["all_checks_pass"] = ok
    print("\nall checks %s" % ("PASS" if ok else "FAIL"))
    save(batches, complete=True)
    backend.close()
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        rc = main()
    except Exception as e:
        from hf_decode_lib import HFAPIError
        if isinstance(e, HFAPIError):
            sys.exit("hf_decode: torch/transformers API mismatch: %s" % e)
        raise
    sys.exit(rc)
