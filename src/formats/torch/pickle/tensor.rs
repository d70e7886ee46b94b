//! torch's tensor rebuild calls read into tensor nodes: shapes, strides, storage references
//! and their dtypes, checked as they are read.

use super::vm::{Vm, R};
use crate::dtype::DType;
use crate::formats::torch::globals::{storage_dtype, torch_dtype};
use crate::formats::torch::value::{Id, Node, Rebuild, StorageRef, TensorNode};
use std::collections::HashSet;

impl<'a> Vm<'a> {
    /// Backward hooks must be none: an empty dict or OrderedDict, or `None` (files of the
    /// Python 2 era, as the weights the lpips package ships), which torch takes as no hooks.
    pub(super) fn check_hooks(&self, name: &str, id: Id) -> R<()> {
        let empty = match self.p.node(id) {
            Node::None => true,
            Node::Dict(e) => e.is_empty(),
            Node::Object { .. } if self.p.is_ordered_dict(id) => {
                self.p.dict_entries(id).is_some_and(|e| e.is_empty())
            }
            _ => false,
        };
        if !empty {
            return self.err(format!(
                "{name} with backward hooks that are not an empty dict: refusing"
            ));
        }
        Ok(())
    }

    /// Does the value under `id` contain a tensor (bounded: a huge value counts as yes)?
    pub(super) fn has_tensor(&self, id: Id) -> bool {
        let mut stack = vec![id];
        let mut seen = HashSet::new();
        while let Some(i) = stack.pop() {
            if seen.len() > 1 << 16 {
                return true;
            }
            if !seen.insert(i) {
                continue;
            }
            let n = self.p.node(i);
            if matches!(n, Node::Tensor(_) | Node::PersistentId(_)) {
                return true;
            }
            stack.extend(crate::formats::torch::value::node_children(n));
        }
        false
    }

    fn uint(&self, id: Id, what: &str) -> R<u64> {
        match self.p.node(id) {
            Node::Int(i) if *i >= 0 => Ok(*i as u64),
            _ => self.err(format!("tensor {what} is not a non-negative integer")),
        }
    }

    fn uint_tuple(&self, id: Id, what: &str) -> R<Vec<u64>> {
        match self.p.node(id) {
            Node::Tuple(v) => v.iter().map(|&i| self.uint(i, what)).collect(),
            _ => self.err(format!("tensor {what} is not a tuple")),
        }
    }

    /// `_rebuild_tensor(storage, offset, size, stride)`,
    /// `_rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata])`,
    /// `_rebuild_tensor_v3(storage, offset, size, stride, requires_grad, hooks, dtype[, metadata])`.
    pub(super) fn tensor(&self, args: &[Id], rebuild: Rebuild) -> R<TensorNode> {
        let f = rebuild.function();
        let (min, max) = match rebuild {
            Rebuild::V1 => (4, 4),
            Rebuild::V2 => (6, 7),
            Rebuild::V3 => (7, 8),
        };
        if !(min..=max).contains(&args.len()) {
            let want = if min == max {
                min.to_string()
            } else {
                format!("{min} or {max}")
            };
            return self.err(format!(
                "{f} with {} arguments (expected {want})",
                args.len()
            ));
        }
        let Node::PersistentId(pid) = self.p.node(args[0]) else {
            return self.err(format!("{f} whose storage is not a persistent id"));
        };
        let mut storage = self.storage_ref(*pid)?;
        if storage.is_untyped() != (rebuild == Rebuild::V3) {
            return self.err(format!(
                "{f} with a storage of class {}.{}: torch pairs UntypedStorage with _rebuild_tensor_v3 only",
                storage.class.0, storage.class.1
            ));
        }
        if rebuild != Rebuild::V1 {
            if !matches!(self.p.node(args[4]), Node::Bool(_)) {
                return self.err(format!("{f} whose requires_grad is not a bool"));
            }
            self.check_hooks(f, args[5])?;
        }
        if rebuild == Rebuild::V3 {
            let dtype = match self.p.node(args[6]) {
                Node::Global { module, name } if module == "torch" => torch_dtype(name),
                _ => None,
            };
            let Some(dtype) = dtype.filter(|d| d.bits() % 8 == 0 && !d.is_quantized()) else {
                return self.err(format!(
                    "{f} whose dtype argument is not a torch dtype this reader knows"
                ));
            };
            // The persistent id counts bytes; the tree counts elements of the dtype.
            let size = dtype.bits() / 8;
            if storage.numel % size != 0 {
                return self.err(format!(
                    "{f}: an untyped storage of {} bytes does not hold whole {} elements",
                    storage.numel,
                    dtype.torch_name()
                ));
            }
            storage.dtype = dtype;
            storage.numel /= size;
        }
        if rebuild != Rebuild::V1
            && matches!(self.p.node(args[4]), Node::Bool(true))
            && !storage.dtype.can_require_grad()
        {
            return self.err(format!(
                "{f}: a tensor of {} that requires grad (torch lets only floating and complex tensors require gradients)",
                storage.dtype.torch_name()
            ));
        }
        let meta = match rebuild {
            Rebuild::V1 => None,
            Rebuild::V2 => args.get(6),
            Rebuild::V3 => args.get(7),
        };
        if let Some(&m) = meta {
            if !matches!(self.p.node(m), Node::Dict(_) | Node::None) || self.has_tensor(m) {
                return self.err(format!("{f} whose metadata is not a plain dict: refusing"));
            }
            self.check_lazy_bits(f, m)?;
        }
        let shape = self.uint_tuple(args[2], "size")?;
        let stride = self.uint_tuple(args[3], "stride")?;
        if shape.len() != stride.len() {
            return self.err(format!(
                "tensor size has {} dimensions but stride has {}",
                shape.len(),
                stride.len()
            ));
        }
        Ok(TensorNode {
            rebuild,
            storage,
            offset: self.uint(args[1], "storage offset")?,
            shape,
            stride,
            rest: args[4..].to_vec(),
        })
    }

    /// A tensor's metadata (torch's `_get_tensor_metadata`) holds only its lazy conjugate and
    /// negative bits: set, `torch.load` returns the stored values conjugated or negated, so the
    /// stored bytes are not its values; refused, as is a key torch does not write.
    fn check_lazy_bits(&self, f: &str, meta: Id) -> R<()> {
        let Node::Dict(entries) = self.p.node(meta) else {
            return Ok(());
        };
        for &(k, v) in entries {
            let key = self.p.str(k).unwrap_or("");
            let set = !matches!(self.p.node(v), Node::Bool(false));
            if !matches!(key, "conj" | "neg") {
                return self.err(format!(
                    "{f} whose metadata holds '{key}', which torch does not write: refusing"
                ));
            }
            if set {
                return self.err(format!("{f} with torch's lazy '{key}' bit set: torch.load returns its stored values {}, so the bytes are not its values; save x.resolve_conj().resolve_neg() instead", if key == "conj" { "conjugated" } else { "negated" }));
            }
        }
        Ok(())
    }

    /// `('storage', torch.XStorage, key, location, numel[, view_metadata])`.
    pub(crate) fn storage_ref(&self, pid: Id) -> R<StorageRef> {
        let Node::Tuple(items) = self.p.node(pid) else {
            return self.err("persistent id is not a tuple");
        };
        if !(5..=6).contains(&items.len()) || self.p.str(items[0]) != Some("storage") {
            return self
                .err("persistent id is not a ('storage', type, key, location, numel) tuple");
        }
        if items.len() == 6 && !matches!(self.p.node(items[5]), Node::None) {
            return self.err("legacy storage views (view_metadata) are not supported");
        }
        let Node::Global { module, name } = self.p.node(items[1]) else {
            return self.err("storage type is not a global");
        };
        let dtype = match (module.as_str(), name.as_str()) {
            ("torch.storage", "UntypedStorage") => Some(DType::U8),
            ("torch" | "torch.cuda", n) => storage_dtype(n),
            _ => None,
        };
        let Some(dtype) = dtype else {
            return self.err(format!("unknown storage type {module}.{name}"));
        };
        let key = match self.p.node(items[2]) {
            Node::Str(s) => s.clone(),
            Node::Int(i) => i.to_string(),
            _ => return self.err("storage key is not a string"),
        };
        let Some(location) = self.p.str(items[3]).map(str::to_string) else {
            return self.err("storage location is not a string");
        };
        Ok(StorageRef {
            class: (module.clone(), name.clone()),
            dtype,
            key,
            location,
            numel: self.uint(items[4], "storage size")?,
        })
    }
}
