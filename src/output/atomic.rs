//! Atomic replacement of one file: a temp file beside the destination (create_new, the mode a
//! normal create would give), written, fsynced, verified by the caller, renamed into place, and
//! the directory fsynced. Until the rename the destination is untouched; a crash leaves at most a
//! stray `.NAME.ckpt-surgery-*.tmp` beside it, never a partial file at the destination.

use crate::error::{Error, Overlap, Result};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A temp file that becomes `dest` on [`AtomicFile::commit`], and is removed if dropped before.
pub struct AtomicFile {
    dest: PathBuf,
    tmp: PathBuf,
    file: File,
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Refuse `dest` when it is (or resolves to) one of `inputs`, or is a folder.
pub fn ensure_not_input(dest: &Path, inputs: &[&Path]) -> Result<()> {
    let dest_meta = std::fs::metadata(dest).ok();
    if dest_meta.as_ref().is_some_and(|m| m.is_dir()) {
        return Err(Error::arg(
            "--output",
            format!("{}: output is a folder; give a file path", dest.display()),
        ));
    }
    let dest_canon = canonical_destination(dest)?;
    for input in inputs {
        let same_path = std::fs::canonicalize(input).is_ok_and(|c| c == dest_canon);
        let same_inode = match (&dest_meta, std::fs::metadata(input)) {
            (Some(d), Ok(i)) => d.dev() == i.dev() && d.ino() == i.ino(),
            _ => false,
        };
        if same_path || same_inode {
            return Err(over_input(dest, input, Overlap::Same));
        }
    }
    Ok(())
}

/// The refusal of an output that overlaps an input.
fn over_input(dest: &Path, input: &Path, overlap: Overlap) -> Error {
    Error::OutputIsInput {
        path: dest.to_path_buf(),
        input: input.to_path_buf(),
        overlap,
    }
}

/// `p` with symlinks resolved, for a path that may not exist yet: its longest existing ancestor
/// canonicalized, the rest appended (`..` and `.` in the rest taken as written).
pub fn resolve(p: &Path) -> PathBuf {
    let abs = if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir().unwrap_or_default().join(p)
    };
    let mut rest = Vec::new();
    let mut at = abs.as_path();
    loop {
        if let Ok(c) = std::fs::canonicalize(at) {
            return rest.iter().rev().fold(c, |acc: PathBuf, n| acc.join(n));
        }
        match (at.parent(), at.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                at = parent;
            }
            _ => return abs,
        }
    }
}

/// The rule of every writer: the output is not an input, does not lie inside an input folder,
/// and holds no input (symlinks resolved). The refusal names both paths.
pub fn refuse_overlap(dest: &Path, inputs: &[&Path]) -> Result<()> {
    let d = resolve(dest);
    for input in inputs {
        let i = resolve(input);
        let overlap = if d == i {
            Overlap::Same
        } else if d.starts_with(&i) && i.is_dir() {
            Overlap::Inside
        } else if i.starts_with(&d) {
            Overlap::Holds
        } else {
            continue;
        };
        return Err(over_input(dest, input, overlap));
    }
    Ok(())
}

/// Canonical form of a path that may not exist yet: canonical parent + file name.
fn canonical_destination(dest: &Path) -> Result<PathBuf> {
    let name = dest.file_name().ok_or_else(|| {
        Error::arg(
            "--output",
            format!("{}: output path has no file name", dest.display()),
        )
    })?;
    let parent = parent_dir(dest);
    let parent = std::fs::canonicalize(parent).map_err(|e| Error::io(parent, "open folder", e))?;
    Ok(parent.join(name))
}

fn parent_dir(p: &Path) -> &Path {
    match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

impl AtomicFile {
    /// Create the temp file for `dest`, after checking `dest` is none of `inputs`.
    pub fn create(dest: &Path, inputs: &[&Path]) -> Result<Self> {
        let dir = parent_dir(dest);
        if !dir.exists() {
            std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, "create folder", e))?;
        }
        ensure_not_input(dest, inputs)?;
        let name = dest
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = parent_dir(dest).join(format!(
            ".{name}.ckpt-surgery-{}-{}.tmp",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        // Default mode 0o666 minus umask: what a plain create gives the user.
        let file = OpenOptions::new()
            .write(true)
            .read(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|e| Error::io(&tmp, "create temp file", e))?;
        let me = AtomicFile {
            dest: dest.to_path_buf(),
            tmp,
            file,
        };
        // Replacing an existing file keeps its permissions, as overwriting it in place would.
        if let Ok(old) = std::fs::metadata(dest) {
            std::fs::set_permissions(&me.tmp, old.permissions())
                .map_err(|e| Error::io(&me.tmp, "set permissions of", e))?;
        }
        Ok(me)
    }

    /// The open temp file, for writing.
    pub fn file(&mut self) -> &mut File {
        &mut self.file
    }

    /// The temp file's path (for re-opening it to verify).
    pub fn temp_path(&self) -> &Path {
        &self.tmp
    }

    /// fsync the data, so a verification read and the rename see what is on disk.
    pub fn sync(&mut self) -> Result<()> {
        self.file
            .sync_all()
            .map_err(|e| Error::io(&self.tmp, "fsync", e))
    }

    /// Rename into place and fsync the folder. Call only after verifying the temp file.
    pub fn commit(mut self) -> Result<PathBuf> {
        self.sync()?;
        std::fs::rename(&self.tmp, &self.dest)
            .map_err(|e| Error::io(&self.dest, "rename the verified temp file onto", e))?;
        let dir = parent_dir(&self.dest);
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| Error::io(dir, "fsync folder", e))?;
        // Committed: nothing left for Drop to remove.
        self.tmp = PathBuf::new();
        Ok(self.dest.clone())
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if !self.tmp.as_os_str().is_empty() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}
