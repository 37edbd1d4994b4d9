//! How polling threads wait.

/// Empty polls spent spinning before a poller starts yielding.
const SPINS: u32 = 64;

/// The waiting policy of every polling loop (server workers, clients
/// awaiting replies): spin with the CPU's spin hint for a few empty polls,
/// then yield the CPU after each empty poll. On an idle core `yield_now`
/// returns at once, so a poller still occupies a whole core — the polling
/// design the baselines stand for; on an oversubscribed machine (more
/// pollers than cores, as on a 2-core test machine or under the paper's CPU
/// contention experiment) it lets the other runnable threads in instead of
/// burning the rest of its time slice.
#[derive(Debug, Default)]
pub(crate) struct Spinner {
    idle: u32,
}

impl Spinner {
    /// Records an empty poll and waits a little.
    pub(crate) fn idle(&mut self) {
        if self.idle < SPINS {
            self.idle += 1;
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }

    /// Records a successful poll.
    pub(crate) fn reset(&mut self) {
        self.idle = 0;
    }
}
