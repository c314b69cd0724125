//! The control command line, as clap parses it: `edgelimit-admin`'s arguments, and each line of
//! `sim --overrides`. Nothing here is validated beyond its shape: [`super::plan`] turns it into
//! a checked [`super::Planned`] operation first.
// These doc comments are `--help`'s text, where a URL is written as a user types it.
#![allow(rustdoc::bare_urls)]

use std::fmt;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Live control of an edgelimit deployment: peek and reset an identifier's standing, assign tiers
/// and overrides, keep deny and allow lists — straight in the deployment's Redis, or through the
/// Worker's admin route when the state is in its Durable Objects.
#[derive(Debug, Parser)]
#[command(name = "edgelimit-admin", version)]
pub struct Cli {
    /// The store: redis://host:port[/db], redis+cluster://host:port[,host:port…],
    /// upstash+https://host (token from UPSTASH_REDIS_REST_TOKEN). Default: the REST store in
    /// UPSTASH_REDIS_REST_URL.
    #[arg(long, global = true, value_name = "URL", conflicts_with = "worker")]
    pub store: Option<String>,
    /// Treat a redis:// store (or a comma-separated list of them) as a Redis Cluster.
    #[arg(long, global = true, conflicts_with = "worker")]
    pub cluster: bool,
    /// The Worker whose Durable Objects hold the state (store = "durable-object"): its URL,
    /// e.g. https://edge.example.com. Every command is sent to its admin route, at the
    /// configuration's admin_path, with --token.
    #[arg(long, global = true, value_name = "URL")]
    pub worker: Option<String>,
    /// The admin route's token: the Worker's EDGELIMIT_ADMIN_TOKEN secret. Default: the
    /// EDGELIMIT_ADMIN_TOKEN environment variable (better: a command line is visible to other
    /// users of the machine). Never printed.
    #[arg(long, global = true, value_name = "TOKEN")]
    pub token: Option<Token>,
    /// The Worker's configuration: a wrangler.toml ([vars.EDGELIMIT_CONFIG]), a wrangler.json,
    /// or the table alone (TOML or JSON). The namespace, limits, tiers and rules come from it.
    #[arg(
        long,
        global = true,
        value_name = "FILE",
        env = "EDGELIMIT_ADMIN_CONFIG",
        default_value = "wrangler.toml"
    )]
    pub config: PathBuf,
    /// Print JSON (one object per command, stable field names) instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
    /// Use IDENTIFIER as stored: skip the Worker's keying (an `api-key:` limit's SHA-256, the
    /// trimming every source gets).
    #[arg(long, global = true)]
    pub raw_identifier: bool,
    /// How long the store may take per operation (e.g. `2s`, `500ms`).
    #[arg(long, global = true, value_name = "DURATION", default_value = "5s")]
    pub timeout: String,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// An identifier's standing on a limit (remaining, reset, retry after), without consuming.
    Peek(Target),
    /// Forget an identifier's state on a limit (its tier or override stays).
    Reset(Target),
    /// An identifier's tier on a limit.
    #[command(subcommand)]
    Tier(TierCommand),
    /// An identifier's own policy on a limit, overriding the limit's and any tier.
    #[command(subcommand)]
    Override(OverrideCommand),
    /// The deny lists: a listed request is refused (403) before any limit is counted.
    #[command(subcommand)]
    Deny(ListCommand),
    /// The allow lists: a listed request is let through without counting.
    #[command(subcommand)]
    Allow(ListCommand),
}

/// A limit and an identifier on it.
#[derive(Debug, Clone, Args)]
pub struct Target {
    /// The limit's name in the configuration.
    #[arg(value_name = "LIMIT")]
    pub limit: String,
    /// The identifier as the Worker takes it from a request (an address, a header's value, the
    /// API key itself for an `api-key:` limit).
    #[arg(value_name = "IDENTIFIER", allow_hyphen_values = true)]
    pub identifier: String,
}

/// `tier set|get|clear`.
#[derive(Debug, Subcommand)]
pub enum TierCommand {
    /// Put an identifier on one of the limit's tiers.
    Set {
        /// The limit and identifier.
        #[command(flatten)]
        target: Target,
        /// The tier, one the limit names in the configuration.
        #[arg(value_name = "TIER")]
        tier: String,
        /// Lapse after this long (`30s`, `1h`, `7d`); default never.
        #[arg(long, value_name = "DURATION", allow_hyphen_values = true)]
        ttl: Option<String>,
    },
    /// Show an identifier's tier or override and the policy in force.
    Get(Target),
    /// Put an identifier back on the limit's own policy.
    Clear(Target),
}

/// `override set|clear`.
#[derive(Debug, Subcommand)]
pub enum OverrideCommand {
    /// Give an identifier its own policy (same algorithm as the limit's).
    Set {
        /// The limit and identifier.
        #[command(flatten)]
        target: Target,
        /// The policy, e.g. 'gcra 100/1s burst 200'.
        #[arg(value_name = "POLICY")]
        policy: String,
        /// Lapse after this long (`30s`, `1h`, `7d`); default never.
        #[arg(long, value_name = "DURATION", allow_hyphen_values = true)]
        ttl: Option<String>,
    },
    /// Remove an identifier's override.
    Clear(Target),
}

/// `deny|allow add|remove|list`.
#[derive(Debug, Subcommand)]
pub enum ListCommand {
    /// Add an entry: `ip 203.0.113.7`, `ip 203.0.113.0/24`, `country CN`, `header:x-api-key abc`.
    Add {
        /// The entry: a source and a value (one argument quoted, or two).
        #[arg(value_name = "ENTRY", required = true, num_args = 1..=2)]
        entry: Vec<String>,
        /// The rule whose own list this is; default the configuration-wide list.
        #[arg(long, value_name = "RULE")]
        rule: Option<String>,
        /// Lapse after this long (`30s`, `1h`, `7d`); default never.
        #[arg(long, value_name = "DURATION", allow_hyphen_values = true)]
        ttl: Option<String>,
    },
    /// Remove an entry.
    Remove {
        /// The entry, as added.
        #[arg(value_name = "ENTRY", required = true, num_args = 1..=2)]
        entry: Vec<String>,
        /// The rule whose own list this is; default the configuration-wide list.
        #[arg(long, value_name = "RULE")]
        rule: Option<String>,
    },
    /// Show the entries in force (lapsed ones are left out).
    List {
        /// The rule whose own list this is; default the configuration-wide list.
        #[arg(long, value_name = "RULE")]
        rule: Option<String>,
    },
}

/// The admin route's bearer token: kept out of `Debug`, so no message or log can show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    /// The token as given.
    pub fn new(token: impl Into<String>) -> Token {
        Token(token.into())
    }

    /// Whether it is empty or only white space (no Worker accepts that).
    pub fn is_blank(&self) -> bool {
        self.0.trim().is_empty()
    }

    /// The token itself, for the one place it is sent (the `Authorization` header); `Debug`
    /// never shows it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

impl std::str::FromStr for Token {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Token, Self::Err> {
        Ok(Token(s.to_string()))
    }
}
