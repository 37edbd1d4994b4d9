//! Hostile peers for the tests of servers that must not be held hostage:
//! connections that never prove the secret and send their bytes slowly;
//! and a relay that falls silent, as a host does that is cut off.

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

/// A TCP relay to a target address that can fall silent: while silent it
/// swallows what either side sends and answers nothing, keeping both
/// connections open, as a host does that lost power or was cut off (no
/// reset ever comes). Its threads live as long as the test process.
#[derive(Debug)]
pub struct Relay {
    /// The address to connect to instead of the target.
    pub addr: String,
    silent: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Relay {
    /// A relay to `target`, forwarding until [`Relay::go_silent`].
    ///
    /// # Panics
    /// If no loopback port can be bound (a test machine without loopback).
    #[must_use]
    pub fn to(target: String) -> Relay {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let addr = listener.local_addr().expect("a bound address").to_string();
        let silent = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&silent);
        std::thread::spawn(move || {
            for inbound in listener.incoming() {
                let Ok(inbound) = inbound else { return };
                let Ok(outbound) = TcpStream::connect(&target) else {
                    return;
                };
                let (Ok(in2), Ok(out2)) = (inbound.try_clone(), outbound.try_clone()) else {
                    return;
                };
                for (mut from, mut to) in [(in2, out2), (outbound, inbound)] {
                    let flag = Arc::clone(&flag);
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 16 << 10];
                        while let Ok(n @ 1..) = from.read(&mut buf) {
                            if !flag.load(Ordering::SeqCst) && to.write_all(&buf[..n]).is_err() {
                                return;
                            }
                        }
                    });
                }
            }
        });
        Relay { addr, silent }
    }

    /// Falls silent (`true`) or forwards again (`false`).
    pub fn go_silent(&self, silent: bool) {
        self.silent
            .store(silent, std::sync::atomic::Ordering::SeqCst);
    }
}
