"""Helpers of hf_decode.py: the model, one decode step of it, and the four
decode paths (eager reference, generate, torch.cuda.CUDAGraph, torch.compile,
mdr). Everything here fails loudly on an API it does not recognise
(HFAPIError), never silently around it.

The transformers API this leans on, and how each piece is checked:
  * Qwen3Config / Qwen3ForCausalLM (the config's dimensions are read back);
  * StaticCache(config=, max_cache_len=) (5.x), else the 4.x signature
    (max_batch_size, device, dtype), reported as `cache_api`;
  * the forward's keywords: input_ids, position_ids, past_key_values,
    use_cache, logits_to_keep (when the signature has it) and cache_position
    (only when the signature has it: transformers removed it in 5.x, where
    the static cache keeps its own write position in a device tensor,
    `cumulative_length`, which a graph replay advances like eager code);
  * generate(do_sample=False, max_new_tokens=, output_logits=,
    return_dict_in_generate=).
The bit-identity of the graph paths against the eager step loop is what
proves a captured step reads every per-step value from device memory (a
position or a cache length baked into a graph as a Python int would make
the logits differ at the next step).
"""
import inspect
import math
import time

import torch

SIZES = {
    # Qwen3-0.6B and Qwen3-1.7B (their config.json), and a tiny one for tests
    "0.6b": dict(vocab_size=151936, hidden_size=1024, intermediate_size=3072,
                 num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                 head_dim=128, max_position_embeddings=40960, rms_norm_eps=1e-6,
                 tie_word_embeddings=True),
    "1.7b": dict(vocab_size=151936, hidden_size=2048, intermediate_size=6144,
                 num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                 head_dim=128, max_position_embeddings=40960, rms_norm_eps=1e-6,
                 tie_word_embeddings=True),
    "tiny": dict(vocab_size=1024, hidden_size=128, intermediate_size=256,
                 num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 head_dim=32, max_position_embeddings=4096, rms_norm_eps=1e-6,
                 tie_word_embeddings=True),
}
ROPE_THETA = 1000000.0  # Qwen3's


class HFAPIError(RuntimeError):
    """transformers or torch does not offer what this example was written against."""


def _need(cond, what):
    if not cond:
        raise HFAPIError(what)


def versions():
    import transformers
    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "cuda": torch.version.cuda}


# ---- the model ---------------------------------------------------------------------------

def build_model(size, seed, device):
    """Qwen3ForCausalLM from a Qwen3Config of `size`, seeded random weights,
    bf16, eval, on `device`. Returns (model, info)."""
    try:
        from transformers import Qwen3Config, Qwen3ForCausalLM
    except ImportError as e:
        raise HFAPIError("transformers has no Qwen3Config / Qwen3ForCausalLM (%s)" % e)
    dims = SIZES[size]
    cfg = Qwen3Config(**dims)
    for k, v in dims.items():  # every dimension taken as given
        _need(getattr(cfg, k, None) == v, "Qwen3Config ignored %s=%r (has %r)"
              % (k, v, getattr(cfg, k, None)))
    rope = getattr(cfg, "rope_parameters", None)
    if isinstance(rope, dict) and "rope_theta" in rope:
        rope["rope_theta"] = ROPE_THETA
        rope_where = "rope_parameters"
    elif hasattr(cfg, "rope_theta"):
        cfg.rope_theta = ROPE_THETA
        rope_where = "rope_theta"
    else:
        rope_where = "default (no rope_theta found in the config)"
    if hasattr(cfg, "use_cache"):
        cfg.use_cache = True
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)
    with torch.device(device):
        model = Qwen3ForCausalLM(cfg)
    model = model.to(device=device, dtype=torch.bfloat16).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    n = sum(p.numel() for p in model.parameters())
    absum = sum(float(p.float().abs().sum()) for p in model.parameters())
    _need(absum > 0 and math.isfinite(absum), "the random init left the weights zero or "
          "non-finite (sum |w| = %r)" % absum)
    fwd = inspect.signature(model.forward).parameters
    _need("past_key_values" in fwd and "position_ids" in fwd,
          "Qwen3ForCausalLM.forward takes no past_key_values / position_ids: %s" % list(fwd))
    info = {"size": size, "params": n, "seed": seed, "dims": dims, "rope": rope_where,
            "attn_implementation": getattr(model.config, "_attn_implementation", None),
            "forward_has_cache_position": "cache_position" in fwd,
            "forward_has_logits_to_keep": "logits_to_keep" in fwd}
    return model, info


def static_cache(model, batch, max_len, device):
    """A transformers StaticCache for `batch` rows of `max_len` tokens.
    Returns (cache, which constructor took it)."""
    try:
        from transformers import StaticCache
    except ImportError as e:
        raise HFAPIError("transformers has no StaticCache (%s)" % e)
    errs = []
    try:  # 5.x: the layers allocate lazily at the first update (the prefill)
        return StaticCache(config=model.config, max_cache_len=max_len), "5.x (config, max_cache_len)"
    except TypeError as e:
        errs.append(str(e))
    try:  # 4.x
        return StaticCache(config=model.config, max_batch_size=batch, max_cache_len=max_len,
                           device=device, dtype=torch.bfloat16), "4.x (max_batch_size, device, dtype)"
    except TypeError as e:
        errs.append(str(e))
    raise HFAPIError("no StaticCache constructor matched: %s" % " | ".join(errs))


def cache_lengths(cache):
    """The write positions a 5.x static cache keeps on the device (one per
    layer), or None when the cache keeps none (4.x: cache_position)."""
    layers = getattr(cache, "layers", None)
    if not layers:
        return None
    out = []
    for ly in layers:
        c = getattr(ly, "cumulative_length", None)
        if not isinstance(c, torch.Tensor):
            return None
        out.append(int(c))
    return out


def reset_cache(cache):
    _need(hasattr(cache, "reset"), "StaticCache has no reset()")
    cache.reset()


class Stepper:
    """One decode step of the model with a static cache: ids (b, 1) int64
    (or int32 where the embedding gathers the same rows from them),
    positions (>= b,) int64 on the device; returns the last position's
    logits (b, vocab). The same Python code serves every path, so every path
    launches the same kernels."""

    def __init__(self, model, info):
        self.model = model
        self.cache_position = info["forward_has_cache_position"]
        self.keep = info["forward_has_logits_to_keep"]

    @torch.no_grad()
    def __call__(self, cache, ids, pos):
        b = ids.shape[0]
        kw = dict(input_ids=ids, position_ids=pos[:b].view(b, 1), past_key_values=cache,
                  use_cache=True)
        if self.cache_position:
            kw["cache_position"] = pos[:1]
        if self.keep:
            kw["logits_to_keep"] = 1
        out = self.model(**kw)
        logits = getattr(out, "logits", None)
        _need(logits is not None and logits.dim() == 3 and logits.shape[0] == b,
              "the forward returned no (b, seq, vocab) logits: %r" % (type(out),))
        return logits[:, -1, :]

    @torch.no_grad()
    def prefill(self, cache, prompt):
        """The prompt through the model, eagerly: (last logits (b, vocab))."""
        b, n = prompt.shape
        pos = torch.arange(n, device=prompt.device, dtype=torch.long)
        kw = dict(input_ids=prompt, position_ids=pos.view(1, n).expand(b, n),
                  past_key_values=cache, use_cache=True)
        if self.cache_position:
            kw["cache_position"] = pos
        if self.keep:
            kw["logits_to_keep"] = 1
        out = self.model(**kw)
        return out.logits[:, -1, :]


# ---- bf16 margins ------------------------------------------------------------------------

def top2_margins(logits):
    """(margin top1 - top2, bf16 spacing at top1) per row, as float32 (b,)."""
    top = logits.float().topk(2, dim=-1).values
    t1 = top[:, 0]
    margin = t1 - top[:, 1]
    e = torch.floor(torch.log2(t1.abs().clamp_min(1e-30)))
    ulp = torch.pow(2.0, e - 7)  # bf16: 8 significant bits
    return margin, ulp


def agreement(ref_tokens, ref_margins, other_tokens, margin_ulps):
    """Per row: the first step where `other` differs from the reference and
    the first step where the reference's top-2 margin is <= margin_ulps bf16
    spacings (a tie a different kernel may break either way). A row passes
    when it agrees up to its first ambiguous step (or throughout)."""
    steps, b = ref_tokens.shape
    rows = []
    for r in range(b):
        mism = next((k for k in range(steps) if int(ref_tokens[k, r]) != int(other_tokens[k, r])),
                    None)
        amb = next((k for k in range(steps)
                    if ref_margins[k][0][r] <= margin_ulps * ref_margins[k][1][r]), None)
        ok = mism is None or (amb is not None and mism >= amb)
        rows.append({"row": r, "first_mismatch": mism, "first_ambiguous": amb,
                     "agree_until": mism if mism is not None else steps, "ok": ok})
    return rows


# ---- timing helpers ----------------------------------------------------------------------

def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


class Timer:
    """GPU time (CUDA events on `stream`) and wall time of a block."""

    def __init__(self, stream):
        self.stream = stream

    def __enter__(self):
        self.e0 = torch.cuda.Event(enable_timing=True)
        self.e1 = torch.cuda.Event(enable_timing=True)
        self.t0 = time.perf_counter()
        self.e0.record(self.stream)
        return self

    def __exit__(self, *exc):
        self.e1.record(self.stream)
        self.e1.synchronize()
        self.wall_ms = (time.perf_counter() - self.t0) * 1e3
        self.gpu_ms = self.e0.elapsed_time(self.e1)
        return False
