//! Power samples over time and their integral (trapezoid rule).

use serde::Serialize;

/// One power reading: seconds since the start of the trace, and Watts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PowerSample {
    /// Seconds since the trace's origin (for the samplers: `start`).
    pub t_s: f64,
    /// The reading, in Watts.
    pub watts: f64,
}

/// Power readings in time order, integrated to energy with the trapezoid
/// rule: between two readings power is taken to change linearly, so
/// `E = Σ (t[i+1] − t[i]) · (P[i] + P[i+1]) / 2`.
///
/// The integral covers the span from the first to the last reading; nothing
/// is extrapolated beyond it ([`covered_s`](Self::covered_s) says how long
/// that is). A gap left by a failed reading is bridged by the straight line
/// between its neighbours.
///
/// ```
/// use power_ipmi::PowerTrace;
///
/// let mut trace = PowerTrace::new();
/// trace.push(0.0, 100.0);
/// trace.push(1.0, 100.0);
/// trace.push(2.0, 200.0);
/// assert_eq!(trace.joules(), 100.0 + 150.0);
/// assert_eq!(trace.mean_watts(), Some(125.0));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PowerTrace {
    samples: Vec<PowerSample>,
}

impl PowerTrace {
    /// An empty trace.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a reading. A reading earlier than the last one is dropped
    /// (clocks used here are monotonic, so this only guards bad logs).
    pub fn push(&mut self, t_s: f64, watts: f64) {
        if !t_s.is_finite() || !watts.is_finite() {
            return;
        }
        if self.samples.last().is_some_and(|last| t_s < last.t_s) {
            return;
        }
        self.samples.push(PowerSample { t_s, watts });
    }

    /// The readings, in time order.
    pub fn samples(&self) -> &[PowerSample] {
        &self.samples
    }

    /// How many readings the trace holds.
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// Whether the trace holds no reading.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// Energy in Joules between the first and the last reading (0 with
    /// fewer than two readings).
    pub fn joules(&self) -> f64 {
        self.samples
            .windows(2)
            .map(|w| (w[1].t_s - w[0].t_s) * (w[0].watts + w[1].watts) / 2.0)
            .sum()
    }

    /// Seconds from the first to the last reading.
    pub fn covered_s(&self) -> f64 {
        match (self.samples.first(), self.samples.last()) {
            (Some(a), Some(b)) => b.t_s - a.t_s,
            _ => 0.0,
        }
    }

    /// Time-weighted mean power: [`joules`](Self::joules) over
    /// [`covered_s`](Self::covered_s); the reading itself when the trace has
    /// one reading (or several at the same instant); `None` when empty.
    pub fn mean_watts(&self) -> Option<f64> {
        let covered = self.covered_s();
        if covered > 0.0 {
            Some(self.joules() / covered)
        } else if self.samples.is_empty() {
            None
        } else {
            let n = self.samples.len() as f64;
            Some(self.samples.iter().map(|s| s.watts).sum::<f64>() / n)
        }
    }

    /// The lowest reading.
    pub fn min_watts(&self) -> Option<f64> {
        self.samples.iter().map(|s| s.watts).reduce(f64::min)
    }

    /// The highest reading.
    pub fn max_watts(&self) -> Option<f64> {
        self.samples.iter().map(|s| s.watts).reduce(f64::max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trapezoid_of_a_ramp_is_exact() {
        let mut t = PowerTrace::new();
        for i in 0..=10 {
            t.push(f64::from(i), 10.0 * f64::from(i));
        }
        // ∫0..10 10·t dt = 500.
        assert!((t.joules() - 500.0).abs() < 1e-9);
        assert_eq!(t.covered_s(), 10.0);
        assert_eq!(t.min_watts(), Some(0.0));
        assert_eq!(t.max_watts(), Some(100.0));
    }

    #[test]
    fn uneven_spacing_and_gaps() {
        let mut t = PowerTrace::new();
        t.push(0.0, 50.0);
        t.push(0.5, 50.0);
        t.push(3.0, 50.0); // a gap: bridged
        assert!((t.joules() - 150.0).abs() < 1e-9);
        assert_eq!(t.mean_watts(), Some(50.0));
    }

    #[test]
    fn degenerate_traces() {
        let mut t = PowerTrace::new();
        assert_eq!(t.joules(), 0.0);
        assert_eq!(t.mean_watts(), None);
        t.push(1.0, 80.0);
        assert_eq!(t.joules(), 0.0);
        assert_eq!(t.mean_watts(), Some(80.0));
        t.push(0.5, 10.0); // backwards: dropped
        t.push(2.0, f64::NAN); // not a number: dropped
        assert_eq!(t.len(), 1);
    }
}
