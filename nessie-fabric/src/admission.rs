//! What a connection that has not authenticated may cost a server: one
//! deadline for its whole handshake ([`Deadline`]), and a place among a
//! bounded number of unauthenticated connections, the oldest of which is
//! evicted to make room for a newcomer ([`Admission`]).
//!
//! A per-read socket timeout is renewed by every byte, so a peer that
//! dribbles bytes could hold a connection (and its thread) for ever; a
//! deadline fixed at accept cannot be stretched. A cap that refuses
//! newcomers lets a flood of such peers keep honest ones out; evicting the
//! oldest instead means an honest newcomer is among the youngest and has a
//! whole deadline to finish, which an honest handshake needs a fraction of.

use std::collections::{HashMap, VecDeque};
use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// A stream whose reads and writes must all end by one instant: each gets
/// the time left as its socket timeout, and none starts once it has
/// passed.
pub(crate) struct Deadline<'a> {
    stream: &'a TcpStream,
    at: Instant,
}

impl<'a> Deadline<'a> {
    pub(crate) fn new(stream: &'a TcpStream, at: Instant) -> Deadline<'a> {
        Deadline { stream, at }
    }

    /// The time left, or `TimedOut` once there is none.
    pub(crate) fn left(&self) -> io::Result<Duration> {
        let left = self.at.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(ErrorKind::TimedOut, "deadline passed"));
        }
        Ok(left)
    }
}

impl Read for Deadline<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.stream.set_read_timeout(Some(self.left()?))?;
        let mut s = self.stream;
        s.read(buf)
    }
}

impl Write for Deadline<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.stream.set_write_timeout(Some(self.left()?))?;
        let mut s = self.stream;
        s.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        let mut s = self.stream;
        s.flush()
    }
}

/// A server's live connections: unauthenticated ones, oldest first, under
/// one cap, and authenticated ones under another. Holds a clone of each
/// stream so it can shut one down (eviction, or the server stopping) and
/// wake the thread that serves it.
#[derive(Debug)]
pub(crate) struct Admission {
    state: Mutex<State>,
    max_unauthenticated: usize,
    max_authenticated: usize,
}

#[derive(Debug, Default)]
struct State {
    next_id: u64,
    /// Oldest first.
    unauthenticated: VecDeque<(u64, TcpStream)>,
    authenticated: HashMap<u64, TcpStream>,
    closed: bool,
}

/// A connection [`Admission::admit`] took in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Admitted {
    /// Names it to [`Admission::authenticate`] and [`Admission::remove`].
    pub(crate) id: u64,
    /// Whether the oldest unauthenticated connection was shut down to make
    /// room for it.
    pub(crate) evicted: bool,
}

fn shut(stream: &TcpStream) {
    // The peer may be gone already; its thread wakes either way.
    let _ = stream.shutdown(Shutdown::Both);
}

impl Admission {
    pub(crate) fn new(max_unauthenticated: usize, max_authenticated: usize) -> Admission {
        Admission {
            state: Mutex::new(State::default()),
            max_unauthenticated: max_unauthenticated.max(1),
            max_authenticated,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every critical section leaves the state consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes in a newly accepted, unauthenticated connection, evicting the
    /// oldest unauthenticated one if they are at their cap. `None` (the
    /// caller closes it): the authenticated connections are at theirs,
    /// the server is stopping, or the stream cannot be cloned.
    pub(crate) fn admit(&self, stream: &TcpStream) -> Option<Admitted> {
        let mut state = self.lock();
        if state.closed || state.authenticated.len() >= self.max_authenticated {
            return None;
        }
        let clone = stream.try_clone().ok()?;
        let evicted = if state.unauthenticated.len() >= self.max_unauthenticated {
            state
                .unauthenticated
                .pop_front()
                .map(|(_, oldest)| shut(&oldest))
                .is_some()
        } else {
            false
        };
        state.next_id += 1;
        let id = state.next_id;
        state.unauthenticated.push_back((id, clone));
        Some(Admitted { id, evicted })
    }

    /// The connection `id` authenticated: it leaves the unauthenticated
    /// ones for the authenticated. `false` (the caller closes it): it was
    /// evicted meanwhile, the authenticated connections are at their cap,
    /// or the server is stopping.
    pub(crate) fn authenticate(&self, id: u64) -> bool {
        let mut state = self.lock();
        let Some(at) = state.unauthenticated.iter().position(|(i, _)| *i == id) else {
            return false;
        };
        let Some((_, stream)) = state.unauthenticated.remove(at) else {
            return false;
        };
        if state.closed || state.authenticated.len() >= self.max_authenticated {
            return false;
        }
        state.authenticated.insert(id, stream);
        true
    }

    /// The connection `id` ended (or is handed over): forget it.
    pub(crate) fn remove(&self, id: u64) {
        let mut state = self.lock();
        state.unauthenticated.retain(|(i, _)| *i != id);
        state.authenticated.remove(&id);
    }

    /// Shuts every connection down and admits no more.
    pub(crate) fn close(&self) {
        let mut state = self.lock();
        state.closed = true;
        for (_, s) in state.unauthenticated.drain(..) {
            shut(&s);
        }
        for (_, s) in state.authenticated.drain() {
            shut(&s);
        }
    }

    /// Unauthenticated and authenticated connections held.
    #[cfg(test)]
    pub(crate) fn counts(&self) -> (usize, usize) {
        let state = self.lock();
        (state.unauthenticated.len(), state.authenticated.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A connected pair on 127.0.0.1: (the accepted end, the peer's end).
    fn pair(listener: &TcpListener) -> (TcpStream, TcpStream) {
        let peer = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        (accepted, peer)
    }

    /// The peer's end sees the connection closed.
    fn closed(peer: &mut TcpStream) -> bool {
        peer.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut b = [0u8; 1];
        matches!(peer.read(&mut b), Ok(0) | Err(_))
    }

    #[test]
    fn the_oldest_unauthenticated_connection_makes_room() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let admission = Admission::new(2, 1);
        let conns: Vec<_> = (0..3).map(|_| pair(&listener)).collect();
        let a = admission.admit(&conns[0].0).unwrap();
        let b = admission.admit(&conns[1].0).unwrap();
        assert!(!a.evicted && !b.evicted);
        let c = admission.admit(&conns[2].0).unwrap();
        assert!(c.evicted);
        assert_eq!(admission.counts(), (2, 0));
        let mut first = conns.into_iter().next().unwrap().1;
        assert!(closed(&mut first), "the oldest was not shut down");
        // The evicted one cannot authenticate; the others can, up to
        // their own cap.
        assert!(!admission.authenticate(a.id));
        assert!(admission.authenticate(b.id));
        assert!(!admission.authenticate(c.id));
        assert_eq!(admission.counts(), (0, 1));
        // With the authenticated connections at their cap, newcomers are
        // refused until one ends.
        let (d, _peer) = pair(&listener);
        assert_eq!(admission.admit(&d), None);
        admission.remove(b.id);
        assert!(admission.admit(&d).is_some());
        admission.close();
        assert_eq!(admission.counts(), (0, 0));
        assert_eq!(admission.admit(&d), None);
    }

    #[test]
    fn a_deadline_is_not_renewed_by_bytes() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let (accepted, mut peer) = pair(&listener);
        let dribbler = std::thread::spawn(move || {
            // One byte every 20 ms, far more often than the deadline.
            for _ in 0..500 {
                if peer.write_all(&[1]).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        let mut d = Deadline::new(&accepted, Instant::now() + Duration::from_millis(300));
        let mut sink = Vec::new();
        let e = d.read_to_end(&mut sink).unwrap_err();
        assert!(
            matches!(e.kind(), ErrorKind::TimedOut | ErrorKind::WouldBlock),
            "{e}"
        );
        assert!(d.left().is_err());
        assert!(!sink.is_empty());
        // Closed: the dribbler's next writes fail.
        drop(accepted);
        dribbler.join().unwrap();
    }
}
