//! Writing a torch checkpoint through the same atomic, verified path as every other output.

use crate::error::{Error, Result};
use crate::formats::torch::pickle::GlobalPolicy;
use crate::formats::torch::writer::{
    archive_prefix, central_directory, check_plan, emit_pickle, lay_out, Emitted, Laid, Piece,
    StoragePayload, TorchLayout, ALIGNMENT, SERIALIZATION_ID_LEN,
};
use crate::formats::torch::zip_pass::ZipPass;
use crate::formats::torch::{tensor_paths, TorchFile};
use crate::output::atomic::AtomicFile;
use crate::output::manifest::{self, FileManifest, TensorManifest};
use crate::output::segment::{differs, Segment};
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
    plan: &TorchLayout<'_>,
    dest: &Path,
    inputs: &[&Path],
    policy: &GlobalPolicy,
) -> Result<FileManifest> {
    write_torch_scanning(plan, dest, inputs, policy).map(|w| w.manifest)
}

/// What a torch write gives: the manifest, and each of the plan's `scan` tensors as (name, NaN
/// count, Inf count), in the plan's order.
pub struct TorchWritten {
    pub manifest: FileManifest,
    pub nonfinite: Vec<(String, u64, u64)>,
}

/// [`write_torch`], also counting NaN and Inf in the plan's `scan` tensors. Every input byte is
/// read once: as the writer copies it, one pass (`formats::torch::zip_pass`) takes each record's CRC-32
/// and digest and the counts, and makes the data descriptors, serialization id and central
/// directory that follow them; the read-back reads the output only.
pub fn write_torch_scanning(
    plan: &TorchLayout<'_>,
    dest: &Path,
    inputs: &[&Path],
    policy: &GlobalPolicy,
) -> Result<TorchWritten> {
    let mut l = lay_out_plan(plan, dest)?;
    let mut protected: Vec<&Path> = l
        .segments
        .iter()
        .flatten()
        .filter_map(|seg| match seg {
            Segment::File { map, .. } => Some(map.path.as_path()),
            _ => None,
        })
        .collect();
    protected.extend_from_slice(inputs);
    let mut out = AtomicFile::create(dest, &protected)?;
    let tmp = out.temp_path().to_path_buf();
    // Written directly (past the page cache) when the output is large and the filesystem
    // allows, as the safetensors writer does; the pass sees every byte as it goes.
    let mut pass = l.pass(plan);
    let direct = crate::output::write_passing(
        &mut out,
        &l.segments,
        l.total,
        crate::output::direct::wanted(l.total),
        &mut pass,
    )
    .and_then(|direct| out.sync().map(|()| direct))
    .map_err(|e| crate::output::about_destination(e, dest))?;
    let seen = pass
        .finish()
        .map_err(|e| crate::output::about_output(e, dest))?;
    l.made_id(&seen.id);

    // A direct write is not in the page cache: its copied ranges are sampled on the write grid
    // (as the safetensors writer does), computed bytes compared in full.
    let sample = direct.then_some(crate::output::direct::CHUNK);
    let names: Vec<String> = l.names.iter().map(|(n, _)| n.clone()).collect();
    let planned = Planned {
        pickle: &l.pickle,
        names: &names,
        sums: &seen.sums,
        layout: &l.segments,
        sample,
    };
    let mut manifest = verify(&tmp, dest, plan, policy, &planned)?;
    manifest.digest = seen.file_digest;
    out.commit()?;
    Ok(TorchWritten {
        manifest,
        nonfinite: seen.nonfinite,
    })
}

/// A torch file laid out for the writer: each record's pieces (local header, bytes, data
/// descriptor), then the central directory; the descriptors, the serialization id and the
/// directory are made by the pass ([`ZipPass`]) when the writer reaches them.
struct Layout<'s> {
    pickle: Vec<u8>,
    /// Each record's name (without the archive folder) and length.
    names: Vec<(String, u64)>,
    laid: Vec<Laid>,
    segments: Vec<Vec<Segment<'s>>>,
    cd_start: u64,
    total: u64,
}

/// Lay out `plan` as torch.save would for `dest`, each record's CRC-32 still to come.
fn lay_out_plan<'s>(plan: &'s TorchLayout<'_>, dest: &Path) -> Result<Layout<'s>> {
    check_plan(dest, plan)?;
    let emitted = emit_pickle(&plan.pickle)
        .map_err(|p| Error::format(dest, format!("cannot write the value tree: {p}")))?;
    let mut records = records_of(plan, &emitted, dest)?;
    // The id is derived from the other records' CRC-32s: the pass makes it when it gets there.
    let id_name = ".data/serialization_id".to_string();
    records.push((id_name, vec![Segment::Pass(SERIALIZATION_ID_LEN)]));
    let names: Vec<(String, u64)> = records
        .iter()
        .map(|(n, segs)| (n.clone(), segs.iter().map(Segment::len).sum()))
        .collect();
    let lens: Vec<(String, u64, u32)> = names.iter().map(|(n, l)| (n.clone(), *l, 0)).collect();
    let laid = lay_out(&archive_prefix(dest), &lens);
    let cd_start = laid.last().map_or(0, |l| l.end());
    let cd_len = central_directory(&laid, cd_start).len() as u64;
    let mut segments: Vec<Vec<Segment<'s>>> = laid
        .iter()
        .zip(records)
        .map(|(l, (_, segs))| {
            let mut all = vec![Segment::Memory(Cow::Owned(l.local_header.clone()))];
            all.extend(segs);
            all.push(Segment::Pass(l.descriptor.len() as u64));
            all
        })
        .collect();
    segments.push(vec![Segment::Pass(cd_len)]);
    Ok(Layout {
        pickle: emitted.bytes,
        names,
        laid,
        segments,
        cd_start,
        total: cd_start + cd_len,
    })
}

impl<'s> Layout<'s> {
    /// The pass that writes this layout's made pieces and takes its sums and `plan`'s scan.
    fn pass(&self, plan: &TorchLayout<'s>) -> ZipPass<'s> {
        ZipPass::new(
            &self.segments,
            self.laid.clone(),
            self.names.clone(),
            self.cd_start,
            &plan.scan,
            &plan.checked,
            plan.file_sha256,
        )
    }

    /// The serialization id the pass made, in place of its piece, for the read-back.
    fn made_id(&mut self, id: &[u8]) {
        let at = self.segments.len().checked_sub(2);
        if let Some(piece) = at.and_then(|i| self.segments[i].get_mut(1)) {
            *piece = Segment::Memory(Cow::Owned(id.to_vec()));
        }
    }
}

/// The records named and ordered as torch.save writes them: the pickle, the format records,
/// the storages as data/0, data/1, … in order of first use, the version (the id is added by
/// [`write_torch_scanning`]). Records of the input this writer does not know go after the storages (the
/// storages must stay consecutive for torch's offset-calculating loader). Each record is the
/// segments of its bytes, as the writer takes them.
fn records_of<'s>(
    plan: &'s TorchLayout<'_>,
    emitted: &Emitted,
    dest: &Path,
) -> Result<Records<'s>> {
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

/// Record `i` read back: where the zip says it is, its stated CRC-32 and its bytes against what
/// the pass saw written. Its (start, length) in the file and its digest.
///
/// After a buffered write every byte is read back (from the page cache) and its CRC-32 must be
/// the one the pass took from the bytes written, so the inputs are not read again; only when it
/// is not are the bytes compared with the plan, to name the first that differs. After a direct
/// write the copied ranges are sampled against the inputs (see `differs`), computed bytes
/// compared in full.
fn check_record(
    map: &crate::mapped::Mapped,
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
    if planned.sample.is_none() {
        let mut crc = crc32fast::Hasher::new();
        map.stream(r.start, r.len, |c| crc.update(c))
            .map_err(|e| e.to_string())?;
        let back = crc.finalize();
        if back == *want_crc {
            return Ok(((r.start, r.len), want.clone()));
        }
        if differs(map, r.start, bytes, None)
            .map_err(|e| e.to_string())?
            .is_none()
        {
            return Err(format!(
                "record '{name}' read back has CRC-32 {back:08x}, the bytes written {want_crc:08x}"
            ));
        }
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
    plan: &TorchLayout<'_>,
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
    // Each record is checked against what the pass saw written (`check_record`), so the digests
    // the pass took are the file's: nothing is hashed twice. Each record's CRC-32 as the zip
    // states it (what zip tools check; torch's loaders do not) must be the one the pass took.
    if planned.sample.is_some() {
        // Otherwise each sampled block would pull in the disk's readahead window.
        written.map.expect_random_reads();
    }
    let records = (0..names.len())
        .into_par_iter()
        .map(|i| check_record(&written.map, zip, planned, i))
        .collect::<std::result::Result<HashMap<(u64, u64), String>, String>>()
        .map_err(verr)?;
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
                    None => t.digest()?,
                },
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(FileManifest {
        path: dest.to_path_buf(),
        bytes: written.map.len,
        hash: manifest::algorithm(),
        digest: None,
        tensors,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::torch::Container;
    use crate::mapped::Mapped;

    /// A torch file of the testdata, its zip records and its map.
    fn fixture() -> (TorchFile, Mapped) {
        let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let path = here.join("testdata/torch/state_dict.pt");
        let t = TorchFile::open(&path, &GlobalPolicy::default()).unwrap();
        let m = Mapped::open(&path).unwrap();
        (t, m)
    }

    #[test]
    fn a_record_read_back_is_checked_in_full_or_sampled_and_a_difference_is_named() {
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
        // After a direct write, one flipped bit anywhere in computed bytes is found, with the byte.
        let at = bytes.len() / 2 + 1;
        let mut bad = bytes.clone();
        bad[at] ^= 0x10;
        let err = check(bad, Some(crate::output::direct::CHUNK)).unwrap_err();
        assert!(err.contains(&format!("at byte {at}")), "{err}");
        // After a buffered write, a flipped bit in the file read back makes its CRC-32 differ from
        // the one taken from the bytes written: found, with the byte.
        let dir = tempfile::tempdir().unwrap();
        let flipped = dir.path().join("flipped.pt");
        let mut file = map.bytes().to_vec();
        file[(r.start as usize) + at] ^= 0x10;
        std::fs::write(&flipped, &file).unwrap();
        let flipped = Mapped::open(&flipped).unwrap();
        let layout = vec![vec![
            Segment::Memory(Cow::Borrowed(&b"header"[..])),
            Segment::Memory(Cow::Owned(bytes.clone())),
            Segment::Memory(Cow::Borrowed(&b"descriptor"[..])),
        ]];
        let p = Planned {
            pickle: &[],
            names: &names,
            sums: &sums,
            layout: &layout,
            sample: None,
        };
        let err = check_record(&flipped, zip, &p, 0).unwrap_err();
        assert!(err.contains(&format!("at byte {at}")), "{err}");
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
            sample: Some(crate::output::direct::CHUNK),
        };
        let err = check_record(&map, zip, &p, 0).unwrap_err();
        assert!(err.contains(&format!("at byte {last}")), "{err}");
    }

    /// A torch file holding a NaN, planned unchanged with every tensor to scan and the whole
    /// file hashed.
    fn nan_plan(t: &TorchFile) -> TorchLayout<'_> {
        let mut plan = TorchLayout::try_identity(t).unwrap();
        plan.scan = t.tensor_refs().collect();
        plan.file_sha256 = true;
        plan
    }

    fn nan_fixture() -> TorchFile {
        let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let path = here.join("testdata/sanitize/nan_moment.pt");
        TorchFile::open(&path, &GlobalPolicy::default()).unwrap()
    }

    #[test]
    fn a_torch_write_reads_each_input_byte_once_and_agrees_with_separate_passes() {
        let t = nan_fixture();
        let mut plan = nan_plan(&t);
        // Tensors of another file, which the plan does not copy, are scanned too: read once,
        // after the write.
        let (other, _) = fixture();
        plan.scan.extend(other.tensor_refs());
        let copied: u64 = t.storages.values().map(|s| s.len).sum();
        let floats: u64 = other
            .tensor_refs()
            .filter(|x| x.dtype.is_convertible_float())
            .map(|x| x.nbytes())
            .sum();
        let tmp = tempfile::tempdir().unwrap();
        let dest = tmp.path().join("out.pt");
        let before = (t.map.bytes_read(), other.map.bytes_read());
        let policy = GlobalPolicy::default();
        let w = write_torch_scanning(&plan, &dest, &[], &policy).unwrap();
        // One read of each input byte: the copy; CRC-32s, digests and the NaN/Inf scan are taken
        // from the same bytes, and the read-back reads the output only.
        assert_eq!(t.map.bytes_read() - before.0, copied);
        assert_eq!(other.map.bytes_read() - before.1, floats);

        // What the separate passes give, from the file written.
        let file = std::fs::read(&dest).unwrap();
        assert_eq!(w.manifest.digest, Some(manifest::digest(&file)));
        let back = TorchFile::open(&dest, &policy).unwrap();
        let Container::Zip(zip) = &back.container else {
            panic!("not a zip")
        };
        let mut others = Vec::new();
        for r in &zip.records {
            let bytes = back.map.slice(r.start, r.len).unwrap();
            assert_eq!(r.crc32, crc32fast::hash(bytes), "{}", r.name);
            if r.name != ".data/serialization_id" {
                others.push((r.name.clone(), r.len, r.crc32));
            }
        }
        let id = zip.record(".data/serialization_id").unwrap();
        let id = back.map.slice(id.start, id.len).unwrap();
        let made = crate::formats::torch::writer::serialization_id(&others);
        assert_eq!(id, made.as_bytes());
        for (m, x) in w.manifest.tensors.iter().zip(back.tensor_refs()) {
            assert_eq!(m.digest, x.digest().unwrap(), "{}", x.name);
        }
        let scanned: Vec<(String, u64, u64)> = t
            .tensor_refs()
            .chain(other.tensor_refs())
            .map(|x| {
                let (nan, inf) = x.nonfinite().unwrap();
                (x.name.to_string(), nan, inf)
            })
            .collect();
        assert_eq!(w.nonfinite, scanned);
        assert!(
            scanned.iter().any(|(_, nan, _)| *nan > 0),
            "the fixture's NaN"
        );
    }

    #[test]
    fn the_pass_makes_the_same_file_and_sums_in_4096_byte_direct_chunks_or_buffered() {
        let t = nan_fixture();
        let plan = nan_plan(&t);
        let tmp = tempfile::tempdir().unwrap();
        let dest = tmp.path().join("out.pt");
        let w = write_torch_scanning(&plan, &dest, &[], &GlobalPolicy::default()).unwrap();
        let want = std::fs::read(&dest).unwrap();
        // Chunk lines cut records, descriptors and the directory; two writers take turns.
        let l = lay_out_plan(&plan, &dest).unwrap();
        let mut runs = Vec::new();
        for direct in [false, true] {
            let path = tmp.path().join(format!("direct-{direct}.pt"));
            let file = std::fs::File::create(&path).unwrap();
            let mut pass = l.pass(&plan);
            let refused = direct
                && matches!(
                    crate::output::direct::write(
                        &path,
                        &[],
                        &l.segments,
                        l.total,
                        4096,
                        Some(&mut pass)
                    )
                    .unwrap(),
                    crate::output::direct::Outcome::Refused
                );
            if !direct || refused {
                crate::output::direct::write_buffered(
                    &file,
                    &path,
                    &[],
                    &l.segments,
                    l.total,
                    &mut pass,
                )
                .unwrap();
            }
            assert_eq!(std::fs::read(&path).unwrap(), want, "direct: {direct}");
            let seen = pass.finish().unwrap();
            assert_eq!(seen.nonfinite, w.nonfinite, "direct: {direct}");
            assert_eq!(seen.file_digest, w.manifest.digest, "direct: {direct}");
            runs.push(seen.sums);
        }
        assert_eq!(runs[0], runs[1]);
    }
}
