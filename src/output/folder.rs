//! The output rule, for every tool: a folder input gives a folder output, a file gives a file.
//!
//! A folder output is built in a temp folder beside the destination (`.NAME.ckpt-surgery-*.tmp`),
//! every file in it written and verified as a file output is (or carried over from the input
//! folder and compared byte for byte), fsynced, and only then renamed to the destination, so the
//! whole folder appears at once or not at all. The destination must not exist or be an empty
//! folder; with `--overwrite` an existing folder is replaced, but only after the new one is
//! complete. Nothing is written outside the destination, and no file the tool did not create in
//! this run is replaced.

use super::atomic::ensure_not_input;
use crate::error::{Error, Result};
use serde::Serialize;
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A file of the input folder and what became of it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Carried {
    pub name: String,
    /// `reflink`, `copy` or `hard-link`.
    pub how: &'static str,
}

/// A file of the input folder left out of the output, and why.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Left {
    pub name: String,
    pub why: String,
}

/// A folder that becomes `dest` on [`AtomicFolder::commit`], and is removed if dropped before.
pub struct AtomicFolder {
    dest: PathBuf,
    tmp: PathBuf,
    overwrite: bool,
    committed: bool,
}

fn parent_dir(p: &Path) -> &Path {
    match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

impl AtomicFolder {
    /// The temp folder for `dest`. Refused when `dest` is a file, a folder that is not empty
    /// (unless `overwrite`), an input, inside an input folder, or holds an input.
    pub fn create(dest: &Path, inputs: &[&Path], overwrite: bool) -> Result<Self> {
        let name = dest
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(|| {
                Error::arg(
                    "--output",
                    format!("{}: output folder has no name", dest.display()),
                )
            })?;
        super::atomic::refuse_overlap(dest, inputs)?;
        match std::fs::symlink_metadata(dest) {
            Ok(m) if !m.is_dir() => {
                return Err(Error::arg(
                    "--output",
                    format!(
                        "{}: exists and is not a folder; the output of a folder input is a folder",
                        dest.display()
                    ),
                ))
            }
            Ok(_) => {
                let empty = std::fs::read_dir(dest)
                    .map_err(|e| Error::io(dest, "list", e))?
                    .next()
                    .is_none();
                if !empty && !overwrite {
                    return Err(Error::OutputExists {
                        path: dest.to_path_buf(),
                        folder: true,
                    });
                }
            }
            Err(_) => {}
        }
        let parent = parent_dir(dest);
        std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, "create folder", e))?;
        let tmp = parent.join(format!(
            ".{name}.ckpt-surgery-{}-{}.tmp",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir(&tmp).map_err(|e| Error::io(&tmp, "create temp folder", e))?;
        Ok(AtomicFolder {
            dest: dest.to_path_buf(),
            tmp,
            overwrite,
            committed: false,
        })
    }

    /// The temp folder: write the output's files here.
    pub fn path(&self) -> &Path {
        &self.tmp
    }

    /// Where the folder ends up.
    pub fn dest(&self) -> &Path {
        &self.dest
    }

    /// An error about a file in the temp folder, told about the file the user will look for
    /// (the same name under the destination).
    pub fn about(&self, mut e: Error) -> Error {
        let fix = |p: &mut PathBuf| {
            if let Ok(rel) = p.strip_prefix(&self.tmp) {
                *p = self.dest.join(rel);
            }
        };
        match &mut e {
            Error::Io { path, .. }
            | Error::Format { path, .. }
            | Error::Unsupported { path, .. }
            | Error::Tensor { path, .. }
            | Error::Verify { path, .. }
            | Error::Check { path, .. }
            | Error::Pickle { path, .. }
            | Error::UnknownGlobal { path, .. }
            | Error::PickledTensor { path, .. }
            | Error::Shrink { path, .. }
            | Error::Dropped { path, .. }
            | Error::OutputExists { path, .. } => fix(path),
            Error::OutputIsInput { path, input, .. } => {
                fix(path);
                fix(input);
            }
            Error::Arg { problem: text, .. } | Error::Device { detail: text, .. } => {
                *text = self.untemp(text);
            }
        }
        e
    }

    /// `text` with the temp folder's path written as the destination's.
    fn untemp(&self, text: &str) -> String {
        text.replace(&*self.tmp.to_string_lossy(), &self.dest.to_string_lossy())
    }

    /// A path inside the temp folder, for `name` (a file name of the output).
    pub fn join(&self, name: &str) -> PathBuf {
        self.tmp.join(name)
    }

    /// Carry `src` over unchanged as `name`: a reflink where the filesystem has it, else a copy
    /// (a hard link only when `link`: the output then shares the input's inode, and an edit
    /// of one edits both). Copies are compared with the source byte for byte.
    pub fn carry(&self, src: &Path, name: &str, link: bool) -> Result<Carried> {
        let dest = self.tmp.join(name);
        if link && std::fs::hard_link(src, &dest).is_ok() {
            return Ok(Carried {
                name: name.into(),
                how: "hard-link",
            });
        }
        let how = if reflink(src, &dest)? {
            "reflink"
        } else {
            copy(src, &dest)?;
            "copy"
        };
        same_bytes(src, &dest)?;
        Ok(Carried {
            name: name.into(),
            how,
        })
    }

    /// fsync every file and the folder, then rename it to the destination and fsync its parent.
    /// With `overwrite`, an existing destination is moved aside first and removed after.
    pub fn commit(mut self) -> Result<PathBuf> {
        for e in std::fs::read_dir(&self.tmp).map_err(|e| Error::io(&self.tmp, "list", e))? {
            let p = e.map_err(|e| Error::io(&self.tmp, "list", e))?.path();
            File::open(&p)
                .and_then(|f| f.sync_all())
                .map_err(|e| Error::io(&p, "fsync", e))?;
        }
        sync_dir(&self.tmp)?;
        let mut aside = None;
        if let Ok(m) = std::fs::symlink_metadata(&self.dest) {
            let empty = m.is_dir()
                && std::fs::read_dir(&self.dest)
                    .map_err(|e| Error::io(&self.dest, "list", e))?
                    .next()
                    .is_none();
            if empty {
                std::fs::remove_dir(&self.dest)
                    .map_err(|e| Error::io(&self.dest, "remove the empty folder", e))?;
            } else if self.overwrite && m.is_dir() {
                let old = self.tmp.with_extension("old");
                std::fs::rename(&self.dest, &old)
                    .map_err(|e| Error::io(&self.dest, "move the old folder aside", e))?;
                aside = Some(old);
            } else {
                return Err(Error::arg(
                    "--output",
                    format!(
                        "{}: appeared while writing; the output is left in {}",
                        self.dest.display(),
                        self.tmp.display()
                    ),
                ));
            }
        }
        std::fs::rename(&self.tmp, &self.dest)
            .map_err(|e| Error::io(&self.dest, "rename the verified temp folder onto", e))?;
        self.committed = true;
        sync_dir(parent_dir(&self.dest))?;
        if let Some(old) = aside {
            std::fs::remove_dir_all(&old)
                .map_err(|e| Error::io(&old, "remove the old folder", e))?;
        }
        Ok(self.dest.clone())
    }
}

impl Drop for AtomicFolder {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_dir_all(&self.tmp);
        }
    }
}

fn sync_dir(d: &Path) -> Result<()> {
    File::open(d)
        .and_then(|f| f.sync_all())
        .map_err(|e| Error::io(d, "fsync folder", e))
}

/// A copy-on-write clone (FICLONE): true when the filesystem made one.
fn reflink(src: &Path, dest: &Path) -> Result<bool> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::io::AsRawFd;
        let from = File::open(src).map_err(|e| Error::io(src, "open", e))?;
        let to = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(dest)
            .map_err(|e| Error::io(dest, "create", e))?;
        // FICLONE = _IOW(0x94, 9, int)
        const FICLONE: libc::c_ulong = 0x4004_9409;
        // SAFETY: both descriptors are open for the duration of the call.
        let r = unsafe { libc::ioctl(to.as_raw_fd(), FICLONE as _, from.as_raw_fd()) };
        if r == 0 {
            return Ok(true);
        }
        drop(to);
        std::fs::remove_file(dest).map_err(|e| Error::io(dest, "remove", e))?;
        Ok(false)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (src, dest);
        Ok(false)
    }
}

fn copy(src: &Path, dest: &Path) -> Result<()> {
    let mut from = File::open(src).map_err(|e| Error::io(src, "open", e))?;
    let mut to = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(dest)
        .map_err(|e| Error::io(dest, "create", e))?;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = from.read(&mut buf).map_err(|e| Error::io(src, "read", e))?;
        if n == 0 {
            break;
        }
        to.write_all(&buf[..n])
            .map_err(|e| Error::io(dest, "write", e))?;
    }
    to.sync_all().map_err(|e| Error::io(dest, "fsync", e))
}

/// The carried file reads back as the source's bytes.
fn same_bytes(src: &Path, dest: &Path) -> Result<()> {
    let (a, b) = (super::digest_file(src)?, super::digest_file(dest)?);
    if a != b {
        return Err(Error::Verify {
            path: dest.to_path_buf(),
            problem: format!("the copy of {} differs from it", src.display()),
        });
    }
    Ok(())
}

/// Refuse a destination that is an existing file or folder for a file output (a folder where a
/// file is expected), or whose extension names another format than the one written.
pub fn check_file_destination(dest: &Path, writes: &str, extensions: &[&str]) -> Result<()> {
    if dest.is_dir() {
        return Err(Error::arg(
            "--output",
            format!(
                "{}: is a folder; the output of a file input is a file ({writes})",
                dest.display()
            ),
        ));
    }
    let name = dest
        .file_name()
        .map(|n| n.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    if let Some(ext) = name.rsplit_once('.').map(|(_, e)| e.to_string()) {
        let known = ["safetensors", "bin", "pt", "pth", "ckpt", "json", "model"];
        if known.contains(&ext.as_str()) && !extensions.contains(&ext.as_str()) {
            return Err(Error::arg("--output", format!(
                "{}: the extension .{ext} names another format than the one written ({writes}); use {}",
                dest.display(),
                extensions
                    .iter()
                    .map(|e| format!(".{e}"))
                    .collect::<Vec<_>>()
                    .join(" or ")
            )));
        }
    }
    Ok(())
}

/// Check a file destination before a job runs: not a folder, an extension that names what is
/// written, not an input, and, unless `overwrite`, not an existing file (a tool never replaces a
/// file it did not create in this run without being told to).
pub fn file_destination(
    dest: &Path,
    inputs: &[&Path],
    writes: &str,
    ext: &[&str],
    overwrite: bool,
) -> Result<()> {
    check_file_destination(dest, writes, ext)?;
    if dest.exists() {
        ensure_not_input(dest, inputs)?;
        if !overwrite {
            return Err(Error::OutputExists {
                path: dest.to_path_buf(),
                folder: false,
            });
        }
    }
    Ok(())
}

/// Refuse an output path that names a file for a folder input.
pub fn folder_destination_name(dest: &Path) -> Result<()> {
    let name = dest
        .file_name()
        .map(|n| n.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    let files = [
        ".safetensors",
        ".json",
        ".bin",
        ".pt",
        ".pth",
        ".ckpt",
        ".model",
    ];
    if files.iter().any(|e| name.ends_with(e)) {
        return Err(Error::arg("--output", format!(
            "{}: names a file, but the input is a model folder (or a sharded set), so the output is a folder: give --output DIR",
            dest.display()
        )));
    }
    Ok(())
}

/// Files of a Trainer checkpoint that look like weights by their extension and are not: carried.
fn training_state(name: &str) -> bool {
    name == "training_args.bin"
        || name == "scheduler.pt"
        || name == "scaler.pt"
        || (name.starts_with("rng_state") && name.ends_with(".pth"))
}

/// DeepSpeed's own files at a save root beside the tag folders: `latest` (which tag to load) and
/// the `zero_to_*.py` converters it copies there.
pub fn deepspeed_root_file(name: &str) -> bool {
    name == "latest" || (name.starts_with("zero_to_") && name.ends_with(".py"))
}

/// Why a DeepSpeed file of a Trainer checkpoint is left out when the job writes no ZeRO state
/// (`global_step*/` not carried): the tag folder itself, and `latest` / `zero_to_*.py`, which
/// would point at or convert a state that is not there.
fn deepspeed_left(name: &str, is_dir: bool) -> Option<String> {
    if is_dir && name.starts_with("global_step") {
        return Some("DeepSpeed's ZeRO state (optimizer and master weights), sized for the old rows: this job does not resize it; sanitize-checkpoint on the input folder grows it with the weights".into());
    }
    (!is_dir && deepspeed_root_file(name)).then(|| {
        "DeepSpeed's pointer to (or converter of) the ZeRO state left out with global_step*/".into()
    })
}

/// Why a file of the input folder is not carried into the output folder, if it is not.
/// `written`: the names the job writes itself.
fn left_out(name: &str, is_dir: bool, written: &[String]) -> Option<String> {
    if written.iter().any(|w| w == name) || training_state(name) {
        return None;
    }
    if name.contains(".ckpt-surgery-") && name.ends_with(".tmp") {
        return Some("a temp file of an interrupted run".into());
    }
    if is_dir {
        return Some(
            "a folder: only the files of the input folder are carried (weights inside it were not grown)".into(),
        );
    }
    let lower = name.to_ascii_lowercase();
    if lower == "optimizer.pt" {
        return Some(
            "optimizer state sized for the old rows: grow it with sanitize-checkpoint on the folder"
                .into(),
        );
    }
    let weights = [
        ".safetensors",
        ".index.json",
        ".bin",
        ".pt",
        ".pth",
        ".ckpt",
        ".h5",
        ".msgpack",
        ".gguf",
        ".onnx",
    ];
    if weights.iter().any(|e| lower.ends_with(e)) {
        return Some(
            "weights in a file this job did not grow (another format or copy): carried, it would not match the grown ones"
                .into(),
        );
    }
    None
}

/// Files the output folder's consumer (`from_pretrained`, `AutoTokenizer`) parses: a carried one
/// that does not parse would make an output that does not load, so it is refused instead.
pub const CONSUMER_JSON: [&str; 5] = [
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
];

/// Refuse carrying `path` (named `name`) when it is one of [`CONSUMER_JSON`] and is not JSON.
fn refuse_unparsable(path: &Path, name: &str) -> Result<()> {
    if !CONSUMER_JSON.contains(&name) {
        return Ok(());
    }
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, "read", e))?;
    match serde_json::from_slice::<serde::de::IgnoredAny>(&bytes) {
        Ok(_) => Ok(()),
        Err(e) => Err(Error::format(
            path,
            format!("does not parse as JSON ({e}): the output folder would carry it and fail to load (from_pretrained); repair or remove it in a copy of the input, or give a replacement (--tokenizer for tokenizer.json)"),
        )),
    }
}

/// Carry every file of `input_dir` that the job did not write into the output folder (reflink
/// or copy; hard links with `link`), and say which were left out and why: subfolders, weights
/// the job did not grow, an optimizer it did not repair, and `stale` (name, why) the job names
/// (an old tokenizer replaced by a merged one in another format).
pub fn carry_rest(
    out: &AtomicFolder,
    input_dir: &Path,
    written: &[String],
    stale: &[(String, String)],
    link: bool,
) -> Result<(Vec<Carried>, Vec<Left>)> {
    let mut carried = Vec::new();
    let mut left = Vec::new();
    let mut entries: Vec<std::fs::DirEntry> = std::fs::read_dir(input_dir)
        .map_err(|e| Error::io(input_dir, "list", e))?
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| Error::io(input_dir, "list", e))?;
    entries.sort_by_key(|e| e.file_name());
    // A DeepSpeed run's Trainer checkpoint whose ZeRO state this job does not write (a job that
    // writes it names its tag folder in `written`; other tags are then the only ones left).
    let tags: Vec<String> = entries
        .iter()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("global_step"))
        .collect();
    let zero_left = !tags.is_empty() && !tags.iter().any(|t| written.contains(t));
    for e in entries {
        let name = e.file_name().to_string_lossy().into_owned();
        let path = e.path();
        let is_dir = path.is_dir();
        if let Some((_, why)) = stale.iter().find(|(n, _)| *n == name) {
            left.push(Left {
                name,
                why: why.clone(),
            });
            continue;
        }
        let ours = written.contains(&name);
        if let Some(why) = (zero_left && !ours)
            .then(|| deepspeed_left(&name, is_dir))
            .flatten()
        {
            left.push(Left { name, why });
            continue;
        }
        match left_out(&name, is_dir, written) {
            Some(why) => left.push(Left { name, why }),
            None if written.contains(&name) => {}
            None => {
                refuse_unparsable(&path, &name)?;
                carried.push(out.carry(&path, &name, link)?)
            }
        }
    }
    Ok((carried, left))
}

/// The report lines for what a folder output carried over and left out.
pub fn render_carried(carried: &[Carried], left: &[Left]) -> String {
    let mut s = String::new();
    if !carried.is_empty() {
        let names: Vec<String> = carried
            .iter()
            .map(|c| format!("{} ({})", c.name, c.how))
            .collect();
        s.push_str(&format!("carried over: {}\n", names.join(", ")));
    }
    for l in left {
        s.push_str(&format!("left out: {}: {}\n", l.name, l.why));
    }
    s
}

/// A file a folder output gets whole: copied from a path, or bytes the job made.
#[derive(Debug, Clone)]
pub(crate) enum NewFile {
    Path(PathBuf),
    Bytes(Vec<u8>),
}
