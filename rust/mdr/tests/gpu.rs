//! GPU cases: each skips itself (with a message) when `Backend::cuda(0)`
//! fails. Zeroing coverage on the device (against the C zero plan and a
//! host-backend twin), bodies captured and replayed bit-identical to eager
//! over >= 200 steps in every mode, device ids, step inputs staged and
//! padded bit-identical to eager.
mod common;
use common::*;
use mdr::{Arena, Backend, Buffer, Mode, Options, ZeroStrategy};

fn gpu(test: &str) -> Option<Backend> {
    match Backend::cuda(0) {
        Ok(b) => Some(b),
        Err(e) => {
            println!("SKIP {test}: no CUDA backend ({e})");
            None
        }
    }
}

#[test]
fn gpu_zeroing_coverage_on_the_device() {
    let Some(b) = gpu("gpu_zeroing_coverage_on_the_device") else { return };
    let host = Backend::host().unwrap();
    let m = 40;
    let counts = [0usize, 1, 2, 15, 16, 17, 39, 40, 41];
    for z in [ZeroStrategy::Memset, ZeroStrategy::Fused] {
        let mut a = Arena::from_preset(&b, PRESET, limits(m)).unwrap();
        a.set_zero_strategy(z).unwrap();
        let h = Arena::from_preset(&host, PRESET, limits(m)).unwrap();
        let s = b.stream().unwrap();
        let hs = host.stream().unwrap();
        for helper in ["zero_all", "zero_prefill_essentials"] {
            assert_eq!(coverage(&a, &s, helper, 0), coverage(&h, &hs, helper, 0), "{z:?} {helper}: device vs host");
        }
        for &t in &counts {
            let got = coverage(&a, &s, "zero_all_rows", t);
            assert_eq!(got, plan_text(&a, t), "{z:?} zero_all_rows({t}) vs the plan");
            assert_eq!(got, coverage(&h, &hs, "zero_all_rows", t), "{z:?} zero_all_rows({t}): device vs host");
        }
    }
    println!("gpu: zeroing coverage on the device equals the plan and the host twin (memset and fused)");
}

#[test]
fn gpu_graphs_replay_bit_identical_to_eager() {
    let Some(b) = gpu("gpu_graphs_replay_bit_identical_to_eager") else { return };
    for (mode, zero) in [
        (Mode::Exact, None),
        (Mode::Exact, Some(ZeroStrategy::Fused)),
        (Mode::Ladder, None),
        (Mode::Dynamic, Some(ZeroStrategy::Fused)),
    ] {
        let st = graph_vs_eager(&b, mode, 240, 11, zero);
        assert_eq!(st.steps, 240);
        assert!(st.hits > 100, "{mode:?}: graphs replayed: {st:?}");
        assert_eq!(st.eager_steps, 0, "{mode:?}: {st:?}");
        println!("gpu: {mode:?} {zero:?}: 240 steps bit-identical to eager ({} captures, {} replays)", st.captures, st.hits);
    }
}

#[test]
fn gpu_device_ids() {
    let Some(b) = gpu("gpu_device_ids") else { return };
    let m = 32;
    let ids = b.alloc(4 * m).unwrap();
    let a = Arena::from_preset(&b, PRESET, limits(m)).unwrap();
    let s = b.stream().unwrap();
    for mode in [Mode::Exact, Mode::Ladder] {
        let mut c = mdr::GraphCache::new(&a, &s, Options::default().mode(mode)).unwrap();
        let mut rng = Rng(5);
        for k in 0..200 {
            let t = 1 + rng.below(m);
            let want: Vec<u32> = (0..t).map(|i| (k * 7919 + i) as u32).collect();
            s.synchronize().unwrap(); // the previous step read the buffer
            // The cache holds `ids` for its life (its address is in graphs);
            // the engine's kernels would write it on the stream. Here: a
            // blocking copy after the stream drained.
            // SAFETY: in bounds of `ids`; no step is in flight.
            unsafe { b.copy_h2d(ids.ptr(), &want.iter().flat_map(|x| x.to_ne_bytes()).collect::<Vec<u8>>()).unwrap() };
            if k % 2 == 0 {
                c.step_device(&ids, t).unwrap();
            } else {
                a.write(Buffer::TokenIds, 0, &want.iter().flat_map(|x| x.to_ne_bytes()).collect::<Vec<u8>>()).unwrap();
                c.step_from_arena(t).unwrap();
            }
            s.synchronize().unwrap();
            let mut got = vec![0u8; 4 * t];
            a.read(Buffer::TokenIds, 0, &mut got).unwrap();
            let got: Vec<u32> = got.chunks(4).map(|x| u32::from_ne_bytes(x.try_into().unwrap())).collect();
            assert_eq!(got, want, "{mode:?} step {k}");
        }
        assert_eq!(c.stats().device_steps, 200);
    }
    println!("gpu: 400 device-id steps checked");
}

#[test]
fn gpu_a_panicking_body_under_capture() {
    let Some(b) = gpu("gpu_a_panicking_body_under_capture") else { return };
    let a = Arena::from_preset(&b, PRESET, limits(8)).unwrap();
    let s = b.stream().unwrap();
    let opts = Options::default().body(|st: &mdr::StreamRef, t: usize| {
        if t == 2 {
            panic!("gpu boom");
        }
        a.memset_async(st, Buffer::Residual, 0, 1, 64)
    });
    let mut c = mdr::GraphCache::new(&a, &s, opts).unwrap();
    c.step(&[1]).unwrap();
    let e = c.step(&[1, 2]).unwrap_err();
    assert!(e.panicked() && e.message().contains("gpu boom"), "{e}");
    for _ in 0..10 {
        c.step(&[1]).unwrap();
        c.step(&[1, 2, 3]).unwrap();
    }
    s.synchronize().unwrap();
    println!("gpu: a panicking body aborted its capture; the cache kept working");
}

#[test]
fn gpu_step_inputs_bit_identical_to_eager() {
    let Some(b) = gpu("gpu_step_inputs_bit_identical_to_eager") else { return };
    use mdr::DynamicImpl::{DeviceCount, NodeUpdate};
    use mdr::ZeroStrategy::{Fused, Memset};
    for (mode, zero, imp, device_ids) in [
        (Mode::Exact, Memset, NodeUpdate, false),
        (Mode::Exact, Fused, NodeUpdate, false),
        (Mode::Exact, Fused, NodeUpdate, true),
        (Mode::Ladder, Fused, NodeUpdate, false),
        (Mode::Dynamic, Fused, NodeUpdate, false),
        (Mode::Dynamic, Fused, DeviceCount, true),
    ] {
        let st = inputs_graph_vs_eager(&b, mode, Some(zero), imp, 40, 31, device_ids);
        assert_eq!(st.steps, 40);
        assert!(st.hits > 0, "{mode:?}: graphs replayed: {st:?}");
        assert_eq!(st.eager_steps, 0, "{mode:?}: {st:?}");
        println!("gpu: step inputs {mode:?} {zero:?} {imp:?} device_ids={device_ids}: 40 steps bit-identical to eager ({} captures, {} replays)", st.captures, st.hits);
    }
}
