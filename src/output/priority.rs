//! Work that runs beside a writer (hashing, the new rows' statistics) yields the CPU to it. On
//! two cores a writer that waits for a core leaves the disk idle: with this work at normal
//! priority a 4 GiB direct write took ~0.4 s longer than with it niced.

/// Lower the calling thread's scheduling priority (Linux: its own nice value becomes the
/// process's plus 10, at most 19; calling it again changes nothing). Only threads this crate
/// starts for one job call it; they end with the job. Elsewhere, and where the kernel refuses,
/// nothing changes.
pub(crate) fn lower_this_thread() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: getpid, gettid, getpriority and setpriority take and return plain integers and
        // touch no memory of ours. On Linux, PRIO_PROCESS with a thread id names that one thread
        // (the process id names the main thread). An error from getpriority (-1) only makes the
        // target 9: still lower than the default.
        unsafe {
            let process = libc::getpriority(libc::PRIO_PROCESS, libc::getpid() as libc::id_t);
            let tid = libc::gettid() as libc::id_t;
            let now = libc::getpriority(libc::PRIO_PROCESS, tid);
            let target = (process + 10).min(19);
            if target > now {
                libc::setpriority(libc::PRIO_PROCESS, tid, target);
            }
        }
    }
}

/// Run `f` on a rayon pool of its own whose threads have [`lower_this_thread`]'s priority (its
/// parallel iterators stay in that pool). If no pool can be made, `f` runs on the global one.
pub(crate) fn in_background<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    match rayon::ThreadPoolBuilder::new()
        .start_handler(|_| lower_this_thread())
        .build()
    {
        Ok(pool) => pool.install(f),
        Err(_) => f(),
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    fn nice() -> i32 {
        // SAFETY: as above.
        unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) }
    }

    #[test]
    fn background_threads_are_niced_once_and_the_caller_is_not() {
        let before = nice();
        let want = (before + 10).min(19);
        let pool = in_background(|| rayon::broadcast(|_| nice()));
        assert!(
            !pool.is_empty() && pool.iter().all(|&n| n == want),
            "{pool:?}"
        );
        assert_eq!(nice(), before, "the calling thread keeps its priority");
        let own = std::thread::spawn(|| {
            lower_this_thread();
            lower_this_thread();
            nice()
        })
        .join()
        .unwrap();
        assert_eq!(own, want);
    }
}
