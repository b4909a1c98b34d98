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

/// Small host steps of an EXACT cache carry their ids in the fused launch's
/// parameters: `inline_steps` counts them (24 ids fit; 28 do not: the
/// arena's memset zeroing takes the small class only).
#[test]
fn inline_steps_are_exposed_and_counted() {
    let b = Backend::host().unwrap();
    let a = Arena::from_preset(&b, PRESET, limits(32)).unwrap();
    let s = b.stream().unwrap();
    let mut c = mdr::GraphCache::new(&a, &s, Options::default().mode(Mode::Exact)).unwrap();
    for (k, &t) in [1usize, 3, 3, 28, 24].iter().enumerate() {
        let ids: Vec<u32> = (0..t as u32).map(|i| 500 * (k as u32 + 1) + i).collect();
        a.fill(Buffer::TokenIds, 0xFF).unwrap();
        c.step(&ids).unwrap();
        s.synchronize().unwrap();
        let mut got = vec![0u8; a.bytes(Buffer::TokenIds)];
        a.read(Buffer::TokenIds, 0, &mut got).unwrap();
        let head: Vec<u32> = got[..4 * t].chunks(4).map(|x| u32::from_ne_bytes(x.try_into().unwrap())).collect();
        assert_eq!(head, ids, "step {k}");
        assert!(got[4 * t..].iter().all(|&x| x == 0xFF), "step {k}: nothing past its ids");
    }
    let st = c.stats();
    assert_eq!(st.steps, 5);
    assert_eq!(st.inline_steps, 4, "{st:?}");
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
fn a_host_communicator_fuses_the_residual_add_and_rmsnorm() {
    let b0 = Backend::host().unwrap();
    let b1 = Backend::host().unwrap();
    let comms = mdr::Comm::create_host(&[&b0, &b1]).unwrap();
    let sizes = mdr::Sizes::from_preset(PRESET, &limits(8)).unwrap();
    let arenas = Arena::on_comms(&comms, &sizes).unwrap();
    std::thread::scope(|sc| {
        for (r, a) in arenas.iter().enumerate() {
            sc.spawn(move || {
                let s = a.backend().stream().unwrap();
                let row = a.bytes(Buffer::HiddenStates) / a.max_batch_tokens();
                // the sum 0, the residual (and the weight) bf16 1.0, the output poisoned
                a.write(Buffer::HiddenStates, 0, &vec![0u8; row * 2]).unwrap();
                let ones: Vec<u8> = (0..row * 2 / 2).flat_map(|_| 0x3F80u16.to_ne_bytes()).collect();
                a.write(Buffer::Residual, 0, &ones).unwrap();
                let poison: Vec<u8> = (0..row * 2 / 2).flat_map(|_| 0x7DEDu16.to_ne_bytes()).collect();
                a.write(Buffer::NormOutput, 0, &poison).unwrap();
                let mut d = mdr::AllReduce::new(Buffer::HiddenStates, mdr::DType::Bf16, 1);
                d.residual = Some(Buffer::Residual);
                d.norm = Some(mdr::Norm { output: Buffer::NormOutput, weight: a.ptr(Buffer::Residual), eps: 0.0 });
                // where the norm runs: a small one-shot (AUTO) fuses, a two-shot runs it in its own kernel
                assert_eq!(a.all_reduce_norm_fused(&d), Some(true), "rank {r}");
                let mut two = d;
                two.algo = mdr::AllReduceAlgo::TwoShot;
                assert_eq!(a.all_reduce_norm_fused(&two), Some(false), "rank {r}");
                let plain = mdr::AllReduce::new(Buffer::HiddenStates, mdr::DType::Bf16, 1);
                assert_eq!(a.all_reduce_norm_fused(&plain), None, "rank {r}: no norm");
                a.all_reduce(&d, &s).unwrap();
                s.synchronize().unwrap();
                let mut got = vec![0u8; row * 2];
                a.read(Buffer::NormOutput, 0, &mut got).unwrap();
                let got: Vec<u16> = got.chunks(2).map(|c| u16::from_ne_bytes(c.try_into().unwrap())).collect();
                // RMSNorm of ones, weight one, eps 0: exactly 1.0 in row 0; row 1 untouched
                assert!(got[..row / 2].iter().all(|&x| x == 0x3F80), "rank {r}: row 0");
                assert!(got[row / 2..].iter().all(|&x| x == 0x7DED), "rank {r}: row 1");
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

// ---- step inputs, decode_meta, version ------------------------------------

#[test]
fn step_inputs_reach_their_destinations_padded_in_every_mode() {
    use mdr::DynamicImpl::{DeviceCount, NodeUpdate};
    use mdr::ZeroStrategy::{Fused, Memset};
    for (mode, zero, imp, device_ids) in [
        (Mode::Exact, Memset, NodeUpdate, false),
        (Mode::Exact, Fused, NodeUpdate, false),
        (Mode::Exact, Fused, NodeUpdate, true),
        (Mode::Ladder, Memset, NodeUpdate, false),
        (Mode::Ladder, Fused, NodeUpdate, true),
        (Mode::Dynamic, Fused, NodeUpdate, false),
        (Mode::Dynamic, Fused, DeviceCount, false),
        (Mode::Dynamic, Fused, DeviceCount, true),
    ] {
        let b = Backend::host().unwrap();
        // 18 steps: counts 1..4 first, repeats (replays), two turns of the staging ring.
        let st = inputs_graph_vs_eager(&b, mode, Some(zero), imp, 18, 21 + device_ids as u64, device_ids);
        assert_eq!(st.steps, 18);
        assert!(st.hits > 0, "{mode:?}: graphs replayed: {st:?}");
        assert_eq!(st.eager_steps, 0, "{mode:?}: {st:?}");
        assert_eq!(st.device_steps, if device_ids { 18 } else { 0 });
    }
}

/// A cache over `a` with the inputs of the bad-input and layout cases.
fn inputs_cache<'a>(a: &'a Arena<'_>, s: &'a StreamRef, dst: &'a mdr::DeviceBuffer<'_>, src: &'a mdr::DeviceBuffer<'_>, pos_rows: usize) -> mdr::GraphCache<'a> {
    use mdr::{InputShape, StepInput};
    let o = Options::default()
        .max_sequences(4)
        .input(StepInput::new("positions", 4, InputShape::PerToken).max_rows(pos_rows).to_arena(Buffer::Fp8Act, 0))
        .input(StepInput::new("block_table", 4, InputShape::PerSequence).width(3).pad(7).to_arena(Buffer::Fp8Act, 256))
        .input(StepInput::new("slot_mapping", 8, InputShape::PerToken).to_device(dst))
        .input(StepInput::new("top_p", 2, InputShape::Fixed).max_rows(2).to_arena(Buffer::Fp8Act, 512))
        .input(StepInput::new("dev", 4, InputShape::PerToken).to_arena(Buffer::Fp8Act, 1024).from_device(src));
    mdr::GraphCache::new(a, s, o).unwrap()
}

#[test]
fn decode_meta_equals_the_c_query() {
    let b = Backend::host().unwrap();
    let a = Arena::from_preset(&b, PRESET, limits(8)).unwrap();
    let s = b.stream().unwrap();
    let dst = b.alloc(64).unwrap();
    let src = b.alloc(32).unwrap();
    let c = inputs_cache(&a, &s, &dst, &src, 0);
    let meta = c.decode_meta();
    let raw = c.as_raw();
    // SAFETY: live cache; out-params.
    let n = unsafe { sys::mdr_graph_cache_step_input_count(raw) };
    assert_eq!(meta.len(), n);
    assert_eq!(n, 6);
    for (k, m) in meta.iter().enumerate() {
        let mut i: sys::mdr_step_input_info = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { sys::mdr_graph_cache_step_input_info(raw, k, &mut i) }, sys::MDR_OK);
        let name = unsafe { std::ffi::CStr::from_ptr(i.name) }.to_str().unwrap();
        assert_eq!(m.name, name);
        assert_eq!(m.elem_bytes, i.elem_bytes, "{name}");
        assert_eq!(m.shape as i32, [mdr::InputShape::PerToken, mdr::InputShape::PerSequence, mdr::InputShape::Fixed][i.shape as usize] as i32, "{name}");
        assert_eq!((m.width, m.max_rows, m.row_bytes, m.max_bytes), (i.width, i.max_rows, i.row_bytes, i.max_bytes), "{name}");
        assert_eq!((m.dst.0, m.device_src.map_or(0, |p| p.0), m.slot_offset, m.pad), (i.dst, i.device_src, i.slot_offset, i.pad), "{name}");
        assert_eq!(c.step_input_index(name).unwrap(), k);
    }
    // What the declarations said, resolved.
    let names: Vec<&str> = meta.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["token_ids", "positions", "block_table", "slot_mapping", "top_p", "dev"]);
    assert_eq!((meta[0].elem_bytes, meta[0].max_rows, meta[0].dst), (4, 8, a.token_ids()));
    assert_eq!((meta[1].max_rows, meta[1].dst), (8, a.fp8_act()));
    assert_eq!((meta[2].width, meta[2].max_rows, meta[2].row_bytes, meta[2].max_bytes, meta[2].pad), (3, 4, 12, 48, 7));
    assert_eq!((meta[3].dst, meta[3].max_bytes), (dst.ptr(), 64));
    assert_eq!((meta[4].shape, meta[4].max_rows, meta[4].elem_bytes), (mdr::InputShape::Fixed, 2, 2));
    assert_eq!((meta[5].device_src, meta[5].slot_offset), (Some(src.ptr()), 0));
    assert_eq!(c.step_input_index("nope").unwrap_err().status(), Status::OutOfRange);
    // Slot, sequence count and bound against C.
    assert_eq!(c.slot_bytes(), unsafe { sys::mdr_graph_cache_slot_bytes(raw) });
    assert!(c.slot_bytes() >= meta.iter().map(|m| m.slot_offset + if m.device_src.is_some() { 0 } else { m.max_bytes }).max().unwrap());
    assert_eq!(c.sequences_ptr().0, unsafe { sys::mdr_graph_cache_sequences_ptr(raw) });
    assert!(!c.sequences_ptr().is_null());
    assert_eq!(c.max_sequences(), 4);
    for t in 1..=8 {
        let mut n = 0;
        assert_eq!(unsafe { sys::mdr_graph_cache_sequence_bound(raw, t, &mut n) }, sys::MDR_OK);
        assert_eq!(c.sequence_bound(t).unwrap(), n);
        assert_eq!(n, t.min(4));
    }
    assert_eq!(c.sequence_bound(0).unwrap_err().status(), Status::OutOfRange);
    // A cache without inputs: the ids alone.
    let plain = mdr::GraphCache::new(&a, &s, Options::default()).unwrap();
    let m0 = plain.decode_meta();
    assert_eq!(m0.len(), 1);
    assert_eq!(m0[0], meta[0].clone(), "the ids' layout does not depend on the inputs");
    assert_eq!(plain.max_sequences(), 8);
}

#[test]
fn bad_step_inputs_return_the_right_error() {
    use mdr::{InputShape, StepInput, Values};
    let b = Backend::host().unwrap();
    let a = Arena::from_preset(&b, PRESET, limits(8)).unwrap();
    let s = b.stream().unwrap();
    let dst = b.alloc(64).unwrap();
    let src = b.alloc(32).unwrap();
    let small = b.alloc(32).unwrap();
    // Declarations: ours, then C's (each names the input).
    macro_rules! g {
        ($o:expr) => {
            mdr::GraphCache::new(&a, &s, $o).map(|_| ()).unwrap_err()
        };
    }
    let pos = || StepInput::new("positions", 4, InputShape::PerToken).to_arena(Buffer::Fp8Act, 0);
    let e = g!(Options::default().input(StepInput::new("positions", 4, InputShape::PerToken)));
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(e.message().contains("no destination"), "{e}");
    assert_eq!(g!(Options::default().input(StepInput::new("a\0b", 4, InputShape::PerToken).to_arena(Buffer::Fp8Act, 0))).status(), Status::InvalidArgument);
    let e = g!(Options::default().input(pos()).input(pos()));
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(e.message().contains("duplicates"), "{e}");
    assert_eq!(g!(Options::default().input(StepInput::new("token_ids", 4, InputShape::PerToken).to_arena(Buffer::Fp8Act, 0))).status(), Status::InvalidArgument);
    assert_eq!(g!(Options::default().input(StepInput::new("x", 3, InputShape::PerToken).to_arena(Buffer::Fp8Act, 0))).status(), Status::InvalidArgument);
    assert_eq!(g!(Options::default().input(StepInput::new("x", 4, InputShape::Fixed).to_arena(Buffer::Fp8Act, 0))).status(), Status::InvalidArgument, "FIXED needs max_rows");
    assert_eq!(g!(Options::default().input(pos().max_rows(9))).status(), Status::InvalidArgument, "rows over M");
    assert_eq!(g!(Options::default().max_sequences(9)).status(), Status::InvalidArgument);
    let e = g!(Options::default().input(pos().to_arena(Buffer::Fp8Act, a.fp8_act_bytes() - 16)));
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(e.message().contains("offset"), "{e}");
    let mut many = Options::default();
    for k in 0..17 {
        many = many.input(StepInput::new(&format!("in{k}"), 4, InputShape::PerToken).to_arena(Buffer::Fp8Act, 64 * k));
    }
    assert_eq!(g!(many).status(), Status::InvalidArgument, "more than MDR_STEP_INPUTS_MAX");
    // Destinations the step's own launch writes otherwise: from C, naming the overlap.
    let e = g!(Options::default().input(pos().to_arena(Buffer::Scratch, 0)));
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(e.message().contains("overlaps scratch, which the cache's zeroing clears"), "{e}");
    let e = g!(Options::default().input(pos()).input(StepInput::new("slots", 4, InputShape::PerToken).to_arena(Buffer::Fp8Act, 16)));
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(e.message().contains("overlaps inputs[0]'s destination"), "{e}");
    // A device destination or source too small for the largest step (8 rows of 8 bytes).
    let e = g!(Options::default().input(StepInput::new("slots", 8, InputShape::PerToken).to_device(&small)));
    assert_eq!(e.status(), Status::OutOfRange);
    assert!(e.message().contains("slots") && e.message().contains("64"), "{e}");
    let e = g!(Options::default().input(StepInput::new("slots", 8, InputShape::PerToken).to_device(&dst).from_device(&small)));
    assert_eq!(e.status(), Status::OutOfRange);
    assert!(e.message().contains("device source"), "{e}");
    // Memory of another backend.
    let other = Backend::host().unwrap();
    let foreign = other.alloc(64).unwrap();
    assert_eq!(g!(Options::default().input(StepInput::new("slots", 8, InputShape::PerToken).to_device(&foreign))).status(), Status::InvalidArgument);

    // Steps.
    let mut c = inputs_cache(&a, &s, &dst, &src, 4);
    let ids = [1u32, 2, 3];
    let pos3 = [5u32, 6, 7];
    let blk = [1u32; 6]; // 2 sequences of 3
    let slots = [9u64; 3];
    let top = [1u16, 2];
    let good = [Values::of(&pos3), Values::of(&blk), Values::of(&slots), Values::of(&top), Values::DEVICE];
    let check = |r: mdr::Result<()>, want: Status, needle: &str| {
        let e = r.unwrap_err();
        assert_eq!(e.status(), want, "{e}");
        assert!(e.message().contains(needle), "{e} does not name {needle}");
    };
    check(c.step_inputs(&ids, 2, &good[..4]), Status::InvalidArgument, "values of 4 inputs");
    check(c.step_inputs(&[], 1, &good), Status::OutOfRange, "0 tokens");
    check(c.step_inputs(&[0; 9], 1, &good), Status::OutOfRange, "9 tokens");
    check(c.step_inputs(&ids, 0, &good), Status::OutOfRange, "sequences");
    check(c.step_inputs(&ids, 4, &good), Status::OutOfRange, "sequences");
    let pos2 = [5u32, 6];
    check(c.step_inputs(&ids, 2, &[Values::of(&pos2), good[1], good[2], good[3], good[4]]), Status::InvalidArgument, "positions");
    let pos_u64 = [5u64, 6, 7];
    check(c.step_inputs(&ids, 2, &[Values::of(&pos_u64), good[1], good[2], good[3], good[4]]), Status::InvalidArgument, "8-byte values for 4-byte");
    check(c.step_inputs(&ids, 1, &good), Status::InvalidArgument, "block_table");
    check(c.step_inputs(&ids, 2, &[good[0], good[1], good[2], good[3], Values::of(&pos3)]), Status::InvalidArgument, "Values::DEVICE");
    check(c.step_inputs(&ids, 2, &[Values::DEVICE, good[1], good[2], good[3], good[4]]), Status::InvalidArgument, "not Values::DEVICE");
    check(c.step_inputs(&ids, 2, &[good[0], good[1], good[2], Values::of(&top[..1]), good[4]]), Status::InvalidArgument, "top_p");
    // An input's own max_rows (4) below the step's tokens.
    let ids5 = [1u32; 5];
    let pos5 = [0u32; 5];
    let slots5 = [0u64; 5];
    check(c.step_inputs(&ids5, 2, &[Values::of(&pos5), good[1], Values::of(&slots5), good[3], good[4]]), Status::OutOfRange, "positions");
    // Device ids: too few in the buffer.
    check(c.step_inputs_device(Some(&small), 9, 1, &good), Status::OutOfRange, "9 ids");
    // The plain step refuses a cache whose inputs take host values (C's check).
    assert_eq!(c.step(&ids).unwrap_err().status(), Status::InvalidArgument);
    assert_eq!(c.stats().steps, 0, "refused steps change nothing");
    // Raw bytes of any element size, and a good step.
    let blk_bytes: Vec<u8> = blk.iter().flat_map(|x| x.to_ne_bytes()).collect();
    c.step_inputs(&ids, 2, &[Values::from(&pos3), Values::bytes(&blk_bytes), Values::from(&slots[..]), Values::of(&top), Values::DEVICE]).unwrap();
    c.step_inputs_device(None, 3, 2, &good).unwrap();
    s.synchronize().unwrap();
    assert_eq!(c.stats().steps, 2);
    let mut got = [0u8; 16];
    a.read(Buffer::Fp8Act, 0, &mut got).unwrap();
    assert_eq!(&got[..12], &pos3.iter().flat_map(|x| x.to_ne_bytes()).collect::<Vec<u8>>()[..]);
}

#[test]
fn version_and_build_features_equal_the_c_calls() {
    // SAFETY: static strings.
    let v = unsafe { std::ffi::CStr::from_ptr(sys::mdr_version_string()) }.to_str().unwrap();
    assert_eq!(mdr::version(), v);
    assert_eq!(mdr::version_number(), unsafe { sys::mdr_version_number() });
    let n = mdr::version_number();
    assert_eq!(mdr::version(), format!("{}.{}.{}", n / 10000, n / 100 % 100, n % 100));
    let f = mdr::build_features();
    assert_eq!(f.bits(), unsafe { sys::mdr_build_features() });
    let text = unsafe { std::ffi::CStr::from_ptr(sys::mdr_build_features_string()) }.to_str().unwrap();
    assert_eq!(f.to_string(), text);
    assert_eq!(f.names().collect::<Vec<_>>().join(" "), text);
    // The set's own arithmetic and text.
    use mdr::Features;
    let all = Features::CUDA | Features::NCCL | Features::NCCL_DEVICE | Features::NVTX;
    assert_eq!(all.to_string(), "cuda nccl nccl-device nvtx");
    assert_eq!(all.bits(), 15);
    assert!(all.contains(Features::NCCL | Features::NVTX));
    assert!(!Features::CUDA.contains(Features::NCCL));
    assert!(Features::NONE.is_empty() && Features::NONE.to_string().is_empty());
    assert_eq!((all & Features::NCCL_DEVICE).to_string(), "nccl-device");
    assert_eq!(Features::from_bits(f.bits()), f);
    // A build without CUDA has no CUDA backend.
    if !f.contains(Features::CUDA) {
        assert_eq!(Backend::cuda(0).unwrap_err().status(), Status::Unsupported);
    }
}
