//! Scheduling hints for Glider's background threads: a thread that writes what the
//! request path handed it (the context log's writer) should not preempt a request
//! being served on the same core.

/// Lower the calling thread's priority: on Linux its nice value is raised by `by`
/// (capped at 19, the lowest priority; a thread's nice value is its own there). Under
/// CFS a thread woken with work then waits for its core to go idle instead of
/// preempting the thread serving a request, and under load it still gets its share.
/// Lowering needs no privilege. Elsewhere it does nothing.
pub fn lower_this_thread(by: i32) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use rustix::process::{getpriority_process, setpriority_process};
        let me = Some(rustix::thread::gettid());
        let nice = getpriority_process(me)?;
        setpriority_process(me, (nice + by).min(19))?;
    }
    #[cfg(not(target_os = "linux"))]
    let _ = by;
    Ok(())
}

/// A thread named `name` that runs `work` at a priority lowered by `by` (see
/// [`lower_this_thread`]; where it cannot be lowered, `work` runs at the process's and
/// that is logged at debug level): the background work of Glider's writers and
/// readers, which must wait for idle moments of a core serving requests.
pub fn spawn_lowered<T: Send + 'static>(
    name: &str,
    by: i32,
    work: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<T>> {
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            if let Err(error) = lower_this_thread(by) {
                tracing::debug!(%error, "this thread keeps the process's priority");
            }
            work()
        })
}

/// The calling thread's nice value (0 where threads have none of their own).
pub fn this_thread_nice() -> std::io::Result<i32> {
    #[cfg(target_os = "linux")]
    return Ok(rustix::process::getpriority_process(Some(
        rustix::thread::gettid(),
    ))?);
    #[cfg(not(target_os = "linux"))]
    Ok(0)
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use rustix::process::getpriority_process;

    #[test]
    fn only_the_calling_thread_is_lowered() {
        let process_nice = getpriority_process(None).expect("nice");
        let lowered = std::thread::spawn(|| {
            let before = super::this_thread_nice().expect("nice");
            super::lower_this_thread(10).expect("lowered");
            (before, super::this_thread_nice().expect("nice"))
        })
        .join()
        .expect("thread");
        assert_eq!(lowered.1, (lowered.0 + 10).min(19), "{lowered:?}");
        assert_eq!(
            getpriority_process(None).expect("nice"),
            process_nice,
            "the rest of the process keeps its priority"
        );
    }
}
