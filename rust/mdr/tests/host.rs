//! Host-backend cases (run in CI): the seed's accessors against C, zeroing
//! coverage against the C arena, bodies in every mode (a panicking one
//! included), drop order, bad inputs, a host communicator.
mod common;
use common::*;
use mdr::{sys, Arena, Backend, Buffer, Mode, Options, Status, StreamRef};
use std::cell::RefCell;
use std::rc::Rc;

/// The issue's lists, by method: every seed accessor exists under its name.
macro_rules! seed_ptrs {
    ($a:expr; $($n:ident),*) => { vec![$((stringify!($n), $a.$n()),)*] };
}
macro_rules! seed_bytes {
    ($a:expr; $($n:ident),*) => { vec![$((stringify!($n), $a.$n()),)*] };
}

fn seed_pointer_accessors(a: &Arena<'_>) -> Vec<(&'static str, mdr::DevicePtr)> {
    seed_ptrs!(a; hidden_states, residual, norm_output, qkv_output, attn_output, gate_logits, gate_logits_f32,
        moe_router_in_f32, moe_output, logits, ssm_qkvz, ssm_ba, ssm_deinterleaved, ssm_gates, ssm_conv_out_f32,
        scratch, ssd_scratch, token_ids, expert_gate_out, expert_up_out, expert_down_out, gdn_fla_scratch,
        ffn_act_q8, ffn_act_a, ffn_act_scale, ffn_gate_up_fused, ffn_act_scale_kmajor, fp8_act, fp8_act_scale,
        fp8_act_scale_kmajor, q2_dequant_scratch, q2_act_q8, splitk_workspace, o_latent, norm_unit_w, hc_streams,
        hc_lowrank_scratch, qsa_select_scratch, hc_post, hc_comb, lora_xa, lora_delta, lora_hact, lora_seq_slot)
}

fn seed_bytes_accessors(a: &Arena<'_>) -> Vec<(&'static str, usize)> {
    seed_bytes!(a; norm_output_bytes, qkv_output_bytes, ssm_qkvz_bytes, ssm_deinterleaved_bytes, scratch_bytes,
        expert_gate_out_bytes, moe_output_bytes, expert_down_out_bytes, gate_logits_bytes, logits_bytes,
        attn_output_bytes, ffn_gate_up_fused_bytes, ffn_act_a_bytes, ffn_act_scale_bytes, ffn_act_scale_kmajor_bytes,
        fp8_act_bytes, fp8_act_scale_bytes, fp8_act_scale_kmajor_bytes, q2_dequant_scratch_bytes, q2_act_q8_bytes,
        lora_xa_bytes, lora_delta_bytes, lora_hact_bytes)
}

#[test]
fn every_seed_accessor_equals_the_c_accessor() {
    let b = Backend::host().unwrap();
    for preset in mdr::preset_names() {
        let a = Arena::from_preset(&b, preset, limits(48)).unwrap();
        let raw = a.as_raw();
        let ptrs = seed_pointer_accessors(&a);
        assert_eq!(ptrs.len(), 44);
        for (name, p) in ptrs {
            let buf = Buffer::from_name(name).unwrap();
            // SAFETY: live arena.
            assert_eq!(p.0, unsafe { sys::mdr_arena_ptr(raw, buf.raw()) }, "{preset}: {name}");
        }
        let bytes = seed_bytes_accessors(&a);
        assert_eq!(bytes.len(), 23);
        for (name, n) in bytes {
            let buf = Buffer::from_name(name.strip_suffix("_bytes").unwrap()).unwrap();
            assert_eq!(n, unsafe { sys::mdr_arena_bytes(raw, buf.raw()) }, "{preset}: {name}");
        }
        // The header's own inline accessors, as translated in mdr-sys.
        unsafe {
            assert_eq!(a.hidden_states().0, sys::mdr_arena_hidden_states(raw));
            assert_eq!(a.lora_seq_slot().0, sys::mdr_arena_lora_seq_slot(raw));
            assert_eq!(a.logits_bytes(), sys::mdr_arena_logits_bytes(raw));
        }
        assert_eq!(a.max_batch_tokens(), 48);
        assert_eq!(a.sizes().max_batch_tokens(), 48);
        for buf in Buffer::ALL {
            assert_eq!(a.sizes().bytes(buf), a.bytes(buf));
        }
    }
}

#[test]
fn buffer_names_are_the_c_names() {
    assert_eq!(Buffer::ALL.len(), sys::MDR_BUF_COUNT as usize);
    for (i, b) in Buffer::ALL.iter().enumerate() {
        assert_eq!(b.raw(), i as i32);
        // SAFETY: static string.
        let c = unsafe { std::ffi::CStr::from_ptr(sys::mdr_buffer_name(b.raw())) };
        assert_eq!(c.to_str().unwrap(), b.name());
        assert_eq!(Buffer::from_name(b.name()), Some(*b));
    }
}

/// A C program built from the headers makes the same arena, prints every
/// named accessor (the header's static inline ones) relative to
/// hidden_states, and the zeroing coverage of each helper; the Rust side
/// must print the same text.
fn c_twin_text(m: usize, counts: &[usize]) -> Option<String> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    if !std::path::Path::new(env!("MDR_INCLUDE_DIR")).join("mdr/mdr.h").exists() {
        println!("skipped the C twin: the headers at {} are not on this machine", env!("MDR_INCLUDE_DIR"));
        return None;
    }
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("c_twin");
    std::fs::create_dir_all(&dir).unwrap();
    let mut acc = String::new();
    for b in Buffer::ALL {
        let n = b.name();
        acc += &format!("  printf(\"{n} %lld %zu\\n\", mdr_arena_{n}(a) ? (long long)(mdr_arena_{n}(a) - base) : -1LL, mdr_arena_{n}_bytes(a));\n");
    }
    let counts_c: Vec<String> = counts.iter().map(|c| c.to_string()).collect();
    let prog = format!(r#"#include <mdr/mdr.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define CK(x) do {{ if ((x) != MDR_OK) {{ fprintf(stderr, "%s failed\n", #x); return 1; }} }} while (0)
static void cover(mdr_backend *b, mdr_arena *a) {{
  for (int i = 0; i < MDR_BUF_COUNT; i++) {{
    size_t n = mdr_arena_bytes(a, (mdr_buffer)i);
    if (!n) continue;
    unsigned char *v = malloc(n);
    mdr_backend_copy_d2h(b, v, mdr_arena_ptr(a, (mdr_buffer)i), n);
    int first = 1;
    for (size_t j = 0; j < n;) {{
      if (v[j] != 0xAB) {{ size_t s = j; while (j < n && v[j] != 0xAB) j++;
        if (first) printf("%s [", mdr_buffer_name((mdr_buffer)i));
        printf(first ? "(%zu, %zu)" : ", (%zu, %zu)", s, j);
        first = 0; }} else j++;
    }}
    if (!first) printf("]\n");
    free(v);
  }}
}}
static void poison(mdr_backend *b, mdr_arena *a) {{
  for (int i = 0; i < MDR_BUF_COUNT; i++)
    if (mdr_arena_bytes(a, (mdr_buffer)i)) mdr_backend_fill(b, mdr_arena_ptr(a, (mdr_buffer)i), 0xAB, mdr_arena_bytes(a, (mdr_buffer)i));
}}
int main(void) {{
  mdr_model_config cfg; mdr_limits lim = {{{m}, 256, 16, 4}}; mdr_sizes sz;
  mdr_backend *b; mdr_arena *a; mdr_stream s;
  CK(mdr_model_preset("{PRESET}", &cfg)); CK(mdr_sizes_from_config(&cfg, &lim, &sz));
  CK(mdr_backend_host_create(&b)); CK(mdr_arena_create(b, &sz, &a)); CK(mdr_backend_stream_create(b, &s));
  mdr_dptr base = mdr_arena_hidden_states(a);
{acc}
  printf("== zero_all 0\n"); poison(b, a); CK(mdr_arena_zero_all(a, s)); CK(mdr_backend_synchronize(b, s)); cover(b, a);
  printf("== zero_prefill_essentials 0\n"); poison(b, a); CK(mdr_arena_zero_prefill_essentials(a, s)); CK(mdr_backend_synchronize(b, s)); cover(b, a);
  size_t counts[] = {{{counts}}};
  for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {{
    printf("== zero_all_rows %zu\n", counts[k]); poison(b, a); CK(mdr_arena_zero_all_rows(a, s, counts[k])); CK(mdr_backend_synchronize(b, s)); cover(b, a);
  }}
  mdr_backend_stream_destroy(b, s); mdr_arena_destroy(a); mdr_backend_destroy(b);
  return 0;
}}
"#, counts = counts_c.join(", "));
    let src = dir.join("twin.c");
    let exe = dir.join("twin");
    std::fs::write(&src, prog).unwrap();
    let out = match std::process::Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Werror", "-o"]).arg(&exe).arg(&src)
        .arg(format!("-I{}", env!("MDR_INCLUDE_DIR"))).arg(format!("-L{}", env!("MDR_LIB_DIR")))
        .arg(format!("-Wl,-rpath,{}", env!("MDR_LIB_DIR"))).arg("-lmdr")
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            println!("skipped the C twin: no C compiler `{cc}` ({e})");
            return None;
        }
    };
    assert!(out.status.success(), "twin.c: {}", String::from_utf8_lossy(&out.stderr));
    let run = std::process::Command::new(&exe).output().unwrap();
    assert!(run.status.success(), "twin: {}", String::from_utf8_lossy(&run.stderr));
    Some(String::from_utf8(run.stdout).unwrap())
}

#[test]
fn accessors_and_zeroing_coverage_equal_the_c_arena() {
    let m = 20;
    let counts = [0usize, 1, 2, 7, 15, 16, 19, 20, 21, 64];
    let b = Backend::host().unwrap();
    let a = Arena::from_preset(&b, PRESET, limits(m)).unwrap();
    let s = b.stream().unwrap();
    let base = a.hidden_states().0 as i64;
    let mut text = String::new();
    for buf in Buffer::ALL {
        let p = a.ptr(buf);
        text += &format!("{} {} {}\n", buf.name(), if p.is_null() { -1 } else { p.0 as i64 - base }, a.bytes(buf));
    }
    text += "== zero_all 0\n";
    text += &coverage(&a, &s, "zero_all", 0);
    text += "== zero_prefill_essentials 0\n";
    text += &coverage(&a, &s, "zero_prefill_essentials", 0);
    for &t in &counts {
        text += &format!("== zero_all_rows {t}\n");
        let got = coverage(&a, &s, "zero_all_rows", t);
        // Exactly the plan: what it cleared, and nothing else.
        assert_eq!(got, plan_text(&a, t), "zero_all_rows({t}) against mdr_arena_zero_plan");
        text += &got;
    }
    let zero_all_lines = text.split("== zero_all 0\n").nth(1).unwrap().split("==").next().unwrap().lines().count();
    assert_eq!(zero_all_lines, 18, "zero_all clears 18 buffers");
    match c_twin_text(m, &counts) {
        Some(c) => {
            for (i, (x, y)) in text.lines().zip(c.lines()).enumerate() {
                assert_eq!(x, y, "line {i}: Rust vs C");
            }
            assert_eq!(text.lines().count(), c.lines().count());
        }
        None => {}
    }
}

#[test]
fn zeroing_helpers_enqueue_on_the_given_stream_only_and_refuse_another_backends() {
    let b = Backend::host().unwrap();
    let other = Backend::host().unwrap();
    let a = Arena::from_preset(&b, PRESET, limits(8)).unwrap();
    let s2 = other.stream().unwrap();
    for r in [a.zero_all(&s2), a.zero_all_rows(&s2, 1), a.zero_prefill_essentials(&s2)] {
        assert_eq!(r.unwrap_err().status(), Status::InvalidArgument);
    }
}

fn body_mode(mode: Mode, dynamic_body: bool) {
    let b = Backend::host().unwrap();
    let m = 16;
    let a = Arena::from_preset(&b, PRESET, limits(m)).unwrap();
    let s = b.stream().unwrap();
    let row = a.hidden_states_bytes() / m;
    let calls = RefCell::new(Vec::new());
    let mut opts = Options::default().mode(mode);
    if mode == Mode::Dynamic {
        opts = opts.zero(mdr::ZeroStrategy::Fused);
    }
    let opts = if dynamic_body {
        opts.body_dynamic(|st: &StreamRef, count: mdr::DevicePtr, max: usize| {
            calls.borrow_mut().push(max);
            assert!(!count.is_null());
            a.memset_async(st, Buffer::HiddenStates, 0, 0x01, max * row)
        })
    } else {
        opts.body(|st: &StreamRef, t: usize| {
            calls.borrow_mut().push(t);
            a.memset_async(st, Buffer::HiddenStates, 0, 0x01, t * row)
        })
    };
    let mut cache = mdr::GraphCache::new(&a, &s, opts).unwrap();
    for (k, &t) in [1usize, 4, 1, 4, 7, 16, 3].iter().enumerate() {
        let ids: Vec<u32> = (0..t as u32).map(|i| 1000 * (k as u32 + 1) + i).collect();
        a.fill(Buffer::HiddenStates, 0).unwrap();
        cache.step(&ids).unwrap();
        s.synchronize().unwrap();
        let mut got = vec![0u8; 4 * t];
        a.read(Buffer::TokenIds, 0, &mut got).unwrap();
        let got: Vec<u32> = got.chunks(4).map(|c| u32::from_ne_bytes(c.try_into().unwrap())).collect();
        assert_eq!(got, ids, "{mode:?} step {k}");
        let g = cache.graph_tokens(t).unwrap();
        let mut h = vec![0u8; g * row];
        a.read(Buffer::HiddenStates, 0, &mut h).unwrap();
        assert!(h.iter().all(|&x| x == 1), "{mode:?}: the body's rows at step {k}");
        let mut cnt = [0u8; 4];
        // SAFETY: count_ptr is a uint32 of the cache's device block.
        unsafe { b.copy_d2h(&mut cnt, cache.count_ptr()).unwrap() };
        assert_eq!(u32::from_ne_bytes(cnt) as usize, t);
    }
    let st = cache.stats();
    assert_eq!(st.steps, 7);
    assert!(st.captures >= 1 && st.hits >= 1, "{mode:?}: {st:?}");
    drop(cache);
    assert!(!calls.borrow().is_empty());
}

#[test]
fn bodies_in_every_mode() {
    body_mode(Mode::Exact, false);
    body_mode(Mode::Ladder, false);
    body_mode(Mode::Exact, true);
    body_mode(Mode::Ladder, true);
    body_mode(Mode::Dynamic, true);
}

#[test]
fn graphs_equal_eager_on_the_host() {
    for mode in [Mode::Exact, Mode::Ladder, Mode::Dynamic] {
        let b = Backend::host().unwrap();
        let zero = if mode == Mode::Dynamic { Some(mdr::ZeroStrategy::Fused) } else { None };
        let st = graph_vs_eager(&b, mode, 60, 7, zero);
        assert_eq!(st.steps, 60);
    }
}

#[test]
fn a_panicking_body_is_caught_the_step_fails_with_its_message_and_the_cache_stays_usable() {
    let b = Backend::host().unwrap();
    let a = Arena::from_preset(&b, PRESET, limits(8)).unwrap();
    let s = b.stream().unwrap();
    let calls = RefCell::new(0usize);
    let opts = Options::default().body(|st: &StreamRef, t: usize| {
        *calls.borrow_mut() += 1;
        if t == 3 {
            panic!("boom at {t} tokens");
        }
        a.memset_async(st, Buffer::Residual, 0, 2, 16)
    });
    let mut cache = mdr::GraphCache::new(&a, &s, opts).unwrap();
    cache.step(&[1]).unwrap();
    let e = cache.step(&[1, 2, 3]).unwrap_err();
    assert!(e.panicked(), "{e}");
    assert!(e.message().contains("boom at 3 tokens"), "{e}");
    assert!(e.to_string().contains("boom at 3 tokens"));
    // Usable afterwards: other counts replay and capture; the count that
    // panicked fails again, with the message again.
    cache.step(&[1]).unwrap();
    cache.step(&[1, 2]).unwrap();
    let e2 = cache.step(&[4, 5, 6]).unwrap_err();
    assert!(e2.panicked() && e2.message().contains("boom"));
    cache.step(&[9, 9, 9, 9]).unwrap();
    cache.prepare(&[5, 6]).unwrap();
    let e3 = cache.prepare(&[3]).unwrap_err();
    assert!(e3.panicked(), "{e3}");
    s.synchronize().unwrap();
    let st = cache.stats();
    assert_eq!(st.steps, 4, "the four steps that succeeded: {st:?}");
    assert!(st.uncapturable >= 1);
}

#[test]
fn a_failing_body_returns_its_error() {
    let b = Backend::host().unwrap();
    let a = Arena::from_preset(&b, PRESET, limits(8)).unwrap();
    let s = b.stream().unwrap();
    let opts = Options::default().body(|_: &StreamRef, t: usize| {
        if t == 2 {
            Err(mdr::Error::new(Status::OutOfRange, "my body refuses two"))
        } else {
            Ok(())
        }
    });
    let mut cache = mdr::GraphCache::new(&a, &s, opts).unwrap();
    let e = cache.step(&[1, 2]).unwrap_err();
    assert!(!e.panicked());
    assert!(e.message().contains("my body refuses two"), "{e}");
    cache.step(&[1]).unwrap();
}

/// Records its drop in a shared log.
struct Guard(&'static str, Rc<RefCell<Vec<&'static str>>>);
impl Drop for Guard {
    fn drop(&mut self) {
        self.1.borrow_mut().push(self.0);
    }
}

#[test]
fn drop_order() {
    let log = Rc::new(RefCell::new(Vec::new()));
    for round in 0..20 {
        let b = Backend::host().unwrap();
        {
            let a = Arena::from_preset(&b, PRESET, limits(8)).unwrap();
            let s = b.stream().unwrap();
            {
                let g = Guard("body", log.clone());
                let opts = Options::default().body(move |_: &StreamRef, _t: usize| {
                    let _ = &g;
                    Ok(())
                });
                let mut c = mdr::GraphCache::new(&a, &s, opts).unwrap();
                c.step(&[1, 2]).unwrap();
                // A second cache on the same arena and stream (ordered steps).
                let mut c2 = mdr::GraphCache::new(&a, &s, Options::default().mode(Mode::Ladder)).unwrap();
                c2.step(&[3]).unwrap();
                if round % 2 == 0 {
                    drop(c);
                    log.borrow_mut().push("cache");
                    drop(c2);
                } else {
                    drop(c2);
                    drop(c);
                    log.borrow_mut().push("cache");
                }
            }
            // Arena and stream outlive the cache; either may go first.
            let _buf = b.alloc(64).unwrap();
            if round % 3 == 0 {
                drop(s);
                drop(a);
            } else {
                drop(a);
                drop(s);
            }
        }
        drop(b);
    }
    let l = log.borrow();
    assert_eq!(l.len(), 40);
    for pair in l.chunks(2) {
        assert_eq!(pair, ["body", "cache"], "the body is dropped with its cache");
    }
}

#[test]
fn a_failed_create_drops_the_body_and_leaks_nothing() {
    let log = Rc::new(RefCell::new(Vec::new()));
    let b = Backend::host().unwrap();
    let a = Arena::from_preset(&b, PRESET, limits(8)).unwrap();
    let s = b.stream().unwrap();
    let g = Guard("body", log.clone());
    let opts = Options::default().mode(Mode::Dynamic).body(move |_: &StreamRef, _t: usize| {
        let _ = &g;
        Ok(())
    });
    let e = mdr::GraphCache::new(&a, &s, opts).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert_eq!(*log.borrow(), ["body"]);
}

#[test]
fn every_bad_input_returns_the_right_error() {
    use mdr::{Limits, Sizes, SizesOptions, ZeroStrategy};
    // Sizing.
    let e = mdr::model_preset("no-such-model").unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(e.message().contains("no-such-model"));
    assert_eq!(mdr::model_preset("a\0b").unwrap_err().status(), Status::InvalidArgument);
    assert_eq!(Sizes::from_preset(PRESET, &limits(0)).unwrap_err().status(), Status::OutOfRange);
    let cfg = mdr::model_preset(PRESET).unwrap();
    let o = SizesOptions { glm_trim: false, splitk_sm_count: 0 };
    assert_eq!(Sizes::from_config_with(&cfg, &limits(8), &o).unwrap_err().status(), Status::InvalidArgument);
    let huge = Limits { max_batch_tokens: usize::MAX / 2, ..limits(8) };
    assert_eq!(Sizes::from_preset(PRESET, &huge).unwrap_err().status(), Status::Overflow);
    // Backend.
    assert_eq!(Backend::cuda(-1).unwrap_err().status(), Status::InvalidArgument);
    let b = Backend::host().unwrap();
    assert_eq!(b.alloc(0).unwrap_err().status(), Status::InvalidArgument);
    // Arena.
    let mut bad = Sizes::from_preset(PRESET, &limits(8)).unwrap();
    bad.0.logits_rows = 0;
    let e = Arena::new(&b, &bad).unwrap_err();
    assert_eq!(e.status(), Status::OutOfRange);
    assert!(!e.message().is_empty(), "the backend's text");
    let mut bad = Sizes::from_preset(PRESET, &limits(8)).unwrap();
    bad.0.max_batch_tokens = 0;
    assert_eq!(Arena::new(&b, &bad).unwrap_err().status(), Status::InvalidArgument);
    let mut a = Arena::from_preset(&b, PRESET, limits(8)).unwrap();
    let mut v = vec![0u8; a.logits_bytes() + 1];
    assert_eq!(a.read(Buffer::Logits, 0, &mut v).unwrap_err().status(), Status::OutOfRange);
    assert_eq!(a.write(Buffer::Logits, usize::MAX, &[1]).unwrap_err().status(), Status::OutOfRange);
    let s = b.stream().unwrap();
    assert_eq!(a.memset_async(&s, Buffer::Scratch, 1, 0, a.scratch_bytes()).unwrap_err().status(), Status::OutOfRange);
    match a.set_zero_strategy(ZeroStrategy::Fused) {
        Ok(()) => assert_eq!(a.zero_strategy(), ZeroStrategy::Fused),
        Err(e) => assert_eq!(e.status(), Status::Unsupported),
    }
    a.set_zero_strategy(ZeroStrategy::Memset).unwrap();
    assert_eq!(a.zero_strategy(), ZeroStrategy::Memset);
    // All-reduce on an arena without a communicator.
    let d = mdr::AllReduce::new(Buffer::HiddenStates, mdr::DType::Bf16, 1);
    assert_eq!(a.all_reduce(&d, &s).unwrap_err().status(), Status::InvalidArgument);
    assert_eq!(a.all_reduce_choice(&d), None);
    // Graph caches.
    macro_rules! g {
        ($o:expr) => {
            mdr::GraphCache::new(&a, &s, $o).map(|_| ()).unwrap_err().status()
        };
    }
    assert_eq!(g!(Options::default().mode(Mode::Dynamic)), Status::InvalidArgument, "DYNAMIC without FUSED");
    assert_eq!(g!(Options::default().mode(Mode::Dynamic).zero(ZeroStrategy::Fused).body(|_: &StreamRef, _t: usize| Ok(()))),
               Status::InvalidArgument, "a plain body in DYNAMIC mode");
    assert_eq!(g!(Options::default().mode(Mode::Ladder).ladder(vec![4, 2])), Status::InvalidArgument);
    assert_eq!(g!(Options::default().mode(Mode::Ladder).ladder(vec![0, 2])), Status::InvalidArgument);
    let other = Backend::host().unwrap();
    let s_other = other.stream().unwrap();
    assert_eq!(mdr::GraphCache::new(&a, &s_other, Options::default()).unwrap_err().status(), Status::InvalidArgument);
    let ids = b.alloc(8).unwrap();
    let mut c = mdr::GraphCache::new(&a, &s, Options::default()).unwrap();
    let e = c.step(&[]).unwrap_err();
    assert_eq!(e.status(), Status::OutOfRange);
    assert!(!e.message().is_empty());
    let e = c.step(&[0; 9]).unwrap_err();
    assert_eq!(e.status(), Status::OutOfRange);
    assert!(e.message().contains('9'), "the text names the count: {e}");
    assert_eq!(c.prepare(&[1, 99]).unwrap_err().status(), Status::OutOfRange);
    assert_eq!(c.graph_tokens(0).unwrap_err().status(), Status::OutOfRange);
    assert_eq!(c.graph_info(9).unwrap_err().status(), Status::OutOfRange);
    assert_eq!(c.step_from_arena(0).unwrap_err().status(), Status::OutOfRange);
    assert_eq!(c.step_device(&ids, 3).unwrap_err().status(), Status::OutOfRange);
    c.step(&[1, 2]).unwrap();
    assert_eq!(c.stats().steps, 1, "refused steps change nothing");
}

#[test]
fn device_ids_and_ids_already_in_the_arena() {
    let b = Backend::host().unwrap();
    let mut ids = b.alloc(64).unwrap();
    let a = Arena::from_preset(&b, PRESET, limits(8)).unwrap();
    let s = b.stream().unwrap();
    let mut c = mdr::GraphCache::new(&a, &s, Options::default()).unwrap();
    let want: Vec<u32> = vec![11, 22, 33];
    ids.write(0, &want.iter().flat_map(|x| x.to_ne_bytes()).collect::<Vec<u8>>()).unwrap();
    c.step_device(&ids, 3).unwrap();
    c.step_from_arena(3).unwrap();
    s.synchronize().unwrap();
    let mut got = [0u8; 12];
    a.read(Buffer::TokenIds, 0, &mut got).unwrap();
    assert_eq!(got.chunks(4).map(|x| u32::from_ne_bytes(x.try_into().unwrap())).collect::<Vec<_>>(), want);
    assert_eq!(c.stats().device_steps, 2);
}

#[test]
fn one_arena_many_readers() {
    let b = Backend::host().unwrap();
    let a = Arena::from_preset(&b, PRESET, limits(32)).unwrap();
    let want: Vec<_> = Buffer::ALL.iter().map(|&x| (a.ptr(x), a.bytes(x))).collect();
    let plan = a.zero_plan(5).unwrap();
    std::thread::scope(|sc| {
        for _ in 0..4 {
            sc.spawn(|| {
                let s = b.stream().unwrap();
                for k in 0..500 {
                    let got: Vec<_> = Buffer::ALL.iter().map(|&x| (a.ptr(x), a.bytes(x))).collect();
                    assert_eq!(got, want);
                    assert_eq!(a.zero_plan(5).unwrap(), plan);
                    if k % 50 == 0 {
                        a.zero_all_rows(&s, 3).unwrap();
                    }
                }
            });
        }
    });
}

#[test]
fn a_host_communicator_all_reduces_from_rank_threads() {
    let b0 = Backend::host().unwrap();
    let b1 = Backend::host().unwrap();
    let comms = mdr::Comm::create_host(&[&b0, &b1]).unwrap();
    assert_eq!((comms[0].rank(), comms[1].rank(), comms[0].size(), comms[0].device()), (0, 1, 2, -1));
    let sizes = mdr::Sizes::from_preset(PRESET, &limits(8)).unwrap();
    let arenas = Arena::on_comms(&comms, &sizes).unwrap();
    assert_eq!(arenas[0].window(), mdr::Window::Host);
    std::thread::scope(|sc| {
        for (r, a) in arenas.iter().enumerate() {
            sc.spawn(move || {
                let s = a.backend().stream().unwrap();
                let vals: Vec<u8> = (0..16).flat_map(|i| ((r * 100 + i) as f32).to_ne_bytes()).collect();
                a.write(Buffer::HiddenStates, 0, &vals).unwrap();
                let d = mdr::AllReduce::new(Buffer::HiddenStates, mdr::DType::Fp32, 1);
                assert!(a.all_reduce_choice(&d).is_some());
                a.all_reduce(&d, &s).unwrap();
                s.synchronize().unwrap();
                let mut got = vec![0u8; 64];
                a.read(Buffer::HiddenStates, 0, &mut got).unwrap();
                let got: Vec<f32> = got.chunks(4).map(|c| f32::from_ne_bytes(c.try_into().unwrap())).collect();
                let want: Vec<f32> = (0..16).map(|i| (i + (100 + i)) as f32).collect();
                assert_eq!(got, want, "rank {r}");
            });
        }
    });
    drop(arenas);
    drop(comms);
}

#[test]
fn errors_display_status_and_text() {
    let e = mdr::Error::new(Status::Backend, "cudaMalloc failed");
    assert_eq!(e.to_string(), format!("mdr: {}: cudaMalloc failed", Status::Backend.text()));
    let boxed: Box<dyn std::error::Error> = Box::new(e);
    assert!(boxed.to_string().contains("cudaMalloc"));
    assert_eq!(Status::from_raw(sys::MDR_OK), None);
    assert_eq!(Status::from_raw(sys::MDR_ERR_STATE), Some(Status::State));
    assert_eq!(Status::Capture.raw(), sys::MDR_ERR_CAPTURE);
    assert!(mdr::version_number() >= 100);
}
