//! `version`, `build_features` and `Features`.
use crate::error::cstr_static;
use mdr_sys as sys;
use std::fmt;
use std::ops::{BitAnd, BitOr, BitOrAssign};

/// The version of the libmdr linked at run time as "major.minor.patch",
/// e.g. "0.2.0" (`mdr_version_string`).
pub fn version() -> &'static str {
    // SAFETY: a static string, never NULL.
    unsafe { cstr_static(sys::mdr_version_string()) }
}

/// The version of the libmdr linked at run time (major*10000 + minor*100 + patch).
pub fn version_number() -> u32 {
    // SAFETY: no arguments.
    unsafe { sys::mdr_version_number() }
}

/// The optional parts the linked libmdr was compiled with
/// (`mdr_build_features`). A feature compiled in may still be unavailable
/// at run time (no GPU, no driver): the calls that need it then return
/// `NoDevice` or `Unsupported`.
///
/// ```
/// let f = mdr::build_features();
/// if f.contains(mdr::Features::CUDA) {
///     println!("libmdr {} with {f}", mdr::version());
/// }
/// ```
pub fn build_features() -> Features {
    // SAFETY: no arguments.
    Features(unsafe { sys::mdr_build_features() })
}

/// A set of `mdr_feature` bits. `Display` gives the words of
/// `mdr_build_features_string` ("cuda nccl nccl-device nvtx", "" for none).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Features(u32);

impl Features {
    /// The CUDA backend and the fused zeroing kernel.
    pub const CUDA: Features = Features(sys::MDR_FEATURE_CUDA as u32);
    /// The NCCL communicator.
    pub const NCCL: Features = Features(sys::MDR_FEATURE_NCCL as u32);
    /// mdr's all-reduce kernels on NCCL's device API (NCCL 2.28+).
    pub const NCCL_DEVICE: Features = Features(sys::MDR_FEATURE_NCCL_DEVICE as u32);
    /// NVTX ranges in an "mdr" domain.
    pub const NVTX: Features = Features(sys::MDR_FEATURE_NVTX as u32);
    /// No feature (a host-only build).
    pub const NONE: Features = Features(0);
    const NAMED: [(Features, &'static str); 4] =
        [(Features::CUDA, "cuda"), (Features::NCCL, "nccl"), (Features::NCCL_DEVICE, "nccl-device"), (Features::NVTX, "nvtx")];

    /// The set of these raw bits (unknown bits are kept).
    pub const fn from_bits(bits: u32) -> Features {
        Features(bits)
    }
    /// The raw bits.
    pub const fn bits(self) -> u32 {
        self.0
    }
    /// True when every feature of `other` is in `self`.
    pub const fn contains(self, other: Features) -> bool {
        self.0 & other.0 == other.0
    }
    /// True for no feature.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
    /// The names of the known features in the set, in bit order.
    pub fn names(self) -> impl Iterator<Item = &'static str> {
        Features::NAMED.into_iter().filter(move |(f, _)| self.contains(*f)).map(|(_, n)| n)
    }
}

impl BitOr for Features {
    type Output = Features;
    fn bitor(self, o: Features) -> Features {
        Features(self.0 | o.0)
    }
}
impl BitOrAssign for Features {
    fn bitor_assign(&mut self, o: Features) {
        self.0 |= o.0;
    }
}
impl BitAnd for Features {
    type Output = Features;
    fn bitand(self, o: Features) -> Features {
        Features(self.0 & o.0)
    }
}

impl fmt::Display for Features {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (k, n) in self.names().enumerate() {
            if k > 0 {
                f.write_str(" ")?;
            }
            f.write_str(n)?;
        }
        Ok(())
    }
}

impl fmt::Debug for Features {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Features({:#x}: \"{self}\")", self.0)
    }
}
