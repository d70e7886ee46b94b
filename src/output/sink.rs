//! The chunked writers' listener: the progress bar, and the hidden pause tests kill writers in.

use super::progress::Progress;
use std::time::Duration;

/// Hidden test hook: milliseconds to sleep between chunks, so tests can kill a writer mid-write.
const PAUSE_ENV: &str = "CKPT_SURGERY_TEST_PAUSE_MS";

fn test_pause() -> Option<Duration> {
    std::env::var(PAUSE_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .map(Duration::from_millis)
}

/// Called after each chunk written: advances the progress bar, and sleeps when the hidden test
/// hook asks (so tests can kill a writer mid-write).
pub(crate) struct ChunkSink {
    progress: Progress,
    pause: Option<Duration>,
}

impl ChunkSink {
    pub(crate) fn new(total: u64) -> Self {
        ChunkSink {
            progress: Progress::bytes(total, "writing"),
            pause: test_pause(),
        }
    }

    pub(crate) fn chunk(&mut self, n: u64) {
        self.progress.inc(n);
        if let Some(p) = self.pause {
            std::thread::sleep(p);
        }
    }

    pub(crate) fn finish(self) {
        self.progress.finish();
    }
}
