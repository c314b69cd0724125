//! Opening a trace: a file, standard input (`-`) or the bundled trace; gzip is detected by its
//! magic bytes (not the file name), so `trace.log` that is really gzip still works.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use flate2::bufread::MultiGzDecoder;

use crate::error::SimError;

/// Where a trace comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A file on disk (`-` is standard input).
    File(PathBuf),
    /// Standard input, kept in a file so it can be read twice (the charts' second pass); named
    /// `-` as standard input is.
    Spooled(PathBuf),
    /// Bytes in memory (the bundled trace, tests), with a display name.
    Bytes {
        /// What to call it in messages.
        name: String,
        /// The content (may be gzip).
        data: &'static [u8],
    },
}

impl Source {
    /// The name used in messages and reports.
    pub fn name(&self) -> String {
        match self {
            Source::File(p) => p.display().to_string(),
            Source::Spooled(_) => "-".to_string(),
            Source::Bytes { name, .. } => name.clone(),
        }
    }

    /// The raw size in bytes, if known (for the progress bar).
    pub fn size(&self) -> Option<u64> {
        match self {
            Source::File(p) if p == Path::new("-") => None,
            Source::File(p) | Source::Spooled(p) => std::fs::metadata(p).ok().map(|m| m.len()),
            Source::Bytes { data, .. } => Some(data.len() as u64),
        }
    }

    /// Opens the trace, decompressing gzip. `counter` receives the raw bytes read so far.
    pub fn open(&self, counter: Arc<AtomicU64>) -> Result<Box<dyn BufRead>, SimError> {
        let raw: Box<dyn Read> = match self {
            Source::File(p) if p == Path::new("-") => Box::new(io::stdin()),
            Source::File(p) | Source::Spooled(p) => {
                Box::new(File::open(p).map_err(|e| SimError::io(p, e))?)
            }
            Source::Bytes { data, .. } => Box::new(*data),
        };
        decompressing(
            Box::new(Counting {
                inner: raw,
                counter,
            }),
            &self.name(),
        )
    }
}

/// Buffers raw trace bytes for reading lines, decompressing them when they start with gzip's
/// magic bytes. `name` is for the error message.
pub fn decompressing(raw: Box<dyn Read>, name: &str) -> Result<Box<dyn BufRead>, SimError> {
    let mut buffered = BufReader::with_capacity(1 << 16, raw);
    let head = buffered.fill_buf().map_err(|e| SimError::io(name, e))?;
    if head.starts_with(&[0x1f, 0x8b]) {
        Ok(Box::new(BufReader::with_capacity(
            1 << 16,
            Gzip(MultiGzDecoder::new(buffered)),
        )))
    } else {
        Ok(Box::new(buffered))
    }
}

/// Counts raw bytes as they are read, for progress on compressed input.
struct Counting<R> {
    inner: R,
    counter: Arc<AtomicU64>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.counter.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// A gzip decoder whose errors say what happened to the file: flate2 reports a stream that stops
/// early as a bare "unexpected end of file".
struct Gzip<R>(MultiGzDecoder<R>);

impl<R: BufRead> Read for Gzip<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf).map_err(|e| match e.kind() {
            io::ErrorKind::UnexpectedEof => io::Error::new(
                e.kind(),
                "truncated gzip: the file ends inside compressed data (cut short, or still \
                 being written); `gzip -dc FILE | sim replay -` replays what it holds",
            ),
            io::ErrorKind::Interrupted => e,
            _ => io::Error::new(e.kind(), format!("not a valid gzip stream: {e}")),
        })
    }
}
