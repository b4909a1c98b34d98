//! step_cpu.rs — the CPU cost of a graph cache step from Rust and from C,
//! side by side in one run.
//!
//! One cache, EXACT, no body, prepared for the count, stepped through
//! `GraphCache::step` (Rust) and through `mdr_graph_cache_step` called
//! directly on the same cache through mdr-sys (C): the same graph and the
//! same staging ring, so the difference is the binding's alone. Rounds of 8
//! steps alternate between the two, the first side alternating by round;
//! each step is timed alone (Instant around the call). The stream is
//! synchronized between rounds only, so the staging ring's wait is part of
//! neither. Prints median and p99 per side, the difference of the medians,
//! and the median of the rounds' paired differences (each Rust round's
//! median against the C round beside it), which the run-to-run drift of the
//! machine does not move.
//!
//! Usage: cargo run --release --example step_cpu [-- steps tokens]
//! (default 20000 steps per side, 1 token; CUDA device 0, else the host backend).
use mdr::{sys, Arena, Backend, GraphCache, Limits, Options};
use std::time::Instant;

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn main() -> Result<(), mdr::Error> {
    let args: Vec<String> = std::env::args().collect();
    let steps: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(20000);
    let tokens: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1);
    let backend = Backend::cuda(0).or_else(|_| Backend::host())?;
    let limits = Limits { max_batch_tokens: 64, max_seq_len: 4096, kv_block_size: 16, max_batch_size: 4 };
    let arena = Arena::from_preset(&backend, "qwen3-next-80b", limits)?;
    let stream = backend.stream()?;
    let mut rust = GraphCache::new(&arena, &stream, Options::default())?;
    rust.prepare(&[tokens])?;
    let craw = rust.as_raw(); // the same cache, called without the binding
    let ids: Vec<u32> = (0..tokens as u32).collect();
    let batch = 8; // MDR_GRAPH_STAGING_SLOTS: never wait on the ring inside a round
    let (mut tr, mut tc) = (Vec::with_capacity(steps), Vec::with_capacity(steps));
    // Warm-up.
    for _ in 0..200 {
        rust.step(&ids)?;
        // SAFETY: live cache, ids valid for the call.
        unsafe { sys::mdr_graph_cache_step(craw, ids.as_ptr(), ids.len()) };
        stream.synchronize()?;
    }
    let mut round = 0;
    let mut paired = Vec::new();
    while tr.len() < steps || tc.len() < steps {
        let rust_first = round % 2 == 0;
        let (r0, c0) = (tr.len(), tc.len());
        for side in 0..2 {
            let is_rust = (side == 0) == rust_first;
            for _ in 0..batch {
                if is_rust {
                    let t0 = Instant::now();
                    let r = rust.step(&ids);
                    let dt = t0.elapsed();
                    r?;
                    tr.push(dt.as_secs_f64() * 1e6);
                } else {
                    let t0 = Instant::now();
                    // SAFETY: as above.
                    let st = unsafe { sys::mdr_graph_cache_step(craw, ids.as_ptr(), ids.len()) };
                    let dt = t0.elapsed();
                    assert_eq!(st, sys::MDR_OK);
                    tc.push(dt.as_secs_f64() * 1e6);
                }
            }
            stream.synchronize()?;
        }
        let (mut a, mut b) = (tr[r0..].to_vec(), tc[c0..].to_vec());
        paired.push(pct(&mut a, 0.5) - pct(&mut b, 0.5));
        round += 1;
    }
    let (mr, pr) = (pct(&mut tr, 0.5), pct(&mut tr, 0.99));
    let (mc, pc) = (pct(&mut tc, 0.5), pct(&mut tc, 0.99));
    println!("step_cpu: backend {}, {} tokens, {} steps per side, interleaved rounds of {}", backend.name(), tokens, tr.len(), batch);
    println!("step_cpu: rust  GraphCache::step        median {:.3} us  p99 {:.3} us", mr, pr);
    println!("step_cpu: C     mdr_graph_cache_step    median {:.3} us  p99 {:.3} us", mc, pc);
    let md = pct(&mut paired, 0.5);
    println!("step_cpu: difference of the medians (rust - C) {:+.3} us", mr - mc);
    println!("step_cpu: median of {} paired rounds (rust - C) {:+.3} us: {}", paired.len(), md,
             if md.abs() <= 0.1 { "within 0.1 us" } else { "NOT within 0.1 us" });
    drop(rust);
    Ok(())
}
