//! The value tree a pickle builds, stored as an arena: nodes refer to each other by id, so a memo
//! GET shares a node instead of copying it (memory stays bounded by the opcodes read), mutation
//! through one reference is seen through all (as in Python), and the writer can re-emit sharing.

use crate::dtype::DType;

/// Index of a node in [`Pickle::nodes`].
pub type Id = u32;

/// How an object node was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    /// `callable(*args)` (REDUCE, or INST/OBJ in protocol 0/1).
    Reduce,
    /// `cls.__new__(cls, *args)` (NEWOBJ).
    NewObj,
    /// `cls.__new__(cls, *args, **kwargs)` (NEWOBJ_EX); kwargs in `Object::kwargs`.
    NewObjEx,
}

/// A storage a tensor refers to (torch's persistent id `('storage', type, key, location, numel)`).
#[derive(Debug, Clone, PartialEq)]
pub struct StorageRef {
    /// The storage class global as written (`torch`, `FloatStorage`; `torch.storage`,
    /// `UntypedStorage` for the dtypes torch writes with `_rebuild_tensor_v3`).
    pub class: (String, String),
    /// The element type of the tensors viewing it (for an untyped storage: the v3 dtype argument).
    pub dtype: DType,
    pub key: String,
    pub location: String,
    /// Number of elements of `dtype` in the storage.
    pub numel: u64,
}

impl StorageRef {
    /// An `UntypedStorage`: its persistent id (and a legacy file's count) is in bytes.
    pub fn is_untyped(&self) -> bool {
        self.class.1 == "UntypedStorage"
    }

    /// The size as the file writes it: elements for typed storages, bytes for untyped ones.
    pub fn written_numel(&self) -> Option<u64> {
        if self.is_untyped() {
            self.dtype.bytes_for(self.numel)
        } else {
            Some(self.numel)
        }
    }
}

/// Which of torch's rebuild functions made a tensor (written back the same way).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rebuild {
    /// `_rebuild_tensor(storage, offset, size, stride)` (torch ≤ 0.3).
    V1,
    /// `_rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata])`.
    V2,
    /// `_rebuild_tensor_v3(untyped_storage, offset, size, stride, requires_grad, hooks, dtype[,
    /// metadata])`: the dtypes without a legacy storage class (uint16/32/64, float8, complex32).
    V3,
}

impl Rebuild {
    pub fn function(self) -> &'static str {
        match self {
            Rebuild::V1 => "_rebuild_tensor",
            Rebuild::V2 => "_rebuild_tensor_v2",
            Rebuild::V3 => "_rebuild_tensor_v3",
        }
    }
}

/// A tensor: `torch._utils._rebuild_tensor*(storage, offset, size, stride, *rest)`.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorNode {
    pub rebuild: Rebuild,
    pub storage: StorageRef,
    /// In elements.
    pub offset: u64,
    pub shape: Vec<u64>,
    pub stride: Vec<u64>,
    /// requires_grad, backward_hooks, (v3) dtype and (optionally) metadata, written back as they
    /// were; checked when read (see `Vm::tensor` in pickle/tensor.rs).
    pub rest: Vec<Id>,
}

impl TensorNode {
    /// Do both view one storage the same way (a tie: one parameter under two names)?
    pub fn same_view(&self, other: &TensorNode) -> bool {
        self.storage.key == other.storage.key
            && self.offset == other.offset
            && self.shape == other.shape
            && self.stride == other.stride
    }

    pub fn elements(&self) -> u64 {
        self.shape.iter().product()
    }

    /// Make this a contiguous view of `rows` rows of a new storage `key` (the storage it views
    /// is then exactly its elements).
    pub fn view_new_storage(&mut self, key: &str, rows: u64) {
        self.view_new_storage_at(key, rows, 0);
    }

    /// [`Self::view_new_storage`] with the rows along dimension `axis` (the dimensions before it
    /// of length 1: a logits bias [1, V]).
    pub fn view_new_storage_at(&mut self, key: &str, rows: u64, axis: usize) {
        let cols: u64 = self.shape.iter().skip(axis + 1).product();
        self.storage.key = key.to_string();
        self.storage.numel = rows * cols;
        self.offset = 0;
        if let Some(r) = self.shape.get_mut(axis) {
            *r = rows;
        }
        let mut stride = vec![1u64; self.shape.len()];
        for d in (0..self.shape.len().saturating_sub(1)).rev() {
            stride[d] = stride[d + 1] * self.shape[d + 1];
        }
        self.stride = stride;
    }
}

/// One value.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    None,
    Bool(bool),
    Int(i64),
    /// An int that does not fit i64: little-endian two's complement bytes (as LONG1/LONG4 store it).
    BigInt(Vec<u8>),
    Float(f64),
    Str(String),
    Bytes(Vec<u8>),
    ByteArray(Vec<u8>),
    List(Vec<Id>),
    Tuple(Vec<Id>),
    /// Keys of any type, in insertion order.
    Dict(Vec<(Id, Id)>),
    Set(Vec<Id>),
    FrozenSet(Vec<Id>),
    /// A reference to `module.name`, as written in the file (before fix_imports mapping).
    Global {
        module: String,
        name: String,
    },
    /// The argument of BINPERSID that is not a tensor storage.
    PersistentId(Id),
    Tensor(Box<TensorNode>),
    /// Anything else built by calling a global: kept so it can be written back exactly.
    Object {
        callable: Id,
        args: Id,
        call: Call,
        kwargs: Option<Id>,
        /// BUILD argument.
        state: Option<Id>,
        /// APPEND/APPENDS onto the object.
        list_items: Vec<Id>,
        /// SETITEM/SETITEMS onto the object (an OrderedDict's entries).
        dict_items: Vec<(Id, Id)>,
    },
}

impl Node {
    /// An object built by calling `callable` on `args` (REDUCE/NEWOBJ…), with nothing appended
    /// or set on it afterwards but `state` (BUILD).
    pub fn object(
        callable: Id,
        args: Id,
        call: Call,
        kwargs: Option<Id>,
        state: Option<Id>,
    ) -> Node {
        Node::Object {
            callable,
            args,
            call,
            kwargs,
            state,
            list_items: Vec::new(),
            dict_items: Vec::new(),
        }
    }
}

/// Every id a node refers to.
pub(crate) fn node_children(n: &Node) -> Vec<Id> {
    match n {
        Node::List(v) | Node::Tuple(v) | Node::Set(v) | Node::FrozenSet(v) => v.clone(),
        Node::Dict(e) => e.iter().flat_map(|&(k, v)| [k, v]).collect(),
        Node::PersistentId(i) => vec![*i],
        Node::Tensor(t) => t.rest.clone(),
        Node::Object {
            callable,
            args,
            kwargs,
            state,
            list_items,
            dict_items,
            ..
        } => {
            let mut v = vec![*callable, *args];
            v.extend(kwargs.iter());
            v.extend(list_items.iter());
            v.extend(dict_items.iter().flat_map(|&(k, v)| [k, v]));
            v.extend(state.iter());
            v
        }
        _ => Vec::new(),
    }
}

/// A whole unpickled value: the arena and its root.
#[derive(Debug, Clone, PartialEq)]
pub struct Pickle {
    pub nodes: Vec<Node>,
    pub root: Id,
}

impl Pickle {
    pub fn node(&self, id: Id) -> &Node {
        // Ids are only made by the VM and the writer's callers, both from this arena.
        &self.nodes[id as usize]
    }

    pub fn node_mut(&mut self, id: Id) -> &mut Node {
        &mut self.nodes[id as usize]
    }

    /// Append a node, returning its id.
    pub fn push(&mut self, node: Node) -> Id {
        self.nodes.push(node);
        (self.nodes.len() - 1) as Id
    }

    /// `module.name` of a Global node, with Python 2 names mapped as Python's fix_imports does.
    pub fn global_name(&self, id: Id) -> Option<String> {
        match self.node(id) {
            Node::Global { module, name } => Some(format!("{}.{name}", python3_module(module))),
            _ => None,
        }
    }

    /// The string of a Str node.
    pub fn str(&self, id: Id) -> Option<&str> {
        match self.node(id) {
            Node::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The (key, value) entries of a dict or of a dict-like object (OrderedDict).
    pub fn dict_entries(&self, id: Id) -> Option<&[(Id, Id)]> {
        match self.node(id) {
            Node::Dict(e) => Some(e),
            Node::Object { dict_items, .. } if self.is_ordered_dict(id) => Some(dict_items),
            _ => None,
        }
    }

    /// Look up a string key in a dict-like node.
    pub fn get(&self, dict: Id, key: &str) -> Option<Id> {
        self.dict_entries(dict)?
            .iter()
            .find(|(k, _)| self.str(*k) == Some(key))
            .map(|(_, v)| *v)
    }

    /// Remove a string key from a dict-like node; true when it was there.
    pub fn remove_key(&mut self, dict: Id, key: &str) -> bool {
        let keep: Vec<bool> = match self.dict_entries(dict) {
            Some(e) => e.iter().map(|(k, _)| self.str(*k) != Some(key)).collect(),
            None => return false,
        };
        if keep.iter().all(|&k| k) {
            return false;
        }
        let mut it = keep.into_iter();
        match self.node_mut(dict) {
            Node::Dict(e) | Node::Object { dict_items: e, .. } => {
                e.retain(|_| it.next().unwrap_or(true))
            }
            _ => return false,
        }
        true
    }

    /// Is this an `collections.OrderedDict()` object?
    pub fn is_ordered_dict(&self, id: Id) -> bool {
        match self.node(id) {
            Node::Object { callable, .. } => {
                self.global_name(*callable).as_deref() == Some("collections.OrderedDict")
            }
            _ => false,
        }
    }

    /// The tensor under a node: the node itself, or the tensor a Parameter (or a tensor with
    /// Python attributes) wraps.
    pub fn tensor_of(&self, id: Id) -> Option<&TensorNode> {
        match self.node(id) {
            Node::Tensor(t) => Some(t),
            Node::Object { .. } if self.is_from_type(id) => {
                self.from_type_tensor(id).and_then(|t| match self.node(t) {
                    Node::Tensor(t) => Some(&**t),
                    _ => None,
                })
            }
            Node::Object { callable, args, .. } if self.is_parameter(*callable) => {
                match self.node(*args) {
                    Node::Tuple(a) => a.first().and_then(|&d| self.tensor_of(d)),
                    _ => None,
                }
            }
            _ => None,
        }
    }

    /// The id of the tensor node under a node (itself, or the tensor a Parameter wraps).
    pub fn tensor_id(&self, id: Id) -> Option<Id> {
        match self.node(id) {
            Node::Tensor(_) => Some(id),
            Node::Object { .. } if self.is_from_type(id) => self.from_type_tensor(id),
            Node::Object { callable, args, .. } if self.is_parameter(*callable) => {
                match self.node(*args) {
                    Node::Tuple(a) => a.first().and_then(|&d| self.tensor_id(d)),
                    _ => None,
                }
            }
            _ => None,
        }
    }

    /// Is this a `torch._tensor._rebuild_from_type_v2` object (a tensor with Python attributes)?
    pub fn is_from_type(&self, id: Id) -> bool {
        matches!(self.node(id), Node::Object { callable, .. }
            if self.global_name(*callable).as_deref() == Some("torch._tensor._rebuild_from_type_v2"))
    }

    /// The tensor node of a `_rebuild_from_type_v2` object: its third argument.
    pub fn from_type_tensor(&self, id: Id) -> Option<Id> {
        let Node::Object { args, .. } = self.node(id) else {
            return None;
        };
        match self.node(*args) {
            Node::Tuple(a) if a.len() == 4 => Some(a[2]),
            _ => None,
        }
    }

    /// Is this a Parameter (`_rebuild_parameter*`) object?
    pub fn is_parameter_object(&self, id: Id) -> bool {
        matches!(self.node(id), Node::Object { callable, .. } if self.is_parameter(*callable))
    }

    fn is_parameter(&self, callable: Id) -> bool {
        matches!(
            self.global_name(callable).as_deref(),
            Some("torch._utils._rebuild_parameter" | "torch._utils._rebuild_parameter_with_state")
        )
    }
}

/// Python 2 module names that Python 3's unpickler maps (fix_imports) in the files torch writes.
pub fn python3_module(module: &str) -> &str {
    match module {
        "__builtin__" => "builtins",
        "copy_reg" => "copyreg",
        "cPickle" => "pickle",
        "exceptions" => "builtins",
        other => other,
    }
}
