//! extend-embeddings' planner: every decision, read-only, in one [`Planned`] (its
//! [`crate::plan::Plan`] is made by [`super::to_plan()`]).

use super::choose::choose_init;
use super::config::{config_output, read_config};
use super::options::{Options, Target};
use super::report::{planned_tensors, segment_map};
use super::select::{old_rows, selected_ties, target_rows};
use super::{Changed, Report};
use crate::error::Result;
use crate::formats::vocabulary::select_with_logits_bias;
use crate::formats::Tensors;
use crate::rows::device::Device;
use crate::rows::donor::BaseRows;
use crate::rows::init::Init;
use crate::rows::resize::Resize;
use crate::rows::Method;
use crate::ties::{self, Tie};
use crate::vocab::Role;
use std::path::{Path, PathBuf};

/// What extend-embeddings will do, decided before anything is written ([`plan`] only reads):
/// the report as the run will give it (`--dry-run --json` prints it), every tensor of the output
/// with what happens to it, and what the writer needs.
pub struct Planned<'c> {
    pub report: Report,
    pub(super) resizes: Vec<Resize<'c>>,
    pub(super) init: Init,
    pub(super) device: Device,
    /// config.json's edit (its new text, every other byte kept), for a folder output.
    pub(super) config_edit: Option<crate::output::json_text::JsonEdit>,
    /// The input folder, when the output is a folder.
    pub(super) folder_in: Option<PathBuf>,
    /// Every file read: none of them may be the output.
    pub(super) inputs: Vec<PathBuf>,
}

/// Each changed tensor's layout (its new rows are computed while the writer copies) and its
/// line in the report.
fn changes<'c>(
    ckpt: &'c Tensors,
    selected: &[(String, Role)],
    ties: &[Tie],
    rows: (u64, u64),
    segments: u64,
) -> Result<(Vec<Resize<'c>>, Vec<Changed>)> {
    let followers = ties::followers(ties);
    let (mut resizes, mut changed) = (Vec::new(), Vec::new());
    for (name, role) in selected {
        if followers.contains_key(name) {
            continue;
        }
        let Some(t) = ckpt.tensor(name) else { continue };
        let rows_view = t.rows_view();
        resizes.push(Resize::new(rows_view, *role, rows.0, rows.1)?.segmented(segments)?);
        changed.push(Changed {
            name: name.clone(),
            role: *role,
            dtype: t.dtype,
            old_shape: t.shape.to_vec(),
            new_shape: crate::vocab::with_rows(name, t.shape, rows.1),
            old_mean_row_norm: None,
            new_mean_row_norm: None,
            tied: ties
                .iter()
                .filter(|x| x.first() == name)
                .flat_map(|x| x.names[1..].iter().cloned())
                .collect(),
        });
    }
    Ok((resizes, changed))
}

/// Warnings about what the checkpoint holds beside the vocabulary.
fn content_warnings(ckpt: &Tensors, selected: &[(String, Role)], ties: &[Tie]) -> Vec<String> {
    let mut warnings = Vec::new();
    if let Some(t) = ckpt.torch.first() {
        if t.pickle.get(t.pickle.root, "optimizer").is_some() {
            warnings.push("the checkpoint holds optimizer state sized for the old rows: run sanitize-checkpoint before resuming training from it".into());
        }
    }
    let has_head = selected.iter().any(|(_, r)| *r == Role::Head);
    if !has_head && !ties.iter().any(|t| t.how == ties::How::Config) {
        warnings.push("no output head is stored and config.json says tie_word_embeddings: false: the model has no head here (a base model), or it lives in another file".into());
    }
    warnings
}

/// Decide everything: reads the checkpoint, the tokenizers and config.json, writes nothing.
pub fn plan<'c>(ckpt: &'c Tensors, input: &Path, opts: &Options) -> Result<Planned<'c>> {
    let _planning = crate::output::progress::Phase::start("planning");
    let mut inputs: Vec<PathBuf> = ckpt.input_paths().iter().map(|p| p.to_path_buf()).collect();
    let new_rows = target_rows(opts, &mut inputs)?;
    let selected = select_with_logits_bias(ckpt, &opts.tensors)?;
    let old_rows = old_rows(ckpt, &selected, new_rows, opts)?;
    let config = read_config(input, opts, &mut inputs)?;
    let ties = selected_ties(ckpt, &selected, old_rows, config.as_ref().map(|c| &c.value));
    let followers = ties::followers(&ties);
    let untied = selected
        .iter()
        .any(|(n, r)| *r == Role::Head && !followers.contains_key(n));
    let matrices: Vec<(String, Role)> = selected
        .iter()
        .filter(|(n, _)| !followers.contains_key(n))
        .cloned()
        .collect();
    let base = BaseRows {
        ckpt,
        matrices: &matrices,
    };
    let (init, donor, fallbacks) = choose_init(
        input,
        opts,
        (old_rows, new_rows),
        (base, untied),
        &mut inputs,
    )?;
    let (resizes, changed) = changes(ckpt, &selected, &ties, (old_rows, new_rows), opts.segments)?;
    let largest = resizes.iter().map(|r| r.keep).max().unwrap_or(0);
    let device = Device::select_for(opts.device, largest, opts.method == Method::Hewitt)?;
    let mut warnings = content_warnings(ckpt, &selected, &ties);
    // The output rule (output/folder.rs): a folder (or a sharded set) gives a folder, complete;
    // a file gives a file, and nothing beside it.
    let folder_in = ckpt.input_folder(input);
    let (config_changes, config_edit) =
        config_output(config, new_rows, opts, folder_in.is_some(), &mut warnings)?;
    let config_unchanged = config_changes.iter().all(|c| c.old == c.new);
    let tensors = planned_tensors(ckpt, &ties, &changed, new_rows);
    let report = Report {
        input: ckpt.path.clone(),
        layout: ("", false),
        format: ckpt.format,
        output: None,
        old_rows,
        new_rows,
        freeze_until_index: old_rows.min(new_rows),
        segments: segment_map(opts.segments, old_rows, new_rows),
        init: opts.method.name(),
        device: device.name.clone(),
        device_note: device.note.clone(),
        changed,
        ties,
        untouched_tensors: ckpt.tensors().count() - selected.len(),
        fallbacks,
        donor,
        config: None,
        config_changes,
        edited: Vec::new(),
        tokenizer: None,
        carried: Vec::new(),
        left_out: Vec::new(),
        warnings,
        notes: Vec::new(),
        // A folder still changes when its tokenizer is replaced (new ids that fit padding rows)
        // or its config.json's size is set.
        nothing_to_do: new_rows == old_rows
            && config_unchanged
            && !(folder_in.is_some() && matches!(opts.target, Target::Tokenizer(_))),
        dry_run: opts.dry_run,
        tensors,
        manifest: Vec::new(),
    };
    Ok(Planned {
        report,
        resizes,
        init,
        device,
        config_edit,
        folder_in,
        inputs,
    })
}
