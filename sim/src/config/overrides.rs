//! `--overrides FILE`: the live control a deployment keeps in Redis — tiers, overrides, deny and
//! allow lists — given to a `--config` replay as the `edgelimit-admin` commands that would write
//! it, one per line.
//!
//! Each line is split as a shell splits it (`shlex`), parsed by the control command line's clap
//! [`Cli`] (the grammar `edgelimit-admin` parses, in the engine) and checked by its [`plan`]
//! against the configuration the replay runs, so the file accepts exactly what the CLI accepts
//! and refuses with the CLI's own messages (prefixed `FILE:LINE:`); nothing is parsed or
//! validated here twice. Each planned control operation is then applied to the replay's
//! `MemoryStore` at the trace's first request time, so `--ttl` counts from there and lapses as
//! the trace goes on.

use std::collections::HashMap;
use std::path::Path;

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches};
use edgelimit::control::{Assignment, AssignmentKind, ControlOp};
use edgelimit::{Control, Identifier, TimeSource};
use edgelimit_engine::command::{plan, Cli, Command, ListCommand, ListKind, Planned, TierCommand};
use edgelimit_engine::lists;
use edgelimit_engine::Config;

use super::ready::ready;
use crate::error::SimError;

/// The global flags of the command line (`edgelimit-admin`'s) that choose a store or a configuration: meaningless in a
/// file replayed on the sim's own store against `--config`, so refused rather than ignored (a
/// line naming another configuration would otherwise be checked against the wrong one).
const STORE_FLAGS: [(&str, &str); 6] = [
    ("store", "--store"),
    ("cluster", "--cluster"),
    ("worker", "--worker"),
    ("token", "--token"),
    ("timeout", "--timeout"),
    ("config", "--config"),
];

/// Identifiers given a tier or an override, each with the names of the limits it was given them
/// on: looked up by identifier for every decision of a replay with overrides, however many
/// customers the file assigns.
pub type Assigned = HashMap<Identifier, Vec<String>>;

/// What an overrides file applied, by kind of command: the report's `overrides` object.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct AppliedOverrides {
    /// The file.
    pub file: String,
    /// Commands in it (blank lines and comments left out).
    pub commands: u64,
    /// `tier set`.
    pub tiers: u64,
    /// `tier clear`.
    pub tier_clears: u64,
    /// `override set`.
    pub overrides: u64,
    /// `override clear`.
    pub override_clears: u64,
    /// `deny add`.
    pub deny_entries: u64,
    /// `deny remove`.
    pub deny_removals: u64,
    /// `allow add`.
    pub allow_entries: u64,
    /// `allow remove`.
    pub allow_removals: u64,
    /// When they were applied (the trace's first request, epoch ms); `None` for an empty trace.
    pub applied_at_ms: Option<u64>,
    /// Whether the Worker reads the dynamic lists under this configuration (`dynamic_lists`):
    /// when false, list entries change nothing, at the edge as here.
    pub dynamic_lists: bool,
}

impl AppliedOverrides {
    /// `3 tiers, 1 override, 2 deny entries, 1 allow entry` (kinds with none left out).
    pub fn summary(&self) -> String {
        let plural =
            |n: u64, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        let parts: Vec<String> = [
            (self.tiers, "tier", "tiers"),
            (self.tier_clears, "tier cleared", "tiers cleared"),
            (self.overrides, "override", "overrides"),
            (
                self.override_clears,
                "override cleared",
                "overrides cleared",
            ),
            (self.deny_entries, "deny entry", "deny entries"),
            (
                self.deny_removals,
                "deny entry removed",
                "deny entries removed",
            ),
            (self.allow_entries, "allow entry", "allow entries"),
            (
                self.allow_removals,
                "allow entry removed",
                "allow entries removed",
            ),
        ]
        .into_iter()
        .filter(|(n, _, _)| *n > 0)
        .map(|(n, one, many)| plural(n, one, many))
        .collect();
        if parts.is_empty() {
            "no commands".to_string()
        } else {
            parts.join(", ")
        }
    }
}

/// An overrides file, read and checked against one configuration, ready to apply.
#[derive(Debug, Clone)]
pub struct Overrides {
    operations: Vec<Planned>,
    applied: AppliedOverrides,
}

impl Overrides {
    /// Reads `path` and checks every line against `config` (read from `config_file`, named in
    /// the admin's messages). The first bad line fails the whole file: a what-if missing one of
    /// its commands would answer another question than the one asked.
    pub fn load(path: &Path, config: &Config, config_file: &str) -> Result<Overrides, SimError> {
        let text = std::fs::read_to_string(path).map_err(|e| SimError::io(path, e))?;
        Overrides::parse(&text, &path.display().to_string(), config, config_file)
    }

    /// [`Overrides::load`] of the text `text`, named `file` in messages.
    pub fn parse(
        text: &str,
        file: &str,
        config: &Config,
        config_file: &str,
    ) -> Result<Overrides, SimError> {
        let mut applied = AppliedOverrides {
            file: file.to_string(),
            dynamic_lists: config.dynamic_lists,
            ..AppliedOverrides::default()
        };
        let mut operations = Vec::new();
        for (number, line) in (1u64..).zip(text.lines()) {
            let bad = |message: String| SimError::Overrides {
                file: file.to_string(),
                line: number,
                message,
            };
            let Some(words) = shlex::split(line) else {
                return Err(bad("unbalanced quotes or a trailing backslash".to_string()));
            };
            // `#` starts a comment where a shell's would: `shlex` drops it and what follows.
            if words.is_empty() {
                continue;
            }
            let cli = parse_line(&words).map_err(bad)?;
            if let Some(what) = read_only(&cli.command) {
                return Err(bad(format!(
                    "`{what}` writes nothing a replay uses: an overrides file holds `tier \
                     set|clear`, `override set|clear`, `deny add|remove` and `allow add|remove`"
                )));
            }
            let operation = plan(&cli.command, config, config_file, cli.raw_identifier)
                .map_err(|e| bad(e.to_string()))?;
            count(&mut applied, operation.operation());
            operations.push(operation);
        }
        Ok(Overrides {
            operations,
            applied,
        })
    }

    /// What the file holds, by kind (`applied_at_ms` is set by [`Overrides::apply`]).
    pub fn applied(&self) -> &AppliedOverrides {
        &self.applied
    }

    /// The identifiers given a tier or an override, with the limits they were given them on:
    /// their decisions are not the limit's own policy's, so the exact log of that policy is no
    /// reference for them.
    pub fn assigned(&self) -> Assigned {
        let mut assigned = Assigned::new();
        for operation in &self.operations {
            if let ControlOp::Assign {
                limit, identifier, ..
            } = operation.operation()
            {
                let limits = assigned.entry(identifier.clone()).or_default();
                if !limits.iter().any(|l| **l == *limit.name) {
                    limits.push(limit.name.to_string());
                }
            }
        }
        assigned
    }

    /// Carries out every operation on `store` at `now_ms`, in file order: each is the control
    /// operation `edgelimit-admin` would send to Redis for the same line, and writes the same.
    pub fn apply(&mut self, store: &dyn Control, now_ms: u64) -> Result<(), SimError> {
        for operation in &self.operations {
            let done = ready(store.apply(operation.at(now_ms, TimeSource::At(now_ms))))?;
            done.map_err(|e| SimError::Store(format!("{}: {e}", self.applied.file)))?;
        }
        self.applied.applied_at_ms = Some(now_ms);
        Ok(())
    }
}

/// One line's words parsed by the control command line's clap command (`edgelimit-admin`'s), refusing the global flags that
/// choose a store or a configuration.
fn parse_line(words: &[String]) -> Result<Cli, String> {
    let args = std::iter::once("edgelimit-admin").chain(words.iter().map(String::as_str));
    let matches = Cli::command()
        .try_get_matches_from(args)
        .map_err(clap_message)?;
    for (id, flag) in STORE_FLAGS {
        if matches.value_source(id) == Some(ValueSource::CommandLine) {
            return Err(format!(
                "{flag}: the replay decides on its own store under the configuration given to \
                 --config; drop {flag}"
            ));
        }
    }
    Cli::from_arg_matches(&matches).map_err(clap_message)
}

/// clap's message on one line: its text up to the usage, without the `error: ` prefix and with
/// the indented lists it prints (missing arguments) folded in.
fn clap_message(e: clap::Error) -> String {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        return "a command is needed (tier set|clear, override set|clear, deny|allow add|remove), \
                not help or a version"
            .to_string();
    }
    let text = e.to_string();
    let text = text.split("\n\nUsage:").next().unwrap_or(&text);
    let text = text
        .split("\n\nFor more information")
        .next()
        .unwrap_or(text);
    let text = text.trim().trim_start_matches("error: ");
    text.split('\n')
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The name of `command` when it writes nothing the replay could use — looks (`peek`, `tier
/// get`, `… list`) and `reset` (the replay starts with every state fresh) — refused before it is
/// checked, so the refusal is what the line hears of first.
fn read_only(command: &Command) -> Option<&'static str> {
    match command {
        Command::Peek(_) => Some("peek"),
        Command::Reset(_) => Some("reset"),
        Command::Tier(TierCommand::Get(_)) => Some("tier get"),
        Command::Deny(ListCommand::List { .. }) => Some("deny list"),
        Command::Allow(ListCommand::List { .. }) => Some("allow list"),
        _ => None,
    }
}

/// Counts `operation` in `applied` (read-only ones were refused before).
fn count(applied: &mut AppliedOverrides, operation: &ControlOp) {
    applied.commands += 1;
    match operation {
        ControlOp::Assign {
            assignment: Some(assignment),
            ..
        } => match assignment {
            Assignment::Tier(_) => applied.tiers += 1,
            Assignment::Override(_) => applied.overrides += 1,
        },
        ControlOp::ClearAssignment { kind, .. } => match kind {
            AssignmentKind::Tier => applied.tier_clears += 1,
            AssignmentKind::Override => applied.override_clears += 1,
        },
        ControlOp::ListAdd { list, .. } => match list_kind(list) {
            ListKind::Deny => applied.deny_entries += 1,
            ListKind::Allow => applied.allow_entries += 1,
        },
        ControlOp::ListRemove { list, .. } => match list_kind(list) {
            ListKind::Deny => applied.deny_removals += 1,
            ListKind::Allow => applied.allow_removals += 1,
        },
        ControlOp::Assign {
            assignment: None, ..
        }
        | ControlOp::Assignments { .. }
        | ControlOp::ListEntries { .. }
        | ControlOp::Peek { .. }
        | ControlOp::Reset { .. } => {}
    }
}

/// Which kind of list the store's list name `list` is (`deny`, `deny:<rule>`, `allow`, …).
fn list_kind(list: &str) -> ListKind {
    let head = list.split(':').next().unwrap_or(list);
    if head == lists::DENY {
        ListKind::Deny
    } else {
        ListKind::Allow
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Commands are counted by kind, a rule's own list under its kind (`deny:api` is a deny
    /// list), and the summary names only the kinds present, singular or plural by count.
    #[test]
    fn commands_are_counted_by_kind() {
        let config = edgelimit_engine::config::file::parse(
            r#"
[[rules]]
name = "api"
limits = [{ name = "per-ip", policy = "fixed 3/1m", identifier = "ip", tiers = { pro = "fixed 9/1m" } }]
"#,
            "c.toml",
        )
        .unwrap();
        let text = "tier set per-ip 192.0.2.1 pro\n\
                    tier set per-ip 192.0.2.2 pro --ttl 1h\n\
                    tier clear per-ip 192.0.2.1\n\
                    deny add --rule api ip 192.0.2.0/24 # comment\n\
                    allow remove country FR\n";
        let overrides = Overrides::parse(text, "o.txt", &config, "c.toml").unwrap();
        let applied = overrides.applied();
        assert_eq!(
            (
                applied.commands,
                applied.tiers,
                applied.tier_clears,
                applied.deny_entries,
                applied.allow_removals,
                applied.allow_entries,
            ),
            (5, 2, 1, 1, 1, 0)
        );
        assert_eq!(
            applied.summary(),
            "2 tiers, 1 tier cleared, 1 deny entry, 1 allow entry removed"
        );
        let assigned = overrides.assigned();
        assert_eq!(assigned.values().map(Vec::len).sum::<usize>(), 2);
        assert_eq!(assigned[&Identifier::from("192.0.2.2")], ["per-ip"]);
        assert_eq!(applied.applied_at_ms, None);
    }
}
