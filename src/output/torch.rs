//! Writing a torch checkpoint through the same atomic, verified path as every other output.

use super::atomic::AtomicFile;
use super::manifest::{sha256, sha256_range, sha256_tensor, FileManifest, TensorManifest};
use super::{copy_range, sha256_file, write_chunks, ChunkSink};
use crate::error::{Error, Result};
use crate::formats::torch::pickle::GlobalPolicy;
use crate::formats::torch::writer::{
    archive_prefix, central_directory, check_plan, emit_pickle, lay_out, serialization_id,
    StoragePayload, TorchPlan, ALIGNMENT,
};
use crate::formats::torch::{tensor_paths, TorchFile};
use rayon::prelude::*;
use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

/// What one output record holds.
enum Body<'p> {
    Small(Vec<u8>),
    Storage(&'p StoragePayload<'p>),
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

    // Records named and ordered as torch.save writes them: the pickle, the format records,
    // the storages as data/0, data/1, … in order of first use, the version, the id. Records
    // of the input this writer does not know go after the storages (the storages must stay
    // consecutive for torch's offset-calculating loader).
    let mut bodies: Vec<(String, Body<'_>)> = vec![
        ("data.pkl".into(), Body::Small(pickle.clone())),
        (".format_version".into(), Body::Small(b"1".to_vec())),
        (
            ".storage_alignment".into(),
            Body::Small(ALIGNMENT.to_string().into_bytes()),
        ),
        ("byteorder".into(), Body::Small(b"little".to_vec())),
    ];
    for (i, key) in emitted.storage_order.iter().enumerate() {
        let payload = payloads.get(key.as_str()).ok_or_else(|| {
            Error::format(dest, format!("storage '{key}' is used but not planned"))
        })?;
        bodies.push((format!("data/{i}"), Body::Storage(payload)));
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
        bodies.push((n.clone(), Body::Small(b.clone())));
    }
    let version = plan
        .records
        .iter()
        .find(|(n, _)| n == "version" || n == ".data/version")
        .cloned()
        .unwrap_or_else(|| ("version".into(), b"3\n".to_vec()));
    bodies.push((version.0, Body::Small(version.1)));

    // CRC-32 (for the zip) and sha256 (for verification) of every record, in parallel.
    let mut sums: Vec<(u32, String)> = bodies
        .par_iter()
        .map(|(_, b)| {
            let data = match b {
                Body::Small(v) => v.as_slice(),
                Body::Storage(s) => s.bytes(),
            };
            (crc32fast::hash(data), sha256(data))
        })
        .collect();
    let mut lens: Vec<(String, u64, u32)> = bodies
        .iter()
        .zip(&sums)
        .map(|((n, b), (crc, _))| {
            let len = match b {
                Body::Small(v) => v.len() as u64,
                Body::Storage(s) => s.len(),
            };
            (n.clone(), len, *crc)
        })
        .collect();
    let id = serialization_id(&lens).into_bytes();
    let id_crc = crc32fast::hash(&id);
    lens.push((".data/serialization_id".into(), id.len() as u64, id_crc));
    sums.push((id_crc, sha256(&id)));
    bodies.push((".data/serialization_id".into(), Body::Small(id)));
    let prefix = archive_prefix(dest);
    let laid = lay_out(&prefix, &lens);
    let cd_start = laid.last().map_or(0, |l| l.end());
    let cd = central_directory(&laid, cd_start);

    let mut protected: Vec<&Path> = plan
        .storages
        .iter()
        .filter_map(|(_, s)| match s {
            StoragePayload::Copy { map, .. } => Some(map.path.as_path()),
            StoragePayload::Bytes(_) => None,
        })
        .collect();
    protected.extend_from_slice(inputs);
    let mut out = AtomicFile::create(dest, &protected)?;
    let tmp = out.temp_path().to_path_buf();
    write_records(&mut out, &laid, &bodies, &cd, cd_start + cd.len() as u64)
        .map_err(|e| super::about_destination(e, dest))?;

    let manifest = verify(&tmp, dest, plan, policy, &pickle, &bodies, &sums)?;
    out.commit()?;
    Ok(manifest)
}

/// Lay the records and the central directory into the temp file, and fsync it.
fn write_records(
    out: &mut AtomicFile,
    laid: &[crate::formats::torch::writer::Laid],
    bodies: &[(String, Body<'_>)],
    cd: &[u8],
    total: u64,
) -> Result<()> {
    let tmp = out.temp_path().to_path_buf();
    let mut sink = ChunkSink::new(total);
    let mut on_chunk = |n: u64| sink.chunk(n);
    let file = out.file();
    for (l, (_, body)) in laid.iter().zip(bodies) {
        write_chunks(file, &tmp, &l.local_header, &mut on_chunk)?;
        match body {
            Body::Small(v) => write_chunks(file, &tmp, v, &mut on_chunk)?,
            Body::Storage(StoragePayload::Copy { map, start, len }) => {
                copy_range(map, *start, *len, file, &tmp, &mut on_chunk)?
            }
            Body::Storage(StoragePayload::Bytes(b)) => write_chunks(file, &tmp, b, &mut on_chunk)?,
        }
        write_chunks(file, &tmp, &l.descriptor, &mut on_chunk)?;
    }
    file.write_all(cd)
        .map_err(|e| Error::io(&tmp, "write", e))?;
    sink.finish();
    out.sync()
}

/// Re-open the written file with the strict reader and check it against the plan.
fn verify(
    tmp: &Path,
    dest: &Path,
    plan: &TorchPlan<'_>,
    policy: &GlobalPolicy,
    pickle: &[u8],
    bodies: &[(String, Body<'_>)],
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
    written.verify_crcs().map_err(|e| verr(e.to_string()))?;
    let crate::formats::torch::Container::Zip(zip) = &written.container else {
        return Err(verr("did not read back as a zip archive".into()));
    };
    let (file_sha, checks) = rayon::join(
        || sha256_file(tmp),
        || {
            bodies
                .par_iter()
                .zip(sums)
                .map(|((name, _), (_, want))| {
                    let r = zip
                        .record(name)
                        .ok_or_else(|| format!("record '{name}' missing"))?;
                    let got =
                        sha256_range(&written.map, r.start, r.len).map_err(|e| e.to_string())?;
                    if &got == want {
                        Ok(())
                    } else {
                        Err(format!("record '{name}' has sha256 {got}, planned {want}"))
                    }
                })
                .collect::<std::result::Result<Vec<()>, String>>()
        },
    );
    checks.map_err(verr)?;
    let refs: Vec<_> = written.tensor_refs().collect();
    let tensors = refs
        .par_iter()
        .map(|t| {
            Ok(TensorManifest {
                name: t.name.to_string(),
                dtype: t.dtype,
                shape: t.shape.to_vec(),
                bytes: t.nbytes(),
                sha256: sha256_tensor(t)?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(FileManifest {
        path: dest.to_path_buf(),
        bytes: written.map.len,
        sha256: Some(file_sha?),
        tensors,
    })
}
