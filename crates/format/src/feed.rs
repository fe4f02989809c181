//! What the processes `oomscope run` starts tell it on the file descriptor in
//! `OOMSCOPE_FEED_FD`: one JSON object a line. The Python hook of a TensorFlow or JAX
//! program sends the log level the program asked for and memory samples for the live view
//! (the framework's allocator is its own; oomscope reads its OOM report from stderr);
//! oomscope's own allocator sends its count of OOMs at each one, so that the run can say
//! how many there were even when the process ends without saying it (`os._exit`, a kill).
//!
//! ```text
//! {"min_log_level":2}
//! {"framework": "tensorflow", "device": "GPU:0", "current": 123, "peak": 456, "limit": 0}
//! {"pid": 4242, "ooms": 16, "dumps": 5, "said": false}
//! {"pid": 4242, "variables": [{"name": "sequential/dense/kernel", "bytes": 128000, "kind": "weight"}]}
//! ```

use serde::{Deserialize, Serialize};

/// One line of the feed.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum FeedLine {
    /// The TF log level the program asked for (`TF_CPP_MIN_LOG_LEVEL`), sent before the
    /// framework loads: `oomscope run` hides what TF would have hidden.
    LogLevel {
        min_log_level: u8,
    },
    Sample(FrameworkSample),
    Ooms(OomCount),
    Variables(Variables),
}

/// A TensorFlow program's variables, as its hook lists them while Keras trains (the model's
/// weights, and the optimizer's slots once it made them): TF's allocator log names no chunk,
/// and their sizes find theirs ([`Variables`] replace the ones the process sent before).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Variables {
    pub pid: u32,
    pub variables: Vec<Variable>,
}

/// One variable: its name (`sequential/dense/kernel`, `adam/sequential_dense_kernel_momentum`),
/// its bytes (elements × element size) and what it is (`weight` or `optimizer`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Variable {
    pub name: String,
    pub bytes: u64,
    pub kind: crate::Kind,
}

/// A process's OOMs so far, and the dumps written of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OomCount {
    pub pid: u32,
    pub ooms: u64,
    pub dumps: u64,
    /// The process said the total itself, at its normal exit.
    #[serde(default)]
    pub said: bool,
}

impl OomCount {
    /// As a line of the feed.
    pub fn line(&self) -> String {
        let mut s = serde_json::to_string(self).unwrap_or_default();
        s.push('\n');
        s
    }
}

/// What the framework says of one device's memory.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct FrameworkSample {
    /// `tensorflow` or `jax`.
    #[serde(default)]
    pub framework: String,
    /// The framework's name for the device: `GPU:0`.
    pub device: String,
    /// Bytes in use now.
    pub current: u64,
    /// The peak so far (missing: `current`).
    #[serde(default)]
    pub peak: Option<u64>,
    /// The framework's limit (0: not known).
    #[serde(default)]
    pub limit: u64,
}

impl FeedLine {
    /// A line of the feed; `None` for one that is not (the feed is best effort: a line the
    /// hook garbled is dropped, not an error).
    pub fn parse(line: &str) -> Option<FeedLine> {
        serde_json::from_str(line).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hooks_lines_are_read() {
        assert_eq!(FeedLine::parse("{\"min_log_level\":2}"), Some(FeedLine::LogLevel { min_log_level: 2 }));
        let s = FeedLine::parse(r#"{"framework": "jax", "device": "GPU:1", "current": 5, "peak": 9, "limit": 16}"#);
        let Some(FeedLine::Sample(s)) = s else { panic!("{s:?}") };
        assert_eq!((s.device.as_str(), s.current, s.peak, s.limit), ("GPU:1", 5, Some(9), 16));
        let Some(FeedLine::Sample(s)) = FeedLine::parse(r#"{"device": "GPU:0", "current": 5}"#) else { panic!() };
        assert_eq!((s.peak, s.limit), (None, 0));
        let v = FeedLine::parse(r#"{"pid": 3, "variables": [{"name": "adam/m", "bytes": 8, "kind": "optimizer"}]}"#);
        let Some(FeedLine::Variables(v)) = v else { panic!("{v:?}") };
        assert_eq!((v.pid, v.variables[0].bytes, v.variables[0].kind), (3, 8, crate::Kind::Optimizer));
        let c = OomCount { pid: 7, ooms: 16, dumps: 5, said: false };
        assert_eq!(FeedLine::parse(c.line().trim_end()), Some(FeedLine::Ooms(c)));
        for bad in
            ["", "{}", "{\"device\": 3, \"current\": 1}", "{\"current\": 1}", "not json", "{\"min_log_level\": -1}"]
        {
            assert_eq!(FeedLine::parse(bad), None, "{bad}");
        }
    }
}
