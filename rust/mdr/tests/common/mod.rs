//! Helpers shared by the host and GPU tests.
#![allow(dead_code)]
use mdr::{Arena, Buffer, Limits, Mode, Options, StreamRef};

pub const PRESET: &str = "qwen3-next-80b";
pub const POISON: u8 = 0xAB;

pub fn limits(m: usize) -> Limits {
    Limits { max_batch_tokens: m, max_seq_len: 256, kv_block_size: 16, max_batch_size: 4 }
}

/// A tiny deterministic generator (no crates).
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

pub fn poison_all(a: &Arena<'_>, v: u8) {
    for b in Buffer::ALL {
        a.fill(b, v).unwrap();
    }
}

pub fn snapshot(a: &Arena<'_>) -> Vec<Vec<u8>> {
    Buffer::ALL
        .iter()
        .map(|&b| {
            let mut v = vec![0u8; a.bytes(b)];
            a.read(b, 0, &mut v).unwrap();
            v
        })
        .collect()
}

/// The byte ranges of `v` that are not `poison` (what was written), merged.
pub fn written(v: &[u8], poison: u8) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < v.len() {
        if v[i] != poison {
            let s = i;
            while i < v.len() && v[i] != poison {
                i += 1;
            }
            out.push((s, i));
        } else {
            i += 1;
        }
    }
    out
}

/// One line per buffer: "name: ranges cleared" after `helper` on a
/// poisoned arena; also checks every written byte is 0.
pub fn coverage(a: &Arena<'_>, s: &StreamRef, helper: &str, tokens: usize) -> String {
    poison_all(a, POISON);
    match helper {
        "zero_all" => a.zero_all(s).unwrap(),
        "zero_all_rows" => a.zero_all_rows(s, tokens).unwrap(),
        "zero_prefill_essentials" => a.zero_prefill_essentials(s).unwrap(),
        _ => unreachable!(),
    }
    s.synchronize().unwrap();
    let mut text = String::new();
    for (b, v) in Buffer::ALL.iter().zip(snapshot(a)) {
        let w = written(&v, POISON);
        for &(x, y) in &w {
            assert!(v[x..y].iter().all(|&c| c == 0), "{helper}({tokens}): {} got a byte that is neither 0 nor poison", b.name());
        }
        if !w.is_empty() {
            text += &format!("{} {:?}\n", b.name(), w);
        }
    }
    text
}

/// What `zero_all_rows(tokens)` clears per the C plan, in the same format.
pub fn plan_text(a: &Arena<'_>, tokens: usize) -> String {
    let plan = a.zero_plan(tokens).unwrap();
    let mut text = String::new();
    for b in Buffer::ALL {
        let (p, n) = (a.ptr(b).0, a.bytes(b) as u64);
        let mut w: Vec<(usize, usize)> = plan
            .iter()
            .filter(|s| s.ptr.0 >= p && s.ptr.0 < p + n)
            .map(|s| ((s.ptr.0 - p) as usize, (s.ptr.0 - p) as usize + s.bytes))
            .collect();
        w.sort();
        let mut merged: Vec<(usize, usize)> = Vec::new();
        for r in w {
            match merged.last_mut() {
                Some(l) if l.1 >= r.0 => l.1 = l.1.max(r.1),
                _ => merged.push(r),
            }
        }
        if !merged.is_empty() {
            text += &format!("{} {:?}\n", b.name(), merged);
        }
    }
    text
}

/// The body used by the graph-vs-eager comparison: memsets whose values
/// depend on the graph's token count only.
pub fn body_work(a: &Arena<'_>, s: &StreamRef, tokens: usize) -> mdr::Result<()> {
    let m = a.max_batch_tokens();
    let row = a.hidden_states_bytes() / m;
    a.memset_async(s, Buffer::HiddenStates, 0, (tokens % 250) as u8 + 1, tokens * row)?;
    let rrow = a.residual_bytes() / m;
    a.memset_async(s, Buffer::Residual, (tokens - 1) * rrow, 0x5A, rrow)?;
    a.memset_async(s, Buffer::Logits, 0, tokens as u8, 64)
}

/// `steps` random steps of a cache with a body on arena `ga`, and the same
/// work done eagerly on arena `ea` with the helpers; the two arenas are
/// compared byte for byte after every step. Returns the cache's stats.
pub fn graph_vs_eager(backend: &mdr::Backend, mode: Mode, steps: usize, seed: u64, zero: Option<mdr::ZeroStrategy>) -> mdr::GraphStats {
    let m = 24;
    let ga = Arena::from_preset(backend, PRESET, limits(m)).unwrap();
    let mut ea = Arena::from_preset(backend, PRESET, limits(m)).unwrap();
    if let Some(z) = zero {
        ea.set_zero_strategy(z).unwrap();
    }
    let gs = backend.stream().unwrap();
    let es = backend.stream().unwrap();
    poison_all(&ga, POISON);
    poison_all(&ea, POISON);
    let pad = 7u32;
    let mut opts = Options::default().mode(mode);
    opts.pad_token_id = pad;
    if let Some(z) = zero {
        opts = opts.zero(z);
    }
    let opts = if mode == Mode::Dynamic {
        opts.body_dynamic(|s: &StreamRef, _count: mdr::DevicePtr, max: usize| body_work(&ga, s, max))
    } else {
        opts.body(|s: &StreamRef, t: usize| body_work(&ga, s, t))
    };
    let mut cache = mdr::GraphCache::new(&ga, &gs, opts).unwrap();
    let mut rng = Rng(seed);
    for k in 0..steps {
        let t = 1 + rng.below(m);
        let ids: Vec<u32> = (0..t).map(|i| (k * 1000 + i) as u32).collect();
        cache.step(&ids).unwrap();
        // The same step, eagerly, on the other arena.
        let g = cache.graph_tokens(t).unwrap();
        ea.zero_all_rows(&es, t.max(if mode == Mode::Ladder { g } else { t })).unwrap();
        let mut padded = ids.clone();
        if mode == Mode::Ladder {
            padded.resize(g, pad);
        }
        let bytes: Vec<u8> = padded.iter().flat_map(|x| x.to_ne_bytes()).collect();
        es.synchronize().unwrap();
        ea.write(Buffer::TokenIds, 0, &bytes).unwrap();
        body_work(&ea, &es, g).unwrap();
        gs.synchronize().unwrap();
        es.synchronize().unwrap();
        let (x, y) = (snapshot(&ga), snapshot(&ea));
        for (i, b) in Buffer::ALL.iter().enumerate() {
            if x[i] != y[i] {
                let at = x[i].iter().zip(&y[i]).position(|(p, q)| p != q).unwrap();
                panic!("{mode:?} step {k} ({t} tokens, graph {g}): {} differs at byte {at}: graph {} eager {}", b.name(), x[i][at], y[i][at]);
            }
        }
    }
    cache.stats()
}
