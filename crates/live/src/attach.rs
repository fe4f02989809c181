//! The viewing end of the live feed: connect to a socket and read messages.

use oomscope_format::live::{Message, PROTOCOL, SPANS_SENT, State};
use std::fmt;
use std::io::{self, BufRead, BufReader};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

/// The longest message a viewer reads (an OOM's dump with a large history is the longest
/// an allocator sends): a publisher that never ends its line is cut off here.
pub const MAX_LINE: usize = 256 << 20;
/// Regions in a state frame: one per device allocation, as many as a fragmented caching
/// allocator holds, with room to spare.
pub const MAX_REGIONS: usize = 200_000;
/// Names (ops, shapes, stacks) a state frame may introduce.
pub const MAX_NAMES: usize = 1_000_000;

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
    /// Connects to a publisher's socket, after the checks the publisher makes on its own
    /// side: the socket's directory is this user's and private, the socket is this user's,
    /// and so is the process that listens on it.
    pub fn connect(path: &Path) -> Result<Feed, FeedError> {
        let refuse = |message: String| FeedError { path: path.to_path_buf(), line: 0, message };
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        super::check_private_dir(dir).map_err(|e| refuse(format!("not connecting: {e}")))?;
        match std::fs::symlink_metadata(path) {
            Ok(m) if !m.file_type().is_socket() => {
                return Err(refuse("not a socket (give a socket, a directory of sockets, or a pid)".into()));
            }
            Ok(m) if m.uid() != super::uid() => {
                return Err(refuse(format!("not connecting: the socket belongs to another user (uid {})", m.uid())));
            }
            _ => {}
        }
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
        match peer_uid(&stream) {
            Some(uid) if uid == super::uid() => {}
            Some(uid) => {
                return Err(refuse(format!(
                    "not connecting: the process on this socket is another user's (uid {uid})"
                )));
            }
            None => return Err(refuse("not connecting: cannot tell whose process listens on this socket".into())),
        }
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
            let n = read_line_capped(&mut self.reader, &mut self.buf, MAX_LINE).map_err(|e| {
                self.line += 1;
                self.error(e.0)
            })?;
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
            match &msg {
                Message::Hello(h) => check_protocol(&h.protocol).map_err(|m| self.error(m.0))?,
                Message::State(s) => check_state(s).map_err(|m| self.error(m.0))?,
                _ => {}
            }
            // The line's buffer is not kept at the size of the largest message.
            if self.buf.capacity() > 1 << 20 {
                self.buf = String::new();
            }
            return Ok(Some(msg));
        }
    }
}

/// Reads up to and including the next newline into `buf`, refusing a line past `cap` bytes.
/// Returns the bytes read (0 at the end of the feed).
fn read_line_capped(r: &mut impl BufRead, buf: &mut String, cap: usize) -> Result<usize, oomscope_base::Problem> {
    let mut bytes = std::mem::take(buf).into_bytes();
    loop {
        let chunk = match r.fill_buf() {
            Ok(c) => c,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(oomscope_base::problem!("cannot read: {e}")),
        };
        if chunk.is_empty() {
            break;
        }
        let (take, done) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        if bytes.len() + take > cap {
            return Err(oomscope_base::problem!(
                "a message longer than {} MiB: not an oomscope feed, or a damaged one; not read further",
                cap >> 20
            ));
        }
        bytes.extend_from_slice(&chunk[..take]);
        r.consume(take);
        if done {
            break;
        }
    }
    let n = bytes.len();
    *buf = String::from_utf8(bytes).map_err(|_| "a message is not UTF-8: not an oomscope feed".to_string())?;
    Ok(n)
}

/// A state frame within what an allocator sends: its spans merged past [`SPANS_SENT`], one
/// region per device allocation.
fn check_state(s: &State) -> Result<(), oomscope_base::Problem> {
    let spans: usize = s.regions.iter().map(|r| r.spans.len()).sum();
    let names = s.ops.len() + s.shapes.len() + s.stacks.len();
    if s.regions.len() > MAX_REGIONS || spans > SPANS_SENT * 2 + s.regions.len() || names > MAX_NAMES {
        return Err(oomscope_base::problem!(
            "a state frame with {} regions, {spans} spans and {names} names is larger than any allocator sends; \
             not an oomscope feed, or a damaged one",
            s.regions.len()
        ));
    }
    Ok(())
}

/// The user id of the process at the other end of `stream` (Linux's SO_PEERCRED).
fn peer_uid(stream: &UnixStream) -> Option<u32> {
    use std::os::fd::AsRawFd;
    let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid for writes and `len` is `cred`'s size.
    let r = unsafe {
        libc::getsockopt(stream.as_raw_fd(), libc::SOL_SOCKET, libc::SO_PEERCRED, (&raw mut cred).cast(), &raw mut len)
    };
    (r == 0).then_some(cred.uid)
}

/// Accepts `oomscope-live/1.x`; refuses other majors with what to do.
fn check_protocol(p: &str) -> Result<(), oomscope_base::Problem> {
    let ours = PROTOCOL.rsplit('/').next().unwrap_or("1");
    match p.strip_prefix("oomscope-live/") {
        Some(v) if v.split('.').next() == Some(ours) => Ok(()),
        Some(v) => Err(oomscope_base::problem!(
            "the process speaks oomscope-live/{v}, this oomscope reads {PROTOCOL}: use the same oomscope version for both"
        )),
        None => Err(oomscope_base::problem!("not an oomscope feed (protocol \"{p}\")")),
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
