//! Every command checked against the configuration before the store is contacted: the limit
//! exists, the tier is one of its tiers, the override parses and keeps the limit's algorithm, the
//! rule exists, the entry parses, the duration parses. What comes out, an [`Operation`], can only
//! be well formed; an error names the argument and what is wrong with it, and nothing is written.

use std::collections::BTreeSet;

use edgelimit::control::list::ListEntry;
use edgelimit::control::{Assignment, AssignmentKind};
use edgelimit::policy::parse_window;
use edgelimit::store::key::encode_identifier;
use edgelimit::{Identifier, Limit, Policy};
use edgelimit_engine::identify::CLIENT_IP_HEADER;
use edgelimit_engine::lists::ProbeSource;
use edgelimit_engine::{Config, IdentifierSource, OwnedRequest};

use crate::cli::{Command, ListCommand, OverrideCommand, Target, TierCommand};
use crate::error::AdminError;

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

/// A validated command.
#[derive(Debug, Clone, PartialEq)]
pub enum Operation {
    /// `peek`.
    Peek(Subject),
    /// `reset`.
    Reset(Subject),
    /// `tier set` / `override set`: store this assignment, lapsing after `ttl_ms` (None: never).
    Assign {
        /// Whose.
        subject: Subject,
        /// The tier or the override.
        assignment: Assignment,
        /// How long it holds.
        ttl_ms: Option<u64>,
    },
    /// `tier get`.
    Show(Subject),
    /// `tier clear` / `override clear`: removes the assignment of that kind, keeping the other.
    Clear {
        /// Whose.
        subject: Subject,
        /// The tier or the override.
        kind: AssignmentKind,
    },
    /// `deny|allow add`.
    ListAdd {
        /// The store's list name (`deny`, `allow:<rule>`).
        list: String,
        /// The entry, parsed.
        entry: ListEntry,
        /// How long it holds.
        ttl_ms: Option<u64>,
    },
    /// `deny|allow remove`.
    ListRemove {
        /// The store's list name.
        list: String,
        /// The entry, parsed.
        entry: ListEntry,
    },
    /// `deny|allow list`.
    ListShow {
        /// The store's list name.
        list: String,
    },
}

/// Checks `command` against `config` (read from `file`, named in messages). With `raw`,
/// identifiers are taken as stored rather than keyed as the Worker keys them.
pub fn plan(
    command: &Command,
    config: &Config,
    file: &str,
    raw: bool,
) -> Result<Operation, AdminError> {
    let subject = |target: &Target| subject(target, config, file, raw);
    Ok(match command {
        Command::Peek(target) => Operation::Peek(subject(target)?),
        Command::Reset(target) => Operation::Reset(subject(target)?),
        Command::Tier(TierCommand::Set { target, tier, ttl }) => {
            let subject = subject(target)?;
            let tier = known_tier(&subject.limit, tier, file)?;
            Operation::Assign {
                subject,
                assignment: Assignment::Tier(tier.into()),
                ttl_ms: ttl_ms(ttl.as_deref())?,
            }
        }
        Command::Tier(TierCommand::Get(target)) => Operation::Show(subject(target)?),
        Command::Tier(TierCommand::Clear(target)) => Operation::Clear {
            subject: subject(target)?,
            kind: AssignmentKind::Tier,
        },
        Command::Override(OverrideCommand::Set {
            target,
            policy,
            ttl,
        }) => {
            let subject = subject(target)?;
            let policy = override_policy(&subject.limit, policy)?;
            Operation::Assign {
                subject,
                assignment: Assignment::Override(policy),
                ttl_ms: ttl_ms(ttl.as_deref())?,
            }
        }
        Command::Override(OverrideCommand::Clear(target)) => Operation::Clear {
            subject: subject(target)?,
            kind: AssignmentKind::Override,
        },
        Command::Deny(list) => list_operation(ListKind::Deny, list, config, file, raw)?,
        Command::Allow(list) => list_operation(ListKind::Allow, list, config, file, raw)?,
    })
}

fn list_operation(
    kind: ListKind,
    command: &ListCommand,
    config: &Config,
    file: &str,
    raw: bool,
) -> Result<Operation, AdminError> {
    Ok(match command {
        ListCommand::Add { entry, rule, ttl } => Operation::ListAdd {
            list: kind.list_name(known_rule(config, rule.as_deref(), file)?),
            entry: list_entry(entry, config, file, raw)?,
            ttl_ms: ttl_ms(ttl.as_deref())?,
        },
        ListCommand::Remove { entry, rule } => Operation::ListRemove {
            list: kind.list_name(known_rule(config, rule.as_deref(), file)?),
            // Removing needs no check that the Worker reads the source: an entry it never
            // matched must still be removable.
            entry: parse_entry(&entry_text(entry, raw)?)?,
        },
        ListCommand::List { rule } => Operation::ListShow {
            list: kind.list_name(known_rule(config, rule.as_deref(), file)?),
        },
    })
}

/// The limit named `target.limit` and the identifier the Worker would key it by.
fn subject(target: &Target, config: &Config, file: &str, raw: bool) -> Result<Subject, AdminError> {
    let uses: Vec<(&str, &edgelimit_engine::RuleLimit)> = config
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
        return Err(AdminError::input(
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
            return Err(AdminError::input("IDENTIFIER", "is empty"));
        }
        Identifier::from(target.identifier.as_str())
    } else {
        // Rules sharing a limit share its state, so they must key it alike to be told apart.
        if let Some((rule, other)) = uses.iter().find(|(_, l)| l.source != first.source) {
            return Err(AdminError::input(
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
            .map_err(|problem| AdminError::input("IDENTIFIER", problem))?
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
fn known_tier(limit: &Limit, name: &str, file: &str) -> Result<String, AdminError> {
    if limit.tiers.get(name).is_some() {
        return Ok(name.to_string());
    }
    let names: Vec<&str> = limit.tiers.iter().map(|(name, _)| name).collect();
    Err(AdminError::input(
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
fn override_policy(limit: &Limit, spec: &str) -> Result<Policy, AdminError> {
    let policy: Policy = spec
        .parse()
        .map_err(|e: edgelimit::PolicyError| AdminError::input("POLICY", e.to_string()))?;
    if policy.algorithm() != limit.policy.algorithm() {
        return Err(AdminError::input(
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
) -> Result<Option<&'a str>, AdminError> {
    let Some(rule) = rule else {
        return Ok(None);
    };
    if config.rules.iter().any(|r| r.name == rule) {
        return Ok(Some(rule));
    }
    let names: Vec<&str> = config.rules.iter().map(|r| r.name.as_str()).collect();
    Err(AdminError::input(
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
) -> Result<ListEntry, AdminError> {
    let entry = parse_entry(&entry_text(words, raw)?)?;
    let source = entry.source();
    if !config.probe_sources.iter().any(|(spec, _)| *spec == source) {
        let offered: Vec<&str> = config
            .probe_sources
            .iter()
            .map(|(spec, _)| spec.as_str())
            .collect();
        return Err(AdminError::input(
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
fn entry_text(words: &[String], raw: bool) -> Result<String, AdminError> {
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
                .map_err(|problem| AdminError::input("ENTRY", problem))?;
            let hash = api_key
                .list_value(&request)
                .ok_or_else(|| AdminError::input("ENTRY", format!("`{text}` has an empty key")))?;
            Ok(format!("{} {hash}", api_key.spec()))
        }
        _ => Ok(text.to_string()),
    }
}

fn parse_entry(text: &str) -> Result<ListEntry, AdminError> {
    text.parse::<ListEntry>()
        .map_err(|e| AdminError::input("ENTRY", format!("`{text}`: {e}")))
}

/// `--ttl`: a positive duration (`30s`, `1h`, `7d`).
pub fn ttl_ms(text: Option<&str>) -> Result<Option<u64>, AdminError> {
    text.map(|t| duration_ms("--ttl", t)).transpose()
}

/// A positive duration in the policy windows' syntax (`500ms`, `30s`, `15m`, `1h`, `7d`).
pub fn duration_ms(argument: &str, text: &str) -> Result<u64, AdminError> {
    match parse_window(text) {
        Ok(0) => Err(AdminError::input(argument, format!("`{text}` is zero"))),
        Ok(ms) => Ok(ms),
        Err(problem) => Err(AdminError::input(argument, problem)),
    }
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

    #[test]
    fn durations_must_be_positive_and_name_their_argument() {
        assert_eq!(ttl_ms(Some("7d")), Ok(Some(7 * 86_400_000)));
        assert_eq!(ttl_ms(Some("30s")), Ok(Some(30_000)));
        assert_eq!(ttl_ms(None), Ok(None));
        for bad in ["0s", "7", "1fortnight", "-5s", ""] {
            let e = ttl_ms(Some(bad)).unwrap_err().to_string();
            assert!(e.starts_with("--ttl: "), "{bad}: {e}");
        }
    }
}
