//! Every command checked against the configuration before the store is contacted: the limit
//! exists, the tier is one of its tiers, the override parses and keeps the limit's algorithm, the
//! rule exists, the entry parses, the duration parses. What comes out, a [`Planned`] control
//! operation, can only be well formed; an error names the argument and what is wrong with it,
//! and nothing is written.

use std::collections::BTreeSet;

use edgelimit::control::list::ListEntry;
use edgelimit::control::{Assignment, AssignmentKind, ControlOp};
use edgelimit::store::key::encode_identifier;
use edgelimit::TimeSource;
use edgelimit::{Identifier, Limit, Policy};

use super::argument::{ttl_ms, ArgumentError};
use super::grammar::{Command, ListCommand, OverrideCommand, Target, TierCommand};
use crate::identify::CLIENT_IP_HEADER;
use crate::lists::ProbeSource;
use crate::{Config, IdentifierSource, OwnedRequest};

/// One limit and one identifier on it, keyed as the Worker keys it.
#[derive(Debug, Clone, PartialEq)]
pub struct Subject {
    /// The limit, as configured (with its tiers).
    pub limit: Limit,
    /// The identifier as given on the command line.
    pub given: String,
    /// The identifier the Worker would derive from a request offering `given`.
    pub identifier: Identifier,
}

impl Subject {
    /// The identifier as it appears inside the limit's Redis keys (escaped, or `#` and a hash).
    pub fn stored(&self) -> String {
        encode_identifier(&self.identifier)
    }
}

/// Which of the two kinds of list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListKind {
    /// A listed request is refused.
    Deny,
    /// A listed request is let through uncounted.
    Allow,
}

impl ListKind {
    /// `deny` or `allow`.
    pub fn as_str(self) -> &'static str {
        match self {
            ListKind::Deny => "deny",
            ListKind::Allow => "allow",
        }
    }

    /// The list's name in the store: `deny`, or `deny:<rule>` for a rule's own list.
    pub fn list_name(self, rule: Option<&str>) -> String {
        match rule {
            Some(rule) => format!("{}:{rule}", self.as_str()),
            None => self.as_str().to_string(),
        }
    }
}

/// A command checked against the configuration: the [`ControlOp`] it carries out, with its
/// instants left to the moment it runs ([`Planned::at`]): a TTL counts from then.
#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    /// The operation, its instants (`until_ms`, `now_ms`, `time`) zero until [`Planned::at`].
    operation: ControlOp,
    /// How long an assignment or a list entry holds (`--ttl`); `None`: until removed.
    ttl_ms: Option<u64>,
    /// The identifier as given on the command line, for operations on one.
    given: Option<String>,
}

impl Planned {
    fn new(operation: ControlOp) -> Planned {
        Planned {
            operation,
            ttl_ms: None,
            given: None,
        }
    }

    /// The operation as checked, its instants not yet set: what it does, to what.
    pub fn operation(&self) -> &ControlOp {
        &self.operation
    }

    /// The operation to carry out at `now_ms` (what a TTL counts from, what lapses are judged
    /// by), a peek decided on `time`.
    pub fn at(&self, now_ms: u64, time: TimeSource) -> ControlOp {
        let until = self.ttl_ms.map(|ttl| now_ms.saturating_add(ttl));
        let mut operation = self.operation.clone();
        match &mut operation {
            ControlOp::Assign { until_ms, .. } => *until_ms = until,
            ControlOp::ListAdd {
                until_ms,
                now_ms: at,
                ..
            } => {
                *until_ms = until;
                *at = now_ms;
            }
            ControlOp::ListEntries { now_ms: at, .. } => *at = now_ms,
            ControlOp::Peek { time: at, .. } => *at = time,
            ControlOp::ClearAssignment { .. }
            | ControlOp::Assignments { .. }
            | ControlOp::ListRemove { .. }
            | ControlOp::Reset { .. } => {}
        }
        operation
    }

    /// The limit and identifier the operation concerns, with the identifier as given.
    pub fn subject(&self) -> Option<Subject> {
        let (limit, identifier) = self.operation.subject()?;
        Some(Subject {
            limit: limit.clone(),
            given: self.given.clone().unwrap_or_default(),
            identifier: identifier.clone(),
        })
    }
}

/// Checks `command` against `config` (read from `file`, named in messages). With `raw`,
/// identifiers are taken as stored rather than keyed as the Worker keys them.
pub fn plan(
    command: &Command,
    config: &Config,
    file: &str,
    raw: bool,
) -> Result<Planned, ArgumentError> {
    let on = |target: &Target, operation: fn(Limit, Identifier) -> ControlOp| {
        let subject = subject(target, config, file, raw)?;
        Ok::<_, ArgumentError>(Planned {
            given: Some(subject.given),
            ..Planned::new(operation(subject.limit, subject.identifier))
        })
    };
    let assign = |target: &Target,
                  assignment: &dyn Fn(&Limit) -> Result<Assignment, ArgumentError>,
                  ttl: &Option<String>| {
        let subject = subject(target, config, file, raw)?;
        let assignment = assignment(&subject.limit)?;
        Ok::<_, ArgumentError>(Planned {
            operation: ControlOp::Assign {
                limit: subject.limit,
                identifier: subject.identifier,
                assignment: Some(assignment),
                until_ms: None,
            },
            ttl_ms: ttl_ms(ttl.as_deref())?,
            given: Some(subject.given),
        })
    };
    match command {
        Command::Peek(target) => on(target, |limit, identifier| ControlOp::Peek {
            limit,
            identifier,
            time: TimeSource::Server,
        }),
        Command::Reset(target) => on(target, |limit, identifier| ControlOp::Reset {
            limit,
            identifier,
        }),
        Command::Tier(TierCommand::Set { target, tier, ttl }) => assign(
            target,
            &|limit| Ok(Assignment::Tier(known_tier(limit, tier, file)?.into())),
            ttl,
        ),
        Command::Tier(TierCommand::Get(target)) => on(target, |limit, identifier| {
            ControlOp::Assignments { limit, identifier }
        }),
        Command::Tier(TierCommand::Clear(target)) => {
            on(target, |limit, identifier| ControlOp::ClearAssignment {
                limit,
                identifier,
                kind: AssignmentKind::Tier,
            })
        }
        Command::Override(OverrideCommand::Set {
            target,
            policy,
            ttl,
        }) => assign(
            target,
            &|limit| Ok(Assignment::Override(override_policy(limit, policy)?)),
            ttl,
        ),
        Command::Override(OverrideCommand::Clear(target)) => {
            on(target, |limit, identifier| ControlOp::ClearAssignment {
                limit,
                identifier,
                kind: AssignmentKind::Override,
            })
        }
        Command::Deny(list) => list_operation(ListKind::Deny, list, config, file, raw),
        Command::Allow(list) => list_operation(ListKind::Allow, list, config, file, raw),
    }
}

fn list_operation(
    kind: ListKind,
    command: &ListCommand,
    config: &Config,
    file: &str,
    raw: bool,
) -> Result<Planned, ArgumentError> {
    Ok(match command {
        ListCommand::Add { entry, rule, ttl } => Planned {
            operation: ControlOp::ListAdd {
                list: kind.list_name(known_rule(config, rule.as_deref(), file)?),
                entry: list_entry(entry, config, file, raw)?,
                until_ms: None,
                now_ms: 0,
            },
            ttl_ms: ttl_ms(ttl.as_deref())?,
            given: None,
        },
        ListCommand::Remove { entry, rule } => Planned::new(ControlOp::ListRemove {
            list: kind.list_name(known_rule(config, rule.as_deref(), file)?),
            // Removing needs no check that the Worker reads the source: an entry it never
            // matched must still be removable.
            entry: parse_entry(&entry_text(entry, raw)?)?,
        }),
        ListCommand::List { rule } => Planned::new(ControlOp::ListEntries {
            list: kind.list_name(known_rule(config, rule.as_deref(), file)?),
            now_ms: 0,
        }),
    })
}

/// The limit named `target.limit` and the identifier the Worker would key it by.
fn subject(
    target: &Target,
    config: &Config,
    file: &str,
    raw: bool,
) -> Result<Subject, ArgumentError> {
    let uses: Vec<(&str, &crate::RuleLimit)> = config
        .rules
        .iter()
        .flat_map(|rule| rule.limits.iter().map(move |l| (rule.name.as_str(), l)))
        .filter(|(_, l)| &*l.limit.name == target.limit.as_str())
        .collect();
    let Some((_, first)) = uses.first() else {
        let names: BTreeSet<&str> = config
            .rules
            .iter()
            .flat_map(|r| r.limits.iter().map(|l| &*l.limit.name))
            .collect();
        return Err(ArgumentError::new(
            "LIMIT",
            format!(
                "no limit `{}` in {file} (its limits: {})",
                target.limit,
                names.into_iter().collect::<Vec<_>>().join(", ")
            ),
        ));
    };
    let identifier = if raw {
        if target.identifier.is_empty() {
            return Err(ArgumentError::new("IDENTIFIER", "is empty"));
        }
        Identifier::from(target.identifier.as_str())
    } else {
        // Rules sharing a limit share its state, so they must key it alike to be told apart.
        if let Some((rule, other)) = uses.iter().find(|(_, l)| l.source != first.source) {
            return Err(ArgumentError::new(
                "IDENTIFIER",
                format!(
                    "limit `{}` takes its identifier from {} in rule `{}` but from {} in rule `{rule}`: \
                     give it as stored, with --raw-identifier",
                    target.limit,
                    first.source.describe(),
                    uses[0].0,
                    other.source.describe()
                ),
            ));
        }
        keyed(&first.source, &target.identifier)
            .map_err(|problem| ArgumentError::new("IDENTIFIER", problem))?
    };
    Ok(Subject {
        limit: Limit::clone(&first.limit),
        given: target.identifier.clone(),
        identifier,
    })
}

/// The identifier the Worker derives from a request offering `value` where `source` looks: the
/// request is built and handed to the Worker's own extraction, so trimming, the SHA-256 of
/// `api-key:` sources and the hashing of very long values are the Worker's, not a copy.
pub fn keyed(source: &IdentifierSource, value: &str) -> Result<Identifier, String> {
    let request = offering(source, value)?;
    source.extract(&request).ok_or_else(|| {
        format!(
            "`{value}` is empty once trimmed, as {} would be: the Worker never keys that",
            source.describe()
        )
    })
}

/// A request carrying `value` exactly where `source` reads it.
fn offering(source: &IdentifierSource, value: &str) -> Result<OwnedRequest, String> {
    let request = OwnedRequest::get("admin.invalid", "/");
    Ok(match source {
        IdentifierSource::ClientIp(_) => {
            let trimmed = value.trim();
            let address: std::net::IpAddr = trimmed.parse().map_err(|_| {
                format!("`{value}` is not an IP address (the limit is keyed by the client address)")
            })?;
            // Cloudflare sends the canonical form; any other spelling would be another key.
            if address.to_string() != trimmed {
                return Err(format!(
                    "`{value}` is not written as Cloudflare sends it: use `{address}`"
                ));
            }
            request.with_header(CLIENT_IP_HEADER, value)
        }
        IdentifierSource::Header(name) => request.with_header(name, value),
        IdentifierSource::Query(name) => request.with_query(name, value),
        IdentifierSource::PathSegment(n) => {
            if value.contains('/') {
                return Err(format!(
                    "`{value}` holds a `/`, which a path segment never does"
                ));
            }
            let mut path = "/_".repeat(n - 1);
            path.push('/');
            path.push_str(value);
            OwnedRequest::get("admin.invalid", &path)
        }
        IdentifierSource::ApiKey(inner) => offering(inner, value)?,
        // What the service's code supplies, keyed as it is.
        IdentifierSource::Custom(name) => request.with_custom(name, value),
    })
}

/// The tier `name` of `limit`, or an error listing the limit's tiers.
fn known_tier(limit: &Limit, name: &str, file: &str) -> Result<String, ArgumentError> {
    if limit.tiers.get(name).is_some() {
        return Ok(name.to_string());
    }
    let names: Vec<&str> = limit.tiers.iter().map(|(name, _)| name).collect();
    Err(ArgumentError::new(
        "TIER",
        if names.is_empty() {
            format!(
                "limit `{}` names no tiers in {file} (add `tiers = {{ {name} = \"…\" }}` to it)",
                limit.name
            )
        } else {
            format!(
                "limit `{}` has no tier `{name}` in {file} (its tiers: {})",
                limit.name,
                names.join(", ")
            )
        },
    ))
}

/// The override `spec`, which must keep the limit's algorithm (state is kept across policy
/// changes only within one algorithm).
fn override_policy(limit: &Limit, spec: &str) -> Result<Policy, ArgumentError> {
    let policy: Policy = spec
        .parse()
        .map_err(|e: edgelimit::PolicyError| ArgumentError::new("POLICY", e.to_string()))?;
    if policy.algorithm() != limit.policy.algorithm() {
        return Err(ArgumentError::new(
            "POLICY",
            format!(
                "`{policy}` runs {}, but limit `{}` runs {} (`{}`): an override keeps the limit's algorithm",
                policy.algorithm().as_str(),
                limit.name,
                limit.policy.algorithm().as_str(),
                limit.policy
            ),
        ));
    }
    Ok(policy)
}

/// `--rule`, which must name a rule of the configuration.
fn known_rule<'a>(
    config: &Config,
    rule: Option<&'a str>,
    file: &str,
) -> Result<Option<&'a str>, ArgumentError> {
    let Some(rule) = rule else {
        return Ok(None);
    };
    if config.rules.iter().any(|r| r.name == rule) {
        return Ok(Some(rule));
    }
    let names: Vec<&str> = config.rules.iter().map(|r| r.name.as_str()).collect();
    Err(ArgumentError::new(
        "--rule",
        format!(
            "no rule `{rule}` in {file} (its rules: {})",
            names.join(", ")
        ),
    ))
}

/// ENTRY, given as one argument or as a source and a value, for adding: it must parse, and its
/// source must be one the Worker offers the lists (else it could never match).
fn list_entry(
    words: &[String],
    config: &Config,
    file: &str,
    raw: bool,
) -> Result<ListEntry, ArgumentError> {
    let entry = parse_entry(&entry_text(words, raw)?)?;
    let source = entry.source();
    if !config.probe_sources.iter().any(|(spec, _)| *spec == source) {
        let offered: Vec<&str> = config
            .probe_sources
            .iter()
            .map(|(spec, _)| spec.as_str())
            .collect();
        return Err(ArgumentError::new(
            "ENTRY",
            format!(
                "the Worker never offers the lists `{source}` under {file} (it offers: {}): \
                 add it to `list_sources` there first, or the entry can never match",
                offered.join(", ")
            ),
        ));
    }
    Ok(entry)
}

/// ENTRY's text, an `api-key:` entry's key replaced by its SHA-256 as the Worker's probe offers
/// it (unless `raw`: then the hash is given).
fn entry_text(words: &[String], raw: bool) -> Result<String, ArgumentError> {
    let text = words.join(" ");
    let text = text.trim();
    let Some((source, value)) = text.split_once(char::is_whitespace) else {
        return Ok(text.to_string());
    };
    if raw {
        return Ok(text.to_string());
    }
    match ProbeSource::parse(source) {
        Ok(ProbeSource::Request(api_key @ IdentifierSource::ApiKey(_))) => {
            let request = offering(&api_key, value.trim())
                .map_err(|problem| ArgumentError::new("ENTRY", problem))?;
            let hash = api_key
                .list_value(&request)
                .ok_or_else(|| ArgumentError::new("ENTRY", format!("`{text}` has an empty key")))?;
            Ok(format!("{} {hash}", api_key.spec()))
        }
        _ => Ok(text.to_string()),
    }
}

fn parse_entry(text: &str) -> Result<ListEntry, ArgumentError> {
    text.parse::<ListEntry>()
        .map_err(|e| ArgumentError::new("ENTRY", format!("`{text}`: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(spec: &str) -> IdentifierSource {
        IdentifierSource::parse(spec).unwrap()
    }

    #[test]
    fn identifiers_are_keyed_by_the_workers_own_extraction() {
        let request = OwnedRequest::get("h", "/")
            .with_header("authorization", "Bearer k")
            .with_header("x-user", "alice");
        for (spec, given) in [
            ("api-key:header:authorization", "Bearer k"),
            ("header:x-user", "  alice "),
        ] {
            assert_eq!(
                keyed(&source(spec), given),
                Ok(source(spec).extract(&request).unwrap()),
                "{spec}"
            );
        }
        assert_eq!(keyed(&source("path:3"), "42"), Ok(Identifier::from("42")));
        // A custom identifier is the value the service's code gave, hashed for `api-key:`.
        assert_eq!(
            keyed(&source("custom:user"), " alice "),
            Ok(Identifier::from("alice"))
        );
        assert_eq!(
            keyed(&source("api-key:custom:user"), "Bearer k"),
            keyed(&source("api-key:header:authorization"), "Bearer k")
        );
        assert_eq!(
            keyed(&source("query:key"), "a b&c"),
            Ok(Identifier::from("a b&c"))
        );
        // Long values are hashed as the Worker hashes them.
        let long = "x".repeat(1000);
        assert_eq!(
            keyed(&source("header:x-user"), &long).unwrap().as_bytes()[0],
            0xFF
        );
    }

    #[test]
    fn malformed_identifiers_are_refused_with_the_reason() {
        assert!(keyed(&source("ip"), "2001:DB8::1")
            .unwrap_err()
            .contains("use `2001:db8::1`"));
        assert!(keyed(&source("ip"), "203.0.113.300")
            .unwrap_err()
            .contains("not an IP address"));
        assert!(keyed(&source("path:1"), "a/b").unwrap_err().contains('/'));
        assert!(keyed(&source("header:x-user"), "   ")
            .unwrap_err()
            .contains("empty"));
        assert_eq!(
            keyed(&source("ip"), "203.0.113.7"),
            Ok(Identifier::from("203.0.113.7"))
        );
    }

    const CONFIG: &str = r#"
list_sources = ["ip", "country"]

[[rules]]
name = "api"
limits = [
  { name = "per-ip", policy = "gcra 10/1s burst 20", identifier = "ip", tiers = { pro = "gcra 100/1s burst 200" } },
]
"#;

    /// Every command line plans the control operation it names, its instants set when it runs.
    #[test]
    fn each_command_line_plans_its_control_operation() {
        use clap::Parser;
        let config = crate::config::file::parse(CONFIG, "c.toml").unwrap();
        let limit = Limit::clone(&config.rules[0].limits[0].limit);
        let who = Identifier::from("192.0.2.1");
        let entry: ListEntry = "ip 192.0.2.0/24".parse().unwrap();
        let (now, time) = (1_000, TimeSource::At(1_000));
        let cases = [
            (
                "peek per-ip 192.0.2.1",
                ControlOp::Peek {
                    limit: limit.clone(),
                    identifier: who.clone(),
                    time,
                },
            ),
            (
                "reset per-ip 192.0.2.1",
                ControlOp::Reset {
                    limit: limit.clone(),
                    identifier: who.clone(),
                },
            ),
            (
                "tier set per-ip 192.0.2.1 pro --ttl 1h",
                ControlOp::Assign {
                    limit: limit.clone(),
                    identifier: who.clone(),
                    assignment: Some(Assignment::Tier("pro".into())),
                    until_ms: Some(now + 3_600_000),
                },
            ),
            (
                "tier get per-ip 192.0.2.1",
                ControlOp::Assignments {
                    limit: limit.clone(),
                    identifier: who.clone(),
                },
            ),
            (
                "tier clear per-ip 192.0.2.1",
                ControlOp::ClearAssignment {
                    limit: limit.clone(),
                    identifier: who.clone(),
                    kind: AssignmentKind::Tier,
                },
            ),
            (
                "override set per-ip 192.0.2.1 'gcra 5/1s burst 5'",
                ControlOp::Assign {
                    limit: limit.clone(),
                    identifier: who.clone(),
                    assignment: Some(Assignment::Override("gcra 5/1s burst 5".parse().unwrap())),
                    until_ms: None,
                },
            ),
            (
                "override clear per-ip 192.0.2.1",
                ControlOp::ClearAssignment {
                    limit: limit.clone(),
                    identifier: who.clone(),
                    kind: AssignmentKind::Override,
                },
            ),
            (
                "deny add ip 192.0.2.0/24 --rule api --ttl 30s",
                ControlOp::ListAdd {
                    list: "deny:api".into(),
                    entry: entry.clone(),
                    until_ms: Some(now + 30_000),
                    now_ms: now,
                },
            ),
            (
                "allow add 'ip 192.0.2.0/24'",
                ControlOp::ListAdd {
                    list: "allow".into(),
                    entry: entry.clone(),
                    until_ms: None,
                    now_ms: now,
                },
            ),
            (
                "deny remove ip 192.0.2.0/24",
                ControlOp::ListRemove {
                    list: "deny".into(),
                    entry,
                },
            ),
            (
                "allow list --rule api",
                ControlOp::ListEntries {
                    list: "allow:api".into(),
                    now_ms: now,
                },
            ),
        ];
        for (line, expected) in cases {
            let words = line_words(line);
            let cli = crate::command::Cli::try_parse_from(
                std::iter::once("edgelimit-admin").chain(words.iter().map(String::as_str)),
            )
            .unwrap_or_else(|e| panic!("{line}: {e}"));
            let planned = plan(&cli.command, &config, "c.toml", false).unwrap();
            assert_eq!(planned.at(now, time), expected, "{line}");
            let subject = planned.subject();
            assert_eq!(
                subject.as_ref().map(|s| s.given.as_str()),
                expected.subject().map(|_| "192.0.2.1"),
                "{line}"
            );
        }
    }

    /// A line's words as a shell splits them: quotes group, nothing else is special here.
    fn line_words(line: &str) -> Vec<String> {
        let mut words = Vec::new();
        for (i, part) in line.split('\'').enumerate() {
            if i % 2 == 1 {
                words.push(part.to_string());
            } else {
                words.extend(part.split_whitespace().map(str::to_string));
            }
        }
        words
    }
}
