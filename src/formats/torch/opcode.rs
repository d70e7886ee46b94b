//! Pickle opcodes: one enum, decoded once from a byte (the VM matches on names, the writer emits
//! them by name). Values and names are CPython's `pickletools`.

/// Every opcode of pickle protocols 0–5.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    // Framing and the stack.
    Proto = 0x80,
    Frame = 0x95,
    Stop = b'.',
    Mark = b'(',
    Pop = b'0',
    PopMark = b'1',
    Dup = b'2',
    // Scalars.
    None = b'N',
    NewTrue = 0x88,
    NewFalse = 0x89,
    Int = b'I',
    Long = b'L',
    BinInt = b'J',
    BinInt1 = b'K',
    BinInt2 = b'M',
    Long1 = 0x8a,
    Long4 = 0x8b,
    Float = b'F',
    BinFloat = b'G',
    // Text and bytes.
    String = b'S',
    BinString = b'T',
    ShortBinString = b'U',
    Unicode = b'V',
    BinUnicode = b'X',
    ShortBinUnicode = 0x8c,
    BinUnicode8 = 0x8d,
    BinBytes = b'B',
    ShortBinBytes = b'C',
    BinBytes8 = 0x8e,
    ByteArray8 = 0x96,
    // Collections.
    EmptyTuple = b')',
    Tuple1 = 0x85,
    Tuple2 = 0x86,
    Tuple3 = 0x87,
    Tuple = b't',
    EmptyList = b']',
    List = b'l',
    EmptyDict = b'}',
    Dict = b'd',
    EmptySet = 0x8f,
    FrozenSet = 0x91,
    Append = b'a',
    Appends = b'e',
    SetItem = b's',
    SetItems = b'u',
    AddItems = 0x90,
    // Objects.
    Global = b'c',
    StackGlobal = 0x93,
    Inst = b'i',
    Obj = b'o',
    Reduce = b'R',
    NewObj = 0x81,
    NewObjEx = 0x92,
    Build = b'b',
    BinPersId = b'Q',
    PersId = b'P',
    // The memo.
    Put = b'p',
    BinPut = b'q',
    LongBinPut = b'r',
    Memoize = 0x94,
    Get = b'g',
    BinGet = b'h',
    LongBinGet = b'j',
    // Read but refused: the extension registry and out-of-band buffers.
    Ext1 = 0x82,
    Ext2 = 0x83,
    Ext4 = 0x84,
    NextBuffer = 0x97,
    ReadOnlyBuffer = 0x98,
}

/// Every opcode, for decoding (and for the test that each one decodes to itself).
const ALL: [Op; 68] = {
    use Op::*;
    [
        Proto,
        Frame,
        Stop,
        Mark,
        Pop,
        PopMark,
        Dup,
        None,
        NewTrue,
        NewFalse,
        Int,
        Long,
        BinInt,
        BinInt1,
        BinInt2,
        Long1,
        Long4,
        Float,
        BinFloat,
        String,
        BinString,
        ShortBinString,
        Unicode,
        BinUnicode,
        ShortBinUnicode,
        BinUnicode8,
        BinBytes,
        ShortBinBytes,
        BinBytes8,
        ByteArray8,
        EmptyTuple,
        Tuple1,
        Tuple2,
        Tuple3,
        Tuple,
        EmptyList,
        List,
        EmptyDict,
        Dict,
        EmptySet,
        FrozenSet,
        Append,
        Appends,
        SetItem,
        SetItems,
        AddItems,
        Global,
        StackGlobal,
        Inst,
        Obj,
        Reduce,
        NewObj,
        NewObjEx,
        Build,
        BinPersId,
        PersId,
        Put,
        BinPut,
        LongBinPut,
        Memoize,
        Get,
        BinGet,
        LongBinGet,
        Ext1,
        Ext2,
        Ext4,
        NextBuffer,
        ReadOnlyBuffer,
    ]
};

/// Byte → opcode, built at compile time from [`ALL`].
const TABLE: [Option<Op>; 256] = {
    let mut t = [Option::<Op>::None; 256];
    let mut i = 0;
    while i < ALL.len() {
        t[ALL[i] as usize] = Some(ALL[i]);
        i += 1;
    }
    t
};

impl Op {
    /// The opcode a byte names; None for a byte that is no opcode.
    pub fn decode(byte: u8) -> Option<Op> {
        TABLE[byte as usize]
    }

    /// The byte this opcode is written as.
    pub fn byte(self) -> u8 {
        self as u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_opcode_decodes_from_its_own_byte_and_no_other_byte_decodes() {
        let mut seen = 0;
        for b in 0..=255u8 {
            if let Some(op) = Op::decode(b) {
                assert_eq!(op.byte(), b, "{op:?}");
                seen += 1;
            }
        }
        assert_eq!(seen, ALL.len(), "two opcodes share a byte");
        // A few against pickletools' table.
        assert_eq!(Op::decode(0x80), Some(Op::Proto));
        assert_eq!(Op::decode(b'R'), Some(Op::Reduce));
        assert_eq!(Op::decode(0x93), Some(Op::StackGlobal));
        assert_eq!(Op::decode(0x96), Some(Op::ByteArray8));
        assert_eq!(Op::decode(b'Z'), Option::None);
    }
}
