//! Reading a Prometheus/OpenMetrics text page, such as the gateway's `GET /metrics`, so a test or
//! benchmark can count what really reached the store (HTTP requests, Redis commands) rather than
//! estimate it. [`scrape`] fetches a page over plain HTTP/1.1 (std only, like [`crate::command`]);
//! [`Samples`] holds its samples by name and labels.
//!
//! ```no_run
//! use edgelimit_testkit::metrics::scrape;
//!
//! let before = scrape("127.0.0.1:8079", Some("token")).unwrap();
//! // … requests …
//! let after = scrape("127.0.0.1:8079", Some("token")).unwrap();
//! let commands = after.sum("edgelimit_gateway_commands_total") - before.sum("edgelimit_gateway_commands_total");
//! # let _ = commands;
//! ```

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// The samples of one page: metric name and label set to value.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Samples(BTreeMap<(String, BTreeMap<String, String>), f64>);

impl Samples {
    /// Parses the text format: one `name{label="value",…} value` per line; `#` lines and blank
    /// ones are skipped. An error names the line.
    pub fn parse(text: &str) -> Result<Samples, String> {
        let mut samples = BTreeMap::new();
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |why: &str| format!("metrics line {}: {why}: `{line}`", number + 1);
            let (series, value) = line
                .rsplit_once(' ')
                .ok_or_else(|| bad("not `series value`"))?;
            let value: f64 = value.parse().map_err(|_| bad("the value is no number"))?;
            let (name, labels) = match series.split_once('{') {
                None => (series, BTreeMap::new()),
                Some((name, rest)) => {
                    let rest = rest
                        .strip_suffix('}')
                        .ok_or_else(|| bad("labels do not end with `}`"))?;
                    let mut labels = BTreeMap::new();
                    for pair in rest.split(',').filter(|p| !p.is_empty()) {
                        let (key, value) = pair
                            .split_once('=')
                            .ok_or_else(|| bad("a label is not k=v"))?;
                        let value = value
                            .strip_prefix('"')
                            .and_then(|v| v.strip_suffix('"'))
                            .ok_or_else(|| bad("a label value is not quoted"))?;
                        labels.insert(key.to_string(), value.to_string());
                    }
                    (name, labels)
                }
            };
            if samples.insert((name.to_string(), labels), value).is_some() {
                return Err(bad("the series appears twice"));
            }
        }
        Ok(Samples(samples))
    }

    /// The value of `name` with exactly these labels, if present.
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let labels = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.0.get(&(name.to_string(), labels)).copied()
    }

    /// The value of `name` with exactly these labels. Panics, showing the page, when absent.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.get(name, labels)
            .unwrap_or_else(|| panic!("no {name}{labels:?} in {self:#?}"))
    }

    /// The sum of every series of `name` (0 when there is none).
    pub fn sum(&self, name: &str) -> f64 {
        self.series(name).into_iter().map(|(_, v)| v).sum()
    }

    /// Every series of `name`, in label order: its labels and value.
    pub fn series(&self, name: &str) -> Vec<(&BTreeMap<String, String>, f64)> {
        self.0
            .iter()
            .filter(|((n, _), _)| n == name)
            .map(|((_, labels), value)| (labels, *value))
            .collect()
    }
}

/// `GET /metrics` from `address` (`host:port`), with `token` as a bearer token if given, parsed.
/// An error says what failed: connecting, a status other than 200, or a line of the page.
pub fn scrape(address: &str, token: Option<&str>) -> io::Result<Samples> {
    let mut stream = TcpStream::connect(address)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {address}\r\n{auth}Connection: close\r\n\r\n"
    )?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response)?;
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response.split_once("\r\n\r\n").ok_or_else(|| {
        io::Error::new(io::ErrorKind::InvalidData, "no end of the response header")
    })?;
    let status = head.lines().next().unwrap_or_default();
    if !status.contains(" 200 ") {
        return Err(io::Error::other(format!(
            "GET http://{address}/metrics answered `{status}`"
        )));
    }
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return Samples::parse(&dechunk(body)?).map_err(io::Error::other);
    }
    Samples::parse(body).map_err(io::Error::other)
}

/// The body of a chunked response.
fn dechunk(mut body: &str) -> io::Result<String> {
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "a malformed chunked body");
    let mut out = String::new();
    loop {
        let (size, rest) = body.split_once("\r\n").ok_or_else(bad)?;
        let size = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| bad())?;
        if size == 0 {
            return Ok(out);
        }
        out.push_str(rest.get(..size).ok_or_else(bad)?);
        body = rest
            .get(size..)
            .and_then(|r| r.strip_prefix("\r\n"))
            .ok_or_else(bad)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = "# HELP x_total Things.\n# TYPE x_total counter\n\
        x_total{route=\"pipeline\",status=\"200\"} 7\nx_total{route=\"single\",status=\"200\"} 2\n\
        y 1.5\n# EOF\n";

    #[test]
    fn samples_are_found_by_name_and_labels_and_summed() {
        let s = Samples::parse(PAGE).unwrap();
        assert_eq!(
            s.get("x_total", &[("route", "pipeline"), ("status", "200")]),
            Some(7.0)
        );
        assert_eq!(s.get("x_total", &[("route", "pipeline")]), None);
        assert_eq!(s.sum("x_total"), 9.0);
        assert_eq!(s.get("y", &[]), Some(1.5));
        assert_eq!(s.sum("missing"), 0.0);
    }

    #[test]
    fn bad_lines_are_named() {
        let e = Samples::parse("ok 1\nbroken{a=\"1\" 2\n").unwrap_err();
        assert!(e.contains("line 2"), "{e}");
        let e = Samples::parse("a 1\na 2\n").unwrap_err();
        assert!(e.contains("twice"), "{e}");
        assert!(Samples::parse("z notanumber\n").is_err());
    }

    #[test]
    fn chunked_bodies_are_joined() {
        assert_eq!(
            dechunk("4\r\nab\nc\r\n3\r\nd 1\r\n0\r\n\r\n").unwrap(),
            "ab\ncd 1"
        );
        assert!(dechunk("zz\r\n").is_err());
    }
}
