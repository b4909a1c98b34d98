//! `Status`, `Error` and `Result`.
use mdr_sys as sys;
use std::ffi::CStr;
use std::fmt;

/// A failure status of libmdr (`mdr_status` without `MDR_OK`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Status {
    /// `MDR_ERR_INVALID_ARGUMENT`: a NULL handle or out-param, an unknown name or enum.
    InvalidArgument,
    /// `MDR_ERR_OUT_OF_RANGE`: an argument out of range.
    OutOfRange,
    /// `MDR_ERR_OVERFLOW`: a size computation overflowed `size_t`.
    Overflow,
    /// `MDR_ERR_OUT_OF_MEMORY`: a device, pinned or host allocation failed.
    OutOfMemory,
    /// `MDR_ERR_NO_DEVICE`: no CUDA driver or device.
    NoDevice,
    /// `MDR_ERR_BACKEND`: a backend call failed.
    Backend,
    /// `MDR_ERR_CAPTURE`: stream capture or graph instantiation failed. From
    /// a graph cache step it means the step ran eagerly: its work *is*
    /// enqueued (see [`Error::step_enqueued`]).
    Capture,
    /// `MDR_ERR_UNSUPPORTED`: not supported by this backend or build.
    Unsupported,
    /// `MDR_ERR_STATE`: the call is not valid in the object's current state.
    State,
    /// A status this crate does not know (a newer libmdr).
    Other(i32),
}

impl Status {
    /// The status of a raw `mdr_status`; `None` for `MDR_OK`.
    pub fn from_raw(s: sys::mdr_status) -> Option<Status> {
        Some(match s {
            sys::MDR_OK => return None,
            sys::MDR_ERR_INVALID_ARGUMENT => Status::InvalidArgument,
            sys::MDR_ERR_OUT_OF_RANGE => Status::OutOfRange,
            sys::MDR_ERR_OVERFLOW => Status::Overflow,
            sys::MDR_ERR_OUT_OF_MEMORY => Status::OutOfMemory,
            sys::MDR_ERR_NO_DEVICE => Status::NoDevice,
            sys::MDR_ERR_BACKEND => Status::Backend,
            sys::MDR_ERR_CAPTURE => Status::Capture,
            sys::MDR_ERR_UNSUPPORTED => Status::Unsupported,
            sys::MDR_ERR_STATE => Status::State,
            other => Status::Other(other),
        })
    }

    /// The raw `mdr_status` value.
    pub fn raw(self) -> sys::mdr_status {
        match self {
            Status::InvalidArgument => sys::MDR_ERR_INVALID_ARGUMENT,
            Status::OutOfRange => sys::MDR_ERR_OUT_OF_RANGE,
            Status::Overflow => sys::MDR_ERR_OVERFLOW,
            Status::OutOfMemory => sys::MDR_ERR_OUT_OF_MEMORY,
            Status::NoDevice => sys::MDR_ERR_NO_DEVICE,
            Status::Backend => sys::MDR_ERR_BACKEND,
            Status::Capture => sys::MDR_ERR_CAPTURE,
            Status::Unsupported => sys::MDR_ERR_UNSUPPORTED,
            Status::State => sys::MDR_ERR_STATE,
            Status::Other(v) => v,
        }
    }

    /// libmdr's text for the status (`mdr_status_string`).
    pub fn text(self) -> &'static str {
        // SAFETY: mdr_status_string returns a static string for any value.
        unsafe { cstr_static(sys::mdr_status_string(self.raw())) }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text())
    }
}

/// The error of every fallible call: the status and the backend's text
/// (`mdr_backend_last_error` of the calling thread, read right after the
/// failure), or a text of this crate's where it refused the call itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    status: Status,
    message: String,
    panicked: bool,
}

/// `Result<T, mdr::Error>`.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// An error with a status and a text (for bodies that fail on purpose).
    pub fn new(status: Status, message: impl Into<String>) -> Error {
        Error { status, message: message.into(), panicked: false }
    }

    pub(crate) fn panic(status: Status, message: String) -> Error {
        Error { status, message, panicked: true }
    }

    /// The status.
    pub fn status(&self) -> Status {
        self.status
    }

    /// The backend's text (or this crate's), without the status.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// True when a graph cache body panicked during the call; the message
    /// then carries the panic's message.
    pub fn panicked(&self) -> bool {
        self.panicked
    }

    /// True for a step or prepare that returned `MDR_ERR_CAPTURE`: the
    /// capture failed but the step ran eagerly, so its work is enqueued.
    pub fn step_enqueued(&self) -> bool {
        self.status == Status::Capture
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.message.is_empty() {
            write!(f, "mdr: {}", self.status.text())
        } else {
            write!(f, "mdr: {}: {}", self.status.text(), self.message)
        }
    }
}

impl std::error::Error for Error {}

/// A static C string as &str ("" when NULL or not UTF-8).
pub(crate) unsafe fn cstr_static(p: *const std::ffi::c_char) -> &'static str {
    if p.is_null() {
        ""
    } else {
        CStr::from_ptr(p).to_str().unwrap_or("")
    }
}

/// MDR_OK, or the error with the backend's last-error text.
#[inline]
pub(crate) fn check(st: sys::mdr_status, backend: *const sys::mdr_backend) -> Result<()> {
    match Status::from_raw(st) {
        None => Ok(()),
        Some(s) => Err(Error::new(s, last_error(backend))),
    }
}

/// MDR_OK, or the error with a text of ours.
#[inline]
pub(crate) fn check_with(st: sys::mdr_status, what: impl FnOnce() -> String) -> Result<()> {
    match Status::from_raw(st) {
        None => Ok(()),
        Some(s) => Err(Error::new(s, what())),
    }
}

pub(crate) fn last_error(backend: *const sys::mdr_backend) -> String {
    // SAFETY: accepts NULL; the text is valid until this thread's next failure,
    // and it is copied at once.
    unsafe {
        let p = sys::mdr_backend_last_error(backend);
        if p.is_null() {
            String::new()
        } else {
            CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    }
}
