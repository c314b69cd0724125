//! The suggestion as configuration to paste: one shadow rule per window, each with the limit
//! suggested there, and the command that replays it. A shadow rule is decided and reported but
//! never refuses (docs/configuration.md, "A rule"), the first step of a rollout; its limits then
//! move to an enforcing rule staged with `enforce = "10%"`, then enforced for everyone.

use std::fmt::Write;

use super::peaks::PeakRates;

/// The Worker's identifier for a trace's `--key`: what `sim replay --config` reads the same
/// value from, and a comment when that is a guess to check.
fn identifier(key: &str) -> (String, Option<String>) {
    let known = match key {
        "ip" => Some("ip"),
        "host" => Some("header:host"),
        "agent" => Some("header:user-agent"),
        "user" => Some("header:x-remote-user"),
        _ => None,
    };
    if let Some(id) = known {
        return (id.to_string(), None);
    }
    if ["header:", "query:", "path:", "api-key:"]
        .iter()
        .any(|p| key.starts_with(p))
    {
        return (key.to_string(), None);
    }
    (
        format!("header:{}", key.to_ascii_lowercase()),
        Some(format!(
            "# the trace's `{key}` read as a request header: name where the Worker finds it"
        )),
    )
}

/// `text` kept to the characters a rule's or a limit's name may hold.
fn name_part(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect()
}

/// The shadow rules of the windows' suggestions for a trace keyed by `key`: one per window with
/// a suggestion, in the `[[vars.EDGELIMIT_CONFIG.rules]]` form `wrangler.toml` takes and `sim
/// replay --config` reads alone; `None` when no window has one.
pub fn shadow_rules(key: &str, peaks: &[PeakRates]) -> Option<String> {
    let (id, note) = identifier(key);
    let key_name = name_part(key);
    let mut out = String::new();
    for p in peaks {
        let Some(policy) = &p.suggested else {
            continue;
        };
        if !out.is_empty() {
            out.push('\n');
        }
        let _ = writeln!(out, "[[vars.EDGELIMIT_CONFIG.rules]]");
        let _ = writeln!(out, "name = \"suggested-{}\"", name_part(&p.window));
        let _ = writeln!(
            out,
            "shadow = true   # decided and reported, never refusing"
        );
        if let Some(note) = &note {
            let _ = writeln!(out, "{note}");
        }
        let _ = writeln!(
            out,
            "limits = [{{ name = \"per-{key_name}-{}\", policy = \"{policy}\", identifier = \"{id}\" }}]",
            name_part(&p.window)
        );
    }
    (!out.is_empty()).then_some(out)
}

/// `text` as one shell word.
fn shell_word(text: &str) -> String {
    if !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=@%+,".contains(c))
    {
        text.to_string()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

/// The command replaying the trace named `trace` (as the report names it) through the
/// configuration in `file`.
pub fn replay_command(trace: &str, file: &str) -> String {
    let trace = if trace.starts_with("bundled:") {
        // The bundled trace is this file of a checkout, compiled in.
        "sim/data/apache_logs.gz"
    } else if trace == "-" {
        "TRACE"
    } else {
        trace
    };
    format!(
        "sim replay {} --config {}",
        shell_word(trace),
        shell_word(file)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_become_the_identifiers_the_replay_reads() {
        assert_eq!(identifier("ip"), ("ip".into(), None));
        assert_eq!(identifier("agent").0, "header:user-agent");
        assert_eq!(identifier("query:key").0, "query:key");
        let (id, note) = identifier("ClientRequestUserAgent");
        assert_eq!(id, "header:clientrequestuseragent");
        assert!(note.unwrap().contains("`ClientRequestUserAgent`"));
    }

    #[test]
    fn the_command_names_the_trace_as_a_shell_reads_it() {
        assert_eq!(
            replay_command("bundled:apache_logs (…)", "suggested.toml"),
            "sim replay sim/data/apache_logs.gz --config suggested.toml"
        );
        assert_eq!(
            replay_command("my logs/a b.log", "s.toml"),
            "sim replay 'my logs/a b.log' --config s.toml"
        );
    }
}
