"""Smoke test of examples/python/hf_decode.py: a tiny Qwen3 config,
a few greedy steps per batch size, every check of the script (mdr's logits
bit-identical to the eager step loop, MDR_DISABLE_GRAPHS=1 identical, memory
stable, generate agreeing up to the first ambiguous step). Skipped, with the
reason, without torch, transformers, a CUDA device or a CUDA libmdr (CI).

    MDR_LIBRARY=$PWD/build/libmdr.so PYTHONPATH=python \\
        python3 -m pytest -q python/tests/test_hf_decode_smoke.py
"""
import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "examples", "python", "hf_decode.py")

torch = pytest.importorskip("torch", reason="torch is not installed")
pytest.importorskip("transformers", reason="transformers is not installed")
pytest.importorskip("numpy", reason="numpy is not installed")
if not torch.cuda.is_available():
    pytest.skip("torch sees no CUDA device", allow_module_level=True)
try:
    from transformers import Qwen3Config, Qwen3ForCausalLM  # noqa: F401
except ImportError as e:
    pytest.skip("this transformers has no Qwen3 (%s)" % e, allow_module_level=True)

import mdr  # noqa: E402


def _cuda_libmdr():
    try:
        b = mdr.Backend.cuda(int(os.environ.get("MDR_TEST_DEVICE", "0")))
    except mdr.Error as e:
        return str(e)
    b.close()
    return None


def _run(tmp_path, args):
    """The script at the tiny config with `args`: (its JSON, its log); a
    failed run fails the test with the log."""
    why = _cuda_libmdr()
    if why:
        pytest.skip("libmdr has no CUDA backend here: %s" % why)
    out = tmp_path / "hf.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(REPO, "python")] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    if "MDR_LIBRARY" not in env:
        env["MDR_LIBRARY"] = mdr.library_path
    cmd = [sys.executable, SCRIPT, "--tiny", "--steps", "4", "--reps", "1", "--no-compile",
           "--device", os.environ.get("MDR_TEST_DEVICE", "0"), "--json", str(out)] + args
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    log = p.stdout + p.stderr
    assert p.returncode == 0, log
    return json.loads(out.read_text()), log


def test_hf_decode_tiny(tmp_path):
    res, log = _run(tmp_path, ["--batch", "1,4"])
    assert res["all_checks_pass"], log
    assert [b["batch"] for b in res["batches"]] == [1, 4]
    for b in res["batches"]:
        for k in ("d_logits_bit_identical", "d_tokens_identical", "d_disable_graphs_identical",
                  "d_memory_stable", "d_no_eager_steps", "generate_agrees_until_ambiguous"):
            assert b["checks"][k], (b["batch"], k, log)
        for path in ("a", "ref", "b", "d"):
            assert b["paths"][path]["gpu_ms"] > 0, (b["batch"], path)
        assert "unavailable" in b["paths"]["c"]
        # host time paired step by step against (b), for every graph path
        # driven beside it; the CPU target reads the paired figure
        assert "cpu_us_minus_b" not in b["paths"]["b"]
        for path in ("ref", "d"):
            q = b["paths"][path]
            assert q["cpu_us_minus_b_p10"] <= q["cpu_us_minus_b"] <= q["cpu_us_minus_b_p90"], (path, q)
        assert b["targets"]["d_cpu_le_b_plus_3us"] == (b["paths"]["d"]["cpu_us_minus_b"] <= 3.0)
    assert "CPU - (b) paired" in log, log


def test_hf_decode_tiny_placement_and_profile(tmp_path):
    """The diagnostics: (b) and (d) each captured twice, (d) first, mdr's
    empty-body cache, and the profiler's kernels per step beside (b)."""
    res, log = _run(tmp_path, ["--batch", "2", "--no-generate", "--no-ref-timing",
                               "--time", "b,b2,d,d2,d0", "--profile", "2", "--first", "d"])
    b = res["batches"][0]
    assert b["capture_order"] == ["d", "b"], (b["capture_order"], log)
    for k in ("b2_logits_bit_identical", "d2_logits_bit_identical", "d2_tokens_identical"):
        assert b["checks"][k], (k, log)
    for path in ("b", "b2", "d", "d2", "d0"):
        assert b["paths"][path]["gpu_ms"] > 0, (path, log)
    assert set(b["compare"]["placement_us"]) == {"b2_minus_b", "d2_minus_d", "d_pair_minus_b_pair"}
    prof = b["profile"]
    assert prof["d"]["events_per_step"] == prof["d2"]["events_per_step"] > prof["d0"]["events_per_step"]
    assert any("zero_static" in n or "zero_" in n for n in prof["d0"]["by_name"]), prof["d0"]
    assert "vs_b" in prof["d"] and "vs_b" not in prof["b"]


def test_hf_decode_tiny_b2_captured_first(tmp_path):
    """--first b2: torch's second capture of (b) taken before (b), so that
    whether the fast capture is the process's first torch capture can be
    read; it is checked against the reference as when taken later."""
    res, log = _run(tmp_path, ["--batch", "2", "--no-generate", "--no-ref-timing", "--time", "b,b2,d",
                               "--first", "b2"])
    b = res["batches"][0]
    assert b["capture_order"] == ["b2", "b", "d"], (b["capture_order"], log)
    assert b["checks"]["b2_logits_bit_identical"], log
    for path in ("b", "b2", "d"):
        assert b["paths"][path]["gpu_ms"] > 0, (path, log)


def test_hf_decode_tiny_share_pool(tmp_path):
    """--share-pool: (b) and (d) capture on one stream into one graph pool
    (mdr.torch.GraphCache's pool=); (d), captured second, takes no memory
    the pool did not already hold for (b), and every check still passes."""
    res, log = _run(tmp_path, ["--batch", "2", "--no-generate", "--no-ref-timing", "--time", "b,b2,d",
                               "--share-pool"])
    assert res["all_checks_pass"], log
    b = res["batches"][0]
    assert b["capture_order"] == ["b", "d"], (b["capture_order"], log)
    assert "one graph pool" in b["pool"], b["pool"]
    pb = b["shared_pool_bytes"]
    assert pb["after_b"] > 0 and pb["after_d"] == pb["after_b"], (pb, log)
    for k in ("b_logits_bit_identical", "d_logits_bit_identical", "d_tokens_identical",
              "d_disable_graphs_identical", "b2_logits_bit_identical"):
        assert b["checks"][k], (k, log)


def test_hf_decode_first_b2_needs_b2_timed():
    """--first b2 without b2 in --time is refused before any model work."""
    r = subprocess.run([sys.executable, SCRIPT, "--first", "b2", "--time", "b,d"], capture_output=True, text=True)
    assert r.returncode == 2 and "name b2 in --time" in r.stderr, (r.returncode, r.stderr)
