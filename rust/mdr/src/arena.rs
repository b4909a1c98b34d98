//! `Buffer`, `Arena` (the seed's accessors and zeroing helpers), `Segment`.
use crate::backend::{Backend, DevicePtr, StreamRef};
use crate::comm::{AllReduce, AllReduceAlgo, Comm};
use crate::error::{check, Error, Result, Status};
use crate::sizes::{Limits, Sizes};
use mdr_sys as sys;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};

macro_rules! buffers {
    ($($camel:ident, $name:ident, $bytes:ident, $raw:ident;)*) => {
        /// The 46 buffers of a decode step, in the seed's order (`mdr_buffer`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        #[repr(i32)]
        pub enum Buffer {
            $(
                #[doc = concat!("`", stringify!($name), "` (`", stringify!($raw), "`).")]
                $camel = sys::$raw,
            )*
        }

        impl Buffer {
            /// Every buffer, in enum order.
            pub const ALL: [Buffer; sys::MDR_BUF_COUNT as usize] = [$(Buffer::$camel,)*];

            /// The seed's name of the buffer, e.g. "hidden_states".
            pub fn name(self) -> &'static str {
                match self { $(Buffer::$camel => stringify!($name),)* }
            }

            /// The buffer with this seed name.
            pub fn from_name(name: &str) -> Option<Buffer> {
                match name { $(stringify!($name) => Some(Buffer::$camel),)* _ => None }
            }

            /// The raw `mdr_buffer`.
            pub fn raw(self) -> sys::mdr_buffer {
                self as sys::mdr_buffer
            }
        }

        /// The seed's accessors: one pointer accessor and one `_bytes`
        /// accessor per buffer, as `BufferArena` names them.
        impl Arena<'_> {
            $(
                #[doc = concat!("Device address of `", stringify!($name), "` (NULL when the buffer has 0 bytes).")]
                #[inline]
                pub fn $name(&self) -> DevicePtr {
                    self.ptr(Buffer::$camel)
                }
                #[doc = concat!("Allocated bytes of `", stringify!($name), "`.")]
                #[inline]
                pub fn $bytes(&self) -> usize {
                    self.bytes(Buffer::$camel)
                }
            )*
        }
    };
}

buffers! {
    HiddenStates, hidden_states, hidden_states_bytes, MDR_BUF_HIDDEN_STATES;
    Residual, residual, residual_bytes, MDR_BUF_RESIDUAL;
    NormOutput, norm_output, norm_output_bytes, MDR_BUF_NORM_OUTPUT;
    QkvOutput, qkv_output, qkv_output_bytes, MDR_BUF_QKV_OUTPUT;
    AttnOutput, attn_output, attn_output_bytes, MDR_BUF_ATTN_OUTPUT;
    GateLogits, gate_logits, gate_logits_bytes, MDR_BUF_GATE_LOGITS;
    GateLogitsF32, gate_logits_f32, gate_logits_f32_bytes, MDR_BUF_GATE_LOGITS_F32;
    MoeRouterInF32, moe_router_in_f32, moe_router_in_f32_bytes, MDR_BUF_MOE_ROUTER_IN_F32;
    MoeOutput, moe_output, moe_output_bytes, MDR_BUF_MOE_OUTPUT;
    Logits, logits, logits_bytes, MDR_BUF_LOGITS;
    SsmQkvz, ssm_qkvz, ssm_qkvz_bytes, MDR_BUF_SSM_QKVZ;
    SsmBa, ssm_ba, ssm_ba_bytes, MDR_BUF_SSM_BA;
    SsmDeinterleaved, ssm_deinterleaved, ssm_deinterleaved_bytes, MDR_BUF_SSM_DEINTERLEAVED;
    SsmGates, ssm_gates, ssm_gates_bytes, MDR_BUF_SSM_GATES;
    SsmConvOutF32, ssm_conv_out_f32, ssm_conv_out_f32_bytes, MDR_BUF_SSM_CONV_OUT_F32;
    Scratch, scratch, scratch_bytes, MDR_BUF_SCRATCH;
    SsdScratch, ssd_scratch, ssd_scratch_bytes, MDR_BUF_SSD_SCRATCH;
    TokenIds, token_ids, token_ids_bytes, MDR_BUF_TOKEN_IDS;
    ExpertGateOut, expert_gate_out, expert_gate_out_bytes, MDR_BUF_EXPERT_GATE_OUT;
    ExpertUpOut, expert_up_out, expert_up_out_bytes, MDR_BUF_EXPERT_UP_OUT;
    ExpertDownOut, expert_down_out, expert_down_out_bytes, MDR_BUF_EXPERT_DOWN_OUT;
    SplitkWorkspace, splitk_workspace, splitk_workspace_bytes, MDR_BUF_SPLITK_WORKSPACE;
    GdnFlaScratch, gdn_fla_scratch, gdn_fla_scratch_bytes, MDR_BUF_GDN_FLA_SCRATCH;
    FfnActQ8, ffn_act_q8, ffn_act_q8_bytes, MDR_BUF_FFN_ACT_Q8;
    FfnActA, ffn_act_a, ffn_act_a_bytes, MDR_BUF_FFN_ACT_A;
    FfnActScale, ffn_act_scale, ffn_act_scale_bytes, MDR_BUF_FFN_ACT_SCALE;
    FfnGateUpFused, ffn_gate_up_fused, ffn_gate_up_fused_bytes, MDR_BUF_FFN_GATE_UP_FUSED;
    FfnActScaleKmajor, ffn_act_scale_kmajor, ffn_act_scale_kmajor_bytes, MDR_BUF_FFN_ACT_SCALE_KMAJOR;
    Fp8Act, fp8_act, fp8_act_bytes, MDR_BUF_FP8_ACT;
    Fp8ActScale, fp8_act_scale, fp8_act_scale_bytes, MDR_BUF_FP8_ACT_SCALE;
    Fp8ActScaleKmajor, fp8_act_scale_kmajor, fp8_act_scale_kmajor_bytes, MDR_BUF_FP8_ACT_SCALE_KMAJOR;
    Q2DequantScratch, q2_dequant_scratch, q2_dequant_scratch_bytes, MDR_BUF_Q2_DEQUANT_SCRATCH;
    Q2ActQ8, q2_act_q8, q2_act_q8_bytes, MDR_BUF_Q2_ACT_Q8;
    OLatent, o_latent, o_latent_bytes, MDR_BUF_O_LATENT;
    NormUnitW, norm_unit_w, norm_unit_w_bytes, MDR_BUF_NORM_UNIT_W;
    HcStreams, hc_streams, hc_streams_bytes, MDR_BUF_HC_STREAMS;
    HcLowrankScratch, hc_lowrank_scratch, hc_lowrank_scratch_bytes, MDR_BUF_HC_LOWRANK_SCRATCH;
    QsaSelectScratch, qsa_select_scratch, qsa_select_scratch_bytes, MDR_BUF_QSA_SELECT_SCRATCH;
    HcPost, hc_post, hc_post_bytes, MDR_BUF_HC_POST;
    HcComb, hc_comb, hc_comb_bytes, MDR_BUF_HC_COMB;
    LoraXa, lora_xa, lora_xa_bytes, MDR_BUF_LORA_XA;
    LoraDelta, lora_delta, lora_delta_bytes, MDR_BUF_LORA_DELTA;
    LoraHact, lora_hact, lora_hact_bytes, MDR_BUF_LORA_HACT;
    LoraSeqSlot, lora_seq_slot, lora_seq_slot_bytes, MDR_BUF_LORA_SEQ_SLOT;
    MoeFp8Scratch, moe_fp8_scratch, moe_fp8_scratch_bytes, MDR_BUF_MOE_FP8_SCRATCH;
    SsmRowwiseWBf16, ssm_rowwise_w_bf16, ssm_rowwise_w_bf16_bytes, MDR_BUF_SSM_ROWWISE_W_BF16;
}

/// How the arena's zeroing helpers clear memory (`mdr_zero_strategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ZeroStrategy {
    /// One memset per segment.
    Memset,
    /// Every segment in one kernel launch (CUDA only).
    Fused,
}

impl ZeroStrategy {
    pub(crate) fn raw(self) -> sys::mdr_zero_strategy {
        match self {
            ZeroStrategy::Memset => sys::MDR_ZERO_MEMSET,
            ZeroStrategy::Fused => sys::MDR_ZERO_FUSED,
        }
    }
    pub(crate) fn from_raw(z: sys::mdr_zero_strategy) -> Option<ZeroStrategy> {
        match z {
            sys::MDR_ZERO_MEMSET => Some(ZeroStrategy::Memset),
            sys::MDR_ZERO_FUSED => Some(ZeroStrategy::Fused),
            _ => None,
        }
    }
}

/// Which bytes `zero_all_rows(tokens)` clears (`mdr_rows_policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RowsPolicy {
    /// The seed's: splitk_workspace, logits and scratch whole.
    Seed,
    /// Also logits limited to its first min(tokens, logits_rows) rows.
    All,
}

impl RowsPolicy {
    pub(crate) fn raw(self) -> sys::mdr_rows_policy {
        match self {
            RowsPolicy::Seed => sys::MDR_ROWS_SEED,
            RowsPolicy::All => sys::MDR_ROWS_ALL,
        }
    }
    pub(crate) fn from_raw(p: sys::mdr_rows_policy) -> Option<RowsPolicy> {
        match p {
            sys::MDR_ROWS_SEED => Some(RowsPolicy::Seed),
            sys::MDR_ROWS_ALL => Some(RowsPolicy::All),
            _ => None,
        }
    }
}

/// How an arena's slab is shared with its peers (`mdr_window`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Window {
    /// Not on a communicator.
    None,
    /// A symmetric NCCL window.
    Symmetric,
    /// On a communicator, plain device memory.
    Plain,
    /// On a host communicator.
    Host,
}

/// One segment of a zero plan: `bytes` bytes at `ptr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Segment {
    /// Start address.
    pub ptr: DevicePtr,
    /// Bytes cleared.
    pub bytes: usize,
}

/// Every activation buffer of a decode step in one device allocation, at
/// stable addresses, with the seed's accessors and zeroing helpers
/// (`mdr_arena`).
///
/// `Send` and `Sync` as docs/THREADS.md allows: the accessors, the zero
/// plan and the zeroing helpers only read the arena (`&self`, any number
/// of threads); the setters write it and take `&mut self`, so they never
/// run at the same time as a reader. The arena borrows its backend, and a
/// graph cache borrows the arena:
///
/// ```compile_fail
/// let backend = mdr::Backend::host().unwrap();
/// let limits = mdr::Limits { max_batch_tokens: 8, max_seq_len: 64, kv_block_size: 16, max_batch_size: 2 };
/// let arena = mdr::Arena::from_preset(&backend, "qwen3-next-80b", limits).unwrap();
/// let stream = backend.stream().unwrap();
/// let cache = mdr::GraphCache::new(&arena, &stream, mdr::Options::default()).unwrap();
/// drop(arena); // error: `arena` is borrowed by `cache`
/// drop(cache);
/// ```
///
/// ```compile_fail
/// let backend = mdr::Backend::host().unwrap();
/// let limits = mdr::Limits { max_batch_tokens: 8, max_seq_len: 64, kv_block_size: 16, max_batch_size: 2 };
/// let mut arena = mdr::Arena::from_preset(&backend, "qwen3-next-80b", limits).unwrap();
/// let stream = backend.stream().unwrap();
/// let cache = mdr::GraphCache::new(&arena, &stream, mdr::Options::default()).unwrap();
/// arena.set_rows_policy(mdr::RowsPolicy::All).unwrap(); // error: a setter needs the arena unshared
/// drop(cache);
/// ```
pub struct Arena<'b> {
    raw: NonNull<sys::mdr_arena>,
    backend: &'b Backend,
    all_reduce_busy: AtomicBool,
    _comm: PhantomData<&'b ()>,
}

// SAFETY: docs/THREADS.md, "Arena": readers (&self) from any number of
// threads; the setters (&mut self) exclusive. The zeroing helpers only read
// the arena and enqueue on the caller's stream (a StreamRef, used by one
// thread). mdr_all_reduce, one thread per rank, is guarded by a flag.
unsafe impl Send for Arena<'_> {}
unsafe impl Sync for Arena<'_> {}

impl<'b> Arena<'b> {
    /// An arena sized for `sizes` on `backend` (`mdr_arena_create`).
    pub fn new(backend: &'b Backend, sizes: &Sizes) -> Result<Arena<'b>> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: valid backend, sizes and out-param.
        check(unsafe { sys::mdr_arena_create(backend.as_raw(), &sizes.0, &mut raw) }, backend.as_raw())?;
        Ok(Arena::wrap(raw, backend))
    }

    /// An arena sized from a named preset and the serve limits.
    pub fn from_preset(backend: &'b Backend, name: &str, limits: Limits) -> Result<Arena<'b>> {
        Arena::new(backend, &Sizes::from_preset(name, &limits)?)
    }

    /// The arena of rank `comm` (collective: every rank calls it at once,
    /// with identical sizes; `mdr_arena_create_on_comm`).
    pub fn on_comm(comm: &'b Comm<'b>, sizes: &Sizes) -> Result<Arena<'b>> {
        let mut raw = std::ptr::null_mut();
        let b = comm.backend();
        // SAFETY: valid communicator, sizes and out-param.
        check(unsafe { sys::mdr_arena_create_on_comm(comm.as_raw(), &sizes.0, &mut raw) }, b.as_raw())?;
        Ok(Arena::wrap(raw, b))
    }

    /// The arenas of several ranks driven from one thread (`mdr_arena_create_on_comms`).
    pub fn on_comms(comms: &'b [Comm<'b>], sizes: &Sizes) -> Result<Vec<Arena<'b>>> {
        let raws: Vec<*mut sys::mdr_comm> = comms.iter().map(|c| c.as_raw()).collect();
        let mut out = vec![std::ptr::null_mut(); comms.len()];
        let b = comms.first().map_or(std::ptr::null_mut(), |c| c.backend().as_raw());
        // SAFETY: arrays of comms.len() entries.
        check(unsafe { sys::mdr_arena_create_on_comms(raws.as_ptr(), comms.len() as i32, &sizes.0, out.as_mut_ptr()) }, b)?;
        Ok(out.into_iter().zip(comms).map(|(a, c)| Arena::wrap(a, c.backend())).collect())
    }

    fn wrap(raw: *mut sys::mdr_arena, backend: &'b Backend) -> Arena<'b> {
        Arena { raw: NonNull::new(raw).expect("mdr returned MDR_OK and a NULL arena"), backend, all_reduce_busy: AtomicBool::new(false), _comm: PhantomData }
    }

    /// The backend the arena was made on.
    pub fn backend(&self) -> &'b Backend {
        self.backend
    }

    /// The raw handle, for calls through `mdr_sys`. It stays owned by `self`.
    pub fn as_raw(&self) -> *mut sys::mdr_arena {
        self.raw.as_ptr()
    }

    /// Device address of a buffer (NULL for a 0-byte buffer).
    #[inline]
    pub fn ptr(&self, buf: Buffer) -> DevicePtr {
        // SAFETY: live arena; reads only.
        DevicePtr(unsafe { sys::mdr_arena_ptr(self.raw.as_ptr(), buf.raw()) })
    }

    /// Allocated bytes of a buffer.
    #[inline]
    pub fn bytes(&self, buf: Buffer) -> usize {
        // SAFETY: live arena; reads only.
        unsafe { sys::mdr_arena_bytes(self.raw.as_ptr(), buf.raw()) }
    }

    /// M, the rows of the token-major buffers.
    pub fn max_batch_tokens(&self) -> usize {
        // SAFETY: live arena.
        unsafe { sys::mdr_arena_max_batch_tokens(self.raw.as_ptr()) }
    }

    /// The sizes the arena was made from.
    pub fn sizes(&self) -> &Sizes {
        // SAFETY: the arena's own copy, valid for its life; Sizes is repr(transparent).
        unsafe { &*(sys::mdr_arena_sizes(self.raw.as_ptr()) as *const Sizes) }
    }

    /// Bytes of the single slab allocation.
    pub fn slab_bytes(&self) -> usize {
        // SAFETY: live arena.
        unsafe { sys::mdr_arena_slab_bytes(self.raw.as_ptr()) }
    }

    fn same_backend(&self, stream: &StreamRef) -> Result<()> {
        if stream.backend_raw() == self.backend.as_raw() {
            Ok(())
        } else {
            Err(Error::new(Status::InvalidArgument, "the stream belongs to another backend than the arena's"))
        }
    }

    /// The seed's `zero_all`: enqueue, on `stream`, the clearing of its 18
    /// buffers, whole. Enqueue only; the first failed enqueue is returned and
    /// later buffers are not touched.
    pub fn zero_all(&self, stream: &StreamRef) -> Result<()> {
        self.same_backend(stream)?;
        // SAFETY: live arena, a stream of its backend.
        check(unsafe { sys::mdr_arena_zero_all(self.raw.as_ptr(), stream.as_raw()) }, self.backend.as_raw())
    }

    /// The seed's `zero_all_rows(tokens)`: splitk_workspace, logits and
    /// scratch whole, 15 row buffers for their first `tokens` rows
    /// (docs/SIZES.md §9). Enqueue only, on `stream`; first failure returned.
    pub fn zero_all_rows(&self, stream: &StreamRef, tokens: usize) -> Result<()> {
        self.same_backend(stream)?;
        // SAFETY: as zero_all.
        check(unsafe { sys::mdr_arena_zero_all_rows(self.raw.as_ptr(), stream.as_raw(), tokens) }, self.backend.as_raw())
    }

    /// The seed's `zero_prefill_essentials`: 7 buffers, whole. Enqueue only,
    /// on `stream`; first failure returned.
    pub fn zero_prefill_essentials(&self, stream: &StreamRef) -> Result<()> {
        self.same_backend(stream)?;
        // SAFETY: as zero_all.
        check(unsafe { sys::mdr_arena_zero_prefill_essentials(self.raw.as_ptr(), stream.as_raw()) }, self.backend.as_raw())
    }

    /// The segments `zero_all_rows(tokens)` clears under the current policy, in order.
    pub fn zero_plan(&self, tokens: usize) -> Result<Vec<Segment>> {
        let mut seg = [sys::mdr_segment { ptr: 0, bytes: 0 }; sys::MDR_ZERO_PLAN_MAX];
        let mut n = 0;
        // SAFETY: out holds MDR_ZERO_PLAN_MAX segments.
        check(unsafe { sys::mdr_arena_zero_plan(self.raw.as_ptr(), tokens, seg.as_mut_ptr(), seg.len(), &mut n) }, self.backend.as_raw())?;
        Ok(seg[..n.min(seg.len())].iter().map(|s| Segment { ptr: DevicePtr(s.ptr), bytes: s.bytes }).collect())
    }

    /// Choose how the helpers clear memory (`Fused` needs the CUDA backend).
    pub fn set_zero_strategy(&mut self, z: ZeroStrategy) -> Result<()> {
        // SAFETY: &mut self: no reader at the same time.
        check(unsafe { sys::mdr_arena_set_zero_strategy(self.raw.as_ptr(), z.raw()) }, self.backend.as_raw())
    }

    /// Choose the row policy of `zero_all_rows`.
    pub fn set_rows_policy(&mut self, p: RowsPolicy) -> Result<()> {
        // SAFETY: as set_zero_strategy.
        check(unsafe { sys::mdr_arena_set_rows_policy(self.raw.as_ptr(), p.raw()) }, self.backend.as_raw())
    }

    /// Poison mode of the helpers: `zero_all_rows` also fills what it leaves
    /// of each row-trimmed buffer with 0xFF.
    pub fn set_poison(&mut self, on: bool) -> Result<()> {
        // SAFETY: as set_zero_strategy.
        check(unsafe { sys::mdr_arena_set_poison(self.raw.as_ptr(), on as i32) }, self.backend.as_raw())
    }

    /// Whether poison mode is on.
    pub fn poison(&self) -> bool {
        // SAFETY: live arena.
        unsafe { sys::mdr_arena_poison(self.raw.as_ptr()) != 0 }
    }

    /// The helpers' zero strategy.
    pub fn zero_strategy(&self) -> ZeroStrategy {
        // SAFETY: live arena.
        ZeroStrategy::from_raw(unsafe { sys::mdr_arena_zero_strategy(self.raw.as_ptr()) }).expect("an arena's strategy")
    }

    /// The helpers' row policy.
    pub fn rows_policy(&self) -> RowsPolicy {
        // SAFETY: live arena.
        RowsPolicy::from_raw(unsafe { sys::mdr_arena_rows_policy(self.raw.as_ptr()) }).expect("an arena's policy")
    }

    fn range(&self, buf: Buffer, offset: usize, n: usize) -> Result<DevicePtr> {
        let len = self.bytes(buf);
        match offset.checked_add(n) {
            Some(end) if end <= len => Ok(self.ptr(buf).offset(offset)),
            _ => Err(Error::new(Status::OutOfRange, format!("{}: {n} bytes at offset {offset} pass its {len} bytes", buf.name()))),
        }
    }

    /// Blocking copy of `src` into `buf` from byte `offset` (tests, setup;
    /// not capture-safe). Bounds-checked.
    pub fn write(&self, buf: Buffer, offset: usize, src: &[u8]) -> Result<()> {
        let p = self.range(buf, offset, src.len())?;
        // SAFETY: in bounds of the arena's buffer.
        unsafe { self.backend.copy_h2d(p, src) }
    }

    /// Blocking copy of `dst.len()` bytes of `buf` from byte `offset`. Bounds-checked.
    pub fn read(&self, buf: Buffer, offset: usize, dst: &mut [u8]) -> Result<()> {
        let p = self.range(buf, offset, dst.len())?;
        // SAFETY: in bounds of the arena's buffer.
        unsafe { self.backend.copy_d2h(dst, p) }
    }

    /// Blocking fill of the whole of `buf` with `value`.
    pub fn fill(&self, buf: Buffer, value: u8) -> Result<()> {
        let n = self.bytes(buf);
        if n == 0 {
            return Ok(());
        }
        // SAFETY: the arena's buffer.
        unsafe { self.backend.fill(self.ptr(buf), value, n) }
    }

    /// Enqueue on `stream` a memset of `n` bytes of `buf` from `offset`:
    /// capture-safe, what a graph cache body may call. Bounds-checked.
    pub fn memset_async(&self, stream: &StreamRef, buf: Buffer, offset: usize, value: u8, n: usize) -> Result<()> {
        self.same_backend(stream)?;
        let p = self.range(buf, offset, n)?;
        // SAFETY: in bounds of the arena's buffer, which outlives the stream's work
        // (the arena is synchronized before it is freed).
        unsafe { stream.memset_async(p, value, n) }
    }

    /// How the slab is shared with its peers.
    pub fn window(&self) -> Window {
        // SAFETY: live arena.
        match unsafe { sys::mdr_arena_window(self.raw.as_ptr()) } {
            sys::MDR_WINDOW_SYMMETRIC => Window::Symmetric,
            sys::MDR_WINDOW_PLAIN => Window::Plain,
            sys::MDR_WINDOW_HOST => Window::Host,
            _ => Window::None,
        }
    }

    /// Enqueue the all-reduce `d` on `stream` (`mdr_all_reduce`:
    /// collective, capture-safe: call it from a body). One thread per rank:
    /// a second thread's call while one is in flight is refused with `State`.
    pub fn all_reduce(&self, d: &AllReduce, stream: &StreamRef) -> Result<()> {
        self.same_backend(stream)?;
        if self.all_reduce_busy.swap(true, Ordering::Acquire) {
            return Err(Error::new(Status::State, "all_reduce: another thread is in an all-reduce of this rank"));
        }
        let raw = d.raw();
        // SAFETY: live arena, a stream of its backend, one caller at a time.
        let st = unsafe { sys::mdr_all_reduce(self.raw.as_ptr(), &raw, stream.as_raw()) };
        self.all_reduce_busy.store(false, Ordering::Release);
        check(st, self.backend.as_raw())
    }

    /// What `all_reduce(d)` would run; `None` when it would be refused.
    pub fn all_reduce_choice(&self, d: &AllReduce) -> Option<AllReduceAlgo> {
        let raw = d.raw();
        // SAFETY: reads only.
        AllReduceAlgo::from_raw(unsafe { sys::mdr_all_reduce_choice(self.raw.as_ptr(), &raw) })
    }

    /// Where `all_reduce(d)` would run `d`'s RMSNorm (`mdr_all_reduce_norm_fused`):
    /// `Some(true)` in the all-reduce's own kernel, `Some(false)` in a kernel of
    /// its own after it; `None` without a norm or when the call would be refused.
    pub fn all_reduce_norm_fused(&self, d: &AllReduce) -> Option<bool> {
        let raw = d.raw();
        // SAFETY: reads only.
        match unsafe { sys::mdr_all_reduce_norm_fused(self.raw.as_ptr(), &raw) } {
            r if r < 0 => None,
            r => Some(r != 0),
        }
    }

    /// Whether mdr's own all-reduce kernels can run on this arena.
    pub fn all_reduce_kernels(&self) -> bool {
        // SAFETY: reads only.
        unsafe { sys::mdr_all_reduce_kernels(self.raw.as_ptr()) != 0 }
    }
}

impl Drop for Arena<'_> {
    fn drop(&mut self) {
        // Work enqueued on the arena's buffers must have finished: the
        // caches over it (which synchronize their stream when destroyed) are
        // gone; a stream the helpers used is the caller's to synchronize.
        // SAFETY: owned handle.
        unsafe { sys::mdr_arena_destroy(self.raw.as_ptr()) }
    }
}

impl std::fmt::Debug for Arena<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Arena({} bytes, M = {}, on {})", self.slab_bytes(), self.max_batch_tokens(), self.backend.name())
    }
}

