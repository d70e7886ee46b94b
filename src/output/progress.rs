//! Progress on stderr, once work has run for a second: a bar on a terminal; elsewhere (logs,
//! Slurm, CI) a plain line every ~10 s (`CKPT_SURGERY_PROGRESS_SECS` sets the interval; 0: every
//! update, for tests).

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Whether bars may be drawn at all in this process (the Python API turns them off by default).
static ENABLED: AtomicBool = AtomicBool::new(true);

/// Allow (the default) or forbid progress bars in this process from now on.
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// Seconds between plain lines when stderr is not a terminal.
fn plain_every() -> Option<Duration> {
    static EVERY: OnceLock<Option<Duration>> = OnceLock::new();
    *EVERY.get_or_init(|| {
        if std::io::stderr().is_terminal() {
            return None;
        }
        let secs = std::env::var("CKPT_SURGERY_PROGRESS_SECS")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(10);
        Some(Duration::from_secs(secs))
    })
}

fn may_show(started: Instant) -> bool {
    let after = match plain_every() {
        Some(every) if every.is_zero() => Duration::ZERO,
        _ => SHOW_AFTER,
    };
    ENABLED.load(Ordering::Relaxed) && started.elapsed() >= after
}

/// The plain line's clock: milliseconds since `started` of the last line printed (shared by
/// every clone of one bar).
#[derive(Clone, Default)]
struct Plain(Arc<AtomicU64>);

impl Plain {
    /// Print one line for `bar` if stderr is not a terminal and the interval has passed.
    fn tick(&self, bar: &ProgressBar, started: Instant) {
        let Some(every) = plain_every() else { return };
        if !may_show(started) {
            return;
        }
        let now = started.elapsed().as_millis() as u64;
        let last = self.0.load(Ordering::Relaxed);
        let due = last == 0 || now.saturating_sub(last) >= every.as_millis() as u64;
        if !due
            || self
                .0
                .compare_exchange(last, now.max(1), Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        let (pos, total) = (bar.position(), bar.length().unwrap_or(0).max(1));
        eprintln!(
            "{}: {:.1} of {:.1} MB ({:.0} %), {:.0} s",
            bar.message(),
            pos as f64 / 1e6,
            total as f64 / 1e6,
            100.0 * pos as f64 / total as f64,
            started.elapsed().as_secs_f64()
        );
    }
}

/// A byte-counting progress bar that stays invisible for short jobs and non-terminals.
pub struct Progress {
    bar: ProgressBar,
    started: Instant,
    shown: bool,
    plain: Plain,
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
            plain: Plain::default(),
        }
    }

    pub fn inc(&mut self, n: u64) {
        self.bar.inc(n);
        self.plain.tick(&self.bar, self.started);
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
            plain: self.plain.clone(),
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
    plain: Plain,
}

impl SharedProgress {
    pub fn inc(&self, n: u64) {
        self.bar.inc(n);
        self.plain.tick(&self.bar, self.started);
        if self.bar.is_hidden() && may_show(self.started) {
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
        }
    }
}
