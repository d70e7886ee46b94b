//! A pickle virtual machine that never imports or calls anything. Globals are names checked
//! against an allowlist (`super::globals`); REDUCE/NEWOBJ/BUILD record what would be called as nodes; torch's tensor
//! rebuild calls become tensor nodes. Memo, stack, marks and node count are bounded.

use super::globals::unsupported_tensor;
pub use super::globals::{storage_dtype, torch_dtype, GlobalPolicy, KNOWN_DATA_GLOBALS};
use super::opcode::Op;
use super::value::{python3_module, Call, Id, Node, Pickle, Rebuild, StorageRef, TensorNode};
use crate::dtype::DType;
use crate::error::Error;
use std::collections::{HashMap, HashSet};
use std::path::Path;

/// Bounds that keep a hostile pickle from using unbounded memory or time.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_nodes: usize,
    pub max_stack: usize,
    pub max_marks: usize,
    pub max_memo: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_nodes: 16 << 20,
            max_stack: 1 << 20,
            max_marks: 1 << 16,
            max_memo: 16 << 20,
        }
    }
}

/// A few words for what a node is, for messages.
fn shape_of(n: &Node) -> String {
    match n {
        Node::None => "None".into(),
        Node::Bool(_) => "a bool".into(),
        Node::Int(_) | Node::BigInt(_) => "an int".into(),
        Node::Float(_) => "a float".into(),
        Node::Str(_) => "a string".into(),
        Node::Bytes(_) | Node::ByteArray(_) => "bytes".into(),
        Node::List(v) => format!("a list of {}", v.len()),
        Node::Tuple(v) => format!("a tuple of {}", v.len()),
        Node::Dict(e) => format!("a dict of {}", e.len()),
        Node::Set(_) | Node::FrozenSet(_) => "a set".into(),
        Node::Global { module, name } => format!("the global {module}.{name}"),
        Node::PersistentId(_) => "a persistent id".into(),
        Node::Tensor(_) => "a tensor".into(),
        Node::Object { .. } => "an object".into(),
    }
}

/// Where a pickle lies, for its errors: the file, and which pickle of it (`record`, e.g.
/// `data.pkl`; "" when the file is one pickle).
#[derive(Debug, Clone, Copy)]
pub struct Origin<'a> {
    pub path: &'a Path,
    pub record: &'a str,
}

type R<T> = Result<T, Error>;

struct Vm<'a> {
    data: &'a [u8],
    pos: usize,
    /// Offset of the opcode being run, for messages.
    op_pos: usize,
    stack: Vec<Id>,
    marks: Vec<usize>,
    memo: HashMap<u32, Id>,
    p: Pickle,
    policy: &'a GlobalPolicy,
    limits: Limits,
    origin: Origin<'a>,
}

/// Run the pickle at the start of `data` (found at `origin`, for errors). Returns the value and
/// the offset just past STOP (legacy torch files hold several pickles back to back).
pub fn unpickle(
    data: &[u8],
    origin: Origin<'_>,
    policy: &GlobalPolicy,
    limits: Limits,
) -> R<(Pickle, usize)> {
    let mut vm = Vm {
        data,
        pos: 0,
        op_pos: 0,
        stack: Vec::new(),
        marks: Vec::new(),
        memo: HashMap::new(),
        p: Pickle {
            nodes: Vec::new(),
            root: 0,
        },
        policy,
        limits,
        origin,
    };
    let root = vm.run()?;
    vm.p.root = root;
    Ok((vm.p, vm.pos))
}

impl<'a> Vm<'a> {
    fn err<T>(&self, problem: impl Into<String>) -> R<T> {
        Err(Error::Pickle {
            path: self.origin.path.to_path_buf(),
            record: self.origin.record.to_string(),
            offset: self.op_pos,
            problem: problem.into(),
        })
    }

    /// The refusal of a tensor this tool does not read, built by `global`.
    fn unsupported<T>(&self, what: &'static str, global: &str, fix: &'static str) -> R<T> {
        Err(Error::PickledTensor {
            path: self.origin.path.to_path_buf(),
            record: self.origin.record.to_string(),
            offset: self.op_pos,
            what,
            global: global.to_string(),
            fix,
        })
    }

    fn take(&mut self, n: usize) -> R<&'a [u8]> {
        match self.pos.checked_add(n) {
            Some(end) if end <= self.data.len() => {
                let s = &self.data[self.pos..end];
                self.pos = end;
                Ok(s)
            }
            _ => self.err(format!(
                "pickle ends early: needs {n} more bytes at byte {}",
                self.pos
            )),
        }
    }

    fn u8(&mut self) -> R<u8> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> R<u16> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> R<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> R<u64> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    fn len(&mut self, n: u64) -> R<usize> {
        match usize::try_from(n) {
            Ok(n) if n <= self.data.len() - self.pos => Ok(n),
            _ => self.err(format!(
                "length {n} runs past the end of the pickle ({} bytes left)",
                self.data.len() - self.pos
            )),
        }
    }

    fn line_bytes(&mut self) -> R<&'a [u8]> {
        let rest = &self.data[self.pos..];
        let Some(end) = rest.iter().position(|&b| b == b'\n') else {
            return self.err("text opcode without a newline");
        };
        self.pos += end + 1;
        Ok(&rest[..end])
    }

    fn line(&mut self) -> R<&'a str> {
        let b = self.line_bytes()?;
        std::str::from_utf8(b).or_else(|_| self.err("text opcode is not UTF-8"))
    }

    fn push_node(&mut self, node: Node) -> R<Id> {
        if self.p.nodes.len() >= self.limits.max_nodes {
            return self.err(format!(
                "more than {} values: refusing (an expansion bomb?)",
                self.limits.max_nodes
            ));
        }
        Ok(self.p.push(node))
    }

    fn push(&mut self, node: Node) -> R<()> {
        let id = self.push_node(node)?;
        self.push_id(id)
    }

    fn push_id(&mut self, id: Id) -> R<()> {
        if self.stack.len() >= self.limits.max_stack {
            return self.err(format!("stack deeper than {}", self.limits.max_stack));
        }
        self.stack.push(id);
        Ok(())
    }

    fn pop(&mut self) -> R<Id> {
        // A pop may not reach below the innermost mark.
        if self.marks.last().is_some_and(|&m| self.stack.len() <= m) {
            return self.err("pop below a mark");
        }
        match self.stack.pop() {
            Some(id) => Ok(id),
            None => self.err("stack underflow"),
        }
    }

    fn top(&self) -> R<Id> {
        match self.stack.last() {
            Some(&id) if self.marks.last().is_none_or(|&m| self.stack.len() > m) => Ok(id),
            _ => self.err("stack underflow"),
        }
    }

    fn pop_mark(&mut self) -> R<Vec<Id>> {
        let Some(m) = self.marks.pop() else {
            return self.err("no mark on the stack");
        };
        Ok(self.stack.split_off(m))
    }

    fn memo_put(&mut self, key: u32) -> R<()> {
        let top = self.top()?;
        if self.memo.len() >= self.limits.max_memo && !self.memo.contains_key(&key) {
            return self.err(format!("memo larger than {}", self.limits.max_memo));
        }
        self.memo.insert(key, top);
        Ok(())
    }

    fn memo_get(&mut self, key: u32) -> R<()> {
        match self.memo.get(&key) {
            Some(&id) => self.push_id(id),
            None => self.err(format!("memo key {key} read before it was written")),
        }
    }

    fn global(&mut self, module: String, name: String) -> R<()> {
        let full = format!("{}.{name}", python3_module(&module));
        if let Some((what, fix)) = unsupported_tensor(&full) {
            return self.unsupported(what, &full, fix);
        }
        if !self.policy.allows(&full) {
            return Err(Error::UnknownGlobal {
                path: self.origin.path.to_path_buf(),
                record: self.origin.record.to_string(),
                offset: self.op_pos,
                allowable: GlobalPolicy::refuse_extra(&full).is_none(),
                global: full,
            });
        }
        self.push(Node::Global { module, name })
    }

    fn int_node(&self, bytes: &[u8]) -> Node {
        if bytes.is_empty() {
            return Node::Int(0);
        }
        if bytes.len() <= 8 {
            let neg = bytes[bytes.len() - 1] & 0x80 != 0;
            let mut a = [if neg { 0xFF } else { 0 }; 8];
            a[..bytes.len()].copy_from_slice(bytes);
            return Node::Int(i64::from_le_bytes(a));
        }
        Node::BigInt(bytes.to_vec())
    }

    fn append_to(&mut self, target: Id, items: Vec<Id>) -> R<()> {
        self.not_parameter(target, "APPEND")?;
        match self.p.node_mut(target) {
            Node::List(v) => v.extend(items),
            Node::Object { list_items, .. } => list_items.extend(items),
            _ => return self.err("APPEND onto something that is not a list"),
        }
        Ok(())
    }

    fn setitems_on(&mut self, target: Id, items: Vec<Id>) -> R<()> {
        if !items.len().is_multiple_of(2) {
            return self.err("SETITEMS with an odd number of items");
        }
        self.not_parameter(target, "SETITEM")?;
        let pairs: Vec<(Id, Id)> = items.chunks_exact(2).map(|c| (c[0], c[1])).collect();
        match self.p.node_mut(target) {
            Node::Dict(v) => v.extend(pairs),
            Node::Object { dict_items, .. } => dict_items.extend(pairs),
            _ => return self.err("SETITEM onto something that is not a dict"),
        }
        Ok(())
    }

    /// A Parameter is read as its tensor; items or state added to it would be skipped.
    fn not_parameter(&self, target: Id, op: &str) -> R<()> {
        if self.p.is_parameter_object(target) {
            return self.err(format!(
                "{op} onto a Parameter (torch._utils._rebuild_parameter): refusing (it would be skipped)"
            ));
        }
        Ok(())
    }

    /// REDUCE / NEWOBJ: record the call. Callables the VM understands consume every argument
    /// into the tree (tensors, parameters, OrderedDict, bytes, sets) or the pickle is refused,
    /// naming the callable and the argument shape; anything else becomes an object node whose
    /// arguments, state and items are all walked and written back.
    fn call(&mut self, callable: Id, args: Id, call: Call, kwargs: Option<Id>) -> R<()> {
        let Some(name) = self.p.global_name(callable) else {
            return self.err("call of something that is not a global");
        };
        let arg_items = match self.p.node(args) {
            Node::Tuple(a) => a.clone(),
            _ => return self.err(format!("{name} called with non-tuple arguments")),
        };
        let function = matches!(
            name.as_str(),
            "torch._utils._rebuild_tensor"
                | "torch._utils._rebuild_tensor_v2"
                | "torch._utils._rebuild_tensor_v3"
                | "torch._utils._rebuild_parameter"
                | "torch._utils._rebuild_parameter_with_state"
                | "torch._tensor._rebuild_from_type_v2"
                | "_codecs.encode"
        );
        if name == "torch.Tensor" {
            return self.err("torch.Tensor called: refusing (torch.Tensor is read only as the type of _rebuild_from_type_v2)");
        }
        if function && call != Call::Reduce {
            return self.err(format!(
                "{name} is a function but is instantiated as a class (NEWOBJ): not a file torch writes"
            ));
        }
        if call == Call::Reduce {
            match name.as_str() {
                "torch._utils._rebuild_tensor" => {
                    let t = self.tensor(&arg_items, Rebuild::V1)?;
                    return self.push(Node::Tensor(Box::new(t)));
                }
                "torch._utils._rebuild_tensor_v2" => {
                    let t = self.tensor(&arg_items, Rebuild::V2)?;
                    return self.push(Node::Tensor(Box::new(t)));
                }
                "torch._utils._rebuild_tensor_v3" => {
                    let t = self.tensor(&arg_items, Rebuild::V3)?;
                    return self.push(Node::Tensor(Box::new(t)));
                }
                "torch._utils._rebuild_parameter"
                | "torch._utils._rebuild_parameter_with_state" => {
                    self.check_parameter(&name, &arg_items)?;
                }
                "torch._tensor._rebuild_from_type_v2" => {
                    return self.rebuild_with_attributes(callable, &arg_items);
                }
                "_codecs.encode" => {
                    if let [s, enc] = arg_items[..] {
                        if let (Some(s), Some("latin1" | "latin-1")) =
                            (self.p.str(s), self.p.str(enc))
                        {
                            let bytes: Option<Vec<u8>> =
                                s.chars().map(|c| u8::try_from(u32::from(c)).ok()).collect();
                            if let Some(b) = bytes {
                                return self.push(Node::Bytes(b));
                            }
                        }
                    }
                    return self.err("_codecs.encode with arguments other than (str, 'latin1')");
                }
                "builtins.set" | "builtins.frozenset" => {
                    let items = match arg_items[..] {
                        [] => Vec::new(),
                        [l] => match self.p.node(l) {
                            Node::List(v) | Node::Tuple(v) => v.clone(),
                            _ => return self.err(format!("{name} of something not a list")),
                        },
                        _ => return self.err(format!("{name} with more than one argument")),
                    };
                    let node = if name == "builtins.set" {
                        Node::Set(items)
                    } else {
                        Node::FrozenSet(items)
                    };
                    return self.push(node);
                }
                "builtins.bytes" if arg_items.is_empty() => {
                    return self.push(Node::Bytes(Vec::new()))
                }
                _ => {}
            }
        }
        let mut dict_items = Vec::new();
        let mut args = args;
        if name == "collections.OrderedDict" {
            // Python 2 era torch (and OrderedDict's own __reduce__ there) passes the entries as
            // the constructor's argument: OrderedDict([[key, value], ...]). They become the
            // dict's entries; the call is then written back as OrderedDict() + SETITEMS.
            dict_items = self.ordered_dict_args(call, &arg_items, kwargs)?;
            if !arg_items.is_empty() {
                args = self.push_node(Node::Tuple(Vec::new()))?;
            }
        }
        self.push(Node::Object {
            callable,
            args,
            call,
            kwargs,
            state: None,
            list_items: Vec::new(),
            dict_items,
        })
    }

    /// The entries an `OrderedDict(...)` call is given: none, a list/tuple of 2-item lists or
    /// tuples, or a dict. Anything else is refused, naming the shape.
    fn ordered_dict_args(&self, call: Call, args: &[Id], kwargs: Option<Id>) -> R<Vec<(Id, Id)>> {
        let kw_empty =
            kwargs.is_none_or(|k| matches!(self.p.node(k), Node::Dict(e) if e.is_empty()));
        if !kw_empty {
            return self.err("collections.OrderedDict called with keyword arguments: refusing (they would be entries this reader does not keep)");
        }
        match args {
            [] => Ok(Vec::new()),
            [_] if call != Call::Reduce => self.err(
                "collections.OrderedDict created by NEWOBJ with arguments: Python would drop them; refusing rather than guess",
            ),
            [one] => match self.p.node(*one) {
                Node::Dict(e) => Ok(e.clone()),
                Node::List(items) | Node::Tuple(items) => {
                    let mut pairs = Vec::with_capacity(items.len());
                    for (i, &item) in items.iter().enumerate() {
                        match self.p.node(item) {
                            Node::List(kv) | Node::Tuple(kv) if kv.len() == 2 => {
                                pairs.push((kv[0], kv[1]))
                            }
                            other => {
                                return self.err(format!(
                                    "collections.OrderedDict entry {i} is {} where a (key, value) pair was expected: refusing",
                                    shape_of(other)
                                ))
                            }
                        }
                    }
                    Ok(pairs)
                }
                other => self.err(format!(
                    "collections.OrderedDict called with {}: expected () or ([(key, value), ...],); refusing",
                    shape_of(other)
                )),
            },
            more => self.err(format!(
                "collections.OrderedDict called with {} arguments: expected () or ([(key, value), ...],); refusing",
                more.len()
            )),
        }
    }

    /// `_rebuild_from_type_v2(_rebuild_tensor_v2, torch.Tensor, args, attributes)`: a plain
    /// tensor with Python attributes (plain data, no tensors). Kept as an object whose arguments
    /// are (function, type, the tensor, attributes), so it is read as its tensor and written back
    /// as it was; subclasses and other rebuild functions are refused.
    fn rebuild_with_attributes(&mut self, callable: Id, args: &[Id]) -> R<()> {
        let refuse = |vm: &Self| -> R<()> {
            vm.unsupported(
                "a tensor subclass",
                "torch._tensor._rebuild_from_type_v2",
                "save plain tensors (tensor.as_subclass(torch.Tensor))",
            )
        };
        let [func, ty, inner, state] = args[..] else {
            return refuse(self);
        };
        let plain = self.p.global_name(func).as_deref() == Some("torch._utils._rebuild_tensor_v2")
            && self.p.global_name(ty).as_deref() == Some("torch.Tensor")
            && matches!(self.p.node(state), Node::Dict(_))
            && !self.has_tensor(state);
        let Node::Tuple(items) = self.p.node(inner).clone() else {
            return refuse(self);
        };
        if !plain {
            return refuse(self);
        }
        let t = self.tensor(&items, Rebuild::V2)?;
        let tensor = self.push_node(Node::Tensor(Box::new(t)))?;
        let args = self.push_node(Node::Tuple(vec![func, ty, tensor, state]))?;
        self.push(Node::object(callable, args, Call::Reduce, None, None))
    }

    /// `_rebuild_parameter(data, requires_grad, hooks)` /
    /// `_rebuild_parameter_with_state(data, requires_grad, hooks, state)`: the tree keeps the
    /// data tensor; the rest must be plain (no hooks, no tensors in the state).
    fn check_parameter(&self, name: &str, args: &[Id]) -> R<()> {
        let want = if name.ends_with("_with_state") { 4 } else { 3 };
        if args.len() != want {
            return self.err(format!(
                "{name} with {} arguments (expected {want}): refusing",
                args.len()
            ));
        }
        if !matches!(self.p.node(args[0]), Node::Tensor(_)) {
            return self.err(format!(
                "{name} whose data is {}, not a tensor: refusing",
                shape_of(self.p.node(args[0]))
            ));
        }
        if !matches!(self.p.node(args[1]), Node::Bool(_)) {
            return self.err(format!(
                "{name} whose requires_grad is not a bool: refusing"
            ));
        }
        self.check_hooks(name, args[2])?;
        if want == 4 && self.has_tensor(args[3]) {
            return self.err(format!(
                "{name} whose Python attributes hold tensors: refusing (they would be skipped)"
            ));
        }
        Ok(())
    }

    /// Backward hooks must be none: an empty dict or OrderedDict, or `None` (files of the
    /// Python 2 era, as the weights the lpips package ships), which torch takes as no hooks.
    fn check_hooks(&self, name: &str, id: Id) -> R<()> {
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
    fn has_tensor(&self, id: Id) -> bool {
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
            stack.extend(super::writer::node_children(n));
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
    fn tensor(&self, args: &[Id], rebuild: Rebuild) -> R<TensorNode> {
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
        let meta = match rebuild {
            Rebuild::V1 => None,
            Rebuild::V2 => args.get(6),
            Rebuild::V3 => args.get(7),
        };
        if let Some(&m) = meta {
            if !matches!(self.p.node(m), Node::Dict(_) | Node::None) || self.has_tensor(m) {
                return self.err(format!("{f} whose metadata is not a plain dict: refusing"));
            }
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
        let location = self.p.str(items[3]).unwrap_or("cpu").to_string();
        Ok(StorageRef {
            class: (module.clone(), name.clone()),
            dtype,
            key,
            location,
            numel: self.uint(items[4], "storage size")?,
        })
    }

    fn text_string(&self, line: &str) -> R<Vec<u8>> {
        let q = line.as_bytes();
        if q.len() < 2 || q[0] != q[q.len() - 1] || !(q[0] == b'\'' || q[0] == b'"') {
            return self.err("STRING opcode argument is not quoted");
        }
        let mut out = Vec::new();
        let mut it = q[1..q.len() - 1].iter().copied();
        while let Some(c) = it.next() {
            if c != b'\\' {
                out.push(c);
                continue;
            }
            match it.next() {
                Some(b'n') => out.push(b'\n'),
                Some(b't') => out.push(b'\t'),
                Some(b'r') => out.push(b'\r'),
                Some(b'x') => {
                    let h: Vec<u8> = it.by_ref().take(2).collect();
                    let v = std::str::from_utf8(&h)
                        .ok()
                        .and_then(|s| u8::from_str_radix(s, 16).ok());
                    match v {
                        Some(v) => out.push(v),
                        None => return self.err("bad \\x escape in STRING"),
                    }
                }
                Some(c) => out.push(c),
                None => return self.err("STRING ends with a backslash"),
            }
        }
        Ok(out)
    }

    /// Python's raw-unicode-escape: bytes are Latin-1 characters, except `\uXXXX`/`\UXXXXXXXX`.
    fn raw_unicode(&self, line: &[u8]) -> R<String> {
        let mut out = String::new();
        let mut chars = line.iter().map(|&b| char::from(b)).peekable();
        while let Some(c) = chars.next() {
            if c == '\\' && matches!(chars.peek(), Some('u' | 'U')) {
                let n = if chars.next() == Some('u') { 4 } else { 8 };
                let hex: String = chars.by_ref().take(n).collect();
                match u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                    Some(ch) => out.push(ch),
                    None => return self.err("bad \\u escape in UNICODE"),
                }
            } else {
                out.push(c);
            }
        }
        Ok(out)
    }

    fn utf8(&self, b: &[u8], op: &str) -> R<String> {
        match std::str::from_utf8(b) {
            Ok(s) => Ok(s.to_string()),
            Err(_) => self.err(format!("{op} is not valid UTF-8")),
        }
    }

    fn run(&mut self) -> R<Id> {
        loop {
            self.op_pos = self.pos;
            let byte = self.u8()?;
            let Some(op) = Op::decode(byte) else {
                return self.err(format!("unknown opcode 0x{byte:02x}"));
            };
            if op == Op::Stop {
                return self.pop();
            }
            self.step(op)?;
        }
    }

    /// One opcode (STOP aside), by the group it belongs to.
    fn step(&mut self, op: Op) -> R<()> {
        use Op::*;
        match op {
            Proto | Frame | Mark | Pop | PopMark | Dup => self.stack_op(op),
            None | NewTrue | NewFalse | Int | Long | BinInt | BinInt1 | BinInt2 | Long1 | Long4
            | Float | BinFloat => self.scalar_op(op),
            String | BinString | ShortBinString | Unicode | BinUnicode | ShortBinUnicode
            | BinUnicode8 | BinBytes | ShortBinBytes | BinBytes8 | ByteArray8 => self.text_op(op),
            EmptyTuple | Tuple1 | Tuple2 | Tuple3 | Tuple | EmptyList | List | EmptyDict | Dict
            | EmptySet | FrozenSet => self.collection_op(op),
            Append | Appends | SetItem | SetItems | AddItems => self.fill_op(op),
            Global | StackGlobal | Inst | Obj | Reduce | NewObj | NewObjEx | Build | BinPersId
            | PersId => self.object_op(op),
            Put | BinPut | LongBinPut | Memoize | Get | BinGet | LongBinGet => self.memo_op(op),
            Ext1 | Ext2 | Ext4 => self.err("extension-registry opcode (EXT1/2/4) is not supported"),
            NextBuffer | ReadOnlyBuffer => {
                self.err("out-of-band buffer opcode (protocol 5) is not supported")
            }
            Stop => self.err("STOP handled by the loop"),
        }
    }

    /// PROTO, FRAME, MARK, POP, POP_MARK, DUP.
    fn stack_op(&mut self, op: Op) -> R<()> {
        match op {
            Op::Proto => {
                let v = self.u8()?;
                if v > 5 {
                    return self.err(format!("pickle protocol {v} is newer than 5"));
                }
            }
            Op::Frame => {
                let n = self.u64()?;
                self.len(n)?;
            }
            Op::Mark => {
                if self.marks.len() >= self.limits.max_marks {
                    return self.err(format!("more than {} nested marks", self.limits.max_marks));
                }
                self.marks.push(self.stack.len());
            }
            Op::Pop => {
                if self.marks.last().is_some_and(|&m| self.stack.len() <= m) {
                    self.pop_mark()?;
                } else {
                    self.pop()?;
                }
            }
            Op::PopMark => {
                self.pop_mark()?;
            }
            _ => {
                let t = self.top()?;
                self.push_id(t)?;
            }
        }
        Ok(())
    }

    /// None, booleans, integers and floats.
    fn scalar_op(&mut self, op: Op) -> R<()> {
        let node = match op {
            Op::None => Node::None,
            Op::NewTrue => Node::Bool(true),
            Op::NewFalse => Node::Bool(false),
            Op::Int => match self.line()? {
                "00" => Node::Bool(false),
                "01" => Node::Bool(true),
                s => match s.parse::<i64>() {
                    Ok(i) => Node::Int(i),
                    Err(_) => return self.err("INT opcode argument is not an i64"),
                },
            },
            Op::Long => match self.line()?.trim_end_matches('L').parse::<i64>() {
                Ok(i) => Node::Int(i),
                Err(_) => return self.err("LONG text opcode argument is not an i64"),
            },
            Op::BinInt => Node::Int(i64::from(self.u32()? as i32)),
            Op::BinInt1 => Node::Int(i64::from(self.u8()?)),
            Op::BinInt2 => Node::Int(i64::from(self.u16()?)),
            Op::Long1 => {
                let n = self.u8()?;
                let b = self.take(n as usize)?;
                self.int_node(b)
            }
            Op::Long4 => {
                let n = self.u32()? as i32;
                if n < 0 {
                    return self.err("LONG4 with a negative length");
                }
                let n = self.len(n as u64)?;
                let b = self.take(n)?;
                self.int_node(b)
            }
            Op::Float => match self.line()?.parse::<f64>() {
                Ok(f) => Node::Float(f),
                Err(_) => return self.err("FLOAT opcode argument is not a number"),
            },
            _ => {
                let b = self.take(8)?;
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                Node::Float(f64::from_be_bytes(a))
            }
        };
        self.push(node)
    }

    /// Strings (text and binary) and bytes.
    fn text_op(&mut self, op: Op) -> R<()> {
        let node = match op {
            Op::String => {
                let l = self.line()?;
                let b = self.text_string(l)?;
                Node::Str(self.utf8(&b, "STRING")?)
            }
            Op::BinString | Op::ShortBinString => {
                let n = if op == Op::BinString {
                    let n = self.u32()? as i32;
                    if n < 0 {
                        return self.err("BINSTRING with a negative length");
                    }
                    n as u64
                } else {
                    u64::from(self.u8()?)
                };
                let n = self.len(n)?;
                let b = self.take(n)?;
                Node::Str(self.utf8(b, "BINSTRING")?)
            }
            Op::Unicode => {
                let l = self.line_bytes()?;
                Node::Str(self.raw_unicode(l)?)
            }
            Op::BinUnicode | Op::ShortBinUnicode | Op::BinUnicode8 => {
                let n = match op {
                    Op::BinUnicode => u64::from(self.u32()?),
                    Op::ShortBinUnicode => u64::from(self.u8()?),
                    _ => self.u64()?,
                };
                let n = self.len(n)?;
                let b = self.take(n)?;
                Node::Str(self.utf8(b, "BINUNICODE")?)
            }
            _ => {
                let n = match op {
                    Op::BinBytes => u64::from(self.u32()?),
                    Op::ShortBinBytes => u64::from(self.u8()?),
                    _ => self.u64()?,
                };
                let n = self.len(n)?;
                let b = self.take(n)?.to_vec();
                if op == Op::ByteArray8 {
                    Node::ByteArray(b)
                } else {
                    Node::Bytes(b)
                }
            }
        };
        self.push(node)
    }

    /// New tuples, lists, dicts and sets.
    fn collection_op(&mut self, op: Op) -> R<()> {
        let node = match op {
            Op::EmptyTuple => Node::Tuple(Vec::new()),
            Op::Tuple1 | Op::Tuple2 | Op::Tuple3 => {
                let n = (op.byte() - 0x84) as usize;
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(self.pop()?);
                }
                items.reverse();
                Node::Tuple(items)
            }
            Op::Tuple => Node::Tuple(self.pop_mark()?),
            Op::EmptyList => Node::List(Vec::new()),
            Op::List => Node::List(self.pop_mark()?),
            Op::EmptyDict => Node::Dict(Vec::new()),
            Op::Dict => {
                let items = self.pop_mark()?;
                if items.len() % 2 != 0 {
                    return self.err("DICT with an odd number of items");
                }
                Node::Dict(items.chunks_exact(2).map(|c| (c[0], c[1])).collect())
            }
            Op::EmptySet => Node::Set(Vec::new()),
            _ => Node::FrozenSet(self.pop_mark()?),
        };
        self.push(node)
    }

    /// APPEND(S), SETITEM(S), ADDITEMS: items into the collection under them.
    fn fill_op(&mut self, op: Op) -> R<()> {
        match op {
            Op::Append => {
                let v = self.pop()?;
                let t = self.top()?;
                self.append_to(t, vec![v])
            }
            Op::Appends => {
                let items = self.pop_mark()?;
                let t = self.top()?;
                self.append_to(t, items)
            }
            Op::SetItem => {
                let v = self.pop()?;
                let k = self.pop()?;
                let t = self.top()?;
                self.setitems_on(t, vec![k, v])
            }
            Op::SetItems => {
                let items = self.pop_mark()?;
                let t = self.top()?;
                self.setitems_on(t, items)
            }
            _ => {
                let items = self.pop_mark()?;
                let t = self.top()?;
                match self.p.node_mut(t) {
                    Node::Set(v) => {
                        v.extend(items);
                        Ok(())
                    }
                    _ => self.err("ADDITEMS onto something that is not a set"),
                }
            }
        }
    }

    /// Globals, calls, BUILD and persistent ids.
    fn object_op(&mut self, op: Op) -> R<()> {
        match op {
            Op::Global => {
                let module = self.line()?.to_string();
                let name = self.line()?.to_string();
                self.global(module, name)
            }
            Op::StackGlobal => {
                let name = self.pop()?;
                let module = self.pop()?;
                match (self.p.str(module), self.p.str(name)) {
                    (Some(m), Some(n)) => {
                        let (m, n) = (m.to_string(), n.to_string());
                        self.global(m, n)
                    }
                    _ => self.err("STACK_GLOBAL with non-string module or name"),
                }
            }
            Op::Inst => {
                let module = self.line()?.to_string();
                let name = self.line()?.to_string();
                let items = self.pop_mark()?;
                self.global(module, name)?;
                let cls = self.pop()?;
                let args = self.push_node(Node::Tuple(items))?;
                self.call(cls, args, Call::Reduce, Option::None)
            }
            Op::Obj => {
                let items = self.pop_mark()?;
                let Some((&cls, rest)) = items.split_first() else {
                    return self.err("OBJ without a class");
                };
                let args = self.push_node(Node::Tuple(rest.to_vec()))?;
                self.call(cls, args, Call::Reduce, Option::None)
            }
            Op::Reduce | Op::NewObj => {
                let args = self.pop()?;
                let callable = self.pop()?;
                let call = if op == Op::Reduce {
                    Call::Reduce
                } else {
                    Call::NewObj
                };
                self.call(callable, args, call, Option::None)
            }
            Op::NewObjEx => {
                let kwargs = self.pop()?;
                let args = self.pop()?;
                let cls = self.pop()?;
                self.call(cls, args, Call::NewObjEx, Some(kwargs))
            }
            Op::Build => self.build(),
            Op::BinPersId => {
                let pid = self.pop()?;
                self.push(Node::PersistentId(pid))
            }
            _ => {
                let l = self.line()?.to_string();
                let s = self.push_node(Node::Str(l))?;
                self.push(Node::PersistentId(s))
            }
        }
    }

    /// BUILD: the state of the object under it, set once.
    fn build(&mut self) -> R<()> {
        let state = self.pop()?;
        let t = self.top()?;
        self.not_parameter(t, "BUILD")?;
        match self.p.node_mut(t) {
            Node::Object {
                state: s @ None, ..
            } => {
                *s = Some(state);
                Ok(())
            }
            Node::Object { .. } => self.err("BUILD applied twice to one object"),
            _ => self.err("BUILD on a value that is not an object"),
        }
    }

    /// PUT, GET and their binary forms, MEMOIZE.
    fn memo_op(&mut self, op: Op) -> R<()> {
        let key = match op {
            Op::Put | Op::Get => match self.line()?.parse::<u32>() {
                Ok(k) => k,
                Err(_) if op == Op::Put => return self.err("PUT with a bad key"),
                Err(_) => return self.err("GET with a bad key"),
            },
            Op::BinPut | Op::BinGet => u32::from(self.u8()?),
            Op::LongBinPut | Op::LongBinGet => self.u32()?,
            _ => u32::try_from(self.memo.len()).unwrap_or(u32::MAX),
        };
        match op {
            Op::Get | Op::BinGet | Op::LongBinGet => self.memo_get(key),
            _ => self.memo_put(key),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where the test pickles are said to lie.
    fn at() -> Origin<'static> {
        Origin {
            path: Path::new("test.pkl"),
            record: "",
        }
    }

    fn run(bytes: &[u8]) -> R<Pickle> {
        unpickle(bytes, at(), &GlobalPolicy::default(), Limits::default()).map(|(p, _)| p)
    }

    #[test]
    fn protocol_0_text_opcodes_build_the_same_values_python_does() {
        // pickle.dumps([1, 2.5, {'key': 3}, True, 'é', 12345678901, (None,)], protocol=0)
        let p = run(
            b"(lp0\nI1\naF2.5\na(dp1\nVkey\np2\nI3\nsaI01\naV\xe9\np3\naL12345678901L\na(Ntp4\na.",
        )
        .unwrap();
        let Node::List(items) = p.node(p.root) else {
            panic!("not a list")
        };
        let kinds: Vec<&Node> = items.iter().map(|&i| p.node(i)).collect();
        assert_eq!(kinds[0], &Node::Int(1));
        assert_eq!(kinds[1], &Node::Float(2.5));
        assert_eq!(
            p.get(items[2], "key").map(|v| p.node(v)),
            Some(&Node::Int(3))
        );
        assert_eq!(kinds[3], &Node::Bool(true));
        assert_eq!(kinds[4], &Node::Str("é".into()));
        assert_eq!(kinds[5], &Node::Int(12_345_678_901));
        assert!(matches!(kinds[6], Node::Tuple(t) if t.len() == 1));
    }

    #[test]
    fn protocol_4_frames_memoize_and_short_strings_are_read() {
        // pickle.dumps({'a': b'xy', 'b': {1, 2}}, protocol=4)
        let bytes = b"\x80\x04\x95\x1a\x00\x00\x00\x00\x00\x00\x00\x7d\x94\x28\x8c\x01\x61\x94\x43\x02\x78\x79\x94\x8c\x01\x62\x94\x8f\x94\x28\x4b\x01\x4b\x02\x90\x75\x2e";
        let p = run(bytes).unwrap();
        assert_eq!(
            p.get(p.root, "a").map(|v| p.node(v)),
            Some(&Node::Bytes(b"xy".to_vec()))
        );
        assert!(
            matches!(p.get(p.root, "b").map(|v| p.node(v)), Some(Node::Set(s)) if s.len() == 2)
        );
    }

    #[test]
    fn memo_get_shares_the_node_instead_of_copying_it() {
        // l = []; [l, l]: the second element is a GET of the first.
        let p = run(b"\x80\x02](]q\x00h\x00e.").unwrap();
        let Node::List(items) = p.node(p.root) else {
            panic!()
        };
        assert_eq!(items[0], items[1]);
    }

    #[test]
    fn bounds_are_enforced_not_run_into() {
        let small = Limits {
            max_nodes: 10,
            max_stack: 4,
            max_marks: 2,
            max_memo: 1,
        };
        let many = [b"\x80\x02".as_slice(), &[b'N'; 20], b"."].concat();
        let e = unpickle(&many, at(), &GlobalPolicy::default(), small).unwrap_err();
        assert!(e.to_string().contains("stack deeper than 4"), "{e:?}");
        let marks = b"\x80\x02(((N";
        let e = unpickle(marks, at(), &GlobalPolicy::default(), small).unwrap_err();
        assert!(e.to_string().contains("nested marks"), "{e:?}");
        let memo = b"\x80\x02Nq\x00q\x01.";
        let e = unpickle(memo, at(), &GlobalPolicy::default(), small).unwrap_err();
        assert!(e.to_string().contains("memo larger than 1"), "{e:?}");
        let nodes = [b"\x80\x02(".as_slice(), &[b'N'; 12], b"l."].concat();
        let e = unpickle(
            &nodes,
            at(),
            &GlobalPolicy::default(),
            Limits {
                max_stack: 100,
                ..small
            },
        )
        .unwrap_err();
        assert!(e.to_string().contains("more than 10 values"), "{e:?}");
    }

    #[test]
    fn malformed_pickles_are_errors_with_positions_never_panics() {
        let cases: [(&[u8], &str); 10] = [
            (b"", "pickle ends early"),
            (b"\x80\x02", "pickle ends early"),
            (b"\x80\x09N.", "protocol 9"),
            (b"\x80\x02X\xff\xff\xff\x7fab.", "runs past the end"),
            (b"\x80\x02h\x05.", "memo key 5 read before it was written"),
            (b"\x80\x02.", "stack underflow"),
            (b"\x80\x02e.", "no mark"),
            (b"\x80\x02NNs.", "stack underflow"),
            (b"\x80\x02\x82\x01.", "extension-registry"),
            (b"\x80\x02\xff.", "unknown opcode 0xff"),
        ];
        for (bytes, want) in cases {
            let e = run(bytes).unwrap_err();
            assert!(e.to_string().contains(want), "{bytes:?}: {e:?}");
        }
        // Every prefix of a real pickle fails cleanly.
        let real = b"\x80\x02}q\x00(X\x01\x00\x00\x00aK\x01X\x01\x00\x00\x00b]q\x01(G?\xf0\x00\x00\x00\x00\x00\x00\x89eu.";
        assert!(run(real).is_ok());
        for n in 0..real.len() {
            assert!(run(&real[..n]).is_err(), "prefix {n}");
        }
    }

    #[test]
    fn globals_outside_the_allowlist_are_refused_by_name_and_position() {
        let e = run(b"\x80\x02cos\nsystem\nX\x02\x00\x00\x00ls\x85R.").unwrap_err();
        assert!(
            matches!(&e, Error::UnknownGlobal { global, offset: 2, allowable: false, .. } if global == "os.system"),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "test.pkl: refused global os.system at byte 2"
        );
        assert_eq!(e.flag(), None, "no flag allows a code-running global");
        let e = run(b"\x80\x02cargparse\nNamespace\n).").unwrap_err();
        assert_eq!(e.flag(), Some("--allow-global"));
        assert!(e.to_string().contains("--allow-global argparse.Namespace"));
        let mut policy = GlobalPolicy::default();
        policy.extra.insert("argparse.Namespace".into());
        assert!(unpickle(
            b"\x80\x02cargparse\nNamespace\n)\x81.",
            at(),
            &policy,
            Limits::default()
        )
        .is_ok());
        // Python 2 names are mapped before the check, as Python's unpickler maps them.
        assert!(run(b"\x80\x02c__builtin__\nset\n](K\x01e\x85R.").is_ok());
        assert!(run(b"\x80\x02c__builtin__\neval\n.").is_err());
    }
}
