//! Writing a torch checkpoint through the same atomic, verified path as every other output.

use super::atomic::AtomicFile;
use super::manifest::{
    self, digest, digest_range, digest_tensor, FileManifest, Hasher, TensorManifest,
};
use super::{digest_file, Segment};
use crate::error::{Error, Result};
use crate::formats::torch::pickle::GlobalPolicy;
use crate::formats::torch::writer::{
    archive_prefix, central_directory, check_plan, emit_pickle, lay_out, serialization_id, Piece,
    StoragePayload, TorchPlan, ALIGNMENT,
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
    let pickle = emitted.bytes;
    let payloads: HashMap<&str, &StoragePayload<'_>> =
        plan.storages.iter().map(|(k, s)| (k.as_str(), s)).collect();
    let small = |b: Vec<u8>| vec![Segment::Memory(Cow::Owned(b))];

    // Records named and ordered as torch.save writes them: the pickle, the format records,
    // the storages as data/0, data/1, … in order of first use, the version, the id. Records
    // of the input this writer does not know go after the storages (the storages must stay
    // consecutive for torch's offset-calculating loader). Each record is the segments of its
    // bytes, as the writer takes them.
    let mut records: Vec<(String, Vec<Segment<'_>>)> = vec![
        ("data.pkl".into(), small(pickle.clone())),
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

    // CRC-32 (for the zip) and the digest (for verification) of every record, in parallel; input
    // ranges are streamed through their maps, a chunk resident at a time.
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
        .collect::<Result<_>>()?;
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
    super::write_any(&mut out, &[], &layout, total, super::direct::wanted(total))
        .and_then(|_| out.sync())
        .map_err(|e| super::about_destination(e, dest))?;

    let manifest = verify(&tmp, dest, plan, policy, &pickle, &names, &sums)?;
    out.commit()?;
    Ok(manifest)
}

/// Re-open the written file with the strict reader and check it against the plan.
fn verify(
    tmp: &Path,
    dest: &Path,
    plan: &TorchPlan<'_>,
    policy: &GlobalPolicy,
    pickle: &[u8],
    names: &[String],
    sums: &[(u32, String)],
) -> Result<FileManifest> {
    let verr = |p: String| Error::Verify {
        path: dest.to_path_buf(),
        problem: p,
    };
    let written = TorchFile::open(tmp, policy).map_err(|e| verr(e.to_string()))?;
    let back = written
        .map
        .slice(written.pickle_start, written.pickle_len)
        .unwrap_or(&[]);
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
    // One streamed pass per record checks its digest against the plan's. Each record's CRC-32 as
    // the zip states it (what torch's reader checks) must be the one planned, computed from the
    // same bytes, so equal hashes mean the CRCs hold too. The whole file is hashed beside it
    // when asked.
    let (file_sha, records) = rayon::join(
        || plan.file_sha256.then(|| digest_file(tmp)).transpose(),
        || {
            names
                .par_iter()
                .zip(sums)
                .map(|(name, (want_crc, want))| {
                    let r = zip
                        .record(name)
                        .ok_or_else(|| format!("record '{name}' missing"))?;
                    if r.crc32 != *want_crc {
                        return Err(format!(
                            "record '{name}' states CRC-32 {:08x}, planned {want_crc:08x}",
                            r.crc32
                        ));
                    }
                    let got =
                        digest_range(&written.map, r.start, r.len).map_err(|e| e.to_string())?;
                    if &got == want {
                        Ok(((r.start, r.len), got))
                    } else {
                        Err(format!("record '{name}' has digest {got}, planned {want}"))
                    }
                })
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
