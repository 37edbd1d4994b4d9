//! Hostile peers for the tests of servers that must not be held hostage:
//! connections that never prove the secret and send their bytes slowly.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often a dribbler sends its next byte.
pub const DRIBBLE_EVERY: Duration = Duration::from_millis(150);

/// Opens `count` connections to `addr` (all connected before it returns),
/// then sends byte `next_byte(i)` as the `i`-th byte over each, one every
/// [`DRIBBLE_EVERY`], until the other side has closed every connection or
/// `dribble_for` has passed. The thread returns how many connections were
/// still open at the end.
///
/// # Panics
/// If a connection cannot be opened (a test bug: the server listens).
pub fn dribblers(
    addr: &str,
    count: usize,
    next_byte: impl Fn(usize) -> u8 + Send + 'static,
    dribble_for: Duration,
) -> JoinHandle<usize> {
    let mut open: Vec<TcpStream> = (0..count)
        .map(|_| {
            let s = TcpStream::connect(addr).expect("the server listens");
            s.set_nonblocking(true).expect("a socket option");
            s
        })
        .collect();
    std::thread::spawn(move || {
        let until = Instant::now() + dribble_for;
        let mut at = 0;
        while !open.is_empty() && Instant::now() < until {
            let byte = [next_byte(at)];
            at += 1;
            open.retain_mut(|s| {
                let mut b = [0u8; 64];
                let gone = match s.read(&mut b) {
                    Ok(0) => true,
                    Ok(_) => false,
                    Err(e) => e.kind() != ErrorKind::WouldBlock,
                };
                !gone && s.write(&byte).is_ok()
            });
            std::thread::sleep(DRIBBLE_EVERY);
        }
        open.len()
    })
}
