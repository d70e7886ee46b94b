//! The two torch.save containers. Zip (torch ≥ 1.6): `PREFIX/data.pkl`, `PREFIX/data/<key>`
//! storages (must be STORED), `version`, `byteorder`, … Legacy (torch < 1.6): five pickles back to
//! back (magic number, protocol, sys_info, the object, storage keys), then each storage as a u64
//! element count and raw bytes. This module finds the records; torch/mod.rs interprets them.

use crate::error::{Error, Result};
use std::io::Cursor;
use std::path::Path;

/// One zip record: where its bytes are in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Name without the archive prefix (`data.pkl`, `data/0`, `version`, …).
    pub name: String,
    /// Absolute offset of the data in the file.
    pub start: u64,
    pub len: u64,
    pub crc32: u32,
}

/// A parsed zip container.
#[derive(Debug, Clone)]
pub struct Zip {
    /// The archive folder every record sits in (`archive`, the file stem, …).
    pub prefix: String,
    /// Records in file order.
    pub records: Vec<Record>,
}

impl Zip {
    pub fn record(&self, name: &str) -> Option<&Record> {
        self.records.iter().find(|r| r.name == name)
    }
}

const LOCAL_SIG: u32 = 0x0403_4b50;

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Parse and check a zip container held in `bytes` (the whole file).
pub fn parse_zip(path: &Path, bytes: &[u8]) -> Result<Zip> {
    let ferr = |p: String| Error::format(path, p);
    let mut archive = zip::ZipArchive::new(Cursor::new(bytes)).map_err(|e| {
        ferr(format!(
            "not a readable zip archive ({e}): the file is truncated or corrupt (re-save it with torch.save)"
        ))
    })?;
    // TorchScript first: its records are often compressed, and that is not the problem to report.
    if archive.file_names().any(|n| {
        n.split_once('/')
            .is_some_and(|(_, rest)| rest == "constants.pkl" || rest.starts_with("code/"))
    }) {
        return Err(ferr(
            "a TorchScript archive (torch.jit.save), not a torch.save checkpoint: load it with torch.jit.load and save its state_dict() with torch.save".to_string(),
        ));
    }
    let mut records = Vec::with_capacity(archive.len());
    let mut prefix: Option<String> = None;
    for i in 0..archive.len() {
        let entry = archive
            .by_index_raw(i)
            .map_err(|e| ferr(format!("zip entry {i} unreadable: {e}")))?;
        let full = std::str::from_utf8(entry.name_raw())
            .map_err(|_| ferr(format!("zip entry {i} has a name that is not UTF-8")))?
            .to_string();
        if entry.encrypted() {
            return Err(ferr(format!("record '{full}' is encrypted: refusing")));
        }
        let stored = entry.compression() == zip::CompressionMethod::Stored;
        let (size, csize) = (entry.size(), entry.compressed_size());
        let header = entry.header_start();
        let crc32 = entry.crc32();
        drop(entry);
        let start = local_header(path, bytes, header, &full)?;
        if !stored {
            return Err(ferr(format!(
                "record '{full}' is compressed in the central directory: torch.save writes records uncompressed (STORED); re-save it with torch.save"
            )));
        }
        if size != csize {
            return Err(ferr(format!(
                "record '{full}' is STORED but its sizes differ ({csize} stored, {size} uncompressed)"
            )));
        }
        if start
            .checked_add(size)
            .is_none_or(|end| end > bytes.len() as u64)
        {
            return Err(ferr(format!(
                "record '{full}' ({size} bytes at {start}) runs past the end of the file ({} bytes): truncated",
                bytes.len()
            )));
        }
        let Some((first, rest)) = full.split_once('/') else {
            return Err(ferr(format!(
                "record '{full}' is not inside an archive folder"
            )));
        };
        match &prefix {
            None => prefix = Some(first.to_string()),
            Some(p) if p != first => {
                return Err(ferr(format!(
                    "records sit in two archive folders, '{p}' and '{first}'"
                )))
            }
            Some(_) => {}
        }
        if records.iter().any(|r: &Record| r.name == rest) {
            return Err(ferr(format!("record '{full}' appears twice")));
        }
        records.push(Record {
            name: rest.to_string(),
            start,
            len: size,
            crc32,
        });
    }
    let prefix = prefix.ok_or_else(|| ferr("zip archive has no records".to_string()))?;
    if records.iter().all(|r| r.name != "data.pkl") {
        return Err(ferr(format!(
            "zip archive has no '{prefix}/data.pkl': not a torch.save checkpoint"
        )));
    }
    if let Some(r) = records.iter().find(|r| r.name == "byteorder") {
        let order = &bytes[r.start as usize..(r.start + r.len) as usize];
        if order != b"little" {
            return Err(ferr(format!(
                "storages are stored {}-endian: only little-endian checkpoints are supported (load and re-save it on a little-endian machine)",
                String::from_utf8_lossy(order)
            )));
        }
    }
    records.sort_by_key(|r| r.start);
    Ok(Zip { prefix, records })
}

/// Check the local header at `at` against the central directory; return where the data starts.
fn local_header(path: &Path, bytes: &[u8], at: u64, name: &str) -> Result<u64> {
    let ferr = |p: String| Error::format(path, p);
    let at_us = usize::try_from(at).unwrap_or(usize::MAX);
    let Some(h) = bytes.get(at_us..).filter(|h| h.len() >= 30) else {
        return Err(ferr(format!(
            "local header of '{name}' is past the end of the file"
        )));
    };
    if le32(h, 0) != LOCAL_SIG {
        return Err(ferr(format!(
            "local header of '{name}' is missing (bad signature)"
        )));
    }
    let flags = le16(h, 6);
    // bit 0: encrypted; bit 6: strong encryption; bit 13: encrypted central directory.
    if flags & 0x2041 != 0 {
        return Err(ferr(format!(
            "record '{name}' is flagged as encrypted (general purpose flags 0x{flags:04x}): refusing"
        )));
    }
    let method = le16(h, 8);
    if method != 0 {
        let kind = match method {
            8 => "DEFLATE".to_string(),
            9 => "DEFLATE64".to_string(),
            12 => "bzip2".to_string(),
            14 => "LZMA".to_string(),
            93 => "zstd".to_string(),
            m => format!("method {m}"),
        };
        return Err(ferr(format!(
            "record '{name}' is compressed ({kind}): torch.save writes records uncompressed (STORED) and tensors are read in place; re-save it with torch.save"
        )));
    }
    let n = le16(h, 26) as usize;
    let x = le16(h, 28) as usize;
    let Some(local_name) = h.get(30..30 + n) else {
        return Err(ferr(format!("local header of '{name}' is truncated")));
    };
    if local_name != name.as_bytes() {
        return Err(ferr(format!(
            "local header names '{}' where the central directory names '{name}': the archive was tampered with or is corrupt",
            String::from_utf8_lossy(local_name)
        )));
    }
    Ok(at + 30 + n as u64 + x as u64)
}

/// CRC-32 of a record's bytes against the value the zip stores.
pub fn check_crc(path: &Path, r: &Record, data: &[u8]) -> Result<()> {
    check_crc_value(path, r, crc32fast::hash(data))
}

/// [`check_crc`] with the CRC-32 already computed.
pub fn check_crc_value(path: &Path, r: &Record, got: u32) -> Result<()> {
    if got != r.crc32 {
        return Err(Error::format(
            path,
            format!(
                "record '{}' fails its CRC-32 check (stored {:08x}, computed {got:08x}): the file is corrupt",
                r.name, r.crc32
            ),
        ));
    }
    Ok(())
}

/// The magic number legacy torch.save writes first: 0x1950a86a20f9469cfc6c, as LONG1 bytes.
pub const LEGACY_MAGIC: [u8; 10] = [0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19];
/// The protocol version legacy torch.save writes second.
pub const LEGACY_PROTOCOL: i64 = 1001;
