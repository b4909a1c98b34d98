//! Step inputs: `StepInput` (a declaration), `Values` (one step's values of
//! one input), `StepInputInfo` (the layout a cache resolved, its
//! `decode_meta`).
use crate::arena::Buffer;
use crate::backend::{DeviceBuffer, DevicePtr};
use crate::error::{Error, Result, Status};
use mdr_sys as sys;
use std::ffi::CString;
use std::marker::PhantomData;

/// How many rows of `width` elements a step carries of an input
/// (`mdr_step_input_shape`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InputShape {
    /// One row per token of the step (positions, a slot mapping).
    PerToken,
    /// One row per sequence of the step (sequence lengths; with `width` =
    /// blocks per sequence, a block table).
    PerSequence,
    /// `max_rows` rows every step (sampling parameters of a fixed batch).
    Fixed,
}

impl InputShape {
    pub(crate) fn raw(self) -> sys::mdr_step_input_shape {
        match self {
            InputShape::PerToken => sys::MDR_INPUT_PER_TOKEN,
            InputShape::PerSequence => sys::MDR_INPUT_PER_SEQUENCE,
            InputShape::Fixed => sys::MDR_INPUT_FIXED,
        }
    }
    pub(crate) fn from_raw(s: sys::mdr_step_input_shape) -> Option<InputShape> {
        match s {
            sys::MDR_INPUT_PER_TOKEN => Some(InputShape::PerToken),
            sys::MDR_INPUT_PER_SEQUENCE => Some(InputShape::PerSequence),
            sys::MDR_INPUT_FIXED => Some(InputShape::Fixed),
            _ => None,
        }
    }
}

/// Where a declared input's values go.
#[derive(Debug, Clone, Copy)]
enum Dest<'a> {
    Arena { buffer: Buffer, offset: usize },
    Device { ptr: DevicePtr, len: Option<usize>, backend: *mut sys::mdr_backend, _b: PhantomData<&'a ()> },
}

/// Where the values come from.
#[derive(Debug, Clone, Copy)]
enum Src<'a> {
    Host,
    Device { ptr: DevicePtr, len: Option<usize>, backend: *mut sys::mdr_backend, _b: PhantomData<&'a ()> },
}

/// One declared step input (`mdr_step_input`): a small per-step array
/// (positions, sequence lengths, a block table, ...) that each step stages
/// with the ids in the same slot, and the same launch copies to its
/// destination. Declare inputs with [`Options::input`](crate::Options::input);
/// steps pass their values with [`GraphCache::step_inputs`](crate::GraphCache::step_inputs).
///
/// A destination (or device source) is captured into the graphs, so it
/// must outlive the cache: a [`DeviceBuffer`] is borrowed for the cache's
/// life `'a`, an arena buffer belongs to the cache's arena. The cache
/// checks at create that each one holds the input's largest step
/// (`max_rows` rows of `width` elements).
///
/// ```
/// use mdr::{Buffer, InputShape, StepInput};
/// let positions = StepInput::new("positions", 4, InputShape::PerToken).to_arena(Buffer::Fp8Act, 0);
/// let block_table = StepInput::new("block_table", 4, InputShape::PerSequence)
///     .width(8)
///     .pad(u32::MAX as u64)
///     .to_arena(Buffer::Fp8Act, 4096);
/// # let _ = (positions, block_table);
/// ```
#[derive(Debug, Clone)]
pub struct StepInput<'a> {
    pub(crate) name: String,
    pub(crate) elem_bytes: usize,
    pub(crate) shape: InputShape,
    pub(crate) width: usize,
    pub(crate) max_rows: usize,
    pub(crate) pad: u64,
    dest: Option<Dest<'a>>,
    src: Src<'a>,
}

impl<'a> StepInput<'a> {
    /// An input called `name` (unique, not "token_ids") of `elem_bytes`-byte
    /// elements (1, 2, 4 or 8) and this shape; width 1, `max_rows` 0 (the
    /// default: max_batch_tokens per token, max_sequences per sequence; a
    /// FIXED input must set it), pad 0, values from the host. Give it a
    /// destination with [`to_arena`](Self::to_arena) or
    /// [`to_device`](Self::to_device) before the cache is made.
    pub fn new(name: &str, elem_bytes: usize, shape: InputShape) -> StepInput<'a> {
        StepInput { name: name.to_string(), elem_bytes, shape, width: 1, max_rows: 0, pad: 0, dest: None, src: Src::Host }
    }

    /// Elements per row (0 means 1).
    pub fn width(mut self, width: usize) -> Self {
        self.width = width;
        self
    }

    /// The most rows a step carries (a step over it is refused). PER_TOKEN:
    /// 0 means max_batch_tokens; PER_SEQUENCE: 0 means max_sequences; FIXED:
    /// the rows of every step, at least 1.
    pub fn max_rows(mut self, rows: usize) -> Self {
        self.max_rows = rows;
        self
    }

    /// The element value of the padded rows (its low `elem_bytes` bytes):
    /// rows from the step's count up to the graph's bound get it.
    pub fn pad(mut self, pad: u64) -> Self {
        self.pad = pad;
        self
    }

    /// Destination: `buffer` of the cache's arena, from byte `offset`
    /// (16-byte aligned). The cache refuses a destination past the buffer,
    /// and one that shares a byte with a buffer the step's zeroing clears
    /// (`Buffer::Scratch`, say), token_ids or another input (the C header's
    /// `mdr_step_input_dest`).
    pub fn to_arena(mut self, buffer: Buffer, offset: usize) -> Self {
        self.dest = Some(Dest::Arena { buffer, offset });
        self
    }

    /// Destination: device memory the engine owns, from its start. It must
    /// hold the input's largest step (checked at create).
    pub fn to_device(mut self, buffer: &'a DeviceBuffer<'_>) -> Self {
        self.dest = Some(Dest::Device { ptr: buffer.ptr(), len: Some(buffer.len()), backend: buffer.backend_raw(), _b: PhantomData });
        self
    }

    /// Destination: any device address.
    ///
    /// # Safety
    /// `address` must be 16-byte aligned device memory of the cache's
    /// backend holding the input's largest step (`max_rows * width *
    /// elem_bytes` bytes), allocated for the cache's whole life, and not
    /// written by anything else while a step may copy into it.
    pub unsafe fn to_device_raw(mut self, address: DevicePtr) -> Self {
        self.dest = Some(Dest::Device { ptr: address, len: None, backend: std::ptr::null_mut(), _b: PhantomData });
        self
    }

    /// Values already in device memory (the engine's own kernels wrote
    /// them, on the cache's stream or before the step): each step copies
    /// its rows from there device to device and pads, and passes
    /// [`Values::DEVICE`] for this input. The buffer must hold the largest
    /// step (checked at create).
    pub fn from_device(mut self, buffer: &'a DeviceBuffer<'_>) -> Self {
        self.src = Src::Device { ptr: buffer.ptr(), len: Some(buffer.len()), backend: buffer.backend_raw(), _b: PhantomData };
        self
    }

    /// Values already in device memory at any address (see [`from_device`](Self::from_device)).
    ///
    /// # Safety
    /// `address` must be device memory of the cache's backend holding the
    /// input's largest step, allocated for the cache's whole life.
    pub unsafe fn from_device_raw(mut self, address: DevicePtr) -> Self {
        self.src = Src::Device { ptr: address, len: None, backend: std::ptr::null_mut(), _b: PhantomData };
        self
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The C declaration, its name kept alive by `name`. Refuses a name
    /// with a NUL byte, no destination, or memory of another backend.
    pub(crate) fn raw(&self, backend: *mut sys::mdr_backend, name: &CString) -> Result<sys::mdr_step_input> {
        // SAFETY: plain data.
        let mut r: sys::mdr_step_input = unsafe { std::mem::zeroed() };
        r.name = name.as_ptr();
        r.elem_bytes = self.elem_bytes;
        r.shape = self.shape.raw();
        r.width = self.width;
        r.max_rows = self.max_rows;
        r.pad = self.pad;
        match self.dest {
            None => return Err(Error::new(Status::InvalidArgument, format!("step input {}: no destination (to_arena or to_device)", self.name))),
            Some(Dest::Arena { buffer, offset }) => {
                r.dest = sys::MDR_INPUT_TO_ARENA;
                r.buffer = buffer.raw();
                r.offset = offset;
            }
            Some(Dest::Device { ptr, backend: b, .. }) => {
                if !b.is_null() && b != backend {
                    return Err(Error::new(Status::InvalidArgument, format!("step input {}: the destination belongs to another backend than the cache's", self.name)));
                }
                r.dest = sys::MDR_INPUT_TO_DEVICE;
                r.address = ptr.0;
            }
        }
        if let Src::Device { ptr, backend: b, .. } = self.src {
            if !b.is_null() && b != backend {
                return Err(Error::new(Status::InvalidArgument, format!("step input {}: the device source belongs to another backend than the cache's", self.name)));
            }
            r.device_src = ptr.0;
        }
        Ok(r)
    }

    /// After create: the resolved extent against the borrowed buffers.
    pub(crate) fn check_extent(&self, info: &StepInputInfo) -> Result<()> {
        let short = |what: &str, len: usize| {
            Err(Error::new(
                Status::OutOfRange,
                format!("step input {}: the {what} holds {len} bytes, its largest step {} ({} rows of {} bytes)", self.name, info.max_bytes, info.max_rows, info.row_bytes),
            ))
        };
        if let Some(Dest::Device { len: Some(len), .. }) = self.dest {
            if info.max_bytes > len {
                return short("destination", len);
            }
        }
        if let Src::Device { len: Some(len), .. } = self.src {
            if info.max_bytes > len {
                return short("device source", len);
            }
        }
        Ok(())
    }
}

mod sealed {
    pub trait Sealed {}
}

/// Element types of step-input values: plain integers and floats of 1, 2,
/// 4 or 8 bytes, copied byte for byte.
pub trait Element: sealed::Sealed + Copy {}
macro_rules! element {
    ($($t:ty),*) => { $(impl sealed::Sealed for $t {} impl Element for $t {})* };
}
element!(u8, i8, u16, i16, u32, i32, f32, u64, i64, f64);

/// One step's values of one input, borrowed for the call: a slice of
/// elements (`&[u32]`, `&[f32]`, `&Vec<u64>`, ... through `From`), raw
/// bytes ([`Values::bytes`]), or none ([`Values::DEVICE`], for an input
/// whose values are already in device memory).
///
/// A slice's element size must equal the input's, and its length the
/// step's rows times the input's width (PER_TOKEN: the step's tokens;
/// PER_SEQUENCE: its sequences; FIXED: `max_rows`).
#[derive(Debug, Clone, Copy)]
pub struct Values<'v> {
    ptr: *const u8,
    bytes: usize,
    /// Element size of a typed slice; None for raw bytes.
    elem: Option<usize>,
    device: bool,
    _v: PhantomData<&'v [u8]>,
}

impl<'v> Values<'v> {
    /// No host values: the input's values are already in device memory
    /// ([`StepInput::from_device`]).
    pub const DEVICE: Values<'static> = Values { ptr: std::ptr::null(), bytes: 0, elem: None, device: true, _v: PhantomData };

    /// Raw bytes, of any element size: the length must be the step's rows
    /// times the input's row bytes.
    pub fn bytes(b: &'v [u8]) -> Values<'v> {
        Values { ptr: b.as_ptr(), bytes: b.len(), elem: None, device: false, _v: PhantomData }
    }

    /// The values of a typed slice.
    pub fn of<T: Element>(s: &'v [T]) -> Values<'v> {
        Values { ptr: s.as_ptr() as *const u8, bytes: std::mem::size_of_val(s), elem: Some(std::mem::size_of::<T>()), device: false, _v: PhantomData }
    }

    /// Checked against input `info` at this step's counts: the pointer C gets.
    pub(crate) fn check(&self, info: &StepInputInfo, tokens: usize, sequences: usize) -> Result<*const std::ffi::c_void> {
        let bad = |s: Status, m: String| Err(Error::new(s, format!("step input {}: {m}", info.name)));
        if info.device_src.is_some() {
            if !self.device {
                return bad(Status::InvalidArgument, "its values are in device memory: pass Values::DEVICE".into());
            }
            return Ok(std::ptr::null());
        }
        if self.device {
            return bad(Status::InvalidArgument, "takes host values, not Values::DEVICE".into());
        }
        if let Some(e) = self.elem {
            if e != info.elem_bytes {
                return bad(Status::InvalidArgument, format!("{e}-byte values for {}-byte elements", info.elem_bytes));
            }
        }
        let rows = match info.shape {
            InputShape::PerToken => tokens,
            InputShape::PerSequence => sequences,
            InputShape::Fixed => info.max_rows,
        };
        if rows > info.max_rows {
            return bad(Status::OutOfRange, format!("{rows} rows, at most {}", info.max_rows));
        }
        // rows <= max_rows: no overflow (max_bytes fits).
        let want = rows * info.row_bytes;
        if self.bytes != want {
            return bad(Status::InvalidArgument, format!("{} bytes of values, the step needs {want} ({rows} rows of {} bytes)", self.bytes, info.row_bytes));
        }
        // A 0-length slice's pointer is dangling but non-NULL; C reads nothing.
        Ok(self.ptr as *const std::ffi::c_void)
    }
}

impl<'v, T: Element> From<&'v [T]> for Values<'v> {
    fn from(s: &'v [T]) -> Values<'v> {
        Values::of(s)
    }
}

impl<'v, T: Element, const N: usize> From<&'v [T; N]> for Values<'v> {
    fn from(s: &'v [T; N]) -> Values<'v> {
        Values::of(&s[..])
    }
}

impl<'v, T: Element> From<&'v Vec<T>> for Values<'v> {
    fn from(s: &'v Vec<T>) -> Values<'v> {
        Values::of(s.as_slice())
    }
}

/// The layout of one step input as a cache resolved it
/// (`mdr_step_input_info`); index 0 is the token ids. The list of them is
/// the cache's [`decode_meta`](crate::GraphCache::decode_meta).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepInputInfo {
    /// Its name ("token_ids" for index 0).
    pub name: String,
    /// Bytes of one element.
    pub elem_bytes: usize,
    /// Rows per step.
    pub shape: InputShape,
    /// Elements per row.
    pub width: usize,
    /// The most rows of a step (resolved, never 0).
    pub max_rows: usize,
    /// `elem_bytes * width`.
    pub row_bytes: usize,
    /// `max_rows * row_bytes`: the destination's extent.
    pub max_bytes: usize,
    /// The destination's device address.
    pub dst: DevicePtr,
    /// Where its values are in device memory; `None`: from the host each step.
    pub device_src: Option<DevicePtr>,
    /// Byte offset of its values in a staging slot (0 for device values).
    pub slot_offset: usize,
    /// The element value of padded rows.
    pub pad: u64,
}

impl StepInputInfo {
    /// # Safety
    /// `i.name` is NULL or a live C string.
    pub(crate) unsafe fn from_raw(i: &sys::mdr_step_input_info) -> StepInputInfo {
        StepInputInfo {
            name: if i.name.is_null() { String::new() } else { std::ffi::CStr::from_ptr(i.name).to_string_lossy().into_owned() },
            elem_bytes: i.elem_bytes,
            shape: InputShape::from_raw(i.shape).unwrap_or(InputShape::PerToken),
            width: i.width,
            max_rows: i.max_rows,
            row_bytes: i.row_bytes,
            max_bytes: i.max_bytes,
            dst: DevicePtr(i.dst),
            device_src: if i.device_src == 0 { None } else { Some(DevicePtr(i.device_src)) },
            slot_offset: i.slot_offset,
            pad: i.pad,
        }
    }
}
