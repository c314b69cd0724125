//! Opening a trace: a file, standard input (`-`) or the bundled trace; gzip is detected by its
//! magic bytes (not the file name), so `trace.log` that is really gzip still works.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver};
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

    /// Opens the trace, decompressing gzip on a thread of its own (so it runs beside the
    /// parsing). `counter` receives the raw bytes read so far.
    pub fn open(&self, counter: Arc<AtomicU64>) -> Result<Box<dyn BufRead>, SimError> {
        let raw: Box<dyn Read + Send> = match self {
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
/// magic bytes — on a thread of its own, which hands the decompressed bytes over in blocks, so
/// that decompressing (as dear as parsing) runs beside it. `name` is for the error message.
pub fn decompressing(raw: Box<dyn Read + Send>, name: &str) -> Result<Box<dyn BufRead>, SimError> {
    let mut buffered = BufReader::with_capacity(1 << 16, raw);
    let head = buffered.fill_buf().map_err(|e| SimError::io(name, e))?;
    if head.starts_with(&[0x1f, 0x8b]) {
        Ok(Box::new(Inflated::spawn(Gzip(MultiGzDecoder::new(
            buffered,
        )))))
    } else {
        Ok(Box::new(buffered))
    }
}

/// Bytes decompressed a block at a time.
const INFLATED_BLOCK: usize = 1 << 18;

/// Blocks decompressed ahead of the reader.
const INFLATED_AHEAD: usize = 8;

/// The reading end of a decompressing thread: its blocks in order, then its error (as
/// [`Gzip`] words it) or the end.
struct Inflated {
    blocks: Receiver<io::Result<Vec<u8>>>,
    block: Vec<u8>,
    pos: usize,
    done: bool,
}

impl Inflated {
    /// Starts decompressing `gzip` on its own thread. The thread stops at the end, at an error
    /// (handed over after every byte before it), or when this end is dropped.
    fn spawn<R: Read + Send + 'static>(mut gzip: R) -> Inflated {
        let (tx, rx) = sync_channel(INFLATED_AHEAD);
        std::thread::spawn(move || loop {
            let mut block = vec![0u8; INFLATED_BLOCK];
            let mut filled = 0;
            let result = loop {
                match gzip.read(&mut block[filled..]) {
                    Ok(0) => break Ok(()),
                    Ok(n) => {
                        filled += n;
                        if filled == block.len() {
                            break Ok(());
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => break Err(e),
                }
            };
            block.truncate(filled);
            let last = filled == 0 || result.is_err() || filled < INFLATED_BLOCK;
            if filled > 0 && tx.send(Ok(block)).is_err() {
                return;
            }
            if let Err(e) = result {
                let _ = tx.send(Err(e));
                return;
            }
            if last {
                return;
            }
        });
        Inflated {
            blocks: rx,
            block: Vec::new(),
            pos: 0,
            done: false,
        }
    }
}

impl Read for Inflated {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let available = self.fill_buf()?;
        let n = available.len().min(buf.len());
        buf[..n].copy_from_slice(&available[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl BufRead for Inflated {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        while self.pos == self.block.len() && !self.done {
            match self.blocks.recv() {
                Ok(Ok(block)) => (self.block, self.pos) = (block, 0),
                Ok(Err(e)) => {
                    self.done = true;
                    return Err(e);
                }
                // The thread ended: everything was read.
                Err(_) => self.done = true,
            }
        }
        Ok(&self.block[self.pos..])
    }

    fn consume(&mut self, amount: usize) {
        self.pos = (self.pos + amount).min(self.block.len());
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

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::write::GzEncoder;
    use std::io::Write;

    #[test]
    fn a_gzip_decompressed_on_its_thread_reads_back_whole_across_blocks() {
        let text: Vec<u8> = (0..300_000u32)
            .flat_map(|i| format!("line {i} {}\n", i * 7919 % 1000).into_bytes())
            .collect();
        assert!(text.len() > 3 * INFLATED_BLOCK);
        let mut gz = GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&text).unwrap();
        let packed = gz.finish().unwrap();
        let mut back = Vec::new();
        decompressing(Box::new(io::Cursor::new(packed.clone())), "t")
            .unwrap()
            .read_to_end(&mut back)
            .unwrap();
        assert_eq!(back, text);
        // Cut short: every byte before the cut arrives, then the error saying so.
        let cut = packed[..packed.len() / 2].to_vec();
        let mut reader = decompressing(Box::new(io::Cursor::new(cut)), "t").unwrap();
        let mut part = Vec::new();
        let err = reader.read_to_end(&mut part).unwrap_err();
        assert!(err.to_string().contains("truncated gzip"), "{err}");
        assert!(part.len() > INFLATED_BLOCK && text.starts_with(&part));
    }
}
