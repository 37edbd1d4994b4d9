//! A background thread that runs one task periodically until it is dropped
//! (the recycler and the clock watch).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// A running periodic task; stops and joins its thread when dropped.
#[derive(Debug)]
pub(crate) struct Periodic {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Periodic {
    /// Starts a thread named `name` that runs `task` at once and then every
    /// `period` (a drop wakes it early, to stop).
    pub(crate) fn start(
        name: &str,
        period: Duration,
        mut task: impl FnMut() + Send + 'static,
    ) -> std::io::Result<Periodic> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    task();
                    std::thread::park_timeout(period);
                }
            })?;
        Ok(Periodic {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Periodic {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn runs_until_dropped() {
        let runs = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&runs);
        let p = Periodic::start("test-periodic", Duration::from_millis(1), move || {
            counter.fetch_add(1, Ordering::Relaxed);
        })
        .unwrap();
        while runs.load(Ordering::Relaxed) < 3 {
            std::thread::yield_now();
        }
        drop(p);
        let after = runs.load(Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(
            runs.load(Ordering::Relaxed),
            after,
            "the task ran after the drop"
        );
    }
}
