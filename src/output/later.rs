//! Bytes computed while the writer runs. A grown matrix's new rows have a known length long
//! before their values exist (the column statistics need a pass over the old rows), so the file
//! can be laid out and its copied bytes written while they are computed; whoever reaches the
//! new rows (a writer, a hasher, the read-back) waits for them.

use crate::error::{Error, Result};
use std::path::PathBuf;
use std::sync::{Condvar, Mutex, OnceLock};

/// `len` bytes, set once by their producer; readers wait until then.
pub struct Later {
    len: u64,
    bytes: OnceLock<std::result::Result<Vec<u8>, String>>,
    lock: Mutex<()>,
    set: Condvar,
}

impl Later {
    /// Bytes still to be computed: `len` of them.
    pub fn new(len: u64) -> Self {
        Later {
            len,
            bytes: OnceLock::new(),
            lock: Mutex::new(()),
            set: Condvar::new(),
        }
    }

    /// Bytes known now.
    pub fn ready(bytes: Vec<u8>) -> Self {
        let later = Later::new(bytes.len() as u64);
        later.put(Ok(bytes));
        later
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the bytes (or the producer's failure) are there: [`Later::wait`] would not wait.
    pub fn is_set(&self) -> bool {
        self.bytes.get().is_some()
    }

    /// Hand over the bytes. Bytes of another length than promised are refused (readers get an
    /// error, never a shifted file); only the first hand-over counts.
    pub fn set(&self, bytes: Vec<u8>) {
        if bytes.len() as u64 == self.len {
            self.put(Ok(bytes));
        } else {
            self.put(Err(format!(
                "{} bytes computed where {} were laid out",
                bytes.len(),
                self.len
            )));
        }
    }

    /// The producer stopped without the bytes: readers get `why` as an error.
    pub fn fail(&self, why: impl Into<String>) {
        self.put(Err(why.into()));
    }

    fn put(&self, r: std::result::Result<Vec<u8>, String>) {
        let _held = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let _ = self.bytes.set(r);
        self.set.notify_all();
    }

    /// The bytes, once they are there.
    pub fn wait(&self) -> Result<&[u8]> {
        let mut held = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(r) = self.bytes.get() {
                return r.as_deref().map_err(|why| Error::Verify {
                    // Left empty: the writer that waited names its destination
                    // (`output::about_output`).
                    path: PathBuf::new(),
                    problem: format!("the new rows could not be computed: {why}"),
                });
            }
            held = self.set.wait(held).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Fails every [`Later`] still unset when dropped: a producer that returns early or panics never
/// leaves a reader waiting.
pub struct FailUnset<'a>(pub &'a [Later]);

impl Drop for FailUnset<'_> {
    fn drop(&mut self) {
        for later in self.0 {
            later.fail("stopped before they were computed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_wait_for_the_bytes_and_a_producer_that_stops_releases_them() {
        let laters = [Later::new(3), Later::new(2), Later::new(4)];
        std::thread::scope(|s| {
            let readers: Vec<_> = laters
                .iter()
                .map(|l| s.spawn(move || l.wait().map(<[u8]>::to_vec).map_err(|e| e.to_string())))
                .collect();
            std::thread::sleep(std::time::Duration::from_millis(20));
            let _guard = FailUnset(&laters);
            laters[0].set(vec![1, 2, 3]);
            laters[1].set(vec![9, 9, 9]); // not the promised length
                                          // laters[2] is left to the guard.
            drop(_guard);
            let got: Vec<_> = readers.into_iter().map(|r| r.join().unwrap()).collect();
            assert_eq!(got[0], Ok(vec![1, 2, 3]));
            assert!(got[1]
                .as_ref()
                .unwrap_err()
                .contains("3 bytes computed where 2"));
            assert!(got[2].as_ref().unwrap_err().contains("stopped before"));
        });
        // The first hand-over counts.
        assert_eq!(laters[0].wait().unwrap(), &[1, 2, 3]);
        assert_eq!(Later::ready(vec![7]).wait().unwrap(), &[7]);
    }
}
