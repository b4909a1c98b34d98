//! `Backend`, `Stream`, `StreamRef`, `DevicePtr` and `DeviceBuffer`.
use crate::error::{check, cstr_static, Error, Result, Status};
use mdr_sys as sys;
use std::ffi::c_void;
use std::fmt;
use std::marker::PhantomData;
use std::ops::Deref;
use std::ptr::NonNull;

/// A device address (`mdr_dptr`); 0 is NULL. On the host backend it is a
/// host address. Plain data: holding one gives no access to the memory.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[repr(transparent)]
pub struct DevicePtr(pub u64);

impl DevicePtr {
    /// The NULL address.
    pub const NULL: DevicePtr = DevicePtr(0);
    /// True for address 0.
    pub fn is_null(self) -> bool {
        self.0 == 0
    }
    /// The address `bytes` further on.
    pub fn offset(self, bytes: usize) -> DevicePtr {
        DevicePtr(self.0 + bytes as u64)
    }
    /// The raw `mdr_dptr`.
    pub fn raw(self) -> sys::mdr_dptr {
        self.0
    }
}

impl fmt::Debug for DevicePtr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DevicePtr({:#x})", self.0)
    }
}

/// Where device memory, streams and graphs come from: the CUDA runtime on
/// one device, or host memory (`Backend::host`, for machines without a GPU).
///
/// `Send` and `Sync`: docs/THREADS.md lets several threads share one
/// backend (allocation, streams, blocking copies, their own arenas and
/// caches). Everything made from it borrows it, so it cannot be dropped
/// first:
///
/// ```compile_fail
/// let backend = mdr::Backend::host().unwrap();
/// let stream = backend.stream().unwrap();
/// drop(backend); // error: `backend` is borrowed by `stream`
/// drop(stream);
/// ```
pub struct Backend {
    raw: NonNull<sys::mdr_backend>,
}

// SAFETY: docs/THREADS.md, "Backend": shared by threads for allocation,
// streams, blocking copies and synchronizing their own streams; the
// last-error text is per thread.
unsafe impl Send for Backend {}
unsafe impl Sync for Backend {}

impl Backend {
    fn make(st: sys::mdr_status, raw: *mut sys::mdr_backend, what: &str) -> Result<Backend> {
        match (Status::from_raw(st), NonNull::new(raw)) {
            (None, Some(raw)) => Ok(Backend { raw }),
            (s, _) => Err(Error::new(s.unwrap_or(Status::Backend), if s.is_some() { what.to_string() } else { format!("{what}: no backend") })),
        }
    }

    /// The host backend: device memory is host memory, a stream runs each
    /// operation when enqueued, a capture records them (`mdr_backend_host_create`).
    pub fn host() -> Result<Backend> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: valid out-param.
        let st = unsafe { sys::mdr_backend_host_create(&mut raw) };
        Backend::make(st, raw, "mdr_backend_host_create")
    }

    /// A CUDA backend on `device` (`mdr_backend_cuda_create`): `NoDevice`
    /// without a driver or such a device, `Unsupported` in a build without CUDA.
    pub fn cuda(device: i32) -> Result<Backend> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: valid out-param.
        let st = unsafe { sys::mdr_backend_cuda_create(device, &mut raw) };
        Backend::make(st, raw, &format!("mdr_backend_cuda_create({device})"))
    }

    /// The CUDA backend on device 0 when there is one, else the host backend.
    pub fn default_device() -> Result<Backend> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: valid out-param.
        let st = unsafe { sys::mdr_backend_create_default(&mut raw) };
        Backend::make(st, raw, "mdr_backend_create_default")
    }

    /// "cuda" or "host".
    pub fn name(&self) -> &'static str {
        // SAFETY: static string.
        unsafe { cstr_static(sys::mdr_backend_name(self.raw.as_ptr())) }
    }

    /// True for a CUDA backend.
    pub fn is_cuda(&self) -> bool {
        self.name() == "cuda"
    }

    /// The latest failure this backend recorded in the calling thread ("" when none).
    pub fn last_error(&self) -> String {
        crate::error::last_error(self.raw.as_ptr())
    }

    /// A new stream (CUDA: non-blocking), destroyed when dropped.
    pub fn stream(&self) -> Result<Stream<'_>> {
        let mut s: sys::mdr_stream = std::ptr::null_mut();
        // SAFETY: valid backend and out-param.
        check(unsafe { sys::mdr_backend_stream_create(self.raw.as_ptr(), &mut s) }, self.raw.as_ptr())?;
        Ok(Stream { inner: StreamRef { raw: s, backend: self.raw }, _backend: PhantomData })
    }

    /// `n` bytes of device memory outside any arena, freed when dropped.
    pub fn alloc(&self, n: usize) -> Result<DeviceBuffer<'_>> {
        let mut p = 0;
        // SAFETY: valid backend and out-param.
        check(unsafe { sys::mdr_backend_alloc(self.raw.as_ptr(), n, &mut p) }, self.raw.as_ptr())?;
        Ok(DeviceBuffer { backend: self, ptr: DevicePtr(p), len: n })
    }

    /// Blocking copy of `src` to device address `dst`.
    ///
    /// # Safety
    /// `dst .. dst + src.len()` must be device memory of this backend that
    /// nothing else uses meanwhile. [`DeviceBuffer::write`] and
    /// [`Arena::write`](crate::Arena::write) are the checked forms.
    pub unsafe fn copy_h2d(&self, dst: DevicePtr, src: &[u8]) -> Result<()> {
        check(sys::mdr_backend_copy_h2d(self.raw.as_ptr(), dst.0, src.as_ptr() as *const c_void, src.len()), self.raw.as_ptr())
    }

    /// Blocking copy of `dst.len()` bytes from device address `src`.
    ///
    /// # Safety
    /// `src .. src + dst.len()` must be device memory of this backend.
    pub unsafe fn copy_d2h(&self, dst: &mut [u8], src: DevicePtr) -> Result<()> {
        check(sys::mdr_backend_copy_d2h(self.raw.as_ptr(), dst.as_mut_ptr() as *mut c_void, src.0, dst.len()), self.raw.as_ptr())
    }

    /// Blocking fill of `n` bytes at `dst` with `value`.
    ///
    /// # Safety
    /// As for [`Backend::copy_h2d`].
    pub unsafe fn fill(&self, dst: DevicePtr, value: u8, n: usize) -> Result<()> {
        check(sys::mdr_backend_fill(self.raw.as_ptr(), dst.0, value, n), self.raw.as_ptr())
    }

    /// The raw handle, for calls through `mdr_sys`. It stays owned by `self`.
    pub fn as_raw(&self) -> *mut sys::mdr_backend {
        self.raw.as_ptr()
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        // SAFETY: everything made from it borrowed it and is gone.
        unsafe { sys::mdr_backend_destroy(self.raw.as_ptr()) }
    }
}

impl fmt::Debug for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Backend({})", self.name())
    }
}

/// A stream as calls see it: what a graph cache body gets, and what
/// [`Stream`] dereferences to. It cannot be created or destroyed by safe
/// code; it is neither `Send` nor `Sync` (a stream is used by one thread
/// at a time).
pub struct StreamRef {
    raw: sys::mdr_stream,
    backend: NonNull<sys::mdr_backend>,
}

impl StreamRef {
    /// The raw `mdr_stream` (a `cudaStream_t` on the CUDA backend), for the
    /// engine's own kernel launches.
    pub fn as_raw(&self) -> sys::mdr_stream {
        self.raw
    }

    /// The raw backend this stream belongs to.
    pub fn backend_raw(&self) -> *mut sys::mdr_backend {
        self.backend.as_ptr()
    }

    /// Block until everything enqueued on the stream has run. Not
    /// capture-safe (never call it from a body).
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: a live stream of this backend.
        check(unsafe { sys::mdr_backend_synchronize(self.backend.as_ptr(), self.raw) }, self.backend.as_ptr())
    }

    /// Enqueue a memset of `n` bytes at `dst` (capture-safe).
    ///
    /// # Safety
    /// `dst .. dst + n` must be device memory of this stream's backend that
    /// stays allocated until the memset ran. [`Arena::memset_async`](crate::Arena::memset_async)
    /// is the checked form.
    pub unsafe fn memset_async(&self, dst: DevicePtr, value: u8, n: usize) -> Result<()> {
        check(sys::mdr_backend_memset_async(self.backend.as_ptr(), dst.0, value, n, self.raw), self.backend.as_ptr())
    }

    pub(crate) fn from_parts(raw: sys::mdr_stream, backend: NonNull<sys::mdr_backend>) -> StreamRef {
        StreamRef { raw, backend }
    }
}

impl fmt::Debug for StreamRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StreamRef({:p})", self.raw)
    }
}

/// A stream made by [`Backend::stream`], destroyed when dropped. `Send`
/// (it may move to the thread that uses it) but not `Sync`:
///
/// ```compile_fail
/// fn shared<T: Sync>(_: &T) {}
/// let backend = mdr::Backend::host().unwrap();
/// let stream = backend.stream().unwrap();
/// shared(&stream); // error: a stream is used by one thread at a time
/// ```
pub struct Stream<'b> {
    inner: StreamRef,
    _backend: PhantomData<&'b Backend>,
}

// SAFETY: docs/THREADS.md: a stream must be used by one thread at a time;
// moving it to another thread is that.
unsafe impl Send for Stream<'_> {}

impl Deref for Stream<'_> {
    type Target = StreamRef;
    fn deref(&self) -> &StreamRef {
        &self.inner
    }
}

impl Drop for Stream<'_> {
    fn drop(&mut self) {
        // SAFETY: made by mdr_backend_stream_create on this backend; every
        // cache using it borrowed it and is gone.
        unsafe { sys::mdr_backend_stream_destroy(self.inner.backend.as_ptr(), self.inner.raw) }
    }
}

impl fmt::Debug for Stream<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Stream({:p})", self.inner.raw)
    }
}

/// Device memory from [`Backend::alloc`], freed when dropped. Reads and
/// writes are blocking and bounds-checked.
pub struct DeviceBuffer<'b> {
    backend: &'b Backend,
    ptr: DevicePtr,
    len: usize,
}

impl DeviceBuffer<'_> {
    /// Its device address.
    pub fn ptr(&self) -> DevicePtr {
        self.ptr
    }
    /// Its size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// True when it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub(crate) fn backend_raw(&self) -> *mut sys::mdr_backend {
        self.backend.as_raw()
    }
    fn range(&self, offset: usize, n: usize) -> Result<()> {
        match offset.checked_add(n) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(Error::new(Status::OutOfRange, format!("device buffer: {n} bytes at offset {offset} pass its {} bytes", self.len))),
        }
    }
    /// Blocking copy of `src` to byte `offset`.
    pub fn write(&mut self, offset: usize, src: &[u8]) -> Result<()> {
        self.range(offset, src.len())?;
        // SAFETY: in bounds of our allocation; &mut self excludes other writers.
        unsafe { self.backend.copy_h2d(self.ptr.offset(offset), src) }
    }
    /// Blocking copy from byte `offset` into `dst`.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.range(offset, dst.len())?;
        // SAFETY: in bounds of our allocation.
        unsafe { self.backend.copy_d2h(dst, self.ptr.offset(offset)) }
    }
    /// Blocking fill of the whole buffer.
    pub fn fill(&mut self, value: u8) -> Result<()> {
        // SAFETY: our allocation.
        unsafe { self.backend.fill(self.ptr, value, self.len) }
    }
}

impl Drop for DeviceBuffer<'_> {
    fn drop(&mut self) {
        // SAFETY: allocated by mdr_backend_alloc on this backend.
        unsafe { sys::mdr_backend_free(self.backend.as_raw(), self.ptr.0) }
    }
}

impl fmt::Debug for DeviceBuffer<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DeviceBuffer({:?}, {} bytes)", self.ptr, self.len)
    }
}
