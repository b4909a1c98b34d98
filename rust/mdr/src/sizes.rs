//! `Limits`, model configs and `Sizes`.
use crate::arena::Buffer;
use crate::error::{check_with, cstr_static, Error, Result, Status};
use mdr_sys as sys;
use std::ffi::CString;

/// Serve limits (`mdr_limits`, docs/SIZES.md §2.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Limits {
    /// M: tokens in one forward pass, the rows of every token-major buffer; >= 1.
    pub max_batch_tokens: usize,
    /// S: the longest sequence.
    pub max_seq_len: usize,
    /// B: tokens per paged-KV block; 0 = unknown (256-entry block table).
    pub kv_block_size: usize,
    /// bs: the serve batch width.
    pub max_batch_size: usize,
}

impl Limits {
    /// The C struct.
    pub fn raw(&self) -> sys::mdr_limits {
        sys::mdr_limits {
            max_batch_tokens: self.max_batch_tokens,
            max_seq_len: self.max_seq_len,
            kv_block_size: self.kv_block_size,
            max_batch_size: self.max_batch_size,
        }
    }
}

/// A model configuration: the C struct `mdr_model_config` (every field the
/// sizing reads, docs/SIZES.md §2.2).
pub type ModelConfig = sys::mdr_model_config;

fn cname(name: &str) -> Result<CString> {
    CString::new(name).map_err(|_| Error::new(Status::InvalidArgument, format!("name {name:?} holds a NUL byte")))
}

/// The named preset (`mdr_model_preset`): "qwen3-next-80b",
/// "glm-5.3-flash-tp2", "nemotron-h", "deepseek-v4-flash" ([`preset_names`]).
pub fn model_preset(name: &str) -> Result<ModelConfig> {
    let c = cname(name)?;
    // SAFETY: mdr_model_config is plain data; the call fills it on success.
    let mut cfg: ModelConfig = unsafe { std::mem::zeroed() };
    check_with(unsafe { sys::mdr_model_preset(c.as_ptr(), &mut cfg) }, || {
        format!("unknown model preset {name:?} (known: {})", preset_names().join(", "))
    })?;
    Ok(cfg)
}

/// The preset names, in libmdr's order.
pub fn preset_names() -> Vec<&'static str> {
    // SAFETY: static strings.
    unsafe { (0..sys::mdr_model_preset_count()).map(|i| cstr_static(sys::mdr_model_preset_name(i))).collect() }
}

/// Options of the sizing (`mdr_sizes_options`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SizesOptions {
    /// Apply the GLM-5.3 trim (docs/SIZES.md §7) when the family is GLM5_NEXT.
    pub glm_trim: bool,
    /// Split-K Legacy slots (§5.6); 0 is rejected.
    pub splitk_sm_count: usize,
}

impl Default for SizesOptions {
    fn default() -> Self {
        let mut o = sys::mdr_sizes_options { glm_trim: false, splitk_sm_count: 0 };
        // SAFETY: valid out-param.
        unsafe { sys::mdr_sizes_options_default(&mut o) };
        SizesOptions { glm_trim: o.glm_trim, splitk_sm_count: o.splitk_sm_count }
    }
}

/// Every buffer's byte size (`mdr_sizes`): what an arena is made from.
#[derive(Debug, Clone, Copy)]
#[repr(transparent)]
pub struct Sizes(pub sys::mdr_sizes);

impl Sizes {
    /// Every formula of docs/SIZES.md with default options (`mdr_sizes_from_config`).
    pub fn from_config(config: &ModelConfig, limits: &Limits) -> Result<Sizes> {
        Sizes::from_config_with(config, limits, &SizesOptions::default())
    }

    /// The same with options (`mdr_sizes_from_config_ex`).
    pub fn from_config_with(config: &ModelConfig, limits: &Limits, options: &SizesOptions) -> Result<Sizes> {
        let l = limits.raw();
        let o = sys::mdr_sizes_options { glm_trim: options.glm_trim, splitk_sm_count: options.splitk_sm_count };
        // SAFETY: plain data; filled on success.
        let mut out: sys::mdr_sizes = unsafe { std::mem::zeroed() };
        let st = unsafe { sys::mdr_sizes_from_config_ex(config, &l, &o, &mut out) };
        check_with(st, || format!("sizes from config with {limits:?}, {options:?}"))?;
        Ok(Sizes(out))
    }

    /// The sizes of a named preset under `limits`.
    pub fn from_preset(name: &str, limits: &Limits) -> Result<Sizes> {
        Sizes::from_config(&model_preset(name)?, limits)
    }

    /// A buffer's allocated bytes (0: the buffer is NULL).
    pub fn bytes(&self, buf: Buffer) -> usize {
        self.0.bytes[buf as usize]
    }

    /// M, the rows of the token-major buffers.
    pub fn max_batch_tokens(&self) -> usize {
        self.0.max_batch_tokens
    }

    /// Rows of the row-major logits buffer.
    pub fn logits_rows(&self) -> usize {
        self.0.logits_rows
    }

    /// The seed's `total_bytes`: every entry except o_latent and norm_unit_w.
    pub fn total_bytes(&self) -> Result<usize> {
        let mut n = 0;
        // SAFETY: valid pointers.
        check_with(unsafe { sys::mdr_sizes_total_bytes(&self.0, &mut n) }, || "total bytes overflow".into())?;
        Ok(n)
    }
}
