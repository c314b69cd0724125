//! Requests into Redis commands: the JSON array and path forms, the allow-list, and the rewrite
//! of scripts that carry Upstash-only flags.

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::Value as Json;

use crate::auth::{percent_decode, Access};
use crate::config::{Config, READ_ONLY_COMMANDS, SCRIPT_SUBCOMMANDS};

/// One command: its arguments as Redis receives them (the name first).
pub type Command = Vec<Vec<u8>>;

/// Why a request cannot become commands. Each becomes a JSON error with status 400.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    /// The body is not JSON.
    #[error("ERR the request body is not valid JSON: {0}")]
    Json(String),
    /// The JSON has the wrong shape.
    #[error("ERR {0}")]
    Shape(String),
    /// The command is not on the allow-list (or not for this token).
    #[error("ERR command `{0}` is not allowed by this gateway")]
    NotAllowed(String),
}

/// Parses one command from a JSON array of strings, numbers and booleans.
pub fn from_json(json: &Json) -> Result<Command, CommandError> {
    let Json::Array(parts) = json else {
        return Err(CommandError::Shape(format!(
            "a command is a JSON array like [\"SET\", \"key\", \"value\"], got {}",
            kind(json)
        )));
    };
    if parts.is_empty() {
        return Err(CommandError::Shape("empty command array".into()));
    }
    parts
        .iter()
        .enumerate()
        .map(|(i, part)| match part {
            Json::String(s) => Ok(s.as_bytes().to_vec()),
            Json::Number(n) => Ok(n.to_string().into_bytes()),
            Json::Bool(b) => Ok(b.to_string().into_bytes()),
            other => Err(CommandError::Shape(format!(
                "argument {i} is {}; only strings, numbers and booleans are allowed",
                kind(other)
            ))),
        })
        .collect()
}

/// Parses a list of commands (the `/pipeline` and `/multi-exec` body).
pub fn list_from_json(json: &Json, max: usize) -> Result<Vec<Command>, CommandError> {
    let Json::Array(commands) = json else {
        return Err(CommandError::Shape(format!(
            "a pipeline is a JSON array of command arrays, got {}",
            kind(json)
        )));
    };
    if commands.is_empty() {
        return Err(CommandError::Shape("empty pipeline".into()));
    }
    if commands.len() > max {
        return Err(CommandError::Shape(format!(
            "pipeline of {} commands exceeds the limit of {max}",
            commands.len()
        )));
    }
    commands.iter().map(from_json).collect()
}

/// Parses the path form: `/set/foo/bar/EX/100`, with a POST body as the last argument.
pub fn from_path(path: &str, body: Option<&[u8]>) -> Result<Command, CommandError> {
    let mut parts: Command = path
        .trim_start_matches('/')
        .split('/')
        .filter(|p| !p.is_empty())
        .map(|p| percent_decode(p).into_bytes())
        .collect();
    if parts.is_empty() {
        return Err(CommandError::Shape("no command in the path".into()));
    }
    if let Some(body) = body.filter(|b| !b.is_empty()) {
        parts.push(body.to_vec());
    }
    Ok(parts)
}

fn kind(json: &Json) -> &'static str {
    match json {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "an array",
        Json::Object(_) => "an object",
    }
}

/// The command's name, upper-cased.
pub fn name(command: &Command) -> String {
    String::from_utf8_lossy(&command[0]).to_ascii_uppercase()
}

/// Checks the command against the allow-list and the token's access.
pub fn check_allowed(
    command: &Command,
    config: &Config,
    access: Access,
) -> Result<(), CommandError> {
    let name = name(command);
    let allowed = config.allowed.contains(&name)
        && (access == Access::Full || READ_ONLY_COMMANDS.contains(&name.as_str()));
    if !allowed {
        return Err(CommandError::NotAllowed(name));
    }
    if name == "SCRIPT" {
        let sub = command
            .get(1)
            .map(|s| String::from_utf8_lossy(s).to_ascii_uppercase())
            .unwrap_or_default();
        if !SCRIPT_SUBCOMMANDS.contains(&sub.as_str())
            && !config.allowed.contains(&format!("SCRIPT {sub}"))
        {
            return Err(CommandError::NotAllowed(format!("SCRIPT {sub}")));
        }
    }
    Ok(())
}

/// The Upstash-only script flag plain Redis rejects in a shebang.
const UPSTASH_ONLY_FLAG: &str = "allow-key-locking";

/// Script rewrites: scripts whose `#!lua` shebang carries [`UPSTASH_ONLY_FLAG`] run without it,
/// and the client's SHA (of the script it sent) maps to the SHA Redis knows it by.
#[derive(Debug, Default)]
pub struct Scripts {
    client_to_loaded: Mutex<HashMap<String, String>>,
}

impl Scripts {
    /// Rewrites EVAL/EVAL_RO/SCRIPT LOAD sources and EVALSHA/EVALSHA_RO/SCRIPT EXISTS SHAs in
    /// place. Returns the client's SHA when a SCRIPT LOAD was rewritten: the reply must carry it,
    /// since that is the SHA the client will call.
    pub fn rewrite(&self, command: &mut Command) -> Option<String> {
        let name = name(command);
        let mut map = self
            .client_to_loaded
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        match name.as_str() {
            "EVAL" | "EVAL_RO" => {
                let source = command.get_mut(1)?;
                let (client_sha, loaded_sha) = strip(source)?;
                map.insert(client_sha, loaded_sha);
                None
            }
            "EVALSHA" | "EVALSHA_RO" => {
                let sha = command.get_mut(1)?;
                let key = String::from_utf8_lossy(sha).to_ascii_lowercase();
                if let Some(loaded) = map.get(&key) {
                    *sha = loaded.clone().into_bytes();
                }
                None
            }
            "SCRIPT" => {
                let sub = String::from_utf8_lossy(command.get(1)?).to_ascii_uppercase();
                match sub.as_str() {
                    "LOAD" => {
                        let source = command.get_mut(2)?;
                        let (client_sha, loaded_sha) = strip(source)?;
                        map.insert(client_sha.clone(), loaded_sha);
                        Some(client_sha)
                    }
                    "EXISTS" => {
                        for sha in command.iter_mut().skip(2) {
                            let key = String::from_utf8_lossy(sha).to_ascii_lowercase();
                            if let Some(loaded) = map.get(&key) {
                                *sha = loaded.clone().into_bytes();
                            }
                        }
                        None
                    }
                    _ => None,
                }
            }
            _ => None,
        }
    }
}

/// Removes [`UPSTASH_ONLY_FLAG`] from a script's shebang, if there; returns the SHA1 of the
/// script as sent and of the script as rewritten.
fn strip(source: &mut Vec<u8>) -> Option<(String, String)> {
    let text = std::str::from_utf8(source).ok()?;
    let (first, rest) = text.split_once('\n').unwrap_or((text, ""));
    let flags = first.strip_prefix("#!lua")?.trim();
    let flags = flags.strip_prefix("flags=").unwrap_or("");
    if !flags.split(',').any(|f| f.trim() == UPSTASH_ONLY_FLAG) {
        return None;
    }
    let kept: Vec<&str> = flags
        .split(',')
        .map(str::trim)
        .filter(|f| !f.is_empty() && *f != UPSTASH_ONLY_FLAG)
        .collect();
    let rewritten = if kept.is_empty() {
        // No shebang at all: the script runs as a classic EVAL script, as Upstash runs it.
        rest.to_string()
    } else {
        format!("#!lua flags={}\n{rest}", kept.join(","))
    };
    let client_sha = sha1_smol::Sha1::from(source.as_slice())
        .digest()
        .to_string();
    let loaded_sha = sha1_smol::Sha1::from(rewritten.as_bytes())
        .digest()
        .to_string();
    *source = rewritten.into_bytes();
    Some((client_sha, loaded_sha))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_arguments_may_be_strings_numbers_or_booleans() {
        let c = from_json(&json!(["SET", "k", 1, 2.5, true])).unwrap();
        assert_eq!(
            c,
            vec![
                b"SET".to_vec(),
                b"k".to_vec(),
                b"1".to_vec(),
                b"2.5".to_vec(),
                b"true".to_vec()
            ]
        );
        let err = from_json(&json!(["SET", {"a": 1}])).unwrap_err();
        assert!(err.to_string().contains("argument 1 is an object"), "{err}");
        assert!(from_json(&json!("GET")).is_err());
        assert!(from_json(&json!([])).is_err());
    }

    #[test]
    fn path_form_takes_the_post_body_last() {
        let c = from_path("/set/foo/bar%20baz/EX/100", None).unwrap();
        assert_eq!(c[2], b"bar baz");
        let c = from_path("/set/foo", Some(b"value")).unwrap();
        assert_eq!(c, vec![b"set".to_vec(), b"foo".to_vec(), b"value".to_vec()]);
    }

    #[test]
    fn the_upstash_flag_is_stripped_and_shas_mapped() {
        let scripts = Scripts::default();
        let source = "#!lua flags=allow-key-locking\nreturn 1";
        let client_sha = sha1_smol::Sha1::from(source).digest().to_string();
        let mut eval = vec![b"EVAL".to_vec(), source.as_bytes().to_vec(), b"0".to_vec()];
        assert_eq!(scripts.rewrite(&mut eval), None);
        assert_eq!(eval[1], b"return 1");
        let mut evalsha = vec![
            b"evalsha".to_vec(),
            client_sha.clone().into_bytes(),
            b"0".to_vec(),
        ];
        scripts.rewrite(&mut evalsha);
        assert_eq!(
            evalsha[1],
            sha1_smol::Sha1::from("return 1")
                .digest()
                .to_string()
                .into_bytes()
        );
        let mut load = vec![
            b"SCRIPT".to_vec(),
            b"LOAD".to_vec(),
            b"#!lua flags=no-writes,allow-key-locking\nreturn 2".to_vec(),
        ];
        let answered = scripts.rewrite(&mut load).unwrap();
        assert_eq!(load[2], b"#!lua flags=no-writes\nreturn 2");
        assert_eq!(
            answered,
            sha1_smol::Sha1::from("#!lua flags=no-writes,allow-key-locking\nreturn 2")
                .digest()
                .to_string()
        );
        // Scripts without the flag pass untouched.
        let mut plain = vec![b"EVAL".to_vec(), b"return 3".to_vec(), b"0".to_vec()];
        scripts.rewrite(&mut plain);
        assert_eq!(plain[1], b"return 3");
    }
}
