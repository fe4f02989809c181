//! The viewing end of the live feed: connect to a socket and read messages.

use oomscope_dump::live::{Message, PROTOCOL};
use std::fmt;
use std::io::{self, BufRead, BufReader};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

/// A problem with a feed, naming the socket and the line.
#[derive(Debug)]
pub struct FeedError {
    pub path: PathBuf,
    pub line: u64,
    pub message: String,
}

impl fmt::Display for FeedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.path.display(), self.message)
        } else {
            write!(f, "{} line {}: {}", self.path.display(), self.line, self.message)
        }
    }
}

impl std::error::Error for FeedError {}

/// A connection to a publishing process.
#[derive(Debug)]
pub struct Feed {
    reader: BufReader<UnixStream>,
    path: PathBuf,
    line: u64,
    buf: String,
}

impl Feed {
    pub fn connect(path: &Path) -> Result<Feed, FeedError> {
        let stream = UnixStream::connect(path).map_err(|e| FeedError {
            path: path.to_path_buf(),
            line: 0,
            message: match e.kind() {
                io::ErrorKind::ConnectionRefused => {
                    "nothing listens on this socket (the process has exited)".to_string()
                }
                io::ErrorKind::NotFound => "no such socket (is the process running with the live feed on?)".to_string(),
                _ => format!("cannot connect: {e}"),
            },
        })?;
        Ok(Feed {
            reader: BufReader::with_capacity(1 << 16, stream),
            path: path.to_path_buf(),
            line: 0,
            buf: String::new(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn error(&self, message: String) -> FeedError {
        FeedError { path: self.path.clone(), line: self.line, message }
    }

    /// The next message; `None` when the process closed the feed.
    pub fn next_message(&mut self) -> Result<Option<Message>, FeedError> {
        loop {
            self.buf.clear();
            let n = self.reader.read_line(&mut self.buf).map_err(|e| self.error(format!("cannot read: {e}")))?;
            if n == 0 {
                return Ok(None);
            }
            self.line += 1;
            if !self.buf.ends_with('\n') {
                return Err(self.error("the feed ended in the middle of a message".into()));
            }
            if self.buf.trim().is_empty() {
                continue;
            }
            let msg: Message = serde_json::from_str(&self.buf)
                .map_err(|e| self.error(format!("not an {PROTOCOL} message ({e}); is this an oomscope socket?")))?;
            if let Message::Hello(h) = &msg {
                check_protocol(&h.protocol).map_err(|m| self.error(m))?;
            }
            return Ok(Some(msg));
        }
    }
}

/// Accepts `oomscope-live/1.x`; refuses other majors with what to do.
fn check_protocol(p: &str) -> Result<(), String> {
    let ours = PROTOCOL.rsplit('/').next().unwrap_or("1");
    match p.strip_prefix("oomscope-live/") {
        Some(v) if v.split('.').next() == Some(ours) => Ok(()),
        Some(v) => Err(format!(
            "the process speaks oomscope-live/{v}, this oomscope reads {PROTOCOL}: use the same oomscope version for both"
        )),
        None => Err(format!("not an oomscope feed (protocol \"{p}\")")),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn protocol_versions() {
        assert!(super::check_protocol("oomscope-live/1").is_ok());
        assert!(super::check_protocol("oomscope-live/1.3").is_ok());
        assert!(super::check_protocol("oomscope-live/2").unwrap_err().contains("same oomscope version"));
        assert!(super::check_protocol("http/1").unwrap_err().contains("not an oomscope feed"));
    }
}
