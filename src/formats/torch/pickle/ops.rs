//! The opcode loop: each opcode decoded and run on the machine, and the pickle's text and
//! number encodings read.

use super::calls::shape_of;
use super::vm::{Limits, Origin, Vm, R};
use crate::formats::torch::globals::GlobalPolicy;
use crate::formats::torch::opcode::Op;
use crate::formats::torch::value::{Call, Id, Node, Pickle};
use std::collections::HashMap;

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
    vm.refuse_repeated_keys()?;
    vm.p.root = root;
    Ok((vm.p, vm.pos))
}

impl<'a> Vm<'a> {
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
            _ => {
                // Written back as builtins.frozenset, which torch's loader refuses by default.
                self.allowed("builtins.frozenset".into())?;
                let items = self.pop_mark()?;
                self.hashable(items.iter().copied(), "a set member")?;
                Node::FrozenSet(items)
            }
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
                self.hashable(items.iter().copied(), "a set member")?;
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
                let storage = match self.p.node(pid) {
                    Node::Tuple(items) => items.first().and_then(|&t| self.p.str(t)),
                    _ => None,
                };
                if storage != Some("storage") {
                    return self.err(format!(
                        "a persistent id that is {}, not a ('storage', …) tuple: torch loads storages only",
                        shape_of(self.p.node(pid))
                    ));
                }
                self.push(Node::PersistentId(pid))
            }
            // Text persistent ids (protocol 0): torch's loaders take tuples only.
            _ => self.err("PERSID (a text persistent id): torch loads tuple ids only"),
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
