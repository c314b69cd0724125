//! What the request path reads of a request, read once and one way for every host: the path and
//! host as the origin serves them, and each field an identifier comes from as exactly one value
//! (docs/configuration.md, "How a request is read"). A client sending a field twice, or spelling a
//! path two ways, must not be two clients to the limiter and one to the origin.
//!
//! [`Config::reading`] builds a [`Reading`] of a host's request; rules match it and identifiers
//! are taken from it ([`crate::plan`]). A request the reading cannot make unambiguous is refused
//! with 400 before any limit is looked at ([`crate::plan::Refusal`]).

use std::borrow::Cow;
use std::cell::Cell;
use std::fmt;
use std::str::FromStr;

use crate::config::Config;
use crate::identify::RequestView;
use crate::normalize::{self, UnreadableHost, UnreadablePath};

/// How a field (a header or a query parameter) that a request carries more than once is read
/// (the configuration's `duplicates`). Origins disagree on which of several values counts (most
/// frameworks take the first header line, PHP and Rails the last query value), and the limiter
/// must count the one the origin uses, so by default such a request is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Duplicates {
    /// `refuse`: answer 400, naming the field (the default).
    #[default]
    Refuse,
    /// `first`: the first value, for origins known to read the first.
    First,
    /// `last`: the last value, for origins known to read the last.
    Last,
}

impl Duplicates {
    /// The configuration's spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Duplicates::Refuse => "refuse",
            Duplicates::First => "first",
            Duplicates::Last => "last",
        }
    }
}

impl FromStr for Duplicates {
    type Err = String;
    fn from_str(text: &str) -> Result<Duplicates, String> {
        match text.trim() {
            "refuse" => Ok(Duplicates::Refuse),
            "first" => Ok(Duplicates::First),
            "last" => Ok(Duplicates::Last),
            other => Err(format!(
                "`{other}` is not one of refuse, first, last (how a field sent twice is read)"
            )),
        }
    }
}

impl fmt::Display for Duplicates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The values a request carries for one field, as far as the limiter needs them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldValues<'r> {
    /// None.
    Absent,
    /// Exactly one.
    One(Cow<'r, str>),
    /// More than one: the first and the last.
    Repeated {
        /// The first value.
        first: Cow<'r, str>,
        /// The last value.
        last: Cow<'r, str>,
    },
}

impl<'r> FieldValues<'r> {
    /// Header `name`'s value as a runtime that joins repeated field lines gives it (the Fetch
    /// standard's `Headers.get`, in a Worker and in Node: `"acme, r1"` for two lines): a value
    /// with a comma may be several lines, and is read as repeated, its parts trimmed — but for
    /// the headers whose one value routinely holds a comma ([`reads_whole`]), read whole.
    pub fn joined(name: &str, value: Option<Cow<'r, str>>) -> FieldValues<'r> {
        let Some(value) = value else {
            return FieldValues::Absent;
        };
        let (Some(first_end), Some(last_start)) = (value.find(','), value.rfind(',')) else {
            return FieldValues::One(value);
        };
        if reads_whole(name) {
            return FieldValues::One(value);
        }
        let part = |text: &str| Cow::Owned(text.trim().to_string());
        FieldValues::Repeated {
            first: part(&value[..first_end]),
            last: part(&value[last_start + 1..]),
        }
    }

    /// Every value of a list of (name, value) pairs whose name is `name`.
    pub fn among<'a: 'r>(
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
        name: &str,
    ) -> FieldValues<'r> {
        let mut found = pairs
            .into_iter()
            .filter(|(k, _)| *k == name)
            .map(|(_, v)| v);
        let Some(first) = found.next() else {
            return FieldValues::Absent;
        };
        match found.last() {
            None => FieldValues::One(Cow::Borrowed(first)),
            Some(last) => FieldValues::Repeated {
                first: Cow::Borrowed(first),
                last: Cow::Borrowed(last),
            },
        }
    }

    /// The one value `duplicates` reads, or `Err(())` when it refuses a repeated field.
    fn read(self, duplicates: Duplicates) -> Result<Option<Cow<'r, str>>, ()> {
        match (self, duplicates) {
            (FieldValues::Absent, _) => Ok(None),
            (FieldValues::One(value), _) => Ok(Some(value)),
            (FieldValues::Repeated { first, .. }, Duplicates::First) => Ok(Some(first)),
            (FieldValues::Repeated { last, .. }, Duplicates::Last) => Ok(Some(last)),
            (FieldValues::Repeated { .. }, Duplicates::Refuse) => Err(()),
        }
    }
}

/// Whether header `name` (lower case) is one whose single value routinely holds a comma — a
/// comment or a list of preferences: `User-Agent`'s `(KHTML, like Gecko)`, `Accept`'s media
/// ranges, the client hints' brand lists. Where repeated lines arrive joined, such a header is
/// read whole: its value is the client's to choose either way, so sending it twice gains a
/// client nothing it could not have by sending another value, while refusing every comma would
/// refuse every browser. Credentials and ids (`Authorization`, `X-Api-Key`, a tenant) hold no
/// comma and are read strictly.
pub fn reads_whole(name: &str) -> bool {
    matches!(
        name,
        "user-agent"
            | "accept"
            | "accept-charset"
            | "accept-encoding"
            | "accept-language"
            | "cache-control"
            | "sec-ch-ua"
            | "sec-ch-ua-full-version-list"
            | "via"
    )
}

/// A field the request carries more than once where the configuration reads one value
/// (`duplicates = "refuse"`): the request is refused with 400 naming it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RepeatedField {
    /// A header (lower case).
    Header(String),
    /// A query parameter.
    Query(String),
}

impl fmt::Display for RepeatedField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RepeatedField::Header(name) => write!(f, "header `{name}`"),
            RepeatedField::Query(name) => write!(f, "query parameter `{name}`"),
        }
    }
}

/// Why a request's path or host cannot be read the way its origin reads it
/// ([`crate::normalize`]): the request is refused with 400, before any rule is matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unreadable {
    /// The path.
    Path(UnreadablePath),
    /// The host.
    Host(UnreadableHost),
}

impl fmt::Display for Unreadable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unreadable::Path(why) => write!(f, "its path cannot be read unambiguously: {why}"),
            Unreadable::Host(why) => write!(f, "its host cannot be read unambiguously: {why}"),
        }
    }
}

/// A request as the request path reads it: the host's request, its path and host normalised,
/// and each header and query parameter read as one value under the configuration's
/// [`Duplicates`]. Every rule and identifier source reads the request through it.
pub struct Reading<'r, R: ?Sized> {
    request: &'r R,
    path: Cow<'r, str>,
    host: Cow<'r, str>,
    /// Why the path or host cannot be read, when one cannot: the request is refused.
    unreadable: Option<Unreadable>,
    duplicates: Duplicates,
    /// The first field read that the request repeats, when `duplicates` refuses them.
    repeated: Cell<Option<RepeatedField>>,
}

impl<R: ?Sized> fmt::Debug for Reading<'_, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reading")
            .field("path", &self.path)
            .field("host", &self.host)
            .field("duplicates", &self.duplicates)
            .finish_non_exhaustive()
    }
}

impl<'r, R: RequestView + ?Sized> Reading<'r, R> {
    /// The host's request itself.
    pub fn request(&self) -> &'r R {
        self.request
    }

    /// The path and host as read, each `None` where it reads as the request sent it: what a
    /// [`crate::read_ahead::ReadAhead`] keeps beyond its borrow of the request, to give back to
    /// [`Config::read_before`].
    pub(crate) fn changes(&self) -> (Option<String>, Option<String>) {
        let changed = |read: &str, sent: &str| (read != sent).then(|| read.to_string());
        (
            changed(&self.path, self.request.path()),
            changed(&self.host, self.request.host()),
        )
    }

    /// Why the request's path or host cannot be read, if one cannot: then the request is
    /// refused, and its path and host read as sent.
    pub fn unreadable(&self) -> Option<Unreadable> {
        self.unreadable
    }

    /// The first field the request repeats among those read so far, when the configuration
    /// refuses repeated fields: then the request is refused, whatever else was read.
    pub fn repeated(&self) -> Option<RepeatedField> {
        let repeated = self.repeated.take();
        self.repeated.set(repeated.clone());
        repeated
    }

    fn one(
        &self,
        values: FieldValues<'r>,
        field: impl FnOnce() -> RepeatedField,
    ) -> Option<Cow<'r, str>> {
        values.read(self.duplicates).unwrap_or_else(|()| {
            let first_seen = self.repeated.take().unwrap_or_else(field);
            self.repeated.set(Some(first_seen));
            None
        })
    }
}

impl Config {
    /// `request` as the request path reads it (see [`Reading`]).
    pub fn reading<'r, R: RequestView + ?Sized>(&self, request: &'r R) -> Reading<'r, R> {
        let (raw_path, raw_host) = (request.path(), request.host());
        let path = normalize::path(raw_path).map_err(Unreadable::Path);
        let host = normalize::host(raw_host).map_err(Unreadable::Host);
        let unreadable = path.as_ref().err().or(host.as_ref().err()).copied();
        Reading {
            path: path.unwrap_or(Cow::Borrowed(raw_path)),
            host: host.unwrap_or(Cow::Borrowed(raw_host)),
            unreadable,
            duplicates: self.duplicates,
            repeated: Cell::new(None),
            request,
        }
    }
}

impl Config {
    /// `request` as [`Config::reading`] read it before, its path and host as that reading gave
    /// them (both readable): for a request read ahead of the request path
    /// ([`crate::read_ahead::ReadAhead`]), which would otherwise be read twice.
    pub(crate) fn read_before<'r, R: RequestView + ?Sized>(
        &self,
        request: &'r R,
        path: &'r str,
        host: &'r str,
    ) -> Reading<'r, R> {
        Reading {
            path: Cow::Borrowed(path),
            host: Cow::Borrowed(host),
            unreadable: None,
            duplicates: self.duplicates,
            repeated: Cell::new(None),
            request,
        }
    }
}

impl<R: RequestView + ?Sized> RequestView for Reading<'_, R> {
    fn method(&self) -> &str {
        self.request.method()
    }
    fn host(&self) -> &str {
        &self.host
    }
    fn path(&self) -> &str {
        &self.path
    }
    fn query(&self, name: &str) -> Option<String> {
        self.one(self.request.query_values(name), || {
            RepeatedField::Query(name.to_string())
        })
        .map(Cow::into_owned)
    }
    fn query_values(&self, name: &str) -> FieldValues<'_> {
        self.request.query_values(name)
    }
    fn header(&self, name: &str) -> Option<String> {
        self.header_ref(name).map(Cow::into_owned)
    }
    fn header_ref(&self, name: &str) -> Option<Cow<'_, str>> {
        self.one(self.request.header_values(name), || {
            RepeatedField::Header(name.to_string())
        })
    }
    fn header_values(&self, name: &str) -> FieldValues<'_> {
        self.request.header_values(name)
    }
    fn client_ip(&self) -> Option<Cow<'_, str>> {
        self.request.client_ip()
    }
    fn country(&self) -> Option<String> {
        self.request.country()
    }
    fn custom(&self, name: &str) -> Option<Cow<'_, str>> {
        self.request.custom(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identify::OwnedRequest;

    #[test]
    fn duplicates_parse_and_print_back() {
        for d in [Duplicates::Refuse, Duplicates::First, Duplicates::Last] {
            assert_eq!(d.as_str().parse::<Duplicates>(), Ok(d));
        }
        assert!("both".parse::<Duplicates>().unwrap_err().contains("refuse"));
    }

    #[test]
    fn joined_values_with_a_comma_are_read_as_repeated() {
        assert_eq!(FieldValues::joined("x-tenant", None), FieldValues::Absent);
        assert_eq!(
            FieldValues::joined("x-tenant", Some("acme".into())),
            FieldValues::One("acme".into())
        );
        // A browser's user agent is one value, commas and all.
        let agent = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko)";
        assert_eq!(
            FieldValues::joined("user-agent", Some(agent.into())),
            FieldValues::One(agent.into())
        );
        assert_eq!(
            FieldValues::joined("x-tenant", Some("acme, r1,  r2 ".into())),
            FieldValues::Repeated {
                first: "acme".into(),
                last: "r2".into()
            }
        );
    }

    fn reading_of(request: &OwnedRequest, duplicates: Duplicates) -> Option<String> {
        let reading = Reading {
            request,
            path: Cow::Borrowed(request.path()),
            host: Cow::Borrowed(request.host()),
            unreadable: None,
            duplicates,
            repeated: Cell::new(None),
        };
        let value = reading.header("x-tenant");
        assert_eq!(
            reading.repeated().is_some(),
            duplicates == Duplicates::Refuse && value.is_none() && request.headers.len() > 1
        );
        value
    }

    #[test]
    fn a_repeated_field_is_refused_or_read_as_configured() {
        let twice = OwnedRequest::get("h", "/")
            .with_header("x-tenant", "acme")
            .with_header("x-tenant", "r1");
        assert_eq!(reading_of(&twice, Duplicates::Refuse), None);
        assert_eq!(
            reading_of(&twice, Duplicates::First).as_deref(),
            Some("acme")
        );
        assert_eq!(reading_of(&twice, Duplicates::Last).as_deref(), Some("r1"));
        let once = OwnedRequest::get("h", "/").with_header("x-tenant", "acme");
        assert_eq!(
            reading_of(&once, Duplicates::Refuse).as_deref(),
            Some("acme")
        );
    }
}
