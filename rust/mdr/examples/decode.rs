//! decode.rs — the Rust twin of examples/quickstart.c.
//!
//! Sizes an arena from a preset, makes a graph cache whose graphs hold the
//! fused zeroing, the token-id upload and a small decode body (a Rust
//! closure), runs a few steps, checks that each step's ids reached the
//! arena's token_ids buffer and that the body ran. Uses the CUDA backend
//! when there is a GPU and the host backend otherwise, and says which.
//! Everything is dropped in reverse order of creation (the borrows make any
//! other order a compile error). Run: `cargo run --example decode`.
use mdr::{Arena, Backend, Buffer, GraphCache, Limits, Options, StreamRef, ZeroStrategy};

fn main() -> Result<(), mdr::Error> {
    // 1. A backend: the GPU when there is one, else host memory.
    let backend = match Backend::cuda(0) {
        Ok(b) => b,
        Err(e) => {
            println!("decode: no CUDA backend ({e}); using the host backend");
            Backend::host()?
        }
    };
    println!("decode: backend {}", backend.name());

    // 2. The arena (one allocation) from a preset and the serve limits, and a stream.
    let limits = Limits { max_batch_tokens: 64, max_seq_len: 4096, kv_block_size: 16, max_batch_size: 4 };
    let arena = Arena::from_preset(&backend, "qwen3-next-80b", limits)?;
    let stream = backend.stream()?;

    // 3. The engine's own decode work for one step, captured into each graph
    //    after the zeroing and the id upload, then replayed with it. Only
    //    enqueue work on the stream it gets. Here: 0x01 over the first
    //    `tokens` rows of hidden_states (an embedding lookup's stand-in).
    let row_bytes = arena.hidden_states_bytes() / arena.max_batch_tokens();
    let decode_step = |s: &StreamRef, tokens: usize| arena.memset_async(s, Buffer::HiddenStates, 0, 0x01, tokens * row_bytes);
    let options = Options::default().zero(ZeroStrategy::Fused).body(decode_step);
    let mut cache = GraphCache::new(&arena, &stream, options)?;

    // 4. Decode steps: one graph replay each (captured on the first step of a count).
    for (k, &n) in [1usize, 4, 1, 4, 7].iter().enumerate() {
        let ids: Vec<u32> = (0..n as u32).map(|i| 1000 * (k as u32 + 1) + i).collect();
        cache.step(&ids)?;
        stream.synchronize()?; // a real loop syncs only to read results
        let mut got = vec![0u8; 4 * n];
        arena.read(Buffer::TokenIds, 0, &mut got)?;
        let mut first = [0u8; 1];
        arena.read(Buffer::HiddenStates, 0, &mut first)?;
        let got: Vec<u32> = got.chunks(4).map(|c| u32::from_ne_bytes(c.try_into().unwrap())).collect();
        if got != ids || first[0] != 0x01 {
            eprintln!("decode: step {k} ({n} tokens): token_ids or hidden_states wrong");
            std::process::exit(1);
        }
    }
    let st = cache.stats();
    println!(
        "decode: {} steps, {} graphs captured, {} replays from the cache; token ids checked after every step",
        st.steps, st.captures, st.hits
    );
    drop(cache);
    println!("decode: ok");
    Ok(())
}
