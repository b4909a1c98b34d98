//! `Comm` (a rank of a communicator) and the all-reduce descriptor.
use crate::arena::Buffer;
use crate::backend::{Backend, DevicePtr};
use crate::error::{check, Result};
use mdr_sys as sys;
use std::ffi::c_void;
use std::ptr::NonNull;

/// One rank of a communicator (`mdr_comm`), on its backend. Arenas made on
/// it ([`Arena::on_comm`](crate::Arena::on_comm)) borrow it. `Send` (one
/// thread per rank), not `Sync`: collective calls are made by the rank's
/// own thread.
pub struct Comm<'b> {
    raw: NonNull<sys::mdr_comm>,
    backend: &'b Backend,
}

// SAFETY: comm.h: one thread per rank; rank/size/device/abort are thread-safe.
unsafe impl Send for Comm<'_> {}

fn make<'b>(st: sys::mdr_status, out: Vec<*mut sys::mdr_comm>, backends: &[&'b Backend]) -> Result<Vec<Comm<'b>>> {
    check(st, backends.first().map_or(std::ptr::null(), |b| b.as_raw()))?;
    Ok(out.into_iter().zip(backends).map(|(c, b)| Comm { raw: NonNull::new(c).expect("a communicator"), backend: b }).collect())
}

impl<'b> Comm<'b> {
    /// Host communicators, ranks as threads of this process, rank i on
    /// `backends[i]` (host backends; `mdr_comm_create_host`).
    pub fn create_host(backends: &[&'b Backend]) -> Result<Vec<Comm<'b>>> {
        let raws: Vec<*mut sys::mdr_backend> = backends.iter().map(|b| b.as_raw()).collect();
        let mut out = vec![std::ptr::null_mut(); backends.len()];
        // SAFETY: arrays of backends.len() entries.
        let st = unsafe { sys::mdr_comm_create_host(raws.as_ptr(), raws.len() as i32, out.as_mut_ptr()) };
        make(st, out, backends)
    }

    /// NCCL communicators of local GPUs, one process for all (`mdr_comm_create_local`).
    pub fn create_local(backends: &[&'b Backend]) -> Result<Vec<Comm<'b>>> {
        let raws: Vec<*mut sys::mdr_backend> = backends.iter().map(|b| b.as_raw()).collect();
        let mut out = vec![std::ptr::null_mut(); backends.len()];
        // SAFETY: arrays of backends.len() entries.
        let st = unsafe { sys::mdr_comm_create_local(raws.as_ptr(), raws.len() as i32, out.as_mut_ptr()) };
        make(st, out, backends)
    }

    /// Adopt an engine's NCCL communicator for the rank on `backend`
    /// (`mdr_comm_adopt_nccl`).
    ///
    /// # Safety
    /// `nccl_comm` must be an `ncclComm_t` on the backend's device that
    /// outlives the returned `Comm`.
    pub unsafe fn adopt_nccl(backend: &'b Backend, nccl_comm: *mut c_void) -> Result<Comm<'b>> {
        let mut out = std::ptr::null_mut();
        check(sys::mdr_comm_adopt_nccl(backend.as_raw(), nccl_comm, &mut out), backend.as_raw())?;
        Ok(Comm { raw: NonNull::new(out).expect("a communicator"), backend })
    }

    /// Whether this build of libmdr has NCCL.
    pub fn nccl_available() -> bool {
        // SAFETY: no arguments.
        unsafe { sys::mdr_comm_nccl_available() != 0 }
    }

    /// This rank.
    pub fn rank(&self) -> i32 {
        // SAFETY: live handle.
        unsafe { sys::mdr_comm_rank(self.raw.as_ptr()) }
    }
    /// The number of ranks.
    pub fn size(&self) -> i32 {
        // SAFETY: live handle.
        unsafe { sys::mdr_comm_size(self.raw.as_ptr()) }
    }
    /// The CUDA device (-1 on the host).
    pub fn device(&self) -> i32 {
        // SAFETY: live handle.
        unsafe { sys::mdr_comm_device(self.raw.as_ptr()) }
    }
    /// The backend it was made on.
    pub fn backend(&self) -> &'b Backend {
        self.backend
    }
    /// Mark the communicator failed on every rank of this process.
    pub fn abort(&self) {
        // SAFETY: thread-safe per comm.h.
        unsafe { sys::mdr_comm_abort(self.raw.as_ptr()) }
    }
    /// The raw handle. It stays owned by `self`.
    pub fn as_raw(&self) -> *mut sys::mdr_comm {
        self.raw.as_ptr()
    }
}

impl Drop for Comm<'_> {
    fn drop(&mut self) {
        // SAFETY: arenas on it borrowed it and are gone.
        unsafe { sys::mdr_comm_destroy(self.raw.as_ptr()) }
    }
}

impl std::fmt::Debug for Comm<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Comm(rank {} of {})", self.rank(), self.size())
    }
}

/// Element types of an all-reduce (`mdr_dtype`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    /// bfloat16.
    Bf16,
    /// IEEE half.
    Fp16,
    /// IEEE single.
    Fp32,
}

/// All-reduce algorithms (`mdr_all_reduce_algo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AllReduceAlgo {
    /// The measured table (or, from `all_reduce_choice`, a count read on the device).
    Auto,
    /// `ncclAllReduce`.
    Nccl,
    /// mdr's one-shot kernel.
    OneShot,
    /// mdr's two-shot kernel.
    TwoShot,
}

impl AllReduceAlgo {
    fn raw(self) -> sys::mdr_all_reduce_algo {
        match self {
            AllReduceAlgo::Auto => sys::MDR_ALL_REDUCE_AUTO,
            AllReduceAlgo::Nccl => sys::MDR_ALL_REDUCE_NCCL,
            AllReduceAlgo::OneShot => sys::MDR_ALL_REDUCE_ONE_SHOT,
            AllReduceAlgo::TwoShot => sys::MDR_ALL_REDUCE_TWO_SHOT,
        }
    }
    pub(crate) fn from_raw(a: sys::mdr_all_reduce_algo) -> Option<AllReduceAlgo> {
        Some(match a {
            sys::MDR_ALL_REDUCE_AUTO => AllReduceAlgo::Auto,
            sys::MDR_ALL_REDUCE_NCCL => AllReduceAlgo::Nccl,
            sys::MDR_ALL_REDUCE_ONE_SHOT => AllReduceAlgo::OneShot,
            sys::MDR_ALL_REDUCE_TWO_SHOT => AllReduceAlgo::TwoShot,
            _ => return None,
        })
    }
}

/// The fused RMSNorm of an all-reduce (`norm_output`, `norm_weight`,
/// `norm_eps` of `mdr_all_reduce_desc`): after the residual add, `output`
/// row i = RMSNorm(residual row i) * weight for the reduced rows, in the
/// arithmetic `include/mdr/comm.h` writes down. bf16 and fp16; needs a
/// residual.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Norm {
    /// The buffer that receives the normed rows (same dtype and row bytes).
    pub output: Buffer,
    /// Device address of the weight: one row of the dtype, 16-byte aligned.
    pub weight: DevicePtr,
    /// Epsilon: finite and >= 0.
    pub eps: f32,
}

/// One all-reduce of an arena buffer's first rows (`mdr_all_reduce_desc`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AllReduce {
    /// The buffer whose first rows are summed in place.
    pub buf: Buffer,
    /// Element type.
    pub dtype: DType,
    /// Rows (with `count_ptr`: the most rows a call may have).
    pub tokens: usize,
    /// NULL: `tokens` rows; else a device uint32 row count read when it runs.
    pub count_ptr: DevicePtr,
    /// A buffer to add the sum into, row by row, after the reduction.
    pub residual: Option<Buffer>,
    /// The algorithm.
    pub algo: AllReduceAlgo,
    /// The fused RMSNorm after the residual add (None: none).
    pub norm: Option<Norm>,
}

impl AllReduce {
    /// `tokens` rows of `buf`: no count word, no residual, no norm, `Auto`.
    pub fn new(buf: Buffer, dtype: DType, tokens: usize) -> AllReduce {
        AllReduce {
            buf,
            dtype,
            tokens,
            count_ptr: DevicePtr::NULL,
            residual: None,
            algo: AllReduceAlgo::Auto,
            norm: None,
        }
    }

    pub(crate) fn raw(&self) -> sys::mdr_all_reduce_desc {
        sys::mdr_all_reduce_desc {
            buf: self.buf.raw(),
            dtype: match self.dtype {
                DType::Bf16 => sys::MDR_DTYPE_BF16,
                DType::Fp16 => sys::MDR_DTYPE_FP16,
                DType::Fp32 => sys::MDR_DTYPE_FP32,
            },
            tokens: self.tokens,
            count_ptr: self.count_ptr.0,
            residual: self.residual.map_or(sys::MDR_BUF_COUNT, |b| b.raw()),
            algo: self.algo.raw(),
            norm_output: self.norm.map_or(sys::MDR_BUF_COUNT, |n| n.output.raw()),
            norm_weight: self.norm.map_or(0, |n| n.weight.0),
            norm_eps: self.norm.map_or(0.0, |n| n.eps),
        }
    }
}

