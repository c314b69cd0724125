//! `TraceReader`: lines in, ordered events out — format detection, the chosen identifier, bad-line
//! accounting (`--strict` stops at the first), interning and the reorder buffer, all streaming.

use std::io::BufRead;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use super::clf::ClfParser;
use super::csv::CsvParser;
use super::csv_request::CsvRequestParser;
use super::edgelimit::EdgelimitParser;
use super::format::{Format, Key, LineProblem, LineResult, RequestOptions};
use super::haproxy::HaproxyParser;
use super::lines::{read_line, Line, MAX_LINE_BYTES};
use super::logpush::LogpushParser;
use super::reorder::{Reorder, ReorderStats};
use super::request::Request;
use crate::error::SimError;
use crate::event::{Event, Interner, NO_DURATION};
use crate::input::Source;
use crate::regions::Regions;

/// How many bad lines are kept verbatim for the report.
const BAD_SAMPLES: usize = 5;

/// How to read a trace.
#[derive(Debug, Clone)]
pub struct ReadOptions {
    /// The format, or `None` to guess it from the first line.
    pub format: Option<Format>,
    /// Which field identifies the client.
    pub key: Key,
    /// Fail on the first bad line instead of counting it.
    pub strict: bool,
    /// How far back in time (ms) a line may arrive and still be put in order.
    pub reorder_window_ms: u64,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            format: None,
            key: Key::Ip,
            strict: false,
            reorder_window_ms: 60_000,
        }
    }
}

/// One bad line, for the report.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BadLine {
    /// 1-based line number.
    pub line: u64,
    /// The field at fault.
    pub field: &'static str,
    /// What is wrong.
    pub problem: String,
}

/// What reading the trace found.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ReadStats {
    /// The trace's name.
    pub name: String,
    /// The format used.
    pub format: Option<Format>,
    /// The identifier.
    pub key: String,
    /// Lines read (including blank lines and headers).
    pub lines: u64,
    /// Events produced.
    pub events: u64,
    /// Lines skipped as bad.
    pub bad_lines: u64,
    /// The first few bad lines.
    pub bad_samples: Vec<BadLine>,
    /// What the reorder buffer did.
    pub reorder: ReorderStats,
    /// Distinct clients.
    pub clients: usize,
    /// The earliest and latest event times (UTC epoch ms).
    pub first_ms: Option<u64>,
    /// The latest event time.
    pub last_ms: Option<u64>,
}

enum Parser {
    Clf(ClfParser),
    Haproxy(HaproxyParser),
    Logpush(LogpushParser),
    Csv(CsvParser),
    /// Request mode (`--config`): whole requests, not one identifier.
    Requests(RequestParser),
}

/// Request mode's parser per format.
enum RequestParser {
    Clf(ClfParser),
    Haproxy(HaproxyParser),
    Logpush(LogpushParser),
    Csv(CsvRequestParser),
    Edgelimit(EdgelimitParser),
}

impl RequestParser {
    fn new(format: Format) -> RequestParser {
        match format {
            Format::Clf => RequestParser::Clf(ClfParser::new(&Key::Ip).expect("ip is a CLF key")),
            Format::Haproxy => {
                RequestParser::Haproxy(HaproxyParser::new(&Key::Ip).expect("ip is a HAProxy key"))
            }
            Format::Logpush => RequestParser::Logpush(LogpushParser::new(&Key::Ip)),
            Format::Csv => RequestParser::Csv(CsvRequestParser::new()),
            Format::Edgelimit => RequestParser::Edgelimit(EdgelimitParser::new()),
        }
    }

    fn parse(
        &mut self,
        line: &[u8],
        out: &mut Request,
        options: &RequestOptions,
    ) -> Result<bool, LineProblem> {
        match self {
            RequestParser::Clf(p) => p.parse_request(line, out, options),
            RequestParser::Haproxy(p) => p.parse_request(line, out, options),
            RequestParser::Logpush(p) => p.parse_request(line, out, options),
            RequestParser::Csv(p) => p.parse_request(line, out, options),
            RequestParser::Edgelimit(p) => p.parse_request(line, out),
        }
    }
}

impl Parser {
    fn new(format: Format, key: &Key) -> Result<Parser, SimError> {
        Ok(match format {
            Format::Clf => Parser::Clf(ClfParser::new(key)?),
            Format::Haproxy => Parser::Haproxy(HaproxyParser::new(key)?),
            Format::Logpush => Parser::Logpush(LogpushParser::new(key)),
            Format::Csv => Parser::Csv(CsvParser::new(key)),
            Format::Edgelimit => {
                return Err(SimError::Usage(
                    "--format edgelimit holds the Worker's decisions: replay it through a \
                     configuration with --config FILE"
                        .into(),
                ))
            }
        })
    }

    fn parse<'a>(&mut self, line: &'a [u8]) -> LineResult<'a> {
        match self {
            Parser::Clf(p) => p.parse(line),
            Parser::Haproxy(p) => p.parse(line),
            Parser::Logpush(p) => p.parse(line),
            Parser::Csv(p) => p.parse(line),
            Parser::Requests(_) => Ok(None),
        }
    }
}

/// Request mode's state: the requests waiting in the reorder buffer, by slot (the events' ids).
#[derive(Debug, Default)]
struct Requests {
    options: RequestOptions,
    slots: Vec<Request>,
    free: Vec<u32>,
    /// Emptied requests whose buffers are reused.
    spare: Vec<Request>,
    /// The configuration's regions, placing each request as it is read.
    regions: Option<Regions>,
}

/// Streams a trace as ordered events. Iterate it, then read [`TraceReader::stats`] and
/// [`TraceReader::interner`]. Errors: I/O, `--strict` bad lines, and an empty trace.
pub struct TraceReader {
    input: Box<dyn BufRead>,
    name: String,
    options: ReadOptions,
    parser: Option<Parser>,
    buf: Vec<u8>,
    /// Events parsed so far (some may still wait in the reorder buffer).
    parsed: u64,
    interner: Interner,
    reorder: Reorder,
    stats: ReadStats,
    done: bool,
    requests: Option<Requests>,
}

impl std::fmt::Debug for TraceReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceReader")
            .field("name", &self.name)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl TraceReader {
    /// Opens `source` for reading. `progress` receives the raw bytes read.
    pub fn open(
        source: &Source,
        options: ReadOptions,
        progress: Arc<AtomicU64>,
    ) -> Result<TraceReader, SimError> {
        let input = source.open(progress)?;
        Ok(TraceReader::from_reader(input, source.name(), options))
    }

    /// Reads from any buffered reader (already decompressed).
    pub fn from_reader(input: Box<dyn BufRead>, name: String, options: ReadOptions) -> TraceReader {
        TraceReader {
            input,
            stats: ReadStats {
                name: name.clone(),
                key: options.key.to_string(),
                ..ReadStats::default()
            },
            name,
            reorder: Reorder::new(options.reorder_window_ms),
            options,
            parser: None,
            buf: Vec::with_capacity(1024),
            parsed: 0,
            interner: Interner::new(),
            done: false,
            requests: None,
        }
    }

    /// Opens `source` in request mode (`--config`): each line becomes the whole request the
    /// Worker would have seen, read with [`TraceReader::next_request`]; `options.key` is unused.
    pub fn open_requests(
        source: &Source,
        options: ReadOptions,
        request: RequestOptions,
        progress: Arc<AtomicU64>,
    ) -> Result<TraceReader, SimError> {
        let input = source.open(progress)?;
        Ok(TraceReader::requests_from_reader(
            input,
            source.name(),
            options,
            request,
        ))
    }

    /// Request mode over any buffered reader (already decompressed); see
    /// [`TraceReader::open_requests`].
    pub fn requests_from_reader(
        input: Box<dyn BufRead>,
        name: String,
        options: ReadOptions,
        request: RequestOptions,
    ) -> TraceReader {
        let mut reader = TraceReader::from_reader(input, name, options);
        reader.stats.key = "per limit".into();
        reader.requests = Some(Requests {
            options: request,
            ..Requests::default()
        });
        reader
    }

    /// Places each request in one of `regions` as it is read ([`Regions::place`]): its
    /// [`Request::region`]. A region name the configuration does not have stops the reading
    /// with the file, line and field, `--strict` or not: it is a mismatch between trace and
    /// configuration, not a damaged line. Request mode only.
    pub fn set_regions(&mut self, regions: Regions) {
        if let Some(requests) = self.requests.as_mut() {
            requests.regions = Some(regions);
        }
    }

    /// The regions placing requests, with what they placed so far.
    pub fn regions(&self) -> Option<&Regions> {
        self.requests.as_ref()?.regions.as_ref()
    }

    /// The next request in time order (request mode only; `None` otherwise and at the end).
    /// Hand it back with [`TraceReader::recycle`] to reuse its buffers.
    pub fn next_request(&mut self) -> Option<Result<Request, SimError>> {
        self.requests.as_ref()?;
        let ev = match self.next()? {
            Ok(ev) => ev,
            Err(e) => return Some(Err(e)),
        };
        let requests = self.requests.as_mut()?;
        let mut request = std::mem::take(&mut requests.slots[ev.client as usize]);
        requests.free.push(ev.client);
        // The reorder buffer clamps an event that came too late; the request says so too.
        request.time_ms = ev.time_ms;
        Some(Ok(request))
    }

    /// Returns a request's buffers for the next one.
    pub fn recycle(&mut self, mut request: Request) {
        if let Some(requests) = self.requests.as_mut() {
            request.clear();
            requests.spare.push(request);
        }
    }

    /// What was read so far (complete once the iterator is exhausted).
    pub fn stats(&self) -> ReadStats {
        let mut s = self.stats.clone();
        s.reorder = self.reorder.stats();
        s.clients = self.interner.len();
        s
    }

    /// Client names by id.
    pub fn interner(&self) -> &Interner {
        &self.interner
    }

    /// Gives up the interner (client names by id) once reading is done.
    pub fn into_interner(self) -> Interner {
        self.interner
    }

    /// Reads lines until one yields an event (pushed into the reorder buffer), or the input ends.
    /// Returns `false` at the end of the input.
    fn read_one(&mut self) -> Result<bool, SimError> {
        loop {
            let read =
                read_line(&mut *self.input, &mut self.buf).map_err(|cause| SimError::Read {
                    file: self.name.clone(),
                    lines: self.stats.lines,
                    events: self.parsed,
                    cause,
                })?;
            let Some(read) = read else {
                return Ok(false);
            };
            self.stats.lines += 1;
            let problem = match (read, memchr::memchr(0, &self.buf)) {
                (Line::TooLong(bytes), _) => LineProblem::new(
                    "line",
                    format!("{bytes} bytes long, more than the {MAX_LINE_BYTES} a line may have"),
                ),
                (Line::Whole, Some(at)) => LineProblem::new(
                    "line",
                    format!(
                        "a NUL byte at column {}: binary data, not a log line (a log rotated \
                         under its writer leaves runs of NULs)",
                        at + 1
                    ),
                ),
                (Line::Whole, None) => match self.parse_line()? {
                    Ok(true) => return Ok(true),
                    Ok(false) => continue,
                    Err(problem) => problem,
                },
            };
            self.bad_line(problem)?;
        }
    }

    /// Parses the line in `buf`: `Ok(true)` if it gave an event, `Ok(false)` for a blank line or
    /// a header; the inner error is a bad line, the outer one a usage error (the key does not
    /// fit the format, too many clients).
    fn parse_line(&mut self) -> Result<Result<bool, LineProblem>, SimError> {
        let line = &self.buf[..];
        if self.parser.is_none() {
            if line.trim_ascii().is_empty() {
                return Ok(Ok(false));
            }
            let format = self.options.format.unwrap_or_else(|| Format::sniff(line));
            self.stats.format = Some(format);
            self.parser = Some(match self.requests {
                Some(_) => Parser::Requests(RequestParser::new(format)),
                None => Parser::new(format, &self.options.key)?,
            });
        }
        let parser = self.parser.as_mut().expect("set above");
        if let (Parser::Requests(parser), Some(requests)) = (&mut *parser, self.requests.as_mut()) {
            let parsed = Self::parse_request(parser, requests, line, &mut self.reorder).map_err(
                |problem| SimError::BadLine {
                    file: self.name.clone(),
                    line: self.stats.lines,
                    field: problem.field,
                    problem: problem.problem,
                },
            )?;
            return Ok(parsed.inspect(|&event| self.parsed += u64::from(event)));
        }
        let parsed = match parser.parse(line) {
            Ok(None) => return Ok(Ok(false)),
            Ok(Some(parsed)) => parsed,
            Err(problem) => return Ok(Err(problem)),
        };
        let client = self.interner.intern(&parsed.client).ok_or_else(|| {
            SimError::Usage(format!(
                "{}:{}: more than 2^32 distinct clients; choose a coarser --key",
                self.name, self.stats.lines
            ))
        })?;
        self.reorder.push(Event {
            time_ms: parsed.time_ms,
            client,
            duration_ms: parsed.duration_ms.unwrap_or(NO_DURATION),
            cost: parsed.cost,
        });
        self.parsed += 1;
        Ok(Ok(true))
    }

    /// Request mode: parses `line` into a spare request parked in a slot, places it in its
    /// region, and pushes an event naming the slot into the reorder buffer. The inner error is
    /// a bad line; the outer one a region the configuration does not have.
    fn parse_request(
        parser: &mut RequestParser,
        requests: &mut Requests,
        line: &[u8],
        reorder: &mut Reorder,
    ) -> Result<Result<bool, LineProblem>, LineProblem> {
        let mut request = requests.spare.pop().unwrap_or_default();
        match parser.parse(line, &mut request, &requests.options) {
            Ok(true) => {}
            other => {
                request.clear();
                requests.spare.push(request);
                return Ok(other);
            }
        }
        if let Some(regions) = requests.regions.as_mut() {
            match regions.place(request.place(), request.client()) {
                Ok((region, _)) => request.region = Some(region),
                Err(problem) => {
                    request.clear();
                    requests.spare.push(request);
                    return Err(LineProblem::new("region", problem));
                }
            }
        }
        let time_ms = request.time_ms;
        let slot = match requests.free.pop() {
            Some(slot) => {
                requests.slots[slot as usize] = request;
                slot
            }
            None => {
                requests.slots.push(request);
                u32::try_from(requests.slots.len() - 1)
                    .expect("fewer than 2^32 requests in the reorder buffer")
            }
        };
        // The request keeps its own duration; the event only orders it.
        reorder.push(Event::new(time_ms, slot, 1));
        Ok(Ok(true))
    }

    /// Counts a bad line (or, with `--strict`, stops at it).
    fn bad_line(&mut self, problem: LineProblem) -> Result<(), SimError> {
        let line = self.stats.lines;
        if self.options.strict {
            return Err(SimError::BadLine {
                file: self.name.clone(),
                line,
                field: problem.field,
                problem: problem.problem,
            });
        }
        self.stats.bad_lines += 1;
        if self.stats.bad_samples.len() < BAD_SAMPLES {
            self.stats.bad_samples.push(BadLine {
                line,
                field: problem.field,
                problem: problem.problem,
            });
        }
        Ok(())
    }

    fn emit(&mut self, ev: Event) -> Event {
        self.stats.events += 1;
        self.stats.first_ms.get_or_insert(ev.time_ms);
        self.stats.last_ms = Some(ev.time_ms);
        ev
    }

    fn empty_error(&self) -> SimError {
        let hint = match self.stats.bad_samples.first() {
            Some(b) => format!(
                " ({} bad lines; line {}: {}: {})",
                self.stats.bad_lines, b.line, b.field, b.problem
            ),
            None if self.stats.lines == 0 => " (the file is empty)".to_string(),
            None => format!(
                " ({} lines, all blank, comments or a header)",
                self.stats.lines
            ),
        };
        SimError::Empty {
            file: self.name.clone(),
            hint,
        }
    }
}

impl Iterator for TraceReader {
    type Item = Result<Event, SimError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(ev) = self.reorder.pop_ready() {
                return Some(Ok(self.emit(ev)));
            }
            if self.done {
                return self.reorder.pop().map(|ev| Ok(self.emit(ev)));
            }
            match self.read_one() {
                Ok(true) => {}
                Ok(false) => {
                    self.done = true;
                    if self.stats.events == 0 && self.reorder.is_empty() {
                        return Some(Err(self.empty_error()));
                    }
                }
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            }
        }
    }
}
