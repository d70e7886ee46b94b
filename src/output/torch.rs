//! Writing a torch checkpoint through the same atomic, verified path as every other output.

use super::atomic::AtomicFile;
use super::digest_file;
use super::manifest::{self, digest, digest_tensor, FileManifest, Hasher, TensorManifest};
use super::segment::{differs, Segment};
use crate::error::{Error, Result};
use crate::formats::torch::pickle::GlobalPolicy;
use crate::formats::torch::writer::{
    archive_prefix, central_directory, check_plan, emit_pickle, lay_out, serialization_id, Emitted,
    Piece, StoragePayload, TorchPlan, ALIGNMENT,
};
use crate::formats::torch::{tensor_paths, TorchFile};
use rayon::prelude::*;
use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

/// A storage's pieces as the writer's segments: input ranges and bytes in memory.
fn segments_of<'s>(payload: &'s StoragePayload<'_>) -> Vec<Segment<'s>> {
    payload
        .pieces()
        .into_iter()
        .map(|p| match p {
            Piece::File { map, start, len } => Segment::File { map, start, len },
            Piece::Bytes(b) => Segment::Memory(b),
        })
        .collect()
}

/// A record's bytes as the writer's segments.
type Records<'s> = Vec<(String, Vec<Segment<'s>>)>;

/// Bytes held in memory, as one segment.
fn small<'s>(b: Vec<u8>) -> Vec<Segment<'s>> {
    vec![Segment::Memory(Cow::Owned(b))]
}

/// Write `plan` to `dest` as a torch zip checkpoint, atomically and verified. `policy` must allow
/// the globals the tree uses (the same one it was read with).
pub fn write_torch(
    plan: &TorchPlan<'_>,
    dest: &Path,
    inputs: &[&Path],
    policy: &GlobalPolicy,
) -> Result<FileManifest> {
    check_plan(dest, plan)?;
    let emitted = emit_pickle(&plan.pickle)
        .map_err(|p| Error::format(dest, format!("cannot write the value tree: {p}")))?;
    let mut records = records_of(plan, &emitted, dest)?;
    let pickle = emitted.bytes;
    let (lens, sums) = checksums(&mut records, dest)?;
    let prefix = archive_prefix(dest);
    let laid = lay_out(&prefix, &lens);
    let cd_start = laid.last().map_or(0, |l| l.end());
    let cd = central_directory(&laid, cd_start);

    let mut protected: Vec<&Path> = records
        .iter()
        .flat_map(|(_, segs)| segs)
        .filter_map(|seg| match seg {
            Segment::File { map, .. } => Some(map.path.as_path()),
            _ => None,
        })
        .collect();
    protected.extend_from_slice(inputs);
    let mut out = AtomicFile::create(dest, &protected)?;
    let tmp = out.temp_path().to_path_buf();
    let names: Vec<String> = records.iter().map(|(n, _)| n.clone()).collect();
    // Each record as laid out: local header, its bytes, data descriptor; then the central
    // directory. Written directly (past the page cache) when the output is large and the
    // filesystem allows, as the safetensors writer does.
    let mut layout: Vec<Vec<Segment<'_>>> = laid
        .iter()
        .zip(records)
        .map(|(l, (_, segs))| {
            let mut all = vec![Segment::Memory(Cow::Borrowed(l.local_header.as_slice()))];
            all.extend(segs);
            all.push(Segment::Memory(Cow::Borrowed(l.descriptor.as_slice())));
            all
        })
        .collect();
    layout.push(vec![Segment::Memory(Cow::Borrowed(cd.as_slice()))]);
    let total = cd_start + cd.len() as u64;
    let direct = super::write_any(&mut out, &[], &layout, total, super::direct::wanted(total))
        .and_then(|direct| out.sync().map(|()| direct))
        .map_err(|e| super::about_destination(e, dest))?;

    // A direct write is not in the page cache: its copied ranges are sampled on the write grid
    // (as the safetensors writer does), computed bytes compared in full.
    let sample = direct.then_some(super::direct::CHUNK);
    let planned = Planned {
        pickle: &pickle,
        names: &names,
        sums: &sums,
        layout: &layout,
        sample,
    };
    let manifest = verify(&tmp, dest, plan, policy, &planned)?;
    out.commit()?;
    Ok(manifest)
}

/// The records named and ordered as torch.save writes them: the pickle, the format records,
/// the storages as data/0, data/1, … in order of first use, the version (the id is added by
/// [`checksums`]). Records of the input this writer does not know go after the storages (the
/// storages must stay consecutive for torch's offset-calculating loader). Each record is the
/// segments of its bytes, as the writer takes them.
fn records_of<'s>(plan: &'s TorchPlan<'_>, emitted: &Emitted, dest: &Path) -> Result<Records<'s>> {
    let payloads: HashMap<&str, &StoragePayload<'_>> =
        plan.storages.iter().map(|(k, s)| (k.as_str(), s)).collect();
    let mut records: Records<'s> = vec![
        ("data.pkl".into(), small(emitted.bytes.clone())),
        (".format_version".into(), small(b"1".to_vec())),
        (
            ".storage_alignment".into(),
            small(ALIGNMENT.to_string().into_bytes()),
        ),
        ("byteorder".into(), small(b"little".to_vec())),
    ];
    for (i, key) in emitted.storage_order.iter().enumerate() {
        let payload = payloads.get(key.as_str()).ok_or_else(|| {
            Error::format(dest, format!("storage '{key}' is used but not planned"))
        })?;
        records.push((format!("data/{i}"), segments_of(payload)));
    }
    let known = |n: &str| {
        matches!(
            n,
            "data.pkl"
                | ".format_version"
                | ".storage_alignment"
                | "byteorder"
                | "version"
                | ".data/version"
                | ".data/serialization_id"
        ) || n.starts_with("data/")
    };
    for (n, b) in plan.records.iter().filter(|(n, _)| !known(n)) {
        records.push((n.clone(), small(b.clone())));
    }
    let version = plan
        .records
        .iter()
        .find(|(n, _)| n == "version" || n == ".data/version")
        .cloned()
        .unwrap_or_else(|| ("version".into(), b"3\n".to_vec()));
    records.push((version.0, small(version.1)));
    Ok(records)
}

/// Each record's (name, length, CRC-32) for the zip and (CRC-32, digest) for verification,
/// computed in parallel (input ranges streamed through their maps, a chunk resident at a time);
/// then the `.data/serialization_id` record, derived from them, is added to `records`.
#[allow(clippy::type_complexity)]
fn checksums(
    records: &mut Records<'_>,
    dest: &Path,
) -> Result<(Vec<(String, u64, u32)>, Vec<(u32, String)>)> {
    let mut sums: Vec<(u32, String)> = records
        .par_iter()
        .map(|(_, segs)| {
            let (mut crc, mut h) = (crc32fast::Hasher::new(), Hasher::default());
            for seg in segs {
                seg.stream(|c| {
                    crc.update(c);
                    h.update(c);
                    true
                })?;
            }
            Ok((crc.finalize(), h.finish()))
        })
        .collect::<Result<_>>()
        .map_err(|e| super::about_output(e, dest))?;
    let mut lens: Vec<(String, u64, u32)> = records
        .iter()
        .zip(&sums)
        .map(|((n, segs), (crc, _))| (n.clone(), segs.iter().map(Segment::len).sum(), *crc))
        .collect();
    let id = serialization_id(&lens).into_bytes();
    let id_crc = crc32fast::hash(&id);
    lens.push((".data/serialization_id".into(), id.len() as u64, id_crc));
    sums.push((id_crc, digest(&id)));
    records.push((".data/serialization_id".into(), small(id)));
    Ok((lens, sums))
}

/// Record `i` read back: where the zip says it is, its stated CRC-32 and its bytes against the
/// plan. Its (start, length) in the file and its planned digest.
fn check_record(
    map: &crate::formats::mapped::Mapped,
    zip: &crate::formats::torch::container::Zip,
    planned: &Planned<'_, '_>,
    i: usize,
) -> std::result::Result<((u64, u64), String), String> {
    let (name, (want_crc, want)) = (&planned.names[i], &planned.sums[i]);
    let r = zip
        .record(name)
        .ok_or_else(|| format!("record '{name}' missing"))?;
    if r.crc32 != *want_crc {
        return Err(format!(
            "record '{name}' states CRC-32 {:08x}, planned {want_crc:08x}",
            r.crc32
        ));
    }
    let laid = &planned.layout[i];
    let bytes = &laid[1..laid.len().saturating_sub(1)];
    let len: u64 = bytes.iter().map(Segment::len).sum();
    if len != r.len {
        return Err(format!(
            "record '{name}' holds {} bytes, planned {len}",
            r.len
        ));
    }
    match differs(map, r.start, bytes, planned.sample).map_err(|e| e.to_string())? {
        Some(at) => Err(format!(
            "record '{name}' differs from what was planned at byte {at} of it"
        )),
        None => Ok(((r.start, r.len), want.clone())),
    }
}

/// What the file was planned to hold, for the read-back: the pickle, each record's name, CRC-32
/// and digest, and its laid-out segments (local header, bytes, descriptor), and the direct
/// write's grid when the copied ranges are to be sampled.
struct Planned<'p, 's> {
    pickle: &'p [u8],
    names: &'p [String],
    sums: &'p [(u32, String)],
    layout: &'p [Vec<Segment<'s>>],
    sample: Option<u64>,
}

/// Re-open the written file with the strict reader and check it against the plan.
fn verify(
    tmp: &Path,
    dest: &Path,
    plan: &TorchPlan<'_>,
    policy: &GlobalPolicy,
    planned: &Planned<'_, '_>,
) -> Result<FileManifest> {
    let (pickle, names) = (planned.pickle, planned.names);
    let verr = |p: String| Error::Verify {
        path: dest.to_path_buf(),
        problem: p,
    };
    let written = TorchFile::open(tmp, policy).map_err(|e| verr(e.to_string()))?;
    let back = written
        .map
        .slice(written.pickle_start, written.pickle_len)
        .ok_or_else(|| verr("data.pkl lies past the end of the file read back".into()))?;
    if back != pickle {
        return Err(verr(
            "data.pkl read back differs from what was written".into(),
        ));
    }
    let want: Vec<String> = tensor_paths(&plan.pickle)
        .map_err(verr)?
        .into_iter()
        .map(|t| t.path)
        .collect();
    let got: Vec<&str> = written.tensors.iter().map(|t| t.path.as_str()).collect();
    if want != got {
        return Err(verr("the tensors read back differ from the plan".into()));
    }
    let crate::formats::torch::Container::Zip(zip) = &written.container else {
        return Err(verr("did not read back as a zip archive".into()));
    };
    // Each record's bytes are compared with the planned ones (every byte after a buffered write;
    // after a direct write, computed bytes in full and copied ranges sampled), so the planned
    // digests are the file's: nothing is hashed twice. Each record's CRC-32 as the zip states it
    // (what torch's reader checks) must be the one planned, computed from the same bytes. The
    // whole file is hashed beside it when asked.
    if planned.sample.is_some() {
        // Otherwise each sampled block would pull in the disk's readahead window.
        written.map.expect_random_reads();
    }
    let (file_sha, records) = rayon::join(
        || plan.file_sha256.then(|| digest_file(tmp)).transpose(),
        || {
            (0..names.len())
                .into_par_iter()
                .map(|i| check_record(&written.map, zip, planned, i))
                .collect::<std::result::Result<HashMap<(u64, u64), String>, String>>()
        },
    );
    let records = records.map_err(verr)?;
    // A tensor whose bytes are a whole record (the usual case) has that record's hash.
    let refs: Vec<_> = written.tensor_refs().collect();
    let tensors = refs
        .par_iter()
        .map(|t| {
            let known = t
                .contiguous_range()
                .and_then(|(start, len)| records.get(&(start, len)).cloned());
            Ok(TensorManifest {
                name: t.name.to_string(),
                dtype: t.dtype,
                shape: t.shape.to_vec(),
                bytes: t.nbytes(),
                digest: match known {
                    Some(h) => h,
                    None => digest_tensor(t)?,
                },
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(FileManifest {
        path: dest.to_path_buf(),
        bytes: written.map.len,
        hash: manifest::algorithm(),
        digest: file_sha?,
        tensors,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::mapped::Mapped;
    use crate::formats::torch::Container;

    /// A torch file of the testdata, its zip records and its map.
    fn fixture() -> (TorchFile, Mapped) {
        let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let path = here.join("testdata/torch/state_dict.pt");
        let t = TorchFile::open(&path, &GlobalPolicy::default()).unwrap();
        let m = Mapped::open(&path).unwrap();
        (t, m)
    }

    #[test]
    fn a_record_read_back_is_compared_with_the_plan_byte_for_byte_or_sampled() {
        let (t, map) = fixture();
        let Container::Zip(zip) = &t.container else {
            panic!("not a zip")
        };
        let r = zip.record("data/0").unwrap();
        let bytes = map.slice(r.start, r.len).unwrap().to_vec();
        let names = vec!["data/0".to_string()];
        let sums = vec![(r.crc32, "planned".to_string())];
        let check = |planned: Vec<u8>, sample: Option<u64>| {
            let layout = vec![vec![
                Segment::Memory(Cow::Borrowed(&b"header"[..])),
                Segment::Memory(Cow::Owned(planned)),
                Segment::Memory(Cow::Borrowed(&b"descriptor"[..])),
            ]];
            let p = Planned {
                pickle: &[],
                names: &names,
                sums: &sums,
                layout: &layout,
                sample,
            };
            check_record(&map, zip, &p, 0)
        };
        // The same bytes: its place and the planned digest.
        assert_eq!(
            check(bytes.clone(), None).unwrap(),
            ((r.start, r.len), "planned".to_string())
        );
        // One flipped bit anywhere in computed bytes is found, with the byte, sampled or not.
        for sample in [None, Some(super::super::direct::CHUNK)] {
            let mut bad = bytes.clone();
            let at = bad.len() / 2 + 1;
            bad[at] ^= 0x10;
            let err = check(bad, sample).unwrap_err();
            assert!(err.contains(&format!("at byte {at}")), "{err}");
        }
        // A record of another length, or a CRC-32 not the planned one, is refused.
        let err = check(bytes[1..].to_vec(), None).unwrap_err();
        assert!(err.contains("bytes, planned"), "{err}");
        let sums = vec![(r.crc32 ^ 1, "planned".to_string())];
        let layout = vec![vec![
            Segment::Memory(Cow::Borrowed(&b"h"[..])),
            Segment::Memory(Cow::Owned(bytes.clone())),
            Segment::Memory(Cow::Borrowed(&b"d"[..])),
        ]];
        let p = Planned {
            pickle: &[],
            names: &names,
            sums: &sums,
            layout: &layout,
            sample: None,
        };
        assert!(check_record(&map, zip, &p, 0)
            .unwrap_err()
            .contains("CRC-32"));
        // Copied ranges, sampled on the write grid: a difference at a range's end is found.
        let mut other = bytes.clone();
        let last = other.len() - 1;
        other[last] ^= 1;
        let tmp = tempfile::tempdir().unwrap();
        let copy = tmp.path().join("copy.bin");
        std::fs::write(&copy, &other).unwrap();
        let src = Mapped::open(&copy).unwrap();
        let layout = vec![vec![
            Segment::Memory(Cow::Borrowed(&b"h"[..])),
            Segment::File {
                map: &src,
                start: 0,
                len: other.len() as u64,
            },
            Segment::Memory(Cow::Borrowed(&b"d"[..])),
        ]];
        let sums = vec![(r.crc32, "planned".to_string())];
        let p = Planned {
            pickle: &[],
            names: &names,
            sums: &sums,
            layout: &layout,
            sample: Some(super::super::direct::CHUNK),
        };
        let err = check_record(&map, zip, &p, 0).unwrap_err();
        assert!(err.contains(&format!("at byte {last}")), "{err}");
    }
}
