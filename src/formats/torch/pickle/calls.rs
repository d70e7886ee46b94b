//! What a pickle would call or mutate, recorded instead: globals checked against the
//! allowlist, REDUCE/NEWOBJ/BUILD as nodes (OrderedDict and parameters understood), APPEND and
//! SETITEMS on their targets.

use super::vm::{Vm, R};
use crate::error::Error;
use crate::formats::torch::globals::{
    storage_dtype, torch_dtype, unsupported_tensor, GlobalPolicy,
};
use crate::formats::torch::value::{python3_module, Call, Id, Node, Rebuild};
use std::collections::HashSet;

/// A few words for what a node is, for messages.
pub(super) fn shape_of(n: &Node) -> String {
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

/// A dict key as Python compares it, for the kinds of key checkpoints use (a bool, an int and an
/// integral float are one number, as `True == 1 == 1.0` in Python; tuples element by element).
#[derive(PartialEq, Eq, Hash)]
enum Key<'a> {
    Str(&'a str),
    Bytes(&'a [u8]),
    Num(i64),
    Float(u64),
    Tuple(Vec<Key<'a>>),
    None,
}

impl<'a> Vm<'a> {
    /// A dict (or OrderedDict, or any object SETITEMS fills) given one key twice is refused:
    /// Python keeps only the last value, so `torch.load` never returns the first, while this tree
    /// would hold both (two tensors where torch has one). `torch.save` never writes such a file.
    /// Keys of other kinds (big ints, NaN, objects) are not compared.
    pub(super) fn refuse_repeated_keys(&self) -> R<()> {
        for n in &self.p.nodes {
            let entries = match n {
                Node::Dict(e) => e,
                Node::Object { dict_items, .. } => dict_items,
                _ => continue,
            };
            if entries.len() < 2 {
                continue;
            }
            let mut seen = HashSet::with_capacity(entries.len());
            for &(k, _) in entries {
                let Some(key) = self.key(k, 0) else { continue };
                if !seen.insert(key) {
                    let name = match self.p.node(k) {
                        Node::Str(s) => format!("the key '{s}'"),
                        other => format!("a key ({})", shape_of(other)),
                    };
                    return self.err(format!(
                        "a dict holds {name} twice: torch.load keeps only the last value, so the file has an entry torch never returns (torch.save does not write this; re-save the checkpoint with torch)"
                    ));
                }
            }
        }
        Ok(())
    }

    /// `id` as a [`Key`]; None for a kind not compared (tuples nested past 32 deep too).
    fn key(&self, id: Id, depth: usize) -> Option<Key<'_>> {
        Some(match self.p.node(id) {
            Node::Str(s) => Key::Str(s),
            Node::Bytes(b) => Key::Bytes(b),
            Node::Int(i) => Key::Num(*i),
            Node::Bool(b) => Key::Num(i64::from(*b)),
            Node::Float(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Key::Num(*f as i64),
            Node::Float(f) if f.is_finite() => Key::Float(f.to_bits()),
            Node::Tuple(v) if depth < 32 => Key::Tuple(
                v.iter()
                    .map(|&e| self.key(e, depth + 1))
                    .collect::<Option<_>>()?,
            ),
            Node::None => Key::None,
            _ => return None,
        })
    }

    pub(super) fn global(&mut self, module: String, name: String) -> R<()> {
        self.allowed(format!("{}.{name}", python3_module(&module)))?;
        self.push(Node::Global { module, name })
    }

    /// Refuse the global `full` (Python 3 names) unless the policy allows it, naming it: also
    /// for what an opcode writes back as a global (FROZENSET as `builtins.frozenset`).
    pub(super) fn allowed(&self, full: String) -> R<()> {
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
        Ok(())
    }

    pub(super) fn append_to(&mut self, target: Id, items: Vec<Id>) -> R<()> {
        self.not_parameter(target, "APPEND")?;
        match self.p.node_mut(target) {
            Node::List(v) => v.extend(items),
            Node::Object { list_items, .. } => list_items.extend(items),
            _ => return self.err("APPEND onto something that is not a list"),
        }
        Ok(())
    }

    pub(super) fn setitems_on(&mut self, target: Id, items: Vec<Id>) -> R<()> {
        if !items.len().is_multiple_of(2) {
            return self.err("SETITEMS with an odd number of items");
        }
        self.not_parameter(target, "SETITEM")?;
        self.hashable(items.iter().step_by(2).copied(), "a dict key")?;
        let pairs: Vec<(Id, Id)> = items.chunks_exact(2).map(|c| (c[0], c[1])).collect();
        match self.p.node_mut(target) {
            Node::Dict(v) => v.extend(pairs),
            Node::Object { dict_items, .. } => dict_items.extend(pairs),
            _ => return self.err("SETITEM onto something that is not a dict"),
        }
        Ok(())
    }

    /// Keys and set members must be values Python can hash, or no unpickler builds the dict or
    /// set: a list, dict, set, bytearray, OrderedDict or Namespace (one inside a tuple too) is
    /// refused, naming what it is.
    pub(super) fn hashable(&self, ids: impl Iterator<Item = Id>, role: &str) -> R<()> {
        let mut todo: Vec<Id> = ids.collect();
        while let Some(id) = todo.pop() {
            let node = self.p.node(id);
            let unhashable = match node {
                Node::List(_) | Node::Dict(_) | Node::Set(_) | Node::ByteArray(_) => true,
                Node::Tuple(v) => {
                    todo.extend(v);
                    false
                }
                Node::Object { callable, .. } => matches!(
                    self.p.global_name(*callable).as_deref(),
                    Some("collections.OrderedDict" | "collections.Counter" | "argparse.Namespace")
                ),
                _ => false,
            };
            if unhashable {
                return self.err(format!(
                    "{role} that is {}, which Python cannot hash: no unpickler builds it",
                    shape_of(node)
                ));
            }
        }
        Ok(())
    }

    /// The value `_codecs.encode(s, 'latin1')` (bytes) or `set(list)` / `frozenset(list)` gives.
    fn builtin_value(&self, name: &str, args: &[Id]) -> R<Node> {
        if name == "_codecs.encode" {
            if let [s, enc] = args[..] {
                if let (Some(s), Some("latin1" | "latin-1")) = (self.p.str(s), self.p.str(enc)) {
                    let bytes: Option<Vec<u8>> =
                        s.chars().map(|c| u8::try_from(u32::from(c)).ok()).collect();
                    if let Some(b) = bytes {
                        return Ok(Node::Bytes(b));
                    }
                }
            }
            return self.err("_codecs.encode with arguments other than (str, 'latin1')");
        }
        let items = match args[..] {
            [] => Vec::new(),
            [l] => match self.p.node(l) {
                Node::List(v) | Node::Tuple(v) => v.clone(),
                _ => return self.err(format!("{name} of something not a list")),
            },
            _ => return self.err(format!("{name} with more than one argument")),
        };
        self.hashable(items.iter().copied(), "a set member")?;
        Ok(if name == "builtins.set" {
            Node::Set(items)
        } else {
            Node::FrozenSet(items)
        })
    }

    /// Globals torch reads as values and never calls (storage classes, dtypes), builtin data
    /// types made by NEWOBJ, and torch.Size or torch.device called with arguments torch's own
    /// constructors refuse: refused, so such a pickle is not written back.
    fn callable_as(&self, name: &str, call: Call, args: &[Id]) -> R<()> {
        let short = name
            .strip_prefix("torch.cuda.")
            .or_else(|| name.strip_prefix("torch."))
            .unwrap_or("");
        let value_only = name == "torch.storage.UntypedStorage"
            || storage_dtype(short).is_some()
            || (name.starts_with("torch.") && torch_dtype(short).is_some());
        if value_only {
            return self.err(format!(
                "{name} called: torch reads it as a value (a storage class or dtype), never calls it"
            ));
        }
        let builtin = name.starts_with("builtins.");
        if builtin && call != Call::Reduce {
            return self.err(format!(
                "{name} made by NEWOBJ: not a pickle Python or torch writes"
            ));
        }
        let ok = match (name, args) {
            ("torch.Size", []) => true,
            ("torch.Size", [dims]) => match self.p.node(*dims) {
                Node::List(v) | Node::Tuple(v) => v
                    .iter()
                    .all(|&d| matches!(self.p.node(d), Node::Int(i) if *i >= 0)),
                _ => false,
            },
            ("torch.Size", _) => false,
            ("torch.device", [kind]) => self.p.str(*kind).is_some(),
            ("torch.device", [kind, index]) => {
                self.p.str(*kind).is_some() && matches!(self.p.node(*index), Node::Int(_))
            }
            ("torch.device", _) => false,
            _ => true,
        };
        if !ok {
            let shapes: Vec<String> = args.iter().map(|&a| shape_of(self.p.node(a))).collect();
            return self.err(format!(
                "{name} called with ({}): torch's constructor refuses them",
                shapes.join(", ")
            ));
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
    pub(super) fn call(&mut self, callable: Id, args: Id, call: Call, kwargs: Option<Id>) -> R<()> {
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
        if name == "torch.nn.parameter.Parameter" {
            // torch.save writes a Parameter as _rebuild_parameter(tensor, …); read as an object,
            // its tensor would be named after the call's arguments, not its key.
            return self.err("torch.nn.parameter.Parameter called directly: refusing (torch.save writes a Parameter with torch._utils._rebuild_parameter, which is read; this file was not written by torch.save)");
        }
        self.callable_as(&name, call, &arg_items)?;
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
                "_codecs.encode" | "builtins.set" | "builtins.frozenset" => {
                    let value = self.builtin_value(&name, &arg_items)?;
                    return self.push(value);
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

    /// BUILD: the state of the object under it, set once.
    pub(super) fn build(&mut self) -> R<()> {
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
}
