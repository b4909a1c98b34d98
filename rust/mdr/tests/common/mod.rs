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

/// The step inputs of `inputs_graph_vs_eager`: (name, element bytes).
pub const INPUTS: [(&str, usize); 6] =
    [("positions", 4), ("seq_lens", 4), ("block_table", 4), ("slot_mapping", 8), ("temperature", 4), ("device_positions", 4)];
pub const INPUT_S: usize = 6; // max_sequences
pub const INPUT_WIDTH: usize = 4; // blocks per sequence
pub const INPUT_FIXED: usize = 2; // rows of the fixed input
pub const INPUT_M: usize = 24;

fn u32_bytes(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

/// One step's values: bytes per input at the step's counts, unpadded.
struct StepVals {
    ids: Vec<u32>,
    pos: Vec<u32>,
    seqlen: Vec<u32>,
    blocks: Vec<u32>,
    slots: Vec<u64>,
    temp: Vec<f32>,
    dev: Vec<u32>,
}

/// `rows` rows of `real` (bytes) then pad elements up to `bound` rows.
fn padded(real: &[u8], row_bytes: usize, elem: usize, pad: u64, bound_rows: usize) -> Vec<u8> {
    let mut v = real.to_vec();
    while v.len() < bound_rows * row_bytes {
        v.extend_from_slice(&pad.to_ne_bytes()[..elem]);
    }
    v
}

/// `steps` random steps with step inputs on a cache over arena `ga`
/// (positions, sequence lengths and a block table in the arena's fp8_act,
/// a slot mapping and a fixed input in device buffers, positions from a
/// device source), and the same work done eagerly on arena `ea` and its
/// own buffers: the zeroing helper, the padded ids and inputs written, the
/// body. After every step both sides are compared byte for byte (every
/// arena buffer and every destination), the token and sequence counts are
/// read back, and the graph side's destinations are checked directly:
/// values, then pad up to the graph's bound, then untouched. Returns the
/// cache's stats.
pub fn inputs_graph_vs_eager(backend: &mdr::Backend, mode: Mode, zero: Option<mdr::ZeroStrategy>, imp: mdr::DynamicImpl, steps: usize, seed: u64, device_ids: bool) -> mdr::GraphStats {
    let ga = Arena::from_preset(backend, PRESET, limits(INPUT_M)).unwrap();
    let mut ea = Arena::from_preset(backend, PRESET, limits(INPUT_M)).unwrap();
    if let Some(z) = zero {
        // The eager twin zeroes with the same strategy.
        ea.set_zero_strategy(z).unwrap();
    }
    inputs_run(backend, mode, zero, imp, steps, seed, device_ids, &ga, &ea, INPUT_M, INPUT_S)
}

#[allow(clippy::too_many_arguments)]
fn inputs_run(backend: &mdr::Backend, mode: Mode, zero: Option<mdr::ZeroStrategy>, imp: mdr::DynamicImpl, steps: usize, seed: u64, device_ids: bool, ga: &Arena<'_>, ea: &Arena<'_>, m: usize, sm: usize) -> mdr::GraphStats {
    use mdr::{InputShape, StepInput, Values};
    const POISON_IN: u8 = 0xC7;
    let pad_id = 3u32;
    // Arena destinations: offsets in fp8_act (outside the zero plan).
    let (off_pos, off_seq, off_blk) = (0usize, 256usize, 512usize);
    assert!(ga.fp8_act_bytes() >= off_blk + sm * INPUT_WIDTH * 4, "fp8_act holds the inputs");
    let slot_dst = backend.alloc(8 * m).unwrap();
    let temp_dst = backend.alloc(4 * INPUT_FIXED).unwrap();
    let dev_dst = backend.alloc(4 * m).unwrap();
    let dev_src = backend.alloc(4 * m).unwrap();
    let ids_buf = backend.alloc(4 * m).unwrap();
    // The eager twin's own buffers.
    let mut e_slot = backend.alloc(8 * m).unwrap();
    let mut e_temp = backend.alloc(4 * INPUT_FIXED).unwrap();
    let mut e_dev = backend.alloc(4 * m).unwrap();
    let pads: [u64; 6] = [0xFFFF_FFF0, 0, u32::MAX as u64, u64::MAX, 0, 0x5A5A_5A5A];
    let gs = backend.stream().unwrap();
    let es = backend.stream().unwrap();
    poison_all(ga, POISON);
    poison_all(ea, POISON);
    let mut opts = Options::default().mode(mode).dynamic_impl(imp).max_sequences(sm);
    opts.pad_token_id = pad_id;
    if let Some(z) = zero {
        opts = opts.zero(z);
    }
    let opts = opts
        .input(StepInput::new("positions", 4, InputShape::PerToken).pad(pads[0]).to_arena(Buffer::Fp8Act, off_pos))
        .input(StepInput::new("seq_lens", 4, InputShape::PerSequence).to_arena(Buffer::Fp8Act, off_seq))
        .input(StepInput::new("block_table", 4, InputShape::PerSequence).width(INPUT_WIDTH).pad(pads[2]).to_arena(Buffer::Fp8Act, off_blk))
        .input(StepInput::new("slot_mapping", 8, InputShape::PerToken).pad(pads[3]).to_device(&slot_dst))
        .input(StepInput::new("temperature", 4, InputShape::Fixed).max_rows(INPUT_FIXED).to_device(&temp_dst))
        .input(StepInput::new("device_positions", 4, InputShape::PerToken).pad(pads[5]).to_device(&dev_dst).from_device(&dev_src));
    let opts = if mode == Mode::Dynamic {
        opts.body_dynamic(|s: &StreamRef, _c: mdr::DevicePtr, max: usize| body_work(ga, s, max))
    } else {
        opts.body(|s: &StreamRef, t: usize| body_work(ga, s, t))
    };
    let mut cache = mdr::GraphCache::new(ga, &gs, opts).unwrap();
    let layout = cache.decode_meta();
    assert_eq!(layout.len(), 1 + INPUTS.len());
    let raw_of = |b: &mdr::DeviceBuffer<'_>| {
        let mut v = vec![0u8; b.len()];
        b.read(0, &mut v).unwrap();
        v
    };
    // The graph side's destinations, as (name, address, bytes).
    let dsts: Vec<(String, mdr::DevicePtr, usize)> = layout.iter().skip(1).map(|i| (i.name.clone(), i.dst, i.max_bytes)).collect();
    let read_dst = |p: mdr::DevicePtr, n: usize| {
        let mut v = vec![0u8; n];
        // SAFETY: a destination of the layout, `max_bytes` long.
        unsafe { backend.copy_d2h(&mut v, p).unwrap() };
        v
    };
    let mut rng = Rng(seed);
    for k in 0..steps {
        let t = if k < 4 { k + 1 } else { 1 + rng.below(m) };
        let s = 1 + rng.below(t.min(sm));
        let r32 = |rng: &mut Rng, n: usize| (0..n).map(|_| rng.next() as u32).collect::<Vec<u32>>();
        let v = StepVals {
            ids: (0..t).map(|i| (k * 1000 + i) as u32).collect(),
            pos: r32(&mut rng, t),
            seqlen: r32(&mut rng, s),
            blocks: r32(&mut rng, s * INPUT_WIDTH),
            slots: (0..t).map(|_| rng.next()).collect(),
            temp: (0..INPUT_FIXED).map(|_| (rng.next() % 1000) as f32 / 7.0).collect(),
            dev: r32(&mut rng, t),
        };
        // Poison the destinations on both sides.
        for (_, p, n) in &dsts {
            // SAFETY: layout destinations.
            unsafe { backend.fill(*p, POISON_IN, *n).unwrap() };
        }
        for b in [&mut e_slot, &mut e_temp, &mut e_dev] {
            b.fill(POISON_IN).unwrap();
        }
        ga.write(Buffer::Fp8Act, 0, &vec![POISON_IN; off_blk + sm * INPUT_WIDTH * 4]).unwrap();
        ea.write(Buffer::Fp8Act, 0, &vec![POISON_IN; off_blk + sm * INPUT_WIDTH * 4]).unwrap();
        // Device values: written while no step is in flight (an engine's
        // kernels would write them on the stream).
        // SAFETY: in bounds of buffers the cache borrows; the stream drained.
        unsafe { backend.copy_h2d(dev_src.ptr(), &u32_bytes(&v.dev)).unwrap() };
        let values = [Values::of(&v.pos), Values::of(&v.seqlen), Values::of(&v.blocks), Values::of(&v.slots), Values::of(&v.temp), Values::DEVICE];
        if device_ids {
            // SAFETY: as above.
            unsafe { backend.copy_h2d(ids_buf.ptr(), &u32_bytes(&v.ids)).unwrap() };
            cache.step_inputs_device(Some(&ids_buf), t, s, &values).unwrap();
        } else {
            cache.step_inputs(&v.ids, s, &values).unwrap();
        }
        // The same step, eagerly, on the other arena.
        let g = cache.graph_tokens(t).unwrap();
        let sb = cache.sequence_bound(t).unwrap();
        let (ct, cs) = if mode == Mode::Dynamic { (t, s) } else { (g, sb) };
        ea.zero_all_rows(&es, t.max(if mode == Mode::Ladder { g } else { t })).unwrap();
        es.synchronize().unwrap();
        let mut ids = v.ids.clone();
        ids.resize(ct, pad_id);
        ea.write(Buffer::TokenIds, 0, &u32_bytes(&ids)).unwrap();
        let want_pos = padded(&u32_bytes(&v.pos), 4, 4, pads[0], ct);
        let want_seq = padded(&u32_bytes(&v.seqlen), 4, 4, pads[1], cs);
        let want_blk = padded(&u32_bytes(&v.blocks), 4 * INPUT_WIDTH, 4, pads[2], cs);
        let slot_bytes: Vec<u8> = v.slots.iter().flat_map(|x| x.to_ne_bytes()).collect();
        let want_slot = padded(&slot_bytes, 8, 8, pads[3], ct);
        let want_temp: Vec<u8> = v.temp.iter().flat_map(|x| x.to_ne_bytes()).collect();
        let want_dev = padded(&u32_bytes(&v.dev), 4, 4, pads[5], ct);
        ea.write(Buffer::Fp8Act, off_pos, &want_pos).unwrap();
        ea.write(Buffer::Fp8Act, off_seq, &want_seq).unwrap();
        ea.write(Buffer::Fp8Act, off_blk, &want_blk).unwrap();
        e_slot.write(0, &want_slot).unwrap();
        e_temp.write(0, &want_temp).unwrap();
        e_dev.write(0, &want_dev).unwrap();
        body_work(ea, &es, g).unwrap();
        gs.synchronize().unwrap();
        es.synchronize().unwrap();
        let what = format!("{mode:?} {zero:?} {imp:?} device_ids={device_ids} step {k} (t={t} s={s}, bound {ct}/{cs})");
        // The graph side directly: values, pad to the bound, then poison.
        let wants = [&want_pos, &want_seq, &want_blk, &want_slot, &want_temp, &want_dev];
        for (i, (name, p, n)) in dsts.iter().enumerate() {
            let got = read_dst(*p, *n);
            let w = wants[i];
            assert_eq!(&got[..w.len()], &w[..], "{what}: {name}: values and pad");
            assert!(got[w.len()..].iter().all(|&x| x == POISON_IN), "{what}: {name}: written past the bound ({} bytes)", w.len());
        }
        let mut cnt = [0u8; 8];
        // SAFETY: two uint32 of the cache's device block.
        unsafe {
            backend.copy_d2h(&mut cnt[..4], cache.count_ptr()).unwrap();
            backend.copy_d2h(&mut cnt[4..], cache.sequences_ptr()).unwrap();
        }
        assert_eq!(u32::from_ne_bytes(cnt[..4].try_into().unwrap()) as usize, t, "{what}: token count");
        assert_eq!(u32::from_ne_bytes(cnt[4..].try_into().unwrap()) as usize, s, "{what}: sequence count");
        // Both sides byte for byte.
        let (x, y) = (snapshot(ga), snapshot(ea));
        for (i, b) in Buffer::ALL.iter().enumerate() {
            if x[i] != y[i] {
                let at = x[i].iter().zip(&y[i]).position(|(p, q)| p != q).unwrap();
                panic!("{what}: {} differs at byte {at}: graph {} eager {}", b.name(), x[i][at], y[i][at]);
            }
        }
        assert_eq!(raw_of(&slot_dst), raw_of(&e_slot), "{what}: slot_mapping");
        assert_eq!(raw_of(&temp_dst), raw_of(&e_temp), "{what}: temperature");
        assert_eq!(raw_of(&dev_dst), raw_of(&e_dev), "{what}: device_positions");
    }
    let st = cache.stats();
    drop(cache);
    st
}
