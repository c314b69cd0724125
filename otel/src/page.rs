//! A Prometheus text page (version 0.0.4, what every edgelimit host serves) read into its
//! families: each `# TYPE`d name with its samples — `name`, or a histogram's `name_bucket`,
//! `name_sum` and `name_count`. A sample with no `# TYPE` line is a family of its own, untyped.

use std::fmt;

/// What kind of metric a family is (its `# TYPE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (`…_total`).
    Counter,
    /// Goes up and down.
    Gauge,
    /// Buckets, a sum and a count.
    Histogram,
    /// Quantiles, a sum and a count.
    Summary,
    /// No `# TYPE` line, or `untyped`.
    Untyped,
}

impl Kind {
    fn parse(text: &str) -> Kind {
        match text {
            "counter" => Kind::Counter,
            "gauge" => Kind::Gauge,
            "histogram" => Kind::Histogram,
            "summary" => Kind::Summary,
            _ => Kind::Untyped,
        }
    }
}

/// One sample: its name (the family's, or a histogram's part), labels and value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The sample's name.
    pub name: String,
    /// Its labels, in the page's order.
    pub labels: Vec<(String, String)>,
    /// Its value.
    pub value: f64,
}

/// One family: a name, its kind and help, and its samples in the page's order.
#[derive(Debug, Clone, PartialEq)]
pub struct Family {
    /// The name of its `# TYPE` line (a counter's ends with `_total` in the 0.0.4 format).
    pub name: String,
    /// Its kind.
    pub kind: Kind,
    /// Its `# HELP` text, unescaped (empty without one).
    pub help: String,
    /// Its samples.
    pub samples: Vec<Sample>,
}

/// A line the page could not be read at.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("metrics page, line {line}: {problem}")]
pub struct PageError {
    /// The line's number, from 1.
    pub line: usize,
    /// What is wrong with it.
    pub problem: String,
}

/// Every family of `text`, in the page's order.
pub fn parse(text: &str) -> Result<Vec<Family>, PageError> {
    let mut families: Vec<Family> = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let at = |problem: &str| PageError {
            line: index + 1,
            problem: format!("{problem}: `{line}`"),
        };
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            let mut words = comment.trim_start().splitn(3, ' ');
            let (keyword, name, rest) = (words.next(), words.next(), words.next().unwrap_or(""));
            match (keyword, name) {
                (Some("TYPE"), Some(name)) => {
                    family(&mut families, name).kind = Kind::parse(rest.trim());
                }
                (Some("HELP"), Some(name)) => {
                    family(&mut families, name).help = unescape_help(rest);
                }
                _ => {}
            }
            continue;
        }
        let sample = sample(line).map_err(at)?;
        let owner = families
            .iter()
            .rposition(|f| owns(f, &sample.name))
            .unwrap_or_else(|| {
                families.push(Family {
                    name: sample.name.clone(),
                    kind: Kind::Untyped,
                    help: String::new(),
                    samples: Vec::new(),
                });
                families.len() - 1
            });
        families[owner].samples.push(sample);
    }
    Ok(families)
}

/// The family called `name`, made when it is new.
fn family<'a>(families: &'a mut Vec<Family>, name: &str) -> &'a mut Family {
    match families.iter().position(|f| f.name == name) {
        Some(at) => &mut families[at],
        None => {
            families.push(Family {
                name: name.to_string(),
                kind: Kind::Untyped,
                help: String::new(),
                samples: Vec::new(),
            });
            families.last_mut().expect("just pushed")
        }
    }
}

/// Whether a sample called `name` belongs to `family`.
fn owns(family: &Family, name: &str) -> bool {
    if name == family.name {
        return true;
    }
    match family.kind {
        Kind::Histogram | Kind::Summary => name
            .strip_prefix(family.name.as_str())
            .is_some_and(|part| matches!(part, "_bucket" | "_sum" | "_count")),
        // A page in the OpenMetrics style names a counter's family without its `_total`.
        Kind::Counter => name.strip_suffix("_total") == Some(family.name.as_str()),
        _ => false,
    }
}

/// `name{label="value",…} value [timestamp]`.
fn sample(line: &str) -> Result<Sample, &'static str> {
    let name_end = line
        .find(|c: char| c == '{' || c.is_whitespace())
        .ok_or("no value")?;
    let name = &line[..name_end];
    if name.is_empty() {
        return Err("no metric name");
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(inner) = rest.strip_prefix('{') {
        let mut chars = inner.char_indices().peekable();
        let mut end = None;
        loop {
            // Blanks and a comma between labels.
            while chars
                .next_if(|(_, c)| *c == ',' || c.is_whitespace())
                .is_some()
            {}
            match chars.peek() {
                Some((i, '}')) => {
                    end = Some(*i);
                    break;
                }
                None => break,
                _ => {}
            }
            let mut key = String::new();
            while let Some((_, c)) = chars.next_if(|(_, c)| *c != '=') {
                key.push(c);
            }
            if chars.next().is_none() || chars.next().map(|(_, c)| c) != Some('"') {
                return Err("a label is not name=\"value\"");
            }
            let mut value = String::new();
            loop {
                match chars.next() {
                    Some((_, '"')) => break,
                    Some((_, '\\')) => match chars.next() {
                        Some((_, 'n')) => value.push('\n'),
                        Some((_, c)) => value.push(c),
                        None => return Err("a label value is not closed"),
                    },
                    Some((_, c)) => value.push(c),
                    None => return Err("a label value is not closed"),
                }
            }
            labels.push((key.trim().to_string(), value));
        }
        let end = end.ok_or("labels do not end with `}`")?;
        rest = &inner[end + 1..];
    }
    let value = rest.split_whitespace().next().ok_or("no value")?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        number => number.parse().map_err(|_| "the value is no number")?,
    };
    Ok(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// A `# HELP` text as written: `\\` and `\n` escaped.
fn unescape_help(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match (c, chars.clone().next()) {
            ('\\', Some('n')) => {
                out.push('\n');
                chars.next();
            }
            ('\\', Some('\\')) => {
                out.push('\\');
                chars.next();
            }
            _ => out.push(c),
        }
    }
    out
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
            Kind::Summary => "summary",
            Kind::Untyped => "untyped",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = r#"# HELP edgelimit_decisions_total Limit decisions by outcome.
# TYPE edgelimit_decisions_total counter
edgelimit_decisions_total{limit="per-ip",outcome="allowed"} 4
edgelimit_decisions_total{limit="a \"quoted\", {odd} \\ name",outcome="denied"} 1
# HELP edgelimit_store_latency_seconds Store round-trip latency.
# TYPE edgelimit_store_latency_seconds histogram
edgelimit_store_latency_seconds_bucket{le="0.0005"} 1
edgelimit_store_latency_seconds_bucket{le="+Inf"} 2
edgelimit_store_latency_seconds_sum 0.0073
edgelimit_store_latency_seconds_count 2
# TYPE edgelimit_gateway_connections_open gauge
edgelimit_gateway_connections_open 3 1700000000000
stray 1.5
# EOF
"#;

    #[test]
    fn families_take_their_samples_and_labels_unescaped() {
        let families = parse(PAGE).unwrap();
        let names: Vec<(&str, Kind, usize)> = families
            .iter()
            .map(|f| (f.name.as_str(), f.kind, f.samples.len()))
            .collect();
        assert_eq!(
            names,
            [
                ("edgelimit_decisions_total", Kind::Counter, 2),
                ("edgelimit_store_latency_seconds", Kind::Histogram, 4),
                ("edgelimit_gateway_connections_open", Kind::Gauge, 1),
                ("stray", Kind::Untyped, 1),
            ]
        );
        assert_eq!(families[0].help, "Limit decisions by outcome.");
        assert_eq!(
            families[0].samples[1].labels,
            [
                (
                    "limit".to_string(),
                    "a \"quoted\", {odd} \\ name".to_string()
                ),
                ("outcome".to_string(), "denied".to_string())
            ]
        );
        assert_eq!(families[1].samples[1].value, 2.0);
        assert_eq!(families[2].samples[0].value, 3.0);
    }

    #[test]
    fn an_unreadable_line_is_named() {
        let error = parse("# TYPE x counter\nx{a=\"1\" 2\n").unwrap_err();
        assert_eq!(error.line, 2, "{error}");
        assert!(parse("x{a=1} 2").is_err());
        assert!(parse("x two").is_err());
    }

    #[test]
    fn an_openmetrics_counter_family_owns_its_total() {
        let families = parse("# TYPE requests counter\nrequests_total 7\n# EOF\n").unwrap();
        assert_eq!(families.len(), 1);
        assert_eq!(families[0].samples[0].name, "requests_total");
    }
}
