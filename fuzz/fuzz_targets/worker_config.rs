//! The Worker's configuration: `Config::from_json` on arbitrary text, and the same text read as a
//! TOML table and converted to JSON (what a `[vars.EDGELIMIT_CONFIG]` table in wrangler.toml
//! becomes, and what `sim` reads). Bad input is a `ConfigError` naming a field, never a panic; an
//! accepted configuration holds its documented bounds, and its rules match requests (the bytes
//! after the first NUL: host, path, and a header value) without panicking.
#![no_main]

use std::borrow::Cow;

use edgelimit_engine::reading::FieldValues;
use edgelimit_engine::{Config, RequestView};
use libfuzzer_sys::fuzz_target;

struct Request<'a> {
    host: &'a str,
    path: &'a str,
    value: &'a str,
}

impl RequestView for Request<'_> {
    fn method(&self) -> &str {
        "GET"
    }
    fn host(&self) -> &str {
        self.host
    }
    fn path(&self) -> &str {
        self.path
    }
    fn query(&self, _name: &str) -> Option<String> {
        Some(self.value.to_string())
    }
    fn query_values(&self, _name: &str) -> FieldValues<'_> {
        FieldValues::One(Cow::Borrowed(self.value))
    }
    fn header(&self, _name: &str) -> Option<String> {
        Some(self.value.to_string())
    }
    fn header_values(&self, _name: &str) -> FieldValues<'_> {
        FieldValues::One(Cow::Borrowed(self.value))
    }
}

fuzz_target!(|data: &[u8]| {
    let (config, request) = match data.iter().position(|&b| b == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[][..]),
    };
    let Ok(text) = std::str::from_utf8(config) else {
        return;
    };
    let request = String::from_utf8_lossy(request);
    let mut parts = request.splitn(3, '\0');
    let request = Request {
        host: parts.next().unwrap_or(""),
        path: parts.next().unwrap_or("/"),
        value: parts.next().unwrap_or(""),
    };
    check(Config::from_json(text), &request);
    if let Ok(table) = toml::from_str::<toml::Table>(text) {
        let json = serde_json::to_value(table).expect("a TOML table is JSON");
        check(Config::from_value(json), &request);
    }
});

fn check(parsed: Result<Config, edgelimit_engine::ConfigError>, request: &Request<'_>) {
    let config = match parsed {
        Ok(config) => config,
        Err(e) => {
            assert!(!e.field.is_empty() && !e.problem.is_empty(), "{e:?}");
            return;
        }
    };
    assert!(!config.rules.is_empty());
    assert!(!config.namespace.is_empty() && config.namespace.len() <= 64);
    let timeout = config.timeout.as_millis();
    assert!((1..=30_000).contains(&timeout), "{timeout}");
    assert!((0.0..=1.0).contains(&config.log_sample));
    for rule in &config.rules {
        assert!(!rule.limits.is_empty(), "{rule:?}");
        rule.matches(request);
        for limit in &rule.limits {
            if let Some(id) = limit.source.extract(request) {
                assert!(!id.as_bytes().is_empty());
            }
            limit.source.describe();
        }
    }
}
