//! The value tree written as torch writes it: a protocol-2 pickle, BINUNICODE for every string,
//! shared nodes written once and fetched from the memo, storage keys renumbered in order of use.

use crate::formats::torch::opcode::Op;
use crate::formats::torch::value::{node_children, Call, Id, Node, Pickle, TensorNode};
use crate::formats::torch::MAX_DEPTH;
use std::collections::{HashMap, HashSet};

struct Emitter<'a> {
    p: &'a Pickle,
    out: Vec<u8>,
    shared: HashSet<Id>,
    memo: HashMap<Id, u32>,
    /// Storage key in the tree → key written (`0`, `1`, … in order of first appearance).
    keys: HashMap<String, String>,
    /// The tree's storage keys in the order they were first written.
    order: Vec<String>,
}

/// A value tree serialised as torch writes it.
pub struct Emitted {
    pub bytes: Vec<u8>,
    /// The tree's storage keys in the order they first appear in `bytes`; the one at index `i`
    /// is written as key `i` (record `data/i`), as `torch.save` numbers them.
    pub storage_order: Vec<String>,
}

/// Serialise a value tree as a protocol-2 pickle. Nodes reached more than once are written once
/// and fetched from the memo after, so sharing (tied weights) survives. Storage keys are
/// renumbered `0, 1, …` in order of first appearance, as `torch.save` numbers them: torch's
/// offset-calculating loader (`calculate_storage_offsets`, and every load onto the meta device)
/// expects key `0` first and each next record right after the previous one.
pub fn emit_pickle(p: &Pickle) -> std::result::Result<Emitted, String> {
    // Count references from reachable parents to find shared nodes.
    let mut refs: HashMap<Id, u32> = HashMap::new();
    let mut seen = HashSet::new();
    let mut stack = vec![p.root];
    while let Some(id) = stack.pop() {
        if !seen.insert(id) {
            continue;
        }
        for c in node_children(p.node(id)) {
            *refs.entry(c).or_default() += 1;
            stack.push(c);
        }
    }
    let shared = refs
        .into_iter()
        .filter(|&(_, n)| n > 1)
        .map(|(id, _)| id)
        .collect();
    let mut e = Emitter {
        p,
        out: vec![Op::Proto.byte(), 2],
        shared,
        memo: HashMap::new(),
        keys: HashMap::new(),
        order: Vec::new(),
    };
    e.emit(p.root, 0)?;
    e.op(Op::Stop);
    Ok(Emitted {
        bytes: e.out,
        storage_order: e.order,
    })
}

impl Emitter<'_> {
    fn op(&mut self, op: Op) {
        self.out.push(op.byte());
    }

    fn global(&mut self, module: &str, name: &str) {
        self.op(Op::Global);
        self.out.extend_from_slice(module.as_bytes());
        self.out.push(b'\n');
        self.out.extend_from_slice(name.as_bytes());
        self.out.push(b'\n');
    }

    fn string(&mut self, s: &str) -> std::result::Result<(), String> {
        let n = u32::try_from(s.len()).map_err(|_| "a string longer than 4 GiB".to_string())?;
        self.op(Op::BinUnicode);
        self.out.extend_from_slice(&n.to_le_bytes());
        self.out.extend_from_slice(s.as_bytes());
        Ok(())
    }

    fn int(&mut self, i: i64) {
        match i {
            0..=0xFF => {
                self.op(Op::BinInt1);
                self.out.push(i as u8);
            }
            0x100..=0xFFFF => {
                self.op(Op::BinInt2);
                self.out.extend_from_slice(&(i as u16).to_le_bytes());
            }
            _ if i32::try_from(i).is_ok() => {
                self.op(Op::BinInt);
                self.out.extend_from_slice(&(i as i32).to_le_bytes());
            }
            _ => {
                // LONG1 with the shortest two's complement that keeps the sign.
                let mut b = i.to_le_bytes().to_vec();
                while b.len() > 1 {
                    let last = b[b.len() - 1];
                    let prev_sign = b[b.len() - 2] & 0x80;
                    if (last == 0 && prev_sign == 0) || (last == 0xFF && prev_sign != 0) {
                        b.pop();
                    } else {
                        break;
                    }
                }
                self.long(&b);
            }
        }
    }

    fn long(&mut self, b: &[u8]) {
        if b.len() < 256 {
            self.op(Op::Long1);
            self.out.push(b.len() as u8);
        } else {
            self.op(Op::Long4);
            self.out.extend_from_slice(&(b.len() as u32).to_le_bytes());
        }
        self.out.extend_from_slice(b);
    }

    fn latin1(b: &[u8]) -> String {
        b.iter().map(|&c| char::from(c)).collect()
    }

    fn uint_tuple(&mut self, v: &[u64]) -> std::result::Result<(), String> {
        self.op(Op::Mark);
        for &x in v {
            let x = i64::try_from(x).map_err(|_| "a size above i64".to_string())?;
            self.int(x);
        }
        self.op(Op::Tuple);
        Ok(())
    }

    fn tensor(&mut self, t: &TensorNode, depth: usize) -> std::result::Result<(), String> {
        self.global("torch._utils", t.rebuild.function());
        self.tensor_args(t, depth)?;
        self.op(Op::Reduce);
        Ok(())
    }

    /// The argument tuple of a tensor's rebuild call.
    fn tensor_args(&mut self, t: &TensorNode, depth: usize) -> std::result::Result<(), String> {
        self.op(Op::Mark);
        // The persistent id: ('storage', torch.XStorage, key, location, numel).
        self.op(Op::Mark);
        self.string("storage")?;
        self.global(&t.storage.class.0, &t.storage.class.1);
        let next = self.order.len().to_string();
        let key = match self.keys.get(&t.storage.key) {
            Some(k) => k.clone(),
            None => {
                self.order.push(t.storage.key.clone());
                self.keys.insert(t.storage.key.clone(), next.clone());
                next
            }
        };
        self.string(&key)?;
        self.string(&t.storage.location)?;
        let numel = t
            .storage
            .written_numel()
            .and_then(|n| i64::try_from(n).ok())
            .ok_or_else(|| "storage too large".to_string())?;
        self.int(numel);
        self.op(Op::Tuple);
        self.op(Op::BinPersId);
        let offset = i64::try_from(t.offset).map_err(|_| "offset too large".to_string())?;
        self.int(offset);
        self.uint_tuple(&t.shape)?;
        self.uint_tuple(&t.stride)?;
        for &r in &t.rest {
            self.emit(r, depth + 1)?;
        }
        self.op(Op::Tuple);
        Ok(())
    }

    /// `_rebuild_from_type_v2(func, type, args, attributes)`: the tensor node written back as
    /// the argument tuple its rebuild function is called with.
    fn tensor_with_attributes(&mut self, id: Id, depth: usize) -> std::result::Result<(), String> {
        let p = self.p;
        let (Node::Object { callable, args, .. }, Some(tensor)) =
            (p.node(id), p.from_type_tensor(id))
        else {
            return Err("malformed _rebuild_from_type_v2".into());
        };
        let (Node::Tuple(a), Node::Tensor(t)) = (p.node(*args), p.node(tensor)) else {
            return Err("malformed _rebuild_from_type_v2".into());
        };
        self.emit(*callable, depth + 1)?;
        self.op(Op::Mark);
        self.emit(a[0], depth + 1)?;
        self.emit(a[1], depth + 1)?;
        self.tensor_args(t, depth + 1)?;
        self.emit(a[3], depth + 1)?;
        self.op(Op::Tuple);
        self.op(Op::Reduce);
        Ok(())
    }

    fn items(&mut self, items: &[Id], depth: usize) -> std::result::Result<(), String> {
        for &i in items {
            self.emit(i, depth + 1)?;
        }
        Ok(())
    }

    fn pairs(&mut self, pairs: &[(Id, Id)], depth: usize) -> std::result::Result<(), String> {
        for &(k, v) in pairs {
            self.emit(k, depth + 1)?;
            self.emit(v, depth + 1)?;
        }
        Ok(())
    }

    /// Write node `id`: fetched from the memo when it was written before, else written and, when
    /// reached more than once, put in the memo.
    fn emit(&mut self, id: Id, depth: usize) -> std::result::Result<(), String> {
        if depth > MAX_DEPTH {
            return Err(format!("values nest deeper than {} levels", MAX_DEPTH));
        }
        if let Some(&k) = self.memo.get(&id) {
            if k < 256 {
                self.op(Op::BinGet);
                self.out.push(k as u8);
            } else {
                self.op(Op::LongBinGet);
                self.out.extend_from_slice(&k.to_le_bytes());
            }
            return Ok(());
        }
        self.node(id, depth)?;
        if self.shared.contains(&id) {
            let k = self.memo.len() as u32;
            if k < 256 {
                self.op(Op::BinPut);
                self.out.push(k as u8);
            } else {
                self.op(Op::LongBinPut);
                self.out.extend_from_slice(&k.to_le_bytes());
            }
            self.memo.insert(id, k);
        }
        Ok(())
    }

    /// The opcodes that build node `id` (its children emitted as they come).
    fn node(&mut self, id: Id, depth: usize) -> std::result::Result<(), String> {
        let p = self.p;
        match p.node(id) {
            Node::None => self.op(Op::None),
            Node::Bool(b) => self.op(if *b { Op::NewTrue } else { Op::NewFalse }),
            Node::Int(i) => self.int(*i),
            Node::BigInt(b) => self.long(b),
            Node::Float(f) => {
                self.op(Op::BinFloat);
                self.out.extend_from_slice(&f.to_be_bytes());
            }
            Node::Str(s) => self.string(s)?,
            Node::Bytes(b) => self.bytes(b)?,
            Node::ByteArray(b) => {
                self.global("__builtin__", "bytearray");
                self.bytes_value(b)?;
                self.op(Op::Tuple1);
                self.op(Op::Reduce);
            }
            Node::List(v) => {
                self.op(Op::EmptyList);
                self.appends(v, depth)?;
            }
            Node::Tuple(v) => self.tuple(v, depth)?,
            Node::Dict(e) => {
                self.op(Op::EmptyDict);
                self.set_items(e, depth)?;
            }
            Node::Set(v) | Node::FrozenSet(v) => {
                let name = if matches!(p.node(id), Node::Set(_)) {
                    "set"
                } else {
                    "frozenset"
                };
                self.global("__builtin__", name);
                self.op(Op::EmptyList);
                self.appends(v, depth)?;
                self.op(Op::Tuple1);
                self.op(Op::Reduce);
            }
            Node::Global { module, name } => self.global(module, name),
            Node::PersistentId(i) => {
                self.emit(*i, depth + 1)?;
                self.op(Op::BinPersId);
            }
            Node::Tensor(t) => self.tensor(t, depth)?,
            Node::Object { .. } if p.is_from_type(id) => self.tensor_with_attributes(id, depth)?,
            Node::Object { .. } => self.object(id, depth)?,
        }
        Ok(())
    }

    /// `bytes`: `_codecs.encode(latin1 text, 'latin1')`, empty ones too. Python pickles `b''` as
    /// `bytes()`, which torch's weights-only loader refuses; this form it loads.
    fn bytes(&mut self, b: &[u8]) -> std::result::Result<(), String> {
        self.bytes_value(b)
    }

    /// `_codecs.encode(latin1 text, 'latin1')`, the bytes value protocol 2 writes.
    fn bytes_value(&mut self, b: &[u8]) -> std::result::Result<(), String> {
        self.global("_codecs", "encode");
        self.string(&Self::latin1(b))?;
        self.string("latin1")?;
        self.op(Op::Tuple2);
        self.op(Op::Reduce);
        Ok(())
    }

    fn tuple(&mut self, v: &[Id], depth: usize) -> std::result::Result<(), String> {
        match v.len() {
            0 => self.op(Op::EmptyTuple),
            n @ 1..=3 => {
                self.items(v, depth)?;
                self.op([Op::Tuple1, Op::Tuple2, Op::Tuple3][n - 1]);
            }
            _ => {
                self.op(Op::Mark);
                self.items(v, depth)?;
                self.op(Op::Tuple);
            }
        }
        Ok(())
    }

    /// `MARK items APPENDS` onto the list on the stack (nothing when there are none).
    fn appends(&mut self, v: &[Id], depth: usize) -> std::result::Result<(), String> {
        if !v.is_empty() {
            self.op(Op::Mark);
            self.items(v, depth)?;
            self.op(Op::Appends);
        }
        Ok(())
    }

    /// `MARK key value … SETITEMS` onto the dict on the stack (nothing when there are none).
    fn set_items(&mut self, e: &[(Id, Id)], depth: usize) -> std::result::Result<(), String> {
        if !e.is_empty() {
            self.op(Op::Mark);
            self.pairs(e, depth)?;
            self.op(Op::SetItems);
        }
        Ok(())
    }

    /// A called object: the call (REDUCE, NEWOBJ, or NEWOBJ_EX spelled through copyreg), then
    /// its list items, dict items and state.
    fn object(&mut self, id: Id, depth: usize) -> std::result::Result<(), String> {
        let Node::Object {
            callable,
            args,
            call,
            kwargs,
            state,
            list_items,
            dict_items,
        } = self.p.node(id)
        else {
            return Err("not an object".into());
        };
        match call {
            Call::Reduce | Call::NewObj => {
                self.emit(*callable, depth + 1)?;
                self.emit(*args, depth + 1)?;
                self.op(if *call == Call::Reduce {
                    Op::Reduce
                } else {
                    Op::NewObj
                });
            }
            Call::NewObjEx => {
                // Protocol 2 has no NEWOBJ_EX: copyreg.__newobj_ex__(cls, args, kwargs).
                self.global("copyreg", "__newobj_ex__");
                self.emit(*callable, depth + 1)?;
                self.emit(*args, depth + 1)?;
                match kwargs {
                    Some(k) => self.emit(*k, depth + 1)?,
                    None => self.op(Op::EmptyDict),
                }
                self.op(Op::Tuple3);
                self.op(Op::Reduce);
            }
        }
        self.appends(list_items, depth)?;
        self.set_items(dict_items, depth)?;
        if let Some(s) = state {
            self.emit(*s, depth + 1)?;
            self.op(Op::Build);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::torch::pickle::{unpickle, GlobalPolicy, Limits, Origin};

    fn round_trip(p: &Pickle) -> Pickle {
        let bytes = emit_pickle(p).unwrap().bytes;
        assert_eq!(&bytes[..2], b"\x80\x02", "protocol 2");
        let (back, end) = unpickle(
            &bytes,
            Origin {
                path: std::path::Path::new("emitted.pkl"),
                record: "",
            },
            &GlobalPolicy::default(),
            Limits::default(),
        )
        .unwrap();
        assert_eq!(end, bytes.len());
        back
    }

    /// Resolve ids so two arenas can be compared by value.
    fn resolve(p: &Pickle, id: Id) -> String {
        let r = |i: &Id| resolve(p, *i);
        match p.node(id) {
            Node::List(v) => format!("[{}]", v.iter().map(r).collect::<Vec<_>>().join(",")),
            Node::Tuple(v) => format!("({})", v.iter().map(r).collect::<Vec<_>>().join(",")),
            Node::Set(v) => format!("set{{{}}}", v.iter().map(r).collect::<Vec<_>>().join(",")),
            Node::Dict(e) => format!(
                "{{{}}}",
                e.iter()
                    .map(|(k, v)| format!("{}:{}", r(k), r(v)))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            other => format!("{other:?}"),
        }
    }

    #[test]
    fn every_node_kind_and_integer_boundary_survives_a_round_trip() {
        let mut p = Pickle {
            nodes: Vec::new(),
            root: 0,
        };
        let mut items = Vec::new();
        for i in [
            0i64,
            255,
            256,
            65535,
            65536,
            -1,
            -129,
            i32::MIN as i64,
            i32::MAX as i64 + 1,
            i64::MIN,
            i64::MAX,
        ] {
            items.push(p.push(Node::Int(i)));
        }
        items.push(p.push(Node::BigInt(vec![0, 0, 0, 0, 0, 0, 0, 0, 0x40])));
        items.push(p.push(Node::Float(-0.0)));
        items.push(p.push(Node::Float(f64::INFINITY)));
        items.push(p.push(Node::Str("ünïcode ✓".into())));
        items.push(p.push(Node::Bytes(vec![0, 0x7f, 0x80, 0xff])));
        items.push(p.push(Node::Bytes(Vec::new())));
        items.push(p.push(Node::None));
        items.push(p.push(Node::Bool(false)));
        let one = p.push(Node::Int(1));
        let t4 = p.push(Node::Tuple(vec![one, one, one, one]));
        items.push(t4);
        items.push(p.push(Node::Tuple(vec![])));
        items.push(p.push(Node::Set(vec![one])));
        let k = p.push(Node::Str("k".into()));
        let shared = p.push(Node::List(vec![one]));
        let d = p.push(Node::Dict(vec![(k, shared)]));
        items.push(d);
        items.push(shared);
        p.root = p.push(Node::List(items));
        let back = round_trip(&p);
        assert_eq!(resolve(&back, back.root), resolve(&p, p.root));
        // The list reached twice is written once and fetched from the memo: still one node.
        let Node::List(top) = back.node(back.root) else {
            panic!()
        };
        let Some(inner) = back.get(top[top.len() - 2], "k") else {
            panic!()
        };
        assert_eq!(inner, top[top.len() - 1]);
    }

    #[test]
    fn empty_bytes_are_written_as_codecs_encode_which_torch_loads() {
        let mut p = Pickle {
            nodes: Vec::new(),
            root: 0,
        };
        p.root = p.push(Node::Bytes(Vec::new()));
        let bytes = emit_pickle(&p).unwrap().bytes;
        // _codecs.encode('', 'latin1'), not bytes() (torch's weights-only loader refuses bytes).
        let want = b"c_codecs\nencode\nX\x00\x00\x00\x00X\x06\x00\x00\x00latin1\x86R.";
        assert!(bytes.ends_with(want), "{bytes:?}");
        let back = round_trip(&p);
        assert_eq!(back.node(back.root), &Node::Bytes(Vec::new()));
    }
}
