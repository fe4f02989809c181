//! The publishing end of the live feed: a Unix socket in a private directory, and one
//! writer thread per viewer fed by a small queue.
//!
//! Publishing never waits for a viewer: [`Publisher::send`] encodes the message once and
//! appends it to each viewer's queue. A queue holds at most [`STATES_QUEUED`] state frames;
//! when a viewer reads too slowly its oldest frame is dropped and counted (the viewer is
//! told how many it missed). Hellos, steps and OOMs are never dropped; a viewer so stalled
//! that [`QUEUE_LIMIT`] of them pile up is disconnected. Viewers come and go at any time;
//! a new one gets the hello, the latest state and the OOMs so far at once.

use oomscope_format::live::{Hello, Message};
use std::collections::VecDeque;
use std::io;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// State frames a viewer's queue holds before the oldest is dropped.
pub const STATES_QUEUED: usize = 2;
/// Messages a viewer's queue holds before the viewer is disconnected.
pub const QUEUE_LIMIT: usize = 1024;
/// OOM messages kept for viewers that attach later.
const OOMS_KEPT: usize = 8;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One viewer's queue.
struct Outbox {
    queue: Mutex<Queue>,
    ready: Condvar,
    stream: UnixStream,
}

#[derive(Default)]
struct Queue {
    items: VecDeque<(Arc<str>, bool)>,
    /// State frames dropped for this viewer.
    dropped: u64,
    /// No more messages: the writer sends what is queued and stops.
    closing: bool,
    /// The viewer is gone or hopeless: the writer stops at once.
    closed: bool,
}

impl Outbox {
    /// Queues a line; false when the viewer is gone.
    fn push(&self, line: &Arc<str>, droppable: bool, dropped_total: &AtomicU64) -> bool {
        let mut q = lock(&self.queue);
        if q.closed || q.closing {
            return !q.closed;
        }
        if droppable
            && q.items.iter().filter(|i| i.1).count() >= STATES_QUEUED
            && let Some(pos) = q.items.iter().position(|i| i.1)
        {
            q.items.remove(pos);
            q.dropped += 1;
            dropped_total.fetch_add(1, Ordering::Relaxed);
        }
        if q.items.len() >= QUEUE_LIMIT {
            q.closed = true;
            drop(q);
            let _ = self.stream.shutdown(std::net::Shutdown::Both);
            self.ready.notify_all();
            return false;
        }
        q.items.push_back((Arc::clone(line), droppable));
        drop(q);
        self.ready.notify_one();
        true
    }

    /// The writer thread: sends queued lines until the viewer goes or the feed closes.
    fn write_loop(&self) {
        let stream = &self.stream;
        let mut reported = 0;
        loop {
            let (line, dropped) = {
                let mut q = lock(&self.queue);
                while q.items.is_empty() && !q.closed && !q.closing {
                    q = self.ready.wait(q).unwrap_or_else(PoisonError::into_inner);
                }
                if q.closed || (q.closing && q.items.is_empty()) {
                    break;
                }
                let (line, _) = q.items.pop_front().expect("not empty: checked above");
                (line, q.dropped)
            };
            if dropped != reported {
                reported = dropped;
                if send_all(stream, Message::Dropped { frames: dropped }.to_line().as_bytes()).is_err() {
                    break;
                }
            }
            if send_all(stream, line.as_bytes()).is_err() {
                break;
            }
        }
        lock(&self.queue).closed = true;
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}

/// Writes all of `buf` without raising SIGPIPE when the viewer is gone: the library runs
/// inside other programs (Python), and a viewer closing its end must not kill them.
fn send_all(stream: &UnixStream, mut buf: &[u8]) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    while !buf.is_empty() {
        // SAFETY: the pointer and length describe `buf`, which outlives the call.
        let n = unsafe { libc::send(stream.as_raw_fd(), buf.as_ptr().cast(), buf.len(), libc::MSG_NOSIGNAL) };
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        buf = &buf[n as usize..];
    }
    Ok(())
}

struct Shared {
    viewers: Mutex<Vec<(Arc<Outbox>, JoinHandle<()>)>>,
    hello: Mutex<Arc<str>>,
    last_state: Mutex<Option<Arc<str>>>,
    ooms: Mutex<VecDeque<Arc<str>>>,
    stop: AtomicBool,
    dropped: AtomicU64,
    sent: AtomicU64,
}

/// A live feed on a Unix socket. Dropping it says goodbye to the viewers and removes the
/// socket.
pub struct Publisher {
    shared: Arc<Shared>,
    path: PathBuf,
    accept: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher").field("path", &self.path).finish_non_exhaustive()
    }
}

impl Publisher {
    /// Listens on `path`, whose directory must be private (see [`super::private_dir`]).
    /// A socket left there by a process that is gone is replaced; one still served is not.
    pub fn bind(path: &Path, hello: Hello) -> io::Result<Publisher> {
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        super::private_dir(dir)?;
        if path.exists() {
            if UnixStream::connect(path).is_ok() {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("{}: another process publishes on this socket", path.display()),
                ));
            }
            std::fs::remove_file(path).map_err(|e| {
                io::Error::new(e.kind(), format!("{}: cannot replace a stale socket: {e}", path.display()))
            })?;
        }
        let listener = UnixListener::bind(path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: cannot listen: {e}", path.display())))?;
        let shared = Arc::new(Shared {
            viewers: Mutex::new(Vec::new()),
            hello: Mutex::new(Message::Hello(Box::new(hello)).to_line().into()),
            last_state: Mutex::new(None),
            ooms: Mutex::new(VecDeque::new()),
            stop: AtomicBool::new(false),
            dropped: AtomicU64::new(0),
            sent: AtomicU64::new(0),
        });
        let accept = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("oomscope-live-accept".into())
                .spawn(move || accept_loop(&listener, &shared))?
        };
        Ok(Publisher { shared, path: path.to_path_buf(), accept: Some(accept) })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Sends `msg` to every viewer without waiting for any.
    pub fn send(&self, msg: &Message) {
        let line: Arc<str> = msg.to_line().into();
        let droppable = matches!(msg, Message::State(_));
        match msg {
            Message::State(_) => *lock(&self.shared.last_state) = Some(Arc::clone(&line)),
            Message::Oom(_) => {
                let mut ooms = lock(&self.shared.ooms);
                if ooms.len() == OOMS_KEPT {
                    ooms.pop_front();
                }
                ooms.push_back(Arc::clone(&line));
            }
            Message::Hello(_) => *lock(&self.shared.hello) = Arc::clone(&line),
            _ => {}
        }
        self.shared.sent.fetch_add(1, Ordering::Relaxed);
        let mut viewers = lock(&self.shared.viewers);
        viewers.retain(|(outbox, _)| outbox.push(&line, droppable, &self.shared.dropped));
    }

    /// Viewers connected now.
    pub fn viewers(&self) -> usize {
        let mut viewers = lock(&self.shared.viewers);
        viewers.retain(|(o, _)| !lock(&o.queue).closed);
        viewers.len()
    }

    /// State frames dropped so far, over all viewers.
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }
}

fn accept_loop(listener: &UnixListener, shared: &Arc<Shared>) {
    for stream in listener.incoming() {
        if shared.stop.load(Ordering::Acquire) {
            break;
        }
        let Ok(stream) = stream else { continue };
        let Ok(writer) = stream.try_clone() else { continue };
        let outbox = Arc::new(Outbox { queue: Mutex::new(Queue::default()), ready: Condvar::new(), stream: writer });
        // What a viewer needs at once: who we are, the state now, the failures so far.
        {
            let mut q = lock(&outbox.queue);
            q.items.push_back((Arc::clone(&lock(&shared.hello)), false));
            if let Some(state) = lock(&shared.last_state).clone() {
                q.items.push_back((state, true));
            }
            for oom in lock(&shared.ooms).iter() {
                q.items.push_back((Arc::clone(oom), false));
            }
        }
        let writer_box = Arc::clone(&outbox);
        let spawned =
            std::thread::Builder::new().name("oomscope-live-writer".into()).spawn(move || writer_box.write_loop());
        if let Ok(handle) = spawned {
            lock(&shared.viewers).push((outbox, handle));
        }
        drop(stream);
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        self.send(&Message::Bye { reason: "the process stopped publishing".into() });
        self.shared.stop.store(true, Ordering::Release);
        let viewers: Vec<(Arc<Outbox>, JoinHandle<()>)> = std::mem::take(&mut *lock(&self.shared.viewers));
        for (outbox, _) in &viewers {
            lock(&outbox.queue).closing = true;
            outbox.ready.notify_all();
        }
        // Let the writers flush the goodbye, briefly: a stalled viewer must not hold us.
        let deadline = Instant::now() + Duration::from_millis(200);
        while Instant::now() < deadline && viewers.iter().any(|(_, h)| !h.is_finished()) {
            std::thread::sleep(Duration::from_millis(2));
        }
        for (outbox, handle) in viewers {
            lock(&outbox.queue).closed = true;
            outbox.ready.notify_all();
            let _ = outbox.stream.shutdown(std::net::Shutdown::Both);
            let _ = handle.join();
        }
        // Wake the accept loop so it sees `stop`.
        let _ = UnixStream::connect(&self.path);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}
