//! Safe Rust bindings of **libmdr**, the metrale decode runtime: an arena of
//! activation buffers with the seed's own accessor names, zeroing helpers,
//! graph caches (EXACT, LADDER, DYNAMIC) whose bodies are Rust closures, and
//! communicators for tensor parallelism.
//!
//! ```no_run
//! let backend = mdr::Backend::cuda(0).or_else(|_| mdr::Backend::host())?;
//! let limits = mdr::Limits { max_batch_tokens: 64, max_seq_len: 4096, kv_block_size: 16, max_batch_size: 4 };
//! let arena = mdr::Arena::from_preset(&backend, "qwen3-next-80b", limits)?;
//! let stream = backend.stream()?;
//! arena.zero_all(&stream)?;
//! let row = arena.hidden_states_bytes() / arena.max_batch_tokens();
//! let options = mdr::Options::default().body(|s: &mdr::StreamRef, tokens: usize| {
//!     arena.memset_async(s, mdr::Buffer::HiddenStates, 0, 0x01, tokens * row)
//! });
//! let mut cache = mdr::GraphCache::new(&arena, &stream, options)?;
//! cache.step(&[1, 2, 3])?;
//! stream.synchronize()?;
//! # Ok::<(), mdr::Error>(())
//! ```
//!
//! Ownership: a [`Stream`], [`Arena`], [`DeviceBuffer`] and [`Comm`] borrow
//! their [`Backend`]; a [`GraphCache`] borrows its arena and stream; so
//! dropping in the wrong order does not compile. Threads: as
//! docs/THREADS.md allows (each type says how). Errors: every fallible call
//! returns [`Result`], whose [`Error`] carries the [`Status`] and the
//! backend's text. A panic in a body never unwinds into C: the capture is
//! aborted, the step returns an error carrying the panic's message, and the
//! cache stays usable.
//!
//! Step inputs (positions, sequence lengths, a block table, ...) are
//! declared on the cache's [`Options`] ([`StepInput`]) and passed each step
//! as slices ([`GraphCache::step_inputs`]); their resolved layout is the
//! cache's [`GraphCache::decode_meta`]. [`version`] and [`build_features`]
//! say which libmdr is linked and what it was built with.
//!
//! Linking: `mdr-sys` finds libmdr through `MDR_DIR`, `pkg-config` or the
//! repository's `build/` folder.
#![deny(missing_docs)]
#![deny(rustdoc::broken_intra_doc_links)]

mod arena;
mod backend;
mod comm;
mod error;
mod graph;
mod inputs;
mod sizes;
mod version;

pub use arena::{Arena, Buffer, RowsPolicy, Segment, Window, ZeroStrategy};
pub use backend::{Backend, DeviceBuffer, DevicePtr, Stream, StreamRef};
pub use comm::{AllReduce, AllReduceAlgo, Comm, DType, Norm};
pub use error::{Error, Result, Status};
pub use graph::{Body, DynamicBody, DynamicImpl, GraphCache, GraphInfo, GraphStats, Mode, Options};
pub use inputs::{Element, InputShape, StepInput, StepInputInfo, Values};
pub use sizes::{model_preset, preset_names, Limits, ModelConfig, Sizes, SizesOptions};

/// The raw declarations, for what this crate does not wrap.
pub use mdr_sys as sys;
pub use version::{build_features, version, version_number, Features};
