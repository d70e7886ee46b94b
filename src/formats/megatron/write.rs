//! Writing a Megatron-Core `torch_dist` checkpoint with its vocabulary resized: the DCP folder
//! through the DCP writer (new row chunks, items left out), `common.pt` with its vocabulary args
//! edited as a pickle, the save root's and the iteration folder's other files carried over; built
//! in a temp folder, re-read with the strict reader, compared, renamed into place.

use super::common::{self, VocabArgs};
use super::{Found, Megatron, LATEST};
use crate::error::{Error, Result};
use crate::formats::dcp::write::{write_dcp_in, ObjectEdit, Out, TensorEdit, Written};
use crate::formats::dcp::{ItemKind, METADATA};
use crate::formats::torch::pickle::GlobalPolicy;
use crate::output::folder::{AtomicFolder, Carried};
use std::path::Path;

/// What is written: the vocabulary matrices' edits, the items left out (the optimizer's, with
/// `--optimizer drop`), `common.pt`'s new args.
#[derive(Debug, Clone)]
pub struct Resize {
    pub edits: Vec<TensorEdit>,
    pub dropped: Vec<String>,
    /// The optimizer's per-bucket size objects rewritten for re-laid buckets.
    pub objects: Vec<ObjectEdit>,
    pub args: VocabArgs,
}

/// Write `m` resized to `dest`: a save root for a save root (`latest_checkpointed_iteration.txt`
/// and the one iteration folder), an iteration folder for one. `policy`: the globals the user
/// allowed when `m` was opened.
pub fn write(
    m: &Megatron,
    r: &Resize,
    dest: &Path,
    overwrite: bool,
    policy: &GlobalPolicy,
) -> Result<(Written, Vec<Carried>)> {
    let inputs = m.input_paths();
    let folder = AtomicFolder::create(dest, &inputs, overwrite)?;
    let mut carried = Vec::new();
    let sub = match m.found {
        Found::Root => {
            carried.push(
                folder
                    .carry(&m.path.join(LATEST), LATEST, false)
                    .map_err(|e| folder.about(e))?,
            );
            let name = m.dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
            let sub = folder.join(name);
            std::fs::create_dir(&sub).map_err(|e| folder.about(Error::io(&sub, "create", e)))?;
            format!("{name}/")
        }
        _ => String::new(),
    };
    carried.extend(carry_iteration_files(m, &folder, &sub)?);
    if let Some(c) = &m.common {
        let dest = folder.join(&format!("{sub}{}", common::COMMON));
        common::write_edited(c, &r.args, policy, &dest).map_err(|e| folder.about(e))?;
    }
    let out = Out {
        edits: &r.edits,
        dropped: &r.dropped,
        objects: &r.objects,
        policy: Some(&super::metadata_policy()),
    };
    let written = write_dcp_in(&m.dcp, &out, &folder, &sub)?;
    verify(m, r, &folder.join(&sub), policy).map_err(|e| folder.about(e))?;
    folder.commit()?;
    Ok((written, carried))
}

/// The iteration folder's files that are neither DCP's (`.metadata`, the data files) nor
/// `common.pt` (`metadata.json`, …), carried byte for byte; subfolders are not Megatron's and
/// are refused.
fn carry_iteration_files(m: &Megatron, folder: &AtomicFolder, sub: &str) -> Result<Vec<Carried>> {
    let mut out = Vec::new();
    let list = std::fs::read_dir(&m.dir).map_err(|e| Error::io(&m.dir, "list", e))?;
    let mut names = Vec::new();
    for e in list {
        let e = e.map_err(|e| Error::io(&m.dir, "list", e))?;
        let name = e.file_name().to_string_lossy().into_owned();
        if name == METADATA || name == common::COMMON || m.dcp.files.contains_key(&name) {
            continue;
        }
        if !e.path().is_file() {
            return Err(Error::unsupported(
                e.path(),
                "not a file: a torch_dist iteration folder holds files only; move it out and run again",
            ));
        }
        names.push(name);
    }
    names.sort();
    for name in names {
        out.push(
            folder
                .carry(&m.dir.join(&name), &format!("{sub}{name}"), false)
                .map_err(|e| folder.about(e))?,
        );
    }
    Ok(out)
}

/// The output re-read as a Megatron checkpoint: the vocabulary at its new shape, split by the
/// same TP size, `common.pt`'s args as planned, re-laid buckets proven again, every
/// `fully_reshardable` state at its weight's shape, no item left that was dropped.
fn verify(m: &Megatron, r: &Resize, dir: &Path, policy: &GlobalPolicy) -> Result<()> {
    let out = Megatron::open(dir, Found::Iteration, policy)?;
    let verr = |problem: String| Error::Verify {
        path: dir.to_path_buf(),
        problem,
    };
    if out.tp != m.tp {
        return Err(verr(format!("split {} ways, not {}", out.tp, m.tp)));
    }
    for e in &r.edits {
        let shape = match out.dcp.item(&e.fqn).map(|i| &i.kind) {
            Some(ItemKind::Tensor { shape, .. }) => shape,
            _ => return Err(verr(format!("'{}' missing", e.fqn))),
        };
        if *shape != e.shape {
            return Err(verr(format!(
                "'{}' is {:?}, planned {:?}",
                e.fqn, shape, e.shape
            )));
        }
    }
    if let Some(d) = r.dropped.iter().find(|d| out.dcp.item(d).is_some()) {
        return Err(verr(format!("'{d}' was to be left out")));
    }
    let args = out.args();
    let want = &r.args;
    let ok = args.is_some_and(|a| {
        a.padded_vocab_size == Some(want.padded_vocab_size)
            && (want.vocab_size.is_none() || a.vocab_size == want.vocab_size)
    });
    if m.common.is_some() && !ok {
        return Err(verr(format!(
            "{} does not hold the planned args {want:?}",
            common::COMMON
        )));
    }
    if !r.objects.is_empty() {
        // The re-laid buckets are proven again as the input's were: every chunk where the
        // model's parameter order puts it, per_bucket_numel_unpadded its length.
        let rule = super::relay::rule(&out, super::relay::run_args(&out, policy)?);
        super::buckets::buckets(&out.dcp, rule)?;
    }
    if let Some(a) = super::layout::states_apart(&out.dcp, &out.optimizer).first() {
        // Every model-space state at its weight's shape, the resized ones included.
        return Err(verr(format!(
            "the optimizer state '{}' is {:?}, its weight '{}' {:?}",
            a.fqn, a.shape, a.weight, a.weight_shape
        )));
    }
    if want.drop_optimizer && out.optimizer.form.is_some() {
        return Err(verr("the optimizer state is still there".into()));
    }
    Ok(())
}
