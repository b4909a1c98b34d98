//! `GraphCache` with Rust bodies, its `Options` and the trampolines.
use crate::arena::{Arena, RowsPolicy, ZeroStrategy};
use crate::backend::{DeviceBuffer, DevicePtr, StreamRef};
use crate::error::{check, last_error, Error, Result, Status};
use crate::inputs::{StepInput, StepInputInfo, Values};
use mdr_sys as sys;
use std::any::Any;
use std::cell::{Cell, RefCell};
use std::ffi::{c_void, CString};
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::NonNull;

/// How a cache maps token counts to graphs (`mdr_graph_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Mode {
    /// One graph per exact token count.
    #[default]
    Exact,
    /// Pad up to the next ladder rung (pad ids = `pad_token_id`).
    Ladder,
    /// One graph for every count (the count is read on the device); needs
    /// `ZeroStrategy::Fused` and a dynamic body (or none).
    Dynamic,
}

/// How a DYNAMIC graph learns each step's count (`mdr_graph_dynamic_impl`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum DynamicImpl {
    /// Re-target the fused node when the count changes (default).
    #[default]
    NodeUpdate,
    /// The graph reads the count from mapped host memory.
    DeviceCount,
}

/// A body of kind 1 (EXACT and LADDER): the engine's decode work for one
/// step, given the stream and the graph's token count.
pub type Body<'a> = Box<dyn FnMut(&StreamRef, usize) -> Result<()> + 'a>;
/// A body of kind 2 (every mode): given the stream, the device address of
/// the step's uint32 token count and the graph's token count (`max_tokens`).
pub type DynamicBody<'a> = Box<dyn FnMut(&StreamRef, DevicePtr, usize) -> Result<()> + 'a>;

enum BodyKind<'a> {
    Plain(RefCell<Body<'a>>),
    Dynamic(RefCell<DynamicBody<'a>>),
}

/// Options of a graph cache (`mdr_graph_cache_options`); `Default` is the
/// C default: EXACT, strategy and row policy of the arena, default ladder,
/// unlimited graphs, pad id 0, no body, no step inputs besides the ids.
pub struct Options<'a> {
    /// Graph per count, ladder or dynamic.
    pub mode: Mode,
    /// Zero strategy of the graphs; `None`: the arena's at create.
    pub zero: Option<ZeroStrategy>,
    /// LADDER rungs (strictly increasing, >= 1); `None`: the default ladder.
    pub ladder: Option<Vec<usize>>,
    /// LRU cap on live graphs; 0: unlimited.
    pub max_graphs: usize,
    /// Id of the padded tokens (LADDER).
    pub pad_token_id: u32,
    /// DYNAMIC implementation.
    pub dynamic_impl: DynamicImpl,
    /// Row policy of the graphs; `None`: the arena's at create.
    pub rows: Option<RowsPolicy>,
    /// Poison mode (rows past the count filled with 0xFF every step).
    pub poison: bool,
    /// LRU cap on the graphs' device memory; 0: none.
    pub max_graph_bytes: u64,
    /// The most sequences of a step (for [`InputShape::PerSequence`](crate::InputShape::PerSequence)
    /// inputs and the sequence count); 0 means max_batch_tokens, at most that.
    pub max_sequences: usize,
    body: Option<BodyKind<'a>>,
    inputs: Vec<StepInput<'a>>,
}

impl Default for Options<'_> {
    fn default() -> Self {
        Options {
            mode: Mode::Exact,
            zero: None,
            ladder: None,
            max_graphs: 0,
            pad_token_id: 0,
            dynamic_impl: DynamicImpl::NodeUpdate,
            rows: None,
            poison: false,
            max_graph_bytes: 0,
            max_sequences: 0,
            body: None,
            inputs: Vec::new(),
        }
    }
}

impl<'a> Options<'a> {
    /// These options with `mode`.
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }
    /// These options with a zero strategy.
    pub fn zero(mut self, z: ZeroStrategy) -> Self {
        self.zero = Some(z);
        self
    }
    /// These options with a row policy.
    pub fn rows(mut self, p: RowsPolicy) -> Self {
        self.rows = Some(p);
        self
    }
    /// These options with a ladder.
    pub fn ladder(mut self, rungs: Vec<usize>) -> Self {
        self.ladder = Some(rungs);
        self
    }
    /// These options with a DYNAMIC implementation.
    pub fn dynamic_impl(mut self, i: DynamicImpl) -> Self {
        self.dynamic_impl = i;
        self
    }
    /// These options with one more step input, after those declared before
    /// (its index in [`GraphCache::decode_meta`] and in the values of
    /// [`GraphCache::step_inputs`] is its place here; index 0 of the layout
    /// is the ids). At most 16 (`MDR_STEP_INPUTS_MAX`).
    pub fn input(mut self, input: StepInput<'a>) -> Self {
        self.inputs.push(input);
        self
    }
    /// These options with the most sequences of a step (0: max_batch_tokens).
    pub fn max_sequences(mut self, n: usize) -> Self {
        self.max_sequences = n;
        self
    }
    /// The step inputs declared so far.
    pub fn inputs(&self) -> &[StepInput<'a>] {
        &self.inputs
    }
    /// These options with a body of kind 1 (`FnMut(&StreamRef, tokens)`),
    /// replacing any body given before. Rules (graph.h): only enqueue work
    /// on the stream it gets; no allocation, no synchronisation.
    pub fn body(mut self, f: impl FnMut(&StreamRef, usize) -> Result<()> + 'a) -> Self {
        self.body = Some(BodyKind::Plain(RefCell::new(Box::new(f))));
        self
    }
    /// These options with a body of kind 2 (`FnMut(&StreamRef, count_ptr,
    /// max_tokens)`), the only kind DYNAMIC takes; replaces any body given before.
    pub fn body_dynamic(mut self, f: impl FnMut(&StreamRef, DevicePtr, usize) -> Result<()> + 'a) -> Self {
        self.body = Some(BodyKind::Dynamic(RefCell::new(Box::new(f))));
        self
    }
}

impl std::fmt::Debug for Options<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("mode", &self.mode)
            .field("zero", &self.zero)
            .field("ladder", &self.ladder)
            .field("max_graphs", &self.max_graphs)
            .field("pad_token_id", &self.pad_token_id)
            .field("dynamic_impl", &self.dynamic_impl)
            .field("rows", &self.rows)
            .field("poison", &self.poison)
            .field("max_graph_bytes", &self.max_graph_bytes)
            .field("max_sequences", &self.max_sequences)
            .field("inputs", &self.inputs.iter().map(|i| i.name()).collect::<Vec<_>>())
            .field("body", &self.body.as_ref().map(|b| match b { BodyKind::Plain(_) => "plain", BodyKind::Dynamic(_) => "dynamic" }))
            .finish()
    }
}

/// What the trampolines reach through `user`.
struct BodyState<'a> {
    kind: BodyKind<'a>,
    backend: NonNull<sys::mdr_backend>,
    /// The first failure of a body since the last step began: (panicked, error).
    failure: Cell<Option<Error>>,
}

fn panic_text(p: &(dyn Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-string payload".to_string()
    }
}

/// The status a panicking body returns to C: the capture is aborted (or
/// the eager step fails) with it; the step then returns the panic's text.
const PANIC_STATUS: sys::mdr_status = sys::MDR_ERR_STATE;

fn finish_body(state: &BodyState<'_>, r: std::thread::Result<Result<()>>) -> sys::mdr_status {
    match r {
        Ok(Ok(())) => sys::MDR_OK,
        Ok(Err(e)) => {
            let st = e.status().raw();
            let old = state.failure.take();
            state.failure.set(Some(old.unwrap_or(e)));
            st
        }
        Err(p) => {
            let text = panic_text(&*p);
            // The payload is dropped here; a payload whose drop panics would
            // abort, never unwind into C.
            let guard = AbortOnUnwind;
            drop(p);
            std::mem::forget(guard);
            let old = state.failure.take();
            state.failure.set(Some(match old {
                Some(e) if e.panicked() => e,
                _ => Error::panic(Status::State, format!("body panicked: {text}")),
            }));
            PANIC_STATUS
        }
    }
}

struct AbortOnUnwind;
impl Drop for AbortOnUnwind {
    fn drop(&mut self) {
        std::process::abort();
    }
}

unsafe extern "C" fn trampoline(user: *mut c_void, stream: sys::mdr_stream, tokens: usize) -> sys::mdr_status {
    // SAFETY: `user` is the cache's BodyState, alive for the cache's life.
    let state = &*(user as *const BodyState<'_>);
    let sref = StreamRef::from_parts(stream, state.backend);
    let r = catch_unwind(AssertUnwindSafe(|| match &state.kind {
        BodyKind::Plain(f) => (f.borrow_mut())(&sref, tokens),
        BodyKind::Dynamic(_) => Err(Error::new(Status::State, "a dynamic body called as a plain one")),
    }));
    finish_body(state, r)
}

unsafe extern "C" fn trampoline_dynamic(user: *mut c_void, stream: sys::mdr_stream, count_ptr: sys::mdr_dptr, max_tokens: usize) -> sys::mdr_status {
    // SAFETY: as trampoline.
    let state = &*(user as *const BodyState<'_>);
    let sref = StreamRef::from_parts(stream, state.backend);
    let r = catch_unwind(AssertUnwindSafe(|| match &state.kind {
        BodyKind::Dynamic(f) => (f.borrow_mut())(&sref, DevicePtr(count_ptr), max_tokens),
        BodyKind::Plain(_) => Err(Error::new(Status::State, "a plain body called as a dynamic one")),
    }));
    finish_body(state, r)
}

/// Counters of a cache (`mdr_graph_stats`).
pub type GraphStats = sys::mdr_graph_stats;
/// What the graph serving a count holds (`mdr_graph_info`).
pub type GraphInfo = sys::mdr_graph_info;

/// A graph cache (`mdr_graph_cache`): each step's zeroing, token-id upload
/// and body captured into a graph per token count and replayed.
///
/// It borrows its arena and stream (both outlive it; its body may borrow
/// them too). A cache belongs to one thread and one stream
/// (docs/THREADS.md): it is neither `Send` nor `Sync`.
///
/// ```compile_fail
/// fn to_thread<T: Send>(_: T) {}
/// let backend = mdr::Backend::host().unwrap();
/// let limits = mdr::Limits { max_batch_tokens: 8, max_seq_len: 64, kv_block_size: 16, max_batch_size: 2 };
/// let arena = mdr::Arena::from_preset(&backend, "qwen3-next-80b", limits).unwrap();
/// let stream = backend.stream().unwrap();
/// let cache = mdr::GraphCache::new(&arena, &stream, mdr::Options::default()).unwrap();
/// to_thread(cache); // error: a cache belongs to one thread
/// ```
///
/// ```compile_fail
/// let backend = mdr::Backend::host().unwrap();
/// let limits = mdr::Limits { max_batch_tokens: 8, max_seq_len: 64, kv_block_size: 16, max_batch_size: 2 };
/// let arena = mdr::Arena::from_preset(&backend, "qwen3-next-80b", limits).unwrap();
/// let stream = backend.stream().unwrap();
/// let cache = mdr::GraphCache::new(&arena, &stream, mdr::Options::default()).unwrap();
/// drop(stream); // error: `stream` is borrowed by `cache`
/// drop(cache);
/// ```
///
/// A body cannot keep the stream it is given past the call:
///
/// ```compile_fail
/// let backend = mdr::Backend::host().unwrap();
/// let limits = mdr::Limits { max_batch_tokens: 8, max_seq_len: 64, kv_block_size: 16, max_batch_size: 2 };
/// let arena = mdr::Arena::from_preset(&backend, "qwen3-next-80b", limits).unwrap();
/// let stream = backend.stream().unwrap();
/// let mut kept = None;
/// let opts = mdr::Options::default().body(|s: &mdr::StreamRef, _t: usize| { kept = Some(s); Ok(()) });
/// let cache = mdr::GraphCache::new(&arena, &stream, opts).unwrap();
/// ```
pub struct GraphCache<'a> {
    raw: NonNull<sys::mdr_graph_cache>,
    backend: NonNull<sys::mdr_backend>,
    body: *mut BodyState<'a>,
    /// The layout (index 0: the ids), read once at create.
    layout: Vec<StepInputInfo>,
    /// The resolved most sequences of a step.
    max_sequences: usize,
    _borrows: PhantomData<(&'a Arena<'a>, &'a StreamRef)>,
}

impl<'a> GraphCache<'a> {
    /// A cache over `arena` capturing and replaying on `stream`
    /// (`mdr_graph_cache_create`). The stream must belong to the arena's backend.
    pub fn new(arena: &'a Arena<'_>, stream: &'a StreamRef, options: Options<'a>) -> Result<GraphCache<'a>> {
        let backend = NonNull::new(arena.backend().as_raw()).unwrap();
        if stream.backend_raw() != backend.as_ptr() {
            return Err(Error::new(Status::InvalidArgument, "graph cache: the stream belongs to another backend than the arena's"));
        }
        let mut o: sys::mdr_graph_cache_options = unsafe { std::mem::zeroed() };
        // SAFETY: valid out-param.
        unsafe { sys::mdr_graph_cache_options_default(&mut o) };
        o.mode = match options.mode {
            Mode::Exact => sys::MDR_GRAPH_EXACT,
            Mode::Ladder => sys::MDR_GRAPH_LADDER,
            Mode::Dynamic => sys::MDR_GRAPH_DYNAMIC,
        };
        o.zero = options.zero.map_or(sys::MDR_ZERO_FROM_ARENA, |z| z.raw());
        o.rows = options.rows.map_or(sys::MDR_ROWS_FROM_ARENA, |p| p.raw());
        if let Some(l) = &options.ladder {
            o.ladder = l.as_ptr();
            o.ladder_len = l.len();
        }
        o.max_graphs = options.max_graphs;
        o.pad_token_id = options.pad_token_id;
        o.dynamic_impl = match options.dynamic_impl {
            DynamicImpl::NodeUpdate => sys::MDR_DYNAMIC_NODE_UPDATE,
            DynamicImpl::DeviceCount => sys::MDR_DYNAMIC_DEVICE_COUNT,
        };
        o.poison = options.poison as i32;
        o.max_graph_bytes = options.max_graph_bytes;
        o.max_sequences = options.max_sequences;
        // The declarations; their names live until create has copied them.
        let mut names = Vec::with_capacity(options.inputs.len());
        for i in &options.inputs {
            names.push(CString::new(i.name.as_str()).map_err(|_| Error::new(Status::InvalidArgument, format!("step input {:?}: a name with a NUL byte", i.name)))?);
        }
        let raw_inputs = options.inputs.iter().zip(&names).map(|(i, n)| i.raw(backend.as_ptr(), n)).collect::<Result<Vec<_>>>()?;
        if !raw_inputs.is_empty() {
            o.inputs = raw_inputs.as_ptr();
            o.n_inputs = raw_inputs.len();
        }
        let body = match options.body {
            None => std::ptr::null_mut(),
            Some(kind) => {
                match kind {
                    BodyKind::Plain(_) => o.body = Some(trampoline),
                    BodyKind::Dynamic(_) => o.body_dynamic = Some(trampoline_dynamic),
                }
                Box::into_raw(Box::new(BodyState { kind, backend, failure: Cell::new(None) }))
            }
        };
        o.user = body as *mut c_void;
        let mut raw = std::ptr::null_mut();
        // SAFETY: valid arena, stream of its backend, options (ladder copied at create).
        let st = unsafe { sys::mdr_graph_cache_create(arena.as_raw(), stream.as_raw(), &o, &mut raw) };
        if let Err(e) = check(st, backend.as_ptr()) {
            if !body.is_null() {
                // SAFETY: ours, never handed to a live cache.
                drop(unsafe { Box::from_raw(body) });
            }
            return Err(e);
        }
        let max_sequences = if options.max_sequences == 0 { arena.max_batch_tokens() } else { options.max_sequences };
        let mut cache = GraphCache { raw: NonNull::new(raw).expect("a cache"), backend, body, layout: Vec::new(), max_sequences, _borrows: PhantomData };
        // On failure from here, dropping `cache` frees the C cache and the body.
        cache.layout = cache.decode_meta();
        for (decl, info) in options.inputs.iter().zip(cache.layout.iter().skip(1)) {
            decl.check_extent(info)?;
        }
        Ok(cache)
    }

    /// MDR_OK, or the error: a body's failure or panic of this call first.
    #[inline]
    fn finish(&self, st: sys::mdr_status) -> Result<()> {
        let Some(status) = Status::from_raw(st) else { return Ok(()) };
        let text = last_error(self.backend.as_ptr());
        // SAFETY: the BodyState lives as long as self; no body runs now.
        let failure = if self.body.is_null() { None } else { unsafe { (*self.body).failure.take() } };
        Err(match failure {
            Some(f) if f.panicked() => Error::panic(status, format!("{}; {text}", f.message())),
            Some(f) => Error::new(status, format!("{text}; the body returned: {f}")),
            None => Error::new(status, text),
        })
    }

    #[inline]
    fn begin(&mut self) {
        if !self.body.is_null() {
            // SAFETY: as finish.
            unsafe { (*self.body).failure.set(None) };
        }
    }

    /// One decode step (`mdr_graph_cache_step`): stage `token_ids`, replay
    /// the graph of `token_ids.len()` tokens (capturing it on a miss).
    /// Asynchronous on the cache's stream. An `Err` whose
    /// [`step_enqueued`](Error::step_enqueued) is true ran eagerly and is enqueued.
    #[inline]
    pub fn step(&mut self, token_ids: &[u32]) -> Result<()> {
        self.begin();
        // SAFETY: live cache; ids valid for the call (copied into a staging slot).
        let st = unsafe { sys::mdr_graph_cache_step(self.raw.as_ptr(), token_ids.as_ptr(), token_ids.len()) };
        self.finish(st)
    }

    /// A step whose `tokens` ids are already in the arena's `token_ids`
    /// (the previous body wrote them; `mdr_graph_cache_step_device` with 0).
    pub fn step_from_arena(&mut self, tokens: usize) -> Result<()> {
        self.begin();
        // SAFETY: address 0: the arena's own buffer.
        let st = unsafe { sys::mdr_graph_cache_step_device(self.raw.as_ptr(), 0, tokens) };
        self.finish(st)
    }

    /// A step whose ids are the first `tokens` uint32 of `ids`, device
    /// memory that outlives the cache (its address is captured into graphs).
    /// Ids in a buffer the step's zeroing clears, in an input's
    /// destination, or partly over token_ids are refused
    /// (`Status::InvalidArgument`): the step's launch writes those as it
    /// reads the ids.
    pub fn step_device(&mut self, ids: &'a DeviceBuffer<'_>, tokens: usize) -> Result<()> {
        if tokens.checked_mul(4).map_or(true, |n| n > ids.len()) {
            return Err(Error::new(Status::OutOfRange, format!("step_device: {tokens} ids pass the buffer's {} bytes", ids.len())));
        }
        self.begin();
        // SAFETY: in bounds; the buffer outlives the cache ('a).
        let st = unsafe { sys::mdr_graph_cache_step_device(self.raw.as_ptr(), ids.ptr().0, tokens) };
        self.finish(st)
    }

    /// A step with ids at any device address (`mdr_graph_cache_step_device`).
    ///
    /// # Safety
    /// `ids` must hold `tokens` uint32 of device memory of the cache's
    /// backend, written before the step on its stream, and stay allocated
    /// while any graph captured with that address may replay.
    pub unsafe fn step_device_raw(&mut self, ids: DevicePtr, tokens: usize) -> Result<()> {
        self.begin();
        let st = sys::mdr_graph_cache_step_device(self.raw.as_ptr(), ids.0, tokens);
        self.finish(st)
    }

    /// The pointers C gets for one step's inputs, checked: the counts'
    /// ranges, then each input's values against the layout.
    #[inline]
    fn stage_values(&self, ids: *const u32, tokens: usize, sequences: usize, values: &[Values<'_>]) -> Result<[*const c_void; 1 + sys::MDR_STEP_INPUTS_MAX]> {
        let m = self.layout[0].max_rows;
        if tokens == 0 || tokens > m {
            return Err(Error::new(Status::OutOfRange, format!("step_inputs: {tokens} tokens, 1 .. {m}")));
        }
        let smax = tokens.min(self.max_sequences);
        if sequences == 0 || sequences > smax {
            return Err(Error::new(Status::OutOfRange, format!("step_inputs: {sequences} sequences, 1 .. {smax} (min(tokens, max_sequences))")));
        }
        if values.len() + 1 != self.layout.len() {
            return Err(Error::new(Status::InvalidArgument, format!("step_inputs: values of {} inputs, the cache declares {}", values.len(), self.layout.len() - 1)));
        }
        let mut ptrs = [std::ptr::null(); 1 + sys::MDR_STEP_INPUTS_MAX];
        ptrs[0] = ids as *const c_void;
        for (k, (v, info)) in values.iter().zip(&self.layout[1..]).enumerate() {
            ptrs[1 + k] = v.check(info, tokens, sequences)?;
        }
        Ok(ptrs)
    }

    /// One decode step with its step inputs (`mdr_graph_cache_step_inputs`):
    /// the ids, the step's sequence count (1 ..= min(tokens,
    /// max_sequences)) and one [`Values`] per declared input, in
    /// declaration order. Everything is copied into a staging slot before
    /// the call returns. Rows past the step's counts, up to the graph's
    /// bound, get each input's pad (EXACT and LADDER).
    ///
    /// Checked before anything is staged: `OutOfRange` for a count out of
    /// range; `InvalidArgument` for a number of values other than the
    /// declared inputs, a slice of another element size or of another
    /// length than the step's rows times the width, host values for an
    /// input in device memory or [`Values::DEVICE`] for one that is not.
    /// Otherwise as [`step`](Self::step).
    ///
    /// ```
    /// use mdr::{Buffer, InputShape, StepInput, Values};
    /// let backend = mdr::Backend::host()?;
    /// let limits = mdr::Limits { max_batch_tokens: 8, max_seq_len: 64, kv_block_size: 16, max_batch_size: 2 };
    /// let arena = mdr::Arena::from_preset(&backend, "qwen3-next-80b", limits)?;
    /// let stream = backend.stream()?;
    /// let options = mdr::Options::default()
    ///     .max_sequences(2)
    ///     .input(StepInput::new("positions", 4, InputShape::PerToken).to_arena(Buffer::Fp8Act, 0))
    ///     .input(StepInput::new("seq_lens", 4, InputShape::PerSequence).to_arena(Buffer::Fp8Act, 64));
    /// let mut cache = mdr::GraphCache::new(&arena, &stream, options)?;
    /// let positions = [7u32, 8, 3];
    /// let seq_lens = [9u32, 4];
    /// cache.step_inputs(&[11, 12, 13], 2, &[Values::of(&positions), Values::of(&seq_lens)])?;
    /// stream.synchronize()?;
    /// # Ok::<(), mdr::Error>(())
    /// ```
    pub fn step_inputs(&mut self, token_ids: &[u32], sequences: usize, values: &[Values<'_>]) -> Result<()> {
        let ptrs = self.stage_values(token_ids.as_ptr(), token_ids.len(), sequences, values)?;
        self.begin();
        // SAFETY: live cache; every pointer checked against the layout at these counts; copied before return.
        let st = unsafe { sys::mdr_graph_cache_step_inputs(self.raw.as_ptr(), ptrs.as_ptr(), self.layout.len(), token_ids.len(), sequences) };
        self.finish(st)
    }

    /// [`step_inputs`](Self::step_inputs) with the ids in device memory
    /// (`mdr_graph_cache_step_inputs_device`): the first `tokens` uint32 of
    /// `ids`, or `None` when they are in the arena's token_ids already. The
    /// step copies the ids and the inputs in no set order, so `ids` must not
    /// overlap an input's destination (refused, as for
    /// [`step_device`](Self::step_device)).
    pub fn step_inputs_device(&mut self, ids: Option<&'a DeviceBuffer<'_>>, tokens: usize, sequences: usize, values: &[Values<'_>]) -> Result<()> {
        if let Some(b) = ids {
            if tokens.checked_mul(4).map_or(true, |n| n > b.len()) {
                return Err(Error::new(Status::OutOfRange, format!("step_inputs_device: {tokens} ids pass the buffer's {} bytes", b.len())));
            }
        }
        // SAFETY: the buffer outlives the cache ('a) and holds the ids.
        unsafe { self.step_inputs_device_raw(ids.map_or(DevicePtr::NULL, |b| b.ptr()), tokens, sequences, values) }
    }

    /// [`step_inputs_device`](Self::step_inputs_device) with ids at any
    /// device address (0: the arena's token_ids).
    ///
    /// # Safety
    /// As [`step_device_raw`](Self::step_device_raw).
    pub unsafe fn step_inputs_device_raw(&mut self, ids: DevicePtr, tokens: usize, sequences: usize, values: &[Values<'_>]) -> Result<()> {
        let ptrs = self.stage_values(std::ptr::null(), tokens, sequences, values)?;
        self.begin();
        let st = sys::mdr_graph_cache_step_inputs_device(self.raw.as_ptr(), ids.0, ptrs.as_ptr(), self.layout.len(), tokens, sequences);
        self.finish(st)
    }

    /// The step-input layout, the seed's `decode_meta`: one
    /// [`StepInputInfo`] per input, index 0 the token ids, then the
    /// declared inputs in order (`mdr_graph_cache_step_input_info` for each).
    pub fn decode_meta(&self) -> Vec<StepInputInfo> {
        // SAFETY: live cache.
        let n = unsafe { sys::mdr_graph_cache_step_input_count(self.raw.as_ptr()) };
        (0..n)
            .filter_map(|k| {
                // SAFETY: plain data, filled on success; the name is the cache's, copied at once.
                let mut i: sys::mdr_step_input_info = unsafe { std::mem::zeroed() };
                let st = unsafe { sys::mdr_graph_cache_step_input_info(self.raw.as_ptr(), k, &mut i) };
                (st == sys::MDR_OK).then(|| unsafe { StepInputInfo::from_raw(&i) })
            })
            .collect()
    }

    /// The index of the input called `name` in [`decode_meta`](Self::decode_meta)
    /// ("token_ids": 0); `OutOfRange` when there is none.
    pub fn step_input_index(&self, name: &str) -> Result<usize> {
        let c = CString::new(name).map_err(|_| Error::new(Status::InvalidArgument, "step_input_index: a name with a NUL byte"))?;
        let mut k = 0;
        // SAFETY: live cache, C string valid for the call.
        check(unsafe { sys::mdr_graph_cache_step_input_find(self.raw.as_ptr(), c.as_ptr(), &mut k) }, self.backend.as_ptr())
            .map_err(|e| Error::new(e.status(), format!("no step input {name:?}")))?;
        Ok(k)
    }

    /// Bytes of one staging slot (header, ids and host inputs at their
    /// largest counts); the ring holds 8 of them in pinned memory.
    pub fn slot_bytes(&self) -> usize {
        // SAFETY: live cache.
        unsafe { sys::mdr_graph_cache_slot_bytes(self.raw.as_ptr()) }
    }

    /// The most sequences of a step (resolved at create).
    pub fn max_sequences(&self) -> usize {
        self.max_sequences
    }

    /// Device address of the uint32 holding the step's real sequence count
    /// (written by every step before the body runs; a step without one has
    /// one per token, up to max_sequences).
    pub fn sequences_ptr(&self) -> DevicePtr {
        // SAFETY: live cache.
        DevicePtr(unsafe { sys::mdr_graph_cache_sequences_ptr(self.raw.as_ptr()) })
    }

    /// The per-sequence rows the graph serving `tokens` holds: min(graph
    /// tokens, max_sequences) in EXACT and LADDER, max_sequences in DYNAMIC.
    pub fn sequence_bound(&self, tokens: usize) -> Result<usize> {
        let mut n = 0;
        // SAFETY: live cache.
        check(unsafe { sys::mdr_graph_cache_sequence_bound(self.raw.as_ptr(), tokens, &mut n) }, self.backend.as_ptr())?;
        Ok(n)
    }

    /// Capture ahead of time the graphs serving these counts (`mdr_graph_cache_prepare`).
    pub fn prepare(&mut self, counts: &[usize]) -> Result<()> {
        self.begin();
        // SAFETY: live cache, counts valid for the call.
        let st = unsafe { sys::mdr_graph_cache_prepare(self.raw.as_ptr(), counts.as_ptr(), counts.len()) };
        self.finish(st)
    }

    /// `prepare` for device steps with ids in `ids` (`None`: in the arena's token_ids).
    pub fn prepare_device(&mut self, ids: Option<&'a DeviceBuffer<'_>>, counts: &[usize]) -> Result<()> {
        let p = ids.map_or(0, |b| b.ptr().0);
        if let Some(b) = ids {
            if counts.iter().any(|&t| t.checked_mul(4).map_or(true, |n| n > b.len())) {
                return Err(Error::new(Status::OutOfRange, "prepare_device: a count passes the ids buffer"));
            }
        }
        self.begin();
        // SAFETY: as step_device.
        let st = unsafe { sys::mdr_graph_cache_prepare_device(self.raw.as_ptr(), p, counts.as_ptr(), counts.len()) };
        self.finish(st)
    }

    /// Device address of the uint32 holding the step's real token count.
    pub fn count_ptr(&self) -> DevicePtr {
        // SAFETY: live cache.
        DevicePtr(unsafe { sys::mdr_graph_cache_count_ptr(self.raw.as_ptr()) })
    }

    /// The zero strategy the graphs use (resolved at create).
    pub fn zero_strategy(&self) -> ZeroStrategy {
        // SAFETY: live cache.
        ZeroStrategy::from_raw(unsafe { sys::mdr_graph_cache_zero_strategy(self.raw.as_ptr()) }).expect("resolved")
    }

    /// The row policy the graphs use (resolved at create).
    pub fn rows_policy(&self) -> RowsPolicy {
        // SAFETY: live cache.
        RowsPolicy::from_raw(unsafe { sys::mdr_graph_cache_rows_policy(self.raw.as_ptr()) }).expect("resolved")
    }

    /// The graph token count serving `tokens`.
    pub fn graph_tokens(&self, tokens: usize) -> Result<usize> {
        let mut n = 0;
        // SAFETY: live cache.
        check(unsafe { sys::mdr_graph_cache_graph_tokens(self.raw.as_ptr(), tokens, &mut n) }, self.backend.as_ptr())?;
        Ok(n)
    }

    /// What the graph serving `tokens` holds.
    pub fn graph_info(&self, tokens: usize) -> Result<GraphInfo> {
        // SAFETY: plain data, filled on success.
        let mut i: GraphInfo = unsafe { std::mem::zeroed() };
        check(unsafe { sys::mdr_graph_cache_graph_info(self.raw.as_ptr(), tokens, &mut i) }, self.backend.as_ptr())?;
        Ok(i)
    }

    /// The counters.
    pub fn stats(&self) -> GraphStats {
        // SAFETY: plain data; a live cache and out-param never fail.
        let mut s: GraphStats = unsafe { std::mem::zeroed() };
        unsafe { sys::mdr_graph_cache_stats(self.raw.as_ptr(), &mut s) };
        s
    }

    /// The raw handle. It stays owned by `self`.
    pub fn as_raw(&self) -> *mut sys::mdr_graph_cache {
        self.raw.as_ptr()
    }
}

impl Drop for GraphCache<'_> {
    fn drop(&mut self) {
        // The C cache first (it waits for its stream and never calls the
        // body again), then the body it pointed at.
        // SAFETY: owned handle; the BodyState was ours.
        unsafe {
            sys::mdr_graph_cache_destroy(self.raw.as_ptr());
            if !self.body.is_null() {
                drop(Box::from_raw(self.body));
            }
        }
    }
}

impl std::fmt::Debug for GraphCache<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GraphCache({} steps)", self.stats().steps)
    }
}
