//! Progress on stderr, once work has run for a second: a bar on a terminal; elsewhere (logs,
//! Slurm, CI) a plain line every ~10 s (`CKPT_SURGERY_PROGRESS_SECS` sets the interval in seconds,
//! fractions too; 0: every update, for tests).

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
        // Seconds, fractions too (`0.5`); anything else (negative, not a number) is the default.
        let secs = std::env::var("CKPT_SURGERY_PROGRESS_SECS")
            .ok()
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s >= 0.0)
            .unwrap_or(10.0);
        Some(Duration::from_secs_f64(secs.min(1e9)))
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

/// Work not counted in bytes (a tokenizer merge, trimming's corpus check): once it has run for a
/// second, a spinner naming it on a terminal, elsewhere a plain line every ~10 s (`label: N s`),
/// until the value is dropped. Nothing for short work, nor where bars are turned off.
pub struct Phase {
    done: Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Phase {
    pub fn start(label: &str) -> Phase {
        let done = Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
        let thread = ENABLED.load(Ordering::Relaxed).then(|| {
            let (done, label) = (done.clone(), label.to_string());
            std::thread::spawn(move || show_phase(&done, &label))
        });
        Phase { done, thread }
    }
}

impl Drop for Phase {
    fn drop(&mut self) {
        let (lock, ready) = &*self.done;
        if let Ok(mut d) = lock.lock() {
            *d = true;
        }
        ready.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The phase's display, on its own thread: wait a second (or not at all with the interval at
/// 0, for tests), then a spinner or a plain line per interval until `done`.
fn show_phase(done: &(std::sync::Mutex<bool>, std::sync::Condvar), label: &str) {
    let started = Instant::now();
    let every = plain_every();
    let zero = every.is_some_and(|e| e.is_zero());
    let (lock, ready) = done;
    let Ok(guard) = lock.lock() else { return };
    let wait = if zero { Duration::ZERO } else { SHOW_AFTER };
    let Ok((mut guard, _)) = ready.wait_timeout_while(guard, wait, |d| !*d) else {
        return;
    };
    let spinner = every.is_none().then(|| {
        let s = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template("{spinner} {msg}") {
            s.set_style(style);
        }
        s
    });
    while !*guard {
        let tick = match (&spinner, every) {
            (Some(s), _) => {
                s.set_message(format!("{label}, {:.0} s", started.elapsed().as_secs_f64()));
                s.tick();
                Duration::from_millis(100)
            }
            (None, Some(e)) => {
                eprintln!("{label}: {:.0} s", started.elapsed().as_secs_f64());
                if zero {
                    Duration::from_secs(3600)
                } else {
                    e
                }
            }
            (None, None) => break,
        };
        guard = match ready.wait_timeout_while(guard, tick, |d| !*d) {
            Ok((g, _)) => g,
            Err(_) => return,
        };
    }
    if let Some(s) = spinner {
        s.finish_and_clear();
    }
}
