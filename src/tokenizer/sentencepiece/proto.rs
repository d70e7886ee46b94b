//! The protobuf underneath a `.model`: fields read as number, wire type and byte range (nothing
//! decoded that a caller does not ask for, so every byte can be kept), and the piece type enum.

use std::ops::Range;

/// `SentencePiece.Type` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PieceType {
    Normal,
    Unknown,
    Control,
    UserDefined,
    Unused,
    Byte,
    Other(u64),
}

impl PieceType {
    pub(crate) fn from_code(c: u64) -> Self {
        match c {
            1 => PieceType::Normal,
            2 => PieceType::Unknown,
            3 => PieceType::Control,
            4 => PieceType::UserDefined,
            5 => PieceType::Unused,
            6 => PieceType::Byte,
            o => PieceType::Other(o),
        }
    }

    pub fn code(self) -> u64 {
        match self {
            PieceType::Normal => 1,
            PieceType::Unknown => 2,
            PieceType::Control => 3,
            PieceType::UserDefined => 4,
            PieceType::Unused => 5,
            PieceType::Byte => 6,
            PieceType::Other(o) => o,
        }
    }
}

fn varint(b: &[u8], pos: &mut usize) -> Result<u64, String> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*pos).ok_or("protobuf varint runs past the end")?;
        *pos += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err("protobuf varint longer than 10 bytes".into())
}

/// One field: number, wire type, and the byte range of its value (for wire type 2, the payload).
pub(crate) struct Field {
    pub(crate) number: u64,
    pub(crate) wire: u8,
    pub(crate) value: Range<usize>,
    pub(crate) varint: u64,
}

/// A message's fields in order, each with the byte range of the whole field.
pub(crate) fn fields(b: &[u8]) -> Result<Vec<(Range<usize>, Field)>, String> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < b.len() {
        let start = pos;
        let key = varint(b, &mut pos)?;
        let (number, wire) = (key >> 3, (key & 7) as u8);
        if number == 0 {
            return Err(format!("protobuf field number 0 at byte {start}"));
        }
        let (value, v) = match wire {
            0 => {
                let s = pos;
                let v = varint(b, &mut pos)?;
                (s..pos, v)
            }
            1 | 5 => {
                let n = if wire == 1 { 8 } else { 4 };
                if pos + n > b.len() {
                    return Err(format!(
                        "protobuf fixed field at byte {start} runs past the end"
                    ));
                }
                pos += n;
                (pos - n..pos, 0)
            }
            2 => {
                let n = varint(b, &mut pos)?;
                let n = usize::try_from(n).map_err(|_| "protobuf length overflows")?;
                if n > b.len() - pos {
                    return Err(format!("protobuf field at byte {start} runs past the end"));
                }
                pos += n;
                (pos - n..pos, 0)
            }
            w => {
                return Err(format!(
                    "protobuf wire type {w} at byte {start} is not supported"
                ))
            }
        };
        out.push((
            start..pos,
            Field {
                number,
                wire,
                value,
                varint: v,
            },
        ));
    }
    Ok(out)
}
