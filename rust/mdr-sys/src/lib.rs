//! Raw FFI declarations of libmdr, the metrale decode runtime.
//!
//! Everything here is generated from the C headers in `include/mdr/` by
//! `generate.py` (checked in as `src/bindings.rs`): every public function,
//! type, enum constant and integer macro, plus the headers' `static inline`
//! accessors (`mdr_arena_hidden_states` ...) translated to Rust. The names
//! and types are the C ones; each item's documentation is the header's own
//! comment. `tests/abi.rs` compiles a C program from the same headers and
//! fails when the declarations disagree with it (names, argument counts and
//! types, struct sizes, alignments and field offsets, constant values).
//!
//! The safe API is the `mdr` crate. `build.rs` finds libmdr through
//! `MDR_DIR`, then `pkg-config`, then the repository's `build/` folder.
#![no_std]
#![allow(non_camel_case_types, non_upper_case_globals, non_snake_case, clippy::all)]

include!("bindings.rs");
