//! The node protocol: JSON lines a node process prints on stdout
//! ([`NodeEvent`]) and one-word commands it reads on stdin
//! ([`NodeCommand`]), shared by the harness side ([`crate::cluster`]) and
//! the node side ([`crate::node`]).

use crate::measure::timeline::{NodeTimeline, RestoreReport};
use crate::measure::{NodeReport, PreloadReport};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// A line a node process prints on stdout.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "lowercase")]
pub enum NodeEvent {
    /// The node is up and attached to its peers.
    Ready {
        /// Node id.
        node: usize,
    },
    /// The node wrote its share of the keys.
    Preloaded {
        /// Node id.
        node: usize,
        /// How it went.
        preload: PreloadReport,
    },
    /// Operations completed so far in the run phase (warm-up included).
    Progress {
        /// Node id.
        node: usize,
        /// Operations.
        ops: u64,
    },
    /// The node's measurements.
    Report {
        /// Everything it measured.
        report: Box<NodeReport>,
    },
    /// The node's measurements are in a file (a launched node: launchers
    /// may tear a long line apart; see [`crate::launcher`]).
    #[serde(rename = "report_file")]
    ReportFile {
        /// Node id.
        node: usize,
        /// The JSON file holding its [`NodeReport`].
        file: PathBuf,
    },
    /// A replacement (`node --rejoin`) restored its copies and is active
    /// (it says `ready` next).
    Restored {
        /// What the restore did and when.
        restore: RestoreReport,
    },
    /// A run measured as a time series: the node's buckets, once it
    /// stopped (`stop`), or so far (`flush`).
    Timeline {
        /// Everything it measured.
        timeline: Box<NodeTimeline>,
    },
    /// The node failed.
    Error {
        /// Node id.
        node: usize,
        /// Why.
        message: String,
    },
}

/// A command the harness sends a node process on stdin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeCommand {
    /// Write your share of the keys.
    Preload,
    /// Run the warm-up and measured phase.
    Run,
    /// Drop the node and exit.
    Exit,
    /// End a run measured as a time series and report it.
    Stop,
    /// Report the buckets of a run measured as a time series so far, and
    /// go on (the harness asks a node it is about to kill).
    Flush,
}

impl NodeCommand {
    /// The word on the wire.
    #[must_use]
    pub fn word(self) -> &'static str {
        match self {
            NodeCommand::Preload => "preload",
            NodeCommand::Run => "run",
            NodeCommand::Exit => "exit",
            NodeCommand::Stop => "stop",
            NodeCommand::Flush => "flush",
        }
    }

    /// Parses a word.
    #[must_use]
    pub fn parse(word: &str) -> Option<Self> {
        match word.trim() {
            "preload" => Some(NodeCommand::Preload),
            "run" => Some(NodeCommand::Run),
            "exit" => Some(NodeCommand::Exit),
            "stop" => Some(NodeCommand::Stop),
            "flush" => Some(NodeCommand::Flush),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_round_trip() {
        for c in [
            NodeCommand::Preload,
            NodeCommand::Run,
            NodeCommand::Exit,
            NodeCommand::Stop,
            NodeCommand::Flush,
        ] {
            assert_eq!(NodeCommand::parse(c.word()), Some(c));
        }
        assert_eq!(NodeCommand::parse("bogus"), None);
    }

    #[test]
    fn events_are_json_lines() {
        let line = serde_json::to_string(&NodeEvent::Progress { node: 2, ops: 7 }).unwrap();
        assert_eq!(line, r#"{"event":"progress","node":2,"ops":7}"#);
        let file = NodeEvent::ReportFile {
            node: 1,
            file: "/r/node-1.report.json".into(),
        };
        let line = serde_json::to_string(&file).unwrap();
        assert_eq!(
            line,
            r#"{"event":"report_file","node":1,"file":"/r/node-1.report.json"}"#
        );
    }
}
