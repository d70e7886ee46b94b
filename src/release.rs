//! Freeing what a job built, off its path: large structures (a 262k-token tokenizer is a map
//! and a string per token, a tenth of a second to free) are dropped on a thread of their own,
//! or, in a command-line tool whose process ends after the run, not at all: the process's exit
//! returns the memory at once, where freeing it would take a core the job still uses.

use std::sync::atomic::{AtomicBool, Ordering};

static PROCESS_ENDS_AFTER_RUN: AtomicBool = AtomicBool::new(false);

/// Called by a tool's `main` (never by the library or the Python module, whose callers go on).
pub fn process_ends_after_run() {
    PROCESS_ENDS_AFTER_RUN.store(true, Ordering::Relaxed);
}

/// Drop `x` on a thread of its own; in a tool whose process ends after the run, leave it to the
/// exit.
pub fn later<T: Send + 'static>(x: T) {
    if PROCESS_ENDS_AFTER_RUN.load(Ordering::Relaxed) {
        std::mem::forget(x);
    } else {
        std::thread::spawn(move || drop(x));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc::{channel, Sender};
    use std::thread::{self, ThreadId};
    use std::time::Duration;

    /// Says on which thread it was dropped.
    struct Dropped(Sender<ThreadId>);

    impl Drop for Dropped {
        fn drop(&mut self) {
            let _ = self.0.send(thread::current().id());
        }
    }

    #[test]
    fn a_library_caller_gets_the_memory_back_freed_on_another_thread() {
        let (tx, rx) = channel();
        super::later(Dropped(tx));
        let on = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("never dropped");
        assert_ne!(on, thread::current().id());
    }
}
