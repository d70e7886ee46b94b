//! Progress on stderr: drawn only when stderr is a terminal, and only once work has run for a second.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Whether bars may be drawn at all in this process (the Python API turns them off by default).
static ENABLED: AtomicBool = AtomicBool::new(true);

/// Allow (the default) or forbid progress bars in this process from now on.
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

fn may_show(started: Instant) -> bool {
    ENABLED.load(Ordering::Relaxed) && started.elapsed() >= SHOW_AFTER
}

/// A byte-counting progress bar that stays invisible for short jobs and non-terminals.
pub struct Progress {
    bar: ProgressBar,
    started: Instant,
    shown: bool,
}

const SHOW_AFTER: Duration = Duration::from_secs(1);

impl Progress {
    pub fn bytes(total: u64, label: &str) -> Self {
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::hidden());
        if let Ok(style) = ProgressStyle::with_template(
            "{msg} [{bar:32}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_message(label.to_string());
        Progress {
            bar,
            started: Instant::now(),
            shown: false,
        }
    }

    pub fn inc(&mut self, n: u64) {
        self.bar.inc(n);
        if !self.shown && may_show(self.started) {
            self.shown = true;
            // A stderr target draws nothing when stderr is not a terminal.
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
        }
    }

    /// A handle safe to share across threads (indicatif bars are internally synchronised).
    pub fn shared(&self) -> SharedProgress {
        SharedProgress {
            bar: self.bar.clone(),
            started: self.started,
        }
    }

    pub fn finish(self) {
        self.bar.finish_and_clear();
    }
}

/// Clone of a [`Progress`] for rayon workers.
#[derive(Clone)]
pub struct SharedProgress {
    bar: ProgressBar,
    started: Instant,
}

impl SharedProgress {
    pub fn inc(&self, n: u64) {
        self.bar.inc(n);
        if self.bar.is_hidden() && may_show(self.started) {
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
        }
    }
}
