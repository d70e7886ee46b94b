//! The zip container laid out exactly as torch's writer lays it out (STORED records aligned to
//! 64 bytes, data descriptors, zip64 end records), so torch's loader can compute every storage's
//! offset from the one before.

use std::path::Path;

/// Records are aligned so each storage can be memory-mapped as its element type (torch uses 64).
pub const ALIGNMENT: u64 = 64;
const U32_MAX: u64 = 0xFFFF_FFFF;
/// General-purpose flags torch's zip writer (miniz, streaming) sets: sizes and CRC follow the
/// data in a descriptor (bit 3), names are UTF-8 (bit 11). An empty record has no descriptor.
const FLAGS_DESCRIPTOR: u16 = 0x0808;
const FLAGS_EMPTY: u16 = 0x0800;

/// The flags of a record of `len` bytes (the same in its local header and the directory).
fn flags(len: u64) -> u16 {
    if len == 0 {
        FLAGS_EMPTY
    } else {
        FLAGS_DESCRIPTOR
    }
}

/// The zip64 extra field of a record (the same in its local header and the directory): both
/// sizes when the record reaches 4 GiB, then its header's offset when that does; empty otherwise.
fn zip64_extra(len: u64, header_offset: u64) -> Vec<u8> {
    let mut fields = Vec::new();
    if len >= U32_MAX {
        fields.extend_from_slice(&len.to_le_bytes());
        fields.extend_from_slice(&len.to_le_bytes());
    }
    if header_offset >= U32_MAX {
        fields.extend_from_slice(&header_offset.to_le_bytes());
    }
    if fields.is_empty() {
        return fields;
    }
    let mut extra = Vec::with_capacity(4 + fields.len());
    extra.extend_from_slice(&1u16.to_le_bytes());
    extra.extend_from_slice(&(fields.len() as u16).to_le_bytes());
    extra.extend_from_slice(&fields);
    extra
}

/// One record as laid out in the output.
#[derive(Debug, Clone)]
pub struct Laid {
    pub name: String,
    pub header_offset: u64,
    pub local_header: Vec<u8>,
    pub data_start: u64,
    pub len: u64,
    pub crc32: u32,
    /// The data descriptor written after the data (empty for an empty record).
    pub descriptor: Vec<u8>,
}

impl Laid {
    /// Where the next record's local header starts.
    pub fn end(&self) -> u64 {
        self.data_start + self.len + self.descriptor.len() as u64
    }

    /// The record's CRC-32, known once its bytes are: into its descriptor (which follows the
    /// bytes) and, through [`central_directory`], the directory. Nothing else depends on it, so
    /// a record can be laid out and written before its CRC is known, as torch's writer does.
    pub fn set_crc(&mut self, crc: u32) {
        self.crc32 = crc;
        if let Some(d) = self.descriptor.get_mut(4..8) {
            d.copy_from_slice(&crc.to_le_bytes());
        }
    }
}

/// Lay out records (name, length, CRC) exactly as torch's writer does, so that its loader can
/// compute every storage's offset from the one before (`get_record_offset_no_read`): local
/// header with zero CRC and sizes; a zip64 extra field when the size or the header's offset
/// reaches 4 GiB (sizes, then offset); an `FB` extra field of `Z` padding so the data starts on
/// [`ALIGNMENT`]; after the data a descriptor of 16 bytes, or 24 when zip64.
pub fn lay_out(prefix: &str, records: &[(String, u64, u32)]) -> Vec<Laid> {
    let mut at = 0u64;
    let mut out = Vec::with_capacity(records.len());
    for (name, len, crc) in records {
        let full = format!("{prefix}/{name}");
        let big_len = *len >= U32_MAX;
        let big_off = at >= U32_MAX;
        let mut extra = zip64_extra(*len, at);
        let base = at + 30 + full.len() as u64 + extra.len() as u64 + 4;
        let pad = (ALIGNMENT - base % ALIGNMENT) % ALIGNMENT;
        extra.extend_from_slice(b"FB");
        extra.extend_from_slice(&(pad as u16).to_le_bytes());
        extra.resize(extra.len() + pad as usize, b'Z');

        let mut h = Vec::with_capacity(30 + full.len() + extra.len());
        h.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
        h.extend_from_slice(&0u16.to_le_bytes()); // version needed, as torch writes it
        h.extend_from_slice(&flags(*len).to_le_bytes());
        h.extend_from_slice(&0u16.to_le_bytes()); // STORED
        h.extend_from_slice(&0u16.to_le_bytes()); // time
        h.extend_from_slice(&0u16.to_le_bytes()); // date
        h.extend_from_slice(&0u32.to_le_bytes()); // CRC: in the descriptor
        let small = if big_len { U32_MAX as u32 } else { 0 };
        h.extend_from_slice(&small.to_le_bytes());
        h.extend_from_slice(&small.to_le_bytes());
        h.extend_from_slice(&(full.len() as u16).to_le_bytes());
        h.extend_from_slice(&(extra.len() as u16).to_le_bytes());
        h.extend_from_slice(full.as_bytes());
        h.extend_from_slice(&extra);
        let data_start = at + h.len() as u64;
        let mut descriptor = Vec::new();
        if *len > 0 {
            descriptor.extend_from_slice(&0x0807_4b50u32.to_le_bytes());
            descriptor.extend_from_slice(&crc.to_le_bytes());
            if big_len || big_off {
                descriptor.extend_from_slice(&len.to_le_bytes());
                descriptor.extend_from_slice(&len.to_le_bytes());
            } else {
                descriptor.extend_from_slice(&(*len as u32).to_le_bytes());
                descriptor.extend_from_slice(&(*len as u32).to_le_bytes());
            }
        }
        let laid = Laid {
            name: full,
            header_offset: at,
            local_header: h,
            data_start,
            len: *len,
            crc32: *crc,
            descriptor,
        };
        at = laid.end();
        out.push(laid);
    }
    out
}

/// The central directory and end records for records laid out by [`lay_out`], which end at
/// `cd_start`. Like torch's writer: zip64 end records always, attributes and times zero.
pub fn central_directory(laid: &[Laid], cd_start: u64) -> Vec<u8> {
    let mut cd = Vec::new();
    for r in laid {
        let extra = zip64_extra(r.len, r.header_offset);
        let big_len = r.len >= U32_MAX;
        let big_off = r.header_offset >= U32_MAX;
        let version: u16 = if big_len || big_off { 45 } else { 0 };
        cd.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
        cd.extend_from_slice(&version.to_le_bytes()); // made by
        cd.extend_from_slice(&version.to_le_bytes()); // needed
        cd.extend_from_slice(&flags(r.len).to_le_bytes());
        cd.extend_from_slice(&0u16.to_le_bytes()); // STORED
        cd.extend_from_slice(&0u16.to_le_bytes()); // time
        cd.extend_from_slice(&0u16.to_le_bytes()); // date
        cd.extend_from_slice(&r.crc32.to_le_bytes());
        let small = if big_len {
            U32_MAX as u32
        } else {
            r.len as u32
        };
        cd.extend_from_slice(&small.to_le_bytes());
        cd.extend_from_slice(&small.to_le_bytes());
        cd.extend_from_slice(&(r.name.len() as u16).to_le_bytes());
        cd.extend_from_slice(&(extra.len() as u16).to_le_bytes());
        cd.extend_from_slice(&0u16.to_le_bytes()); // comment
        cd.extend_from_slice(&0u16.to_le_bytes()); // disk
        cd.extend_from_slice(&0u16.to_le_bytes()); // internal attributes
        cd.extend_from_slice(&0u32.to_le_bytes()); // external attributes
        let off = if big_off {
            U32_MAX as u32
        } else {
            r.header_offset as u32
        };
        cd.extend_from_slice(&off.to_le_bytes());
        cd.extend_from_slice(r.name.as_bytes());
        cd.extend_from_slice(&extra);
    }
    let cd_len = cd.len() as u64;
    let n = laid.len() as u64;
    let eocd64_at = cd_start + cd_len;
    cd.extend_from_slice(&0x0606_4b50u32.to_le_bytes());
    cd.extend_from_slice(&44u64.to_le_bytes());
    cd.extend_from_slice(&0x031eu16.to_le_bytes());
    cd.extend_from_slice(&45u16.to_le_bytes());
    cd.extend_from_slice(&0u32.to_le_bytes());
    cd.extend_from_slice(&0u32.to_le_bytes());
    cd.extend_from_slice(&n.to_le_bytes());
    cd.extend_from_slice(&n.to_le_bytes());
    cd.extend_from_slice(&cd_len.to_le_bytes());
    cd.extend_from_slice(&cd_start.to_le_bytes());
    cd.extend_from_slice(&0x0706_4b50u32.to_le_bytes());
    cd.extend_from_slice(&0u32.to_le_bytes());
    cd.extend_from_slice(&eocd64_at.to_le_bytes());
    cd.extend_from_slice(&1u32.to_le_bytes());
    cd.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
    cd.extend_from_slice(&0u16.to_le_bytes());
    cd.extend_from_slice(&0u16.to_le_bytes());
    let n16 = n.min(0xFFFF) as u16;
    cd.extend_from_slice(&n16.to_le_bytes());
    cd.extend_from_slice(&n16.to_le_bytes());
    cd.extend_from_slice(&(cd_len.min(U32_MAX) as u32).to_le_bytes());
    cd.extend_from_slice(&(cd_start.min(U32_MAX) as u32).to_le_bytes());
    cd.extend_from_slice(&0u16.to_le_bytes());
    cd
}

/// The length of [`serialization_id`]: two u64s of 20 digits each.
pub const SERIALIZATION_ID_LEN: u64 = 40;

/// torch's `.data/serialization_id`: 40 decimal digits. Ours is derived from the records'
/// names and CRCs, so the same output gets the same id.
pub fn serialization_id(records: &[(String, u64, u32)]) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for (name, len, crc) in records {
        h.update(name.as_bytes());
        h.update(len.to_le_bytes());
        h.update(crc.to_le_bytes());
    }
    let d = h.finalize();
    let a = u64::from_le_bytes(d[..8].try_into().unwrap_or([0; 8]));
    let b = u64::from_le_bytes(d[8..16].try_into().unwrap_or([0; 8]));
    format!("{a:020}{b:020}")
}

/// The archive folder torch would use for `dest`: its file name without extension.
pub fn archive_prefix(dest: &Path) -> String {
    dest.file_stem()
        .and_then(|s| s.to_str())
        .filter(|s| !s.is_empty() && !s.contains('/'))
        .unwrap_or("archive")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_aligns_every_record_to_64_bytes() {
        let laid = lay_out(
            "x",
            &[
                ("data.pkl".into(), 123, 1),
                ("data/0".into(), 7, 2),
                ("version".into(), 2, 3),
            ],
        );
        for l in &laid {
            assert_eq!(l.data_start % ALIGNMENT, 0, "{}", l.name);
            assert_eq!(l.data_start, l.header_offset + l.local_header.len() as u64);
        }
        // Each record is followed by its 16-byte data descriptor.
        assert_eq!(laid[1].header_offset, laid[0].data_start + 123 + 16);
        assert_eq!(laid[1].header_offset, laid[0].end());
    }

    #[test]
    fn a_crc_set_after_the_layout_gives_the_bytes_of_a_layout_made_with_it() {
        let records = |crc: u32| {
            vec![
                ("data.pkl".to_string(), 70, 7),
                ("data/0".to_string(), 0, 0),
                ("data/1".to_string(), U32_MAX + 5, crc),
            ]
        };
        let want = lay_out("x", &records(0xDEAD_BEEF));
        let mut got = lay_out("x", &records(0));
        got[2].set_crc(0xDEAD_BEEF);
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(
                (&g.local_header, &g.descriptor, g.crc32),
                (&w.local_header, &w.descriptor, w.crc32)
            );
        }
        assert_eq!(central_directory(&got, 9), central_directory(&want, 9));
        assert_eq!(
            serialization_id(&records(1)).len() as u64,
            SERIALIZATION_ID_LEN
        );
        let max = [("a".to_string(), u64::MAX, u32::MAX)];
        assert_eq!(serialization_id(&max).len() as u64, SERIALIZATION_ID_LEN);
    }
}
