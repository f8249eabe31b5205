//! A cheap clock for the checks a progress pass makes on every call (is it time to ask epoll,
//! to look for dead peers). `Instant::now` reads the precise clock, about 80 ns on a virtual
//! machine, which a round trip that makes a dozen such checks feels; the coarse clock is the
//! kernel's last tick (1 to 10 ms old), read in about 15 ns.

use rustix::time::{clock_gettime, ClockId};

/// Milliseconds of `CLOCK_MONOTONIC_COARSE` (advances once per kernel tick).
pub fn coarse_ms() -> u64 {
    let t = clock_gettime(ClockId::MonotonicCoarse);
    t.tv_sec as u64 * 1000 + t.tv_nsec as u64 / 1_000_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coarse_time_moves_forward_with_real_time() {
        let a = coarse_ms();
        std::thread::sleep(std::time::Duration::from_millis(30));
        let b = coarse_ms();
        assert!(b >= a + 15, "{a} then {b}");
    }
}
