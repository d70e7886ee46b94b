//! The machine's state and its bounded primitives: the input cursor, the stack with its marks,
//! the memo and the node table, with their bounds (the mark bound is checked where MARK runs).

use crate::error::Error;
use crate::formats::torch::globals::GlobalPolicy;
use crate::formats::torch::value::{Id, Node, Pickle};
use std::collections::HashMap;
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

/// Where a pickle lies, for its errors: the file, and which pickle of it (`record`, e.g.
/// `data.pkl`; "" when the file is one pickle).
#[derive(Debug, Clone, Copy)]
pub struct Origin<'a> {
    pub path: &'a Path,
    pub record: &'a str,
}

pub(super) type R<T> = Result<T, Error>;

pub(super) struct Vm<'a> {
    pub(super) data: &'a [u8],
    pub(super) pos: usize,
    /// Offset of the opcode being run, for messages.
    pub(super) op_pos: usize,
    pub(super) stack: Vec<Id>,
    pub(super) marks: Vec<usize>,
    pub(super) memo: HashMap<u32, Id>,
    pub(super) p: Pickle,
    pub(super) policy: &'a GlobalPolicy,
    pub(super) limits: Limits,
    pub(super) origin: Origin<'a>,
}

impl<'a> Vm<'a> {
    pub(super) fn err<T>(&self, problem: impl Into<String>) -> R<T> {
        Err(Error::Pickle {
            path: self.origin.path.to_path_buf(),
            record: self.origin.record.to_string(),
            offset: self.op_pos,
            problem: problem.into(),
        })
    }

    /// The refusal of a tensor this tool does not read, built by `global`.
    pub(super) fn unsupported<T>(
        &self,
        what: &'static str,
        global: &str,
        fix: &'static str,
    ) -> R<T> {
        Err(Error::PickledTensor {
            path: self.origin.path.to_path_buf(),
            record: self.origin.record.to_string(),
            offset: self.op_pos,
            what,
            global: global.to_string(),
            fix,
        })
    }

    pub(super) fn take(&mut self, n: usize) -> R<&'a [u8]> {
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

    pub(super) fn u8(&mut self) -> R<u8> {
        Ok(self.take(1)?[0])
    }

    pub(super) fn u16(&mut self) -> R<u16> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    pub(super) fn u32(&mut self) -> R<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(super) fn u64(&mut self) -> R<u64> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    pub(super) fn len(&mut self, n: u64) -> R<usize> {
        match usize::try_from(n) {
            Ok(n) if n <= self.data.len() - self.pos => Ok(n),
            _ => self.err(format!(
                "length {n} runs past the end of the pickle ({} bytes left)",
                self.data.len() - self.pos
            )),
        }
    }

    pub(super) fn line_bytes(&mut self) -> R<&'a [u8]> {
        let rest = &self.data[self.pos..];
        let Some(end) = rest.iter().position(|&b| b == b'\n') else {
            return self.err("text opcode without a newline");
        };
        self.pos += end + 1;
        Ok(&rest[..end])
    }

    pub(super) fn line(&mut self) -> R<&'a str> {
        let b = self.line_bytes()?;
        std::str::from_utf8(b).or_else(|_| self.err("text opcode is not UTF-8"))
    }

    pub(super) fn push_node(&mut self, node: Node) -> R<Id> {
        if self.p.nodes.len() >= self.limits.max_nodes {
            return self.err(format!(
                "more than {} values: refusing (an expansion bomb?)",
                self.limits.max_nodes
            ));
        }
        Ok(self.p.push(node))
    }

    pub(super) fn push(&mut self, node: Node) -> R<()> {
        let id = self.push_node(node)?;
        self.push_id(id)
    }

    pub(super) fn push_id(&mut self, id: Id) -> R<()> {
        if self.stack.len() >= self.limits.max_stack {
            return self.err(format!("stack deeper than {}", self.limits.max_stack));
        }
        self.stack.push(id);
        Ok(())
    }

    pub(super) fn pop(&mut self) -> R<Id> {
        // A pop may not reach below the innermost mark.
        if self.marks.last().is_some_and(|&m| self.stack.len() <= m) {
            return self.err("pop below a mark");
        }
        match self.stack.pop() {
            Some(id) => Ok(id),
            None => self.err("stack underflow"),
        }
    }

    pub(super) fn top(&self) -> R<Id> {
        match self.stack.last() {
            Some(&id) if self.marks.last().is_none_or(|&m| self.stack.len() > m) => Ok(id),
            _ => self.err("stack underflow"),
        }
    }

    pub(super) fn pop_mark(&mut self) -> R<Vec<Id>> {
        let Some(m) = self.marks.pop() else {
            return self.err("no mark on the stack");
        };
        Ok(self.stack.split_off(m))
    }

    pub(super) fn memo_put(&mut self, key: u32) -> R<()> {
        let top = self.top()?;
        if self.memo.len() >= self.limits.max_memo && !self.memo.contains_key(&key) {
            return self.err(format!("memo larger than {}", self.limits.max_memo));
        }
        self.memo.insert(key, top);
        Ok(())
    }

    pub(super) fn memo_get(&mut self, key: u32) -> R<()> {
        match self.memo.get(&key) {
            Some(&id) => self.push_id(id),
            None => self.err(format!("memo key {key} read before it was written")),
        }
    }
}
