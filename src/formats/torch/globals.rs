//! Which globals a pickle may name: torch's own weights-only allowlist, the user's
//! `--allow-global` names (never the ones that execute code), the globals one kind of file carries
//! as data, and the tensor and storage classes with their dtypes. The pickle VM asks; it never
//! imports.

use crate::dtype::DType;
use crate::error::Error;
use std::collections::HashSet;

/// Which globals a pickle may name.
#[derive(Debug, Clone, Default)]
pub struct GlobalPolicy {
    /// Extra `module.name`s the user allowed with `--allow-global`.
    pub extra: HashSet<String>,
    /// Globals one kind of file is known to carry as plain data (a reader sets it for the one
    /// pickle it parses, e.g. a DCP folder's `.metadata`); never granted by `--allow-global`.
    pub context: &'static [&'static str],
}

/// Globals torch's own weights-only loader accepts and that plain checkpoints carry. Each is
/// either consumed whole by the VM (tensors, parameters, OrderedDict, bytes, sets) or kept as an
/// object whose arguments, state and items are all part of the value tree. With them,
/// [`SAFE_BUILTINS`] (bytes, sets and the like).
const ALLOWED: [&str; 13] = [
    "torch._utils._rebuild_tensor",
    "torch._utils._rebuild_tensor_v2",
    "torch._utils._rebuild_tensor_v3",
    "torch._utils._rebuild_parameter",
    "torch._utils._rebuild_parameter_with_state",
    "torch.storage.UntypedStorage",
    "collections.OrderedDict",
    "torch.Size",
    "torch.device",
    "torch.nn.parameter.Parameter",
    "_codecs.encode",
    // A plain tensor with Python attributes (DeepSpeed's ZeRO-3 flat groups carry `ds_id`):
    // read as its tensor when the type is torch.Tensor and the attributes are plain data.
    "torch._tensor._rebuild_from_type_v2",
    "torch.Tensor",
];

/// Tensor kinds torch can save that this project does not read, with what to do instead. They
/// are refused by name (never allowed with --allow-global: read as plain objects they would hide
/// their storages).
const UNSUPPORTED_TENSORS: [(&str, &str, &str); 7] = [
    (
        "torch._utils._rebuild_qtensor",
        "a quantized tensor",
        "dequantize it (tensor.dequantize()) and save again",
    ),
    (
        "torch._utils._rebuild_sparse_tensor",
        "a sparse tensor",
        "save tensor.to_dense() instead",
    ),
    (
        "torch._utils._rebuild_nested_tensor",
        "a nested tensor",
        "save its components (tensor.unbind()) instead",
    ),
    (
        "torch._utils._rebuild_meta_tensor_no_storage",
        "a meta tensor (it holds no data)",
        "save the materialised tensor",
    ),
    (
        "torch._utils._rebuild_wrapper_subclass",
        "a tensor subclass without storage (fake/functional)",
        "save the materialised tensor",
    ),
    (
        "torch._utils._rebuild_device_tensor_from_numpy",
        "a tensor rebuilt from numpy (XLA/MPS)",
        "load it with torch and save it again",
    ),
    (
        "torch._utils._rebuild_device_tensor_from_cpu_tensor",
        "a tensor rebuilt from a CPU copy (XLA/MPS)",
        "load it with torch and save it again",
    ),
];

/// Why a tensor-kind global is not read, if it is one of [`UNSUPPORTED_TENSORS`].
pub(super) fn unsupported_tensor(full: &str) -> Option<(&'static str, &'static str)> {
    UNSUPPORTED_TENSORS
        .iter()
        .find(|(n, _, _)| *n == full)
        .map(|(_, what, fix)| (*what, *fix))
}

/// Globals real training checkpoints carry that are allowed only when named with --allow-global.
pub const KNOWN_DATA_GLOBALS: [&str; 8] = [
    "numpy.core.multiarray.scalar",
    "numpy._core.multiarray.scalar",
    "numpy.dtype",
    "numpy.core.multiarray._reconstruct",
    "numpy.ndarray",
    "argparse.Namespace",
    "pathlib.PosixPath",
    "pathlib.WindowsPath",
];

/// Never allowed, even with --allow-global: these run code or load more pickles when a
/// checkpoint is loaded by a normal unpickler, so we refuse to read or write them.
const NEVER: [&str; 24] = [
    "os.",
    "posix.",
    "nt.",
    "subprocess.",
    "sys.",
    "pickle.",
    "_pickle.",
    "runpy.",
    "importlib.",
    "shutil.",
    "socket.",
    "code.",
    "pty.",
    "ctypes.",
    "marshal.",
    "types.",
    "webbrowser.",
    "torch.load",
    "torch.serialization.",
    "torch._C.",
    "torch.jit.",
    "builtins.",
    "functools.",
    "operator.",
];

/// Builtins that are plain data constructors: exempt from the `builtins.` ban. The first four are
/// allowed by default: torch's loader takes set, bytearray and complex, and `bytes()` (how Python
/// pickles `b''`) is written back as `_codecs.encode('', 'latin1')`, which it takes too.
/// frozenset and slice it refuses, so they need `--allow-global` (the output keeps them).
const SAFE_BUILTINS: [&str; 6] = [
    "builtins.set",
    "builtins.bytearray",
    "builtins.bytes",
    "builtins.complex",
    "builtins.frozenset",
    "builtins.slice",
];

/// How many of [`SAFE_BUILTINS`] are allowed without `--allow-global`.
const DEFAULT_BUILTINS: usize = 4;

/// Torch's legacy storage class name → element type (the classes `torch.save` writes with
/// `_rebuild_tensor_v2`; newer dtypes use an `UntypedStorage` and `_rebuild_tensor_v3`).
pub fn storage_dtype(class: &str) -> Option<DType> {
    use DType::*;
    Some(match class {
        "FloatStorage" => F32,
        "DoubleStorage" => F64,
        "HalfStorage" => F16,
        "BFloat16Storage" => BF16,
        "LongStorage" => I64,
        "IntStorage" => I32,
        "ShortStorage" => I16,
        "CharStorage" => I8,
        "ByteStorage" => U8,
        "BoolStorage" => Bool,
        "ComplexFloatStorage" => C64,
        "ComplexDoubleStorage" => C128,
        "QInt8Storage" => QI8,
        "QUInt8Storage" => QU8,
        "QInt32Storage" => QI32,
        _ => return None,
    })
}

/// The dtype a `torch.<name>` dtype global names (`torch.uint16`, `torch.float8_e4m3fn`, …), for
/// the dtype argument of `_rebuild_tensor_v3`.
pub fn torch_dtype(name: &str) -> Option<DType> {
    use DType::*;
    let d = match name {
        "float" => F32,
        "double" => F64,
        "half" => F16,
        "long" => I64,
        "int" => I32,
        "short" => I16,
        "cfloat" => C64,
        "cdouble" => C128,
        "chalf" => C32,
        n => {
            return crate::dtype::ALL
                .iter()
                .copied()
                .find(|d| d.torch_name() == n)
        }
    };
    Some(d)
}

impl GlobalPolicy {
    /// The default allowlist plus `names` (from `--allow-global`); the first name that can never
    /// be allowed is the error, a usage error naming `--allow-global`.
    pub fn with_allowed(names: &[String]) -> Result<GlobalPolicy, Error> {
        let mut p = GlobalPolicy::default();
        for n in names {
            if let Some(why) = Self::refuse_extra(n) {
                return Err(Error::arg("--allow-global", why));
            }
            p.extra.insert(n.clone());
        }
        Ok(p)
    }

    /// Why `--allow-global NAME` cannot be granted, if it cannot.
    pub fn refuse_extra(name: &str) -> Option<String> {
        if let Some((what, _)) = unsupported_tensor(name) {
            return Some(format!(
                "--allow-global {name}: {what} is not read by this tool"
            ));
        }
        let never = NEVER
            .iter()
            .any(|p| name.starts_with(p) || name == p.trim_end_matches('.'));
        if never && !SAFE_BUILTINS.contains(&name) {
            return Some(format!(
                "--allow-global {name}: never allowed (loading it would run code)"
            ));
        }
        if !name.contains('.') {
            return Some(format!("--allow-global {name}: expected MODULE.NAME"));
        }
        None
    }

    /// Is `module.name` (already mapped to Python 3 names) allowed?
    pub fn allows(&self, full: &str) -> bool {
        if ALLOWED.contains(&full)
            || SAFE_BUILTINS[..DEFAULT_BUILTINS].contains(&full)
            || self.context.contains(&full)
        {
            return true;
        }
        let storage = full
            .strip_prefix("torch.cuda.")
            .or_else(|| full.strip_prefix("torch."));
        if storage.is_some_and(|n| storage_dtype(n).is_some()) {
            return true;
        }
        if full
            .strip_prefix("torch.")
            .is_some_and(|n| torch_dtype(n).is_some())
        {
            return true;
        }
        self.extra.contains(full) && Self::refuse_extra(full).is_none()
    }
}
