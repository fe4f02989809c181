//! Reading and writing dumps as JSON.

use super::{DUMP_VERSION, Dump};
use serde::Deserialize;
use std::fmt;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Why a dump could not be read or written. Names the file and, for bad content, the
/// line and column, and says what to do.
#[derive(Debug)]
pub enum DumpError {
    Io { path: PathBuf, source: io::Error },
    Parse { path: PathBuf, line: usize, column: usize, problem: String },
    Version { path: PathBuf, found: u32 },
}

impl fmt::Display for DumpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DumpError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            DumpError::Parse { path, line, column, problem } => {
                write!(f, "{}:{line}:{column}: {problem}", path.display())
            }
            DumpError::Version { path, found } => write!(
                f,
                "{}: dump format version {found} is newer than this oomscope reads (version {DUMP_VERSION}); \
                 upgrade oomscope to read it",
                path.display()
            ),
        }
    }
}

impl std::error::Error for DumpError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DumpError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Reads a dump written by [`write_atomic`] (or by another oomscope of the same format).
pub fn read(path: &Path) -> Result<Dump, DumpError> {
    let bytes = std::fs::read(path).map_err(|source| DumpError::Io { path: path.to_path_buf(), source })?;
    parse(path, &bytes)
}

/// Reads a dump found in a directory that others may write to (a job's dump directory):
/// only a regular file is opened, never what a symlink points to, and never a FIFO or a
/// device, whose open or read could block forever ([`open_regular`]).
pub fn read_found(path: &Path) -> Result<Dump, DumpError> {
    let io_error = |source| DumpError::Io { path: path.to_path_buf(), source };
    let mut f = open_regular(path).map_err(io_error)?;
    let mut bytes = Vec::new();
    io::Read::read_to_end(&mut f, &mut bytes).map_err(io_error)?;
    parse(path, &bytes)
}

/// The process a dump found in a directory was taken in (its `process`), without building
/// the rest of it: what tells a run's own dumps from another's.
pub fn read_process(path: &Path) -> Result<Option<crate::ProcessInfo>, DumpError> {
    #[derive(Deserialize)]
    struct ProcessOnly {
        #[serde(default)]
        process: Option<crate::ProcessInfo>,
    }
    let io_error = |source| DumpError::Io { path: path.to_path_buf(), source };
    let f = open_regular(path).map_err(io_error)?;
    let p: ProcessOnly =
        serde_json::from_reader(io::BufReader::with_capacity(1 << 20, f)).map_err(|e| DumpError::Parse {
            path: path.into(),
            line: e.line(),
            column: e.column(),
            problem: strip_position(&e.to_string()),
        })?;
    Ok(p.process)
}

/// Opens `path` for reading when it is a regular file itself: `O_NOFOLLOW` (a symlink is
/// refused, not followed) and `O_NONBLOCK` (a FIFO's open returns at once instead of
/// waiting for a writer), then checked by `fstat` on what was opened, so a file swapped
/// between a listing and the open is judged as it is. Anything else is an error that says
/// what the path is.
pub fn open_regular(path: &Path) -> io::Result<std::fs::File> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => {
                io::Error::new(io::ErrorKind::InvalidInput, "a symbolic link, not a file: not followed")
            }
            _ => e,
        })?;
    let t = f.metadata()?.file_type();
    if t.is_file() {
        return Ok(f);
    }
    let what = if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else {
        "not a regular file"
    };
    Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{what}, not a file: not read")))
}

/// Parses a dump from text; `path` only names it in errors.
pub fn read_str(path: &Path, text: &str) -> Result<Dump, DumpError> {
    parse(path, text.as_bytes())
}

fn parse(path: &Path, bytes: &[u8]) -> Result<Dump, DumpError> {
    // A byte-order mark an editor saved before the JSON is not part of it.
    let bytes = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes);
    #[derive(Deserialize)]
    struct VersionOnly {
        version: u32,
    }
    match serde_json::from_slice::<Dump>(bytes) {
        Ok(dump) if dump.version > DUMP_VERSION => Err(DumpError::Version { path: path.into(), found: dump.version }),
        Ok(dump) => Ok(dump),
        Err(e) => {
            // A newer dump may fail to parse as this version; say so rather than "bad field".
            if let Ok(v) = serde_json::from_slice::<VersionOnly>(bytes)
                && v.version > DUMP_VERSION
            {
                return Err(DumpError::Version { path: path.into(), found: v.version });
            }
            let problem = match e.classify() {
                serde_json::error::Category::Eof if bytes.iter().all(u8::is_ascii_whitespace) => {
                    "the file is empty; expected an oomscope dump (JSON)".to_string()
                }
                serde_json::error::Category::Eof => {
                    format!("the dump ends early (truncated file?): {e}")
                }
                serde_json::error::Category::Syntax => {
                    format!("not JSON, so not an oomscope dump: {e}")
                }
                _ => format!("JSON, but not an oomscope dump: {e}"),
            };
            Err(DumpError::Parse {
                path: path.into(),
                line: e.line(),
                column: e.column(),
                problem: strip_position(&problem),
            })
        }
    }
}

/// serde_json appends " at line L column C"; the error already leads with the position.
fn strip_position(msg: &str) -> String {
    match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_string(),
        None => msg.to_string(),
    }
}

/// Writes a dump as one line of JSON, atomically (temporary file, then rename).
pub fn write_atomic(path: &Path, dump: &Dump) -> Result<(), DumpError> {
    crate::atomic::write_file(path, |w| {
        // serde_json writes token by token; through `&mut dyn Write` each token was a
        // dynamic call (a fifth of writing a 1M-chunk dump). A buffer of a concrete type
        // in between takes them inline and passes the file a megabyte at a time.
        let mut buffered = io::BufWriter::with_capacity(1 << 20, w);
        serde_json::to_writer(&mut buffered, dump).map_err(io::Error::from)?;
        buffered.write_all(b"\n")?;
        buffered.flush()
    })
    .map_err(|source| DumpError::Io { path: path.to_path_buf(), source })
}
