//! Requests into Redis commands: the JSON array and path forms, the allow-list, and the rewrite
//! of scripts that carry Upstash-only flags.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
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

/// One argument parsed straight from JSON text: the bytes [`from_json`] would make of it.
struct Arg(Vec<u8>);

impl<'de> serde::Deserialize<'de> for Arg {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Arg, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Arg;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string, number or boolean")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Arg, E> {
                Ok(Arg(v.as_bytes().to_vec()))
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Arg, E> {
                Ok(Arg(v.into_bytes()))
            }
            // Numbers go through `serde_json::Number` exactly as `Json` parsing does, so they
            // print the same.
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Arg, E> {
                Ok(Arg(serde_json::Number::from(v).to_string().into_bytes()))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Arg, E> {
                Ok(Arg(serde_json::Number::from(v).to_string().into_bytes()))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Arg, E> {
                match serde_json::Number::from_f64(v) {
                    Some(n) => Ok(Arg(n.to_string().into_bytes())),
                    None => Err(E::custom("not a finite number")),
                }
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Arg, E> {
                Ok(Arg(v.to_string().into_bytes()))
            }
        }
        d.deserialize_any(Visitor)
    }
}

/// A command parsed straight from JSON text.
struct Typed(Vec<Arg>);

impl<'de> serde::Deserialize<'de> for Typed {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Typed, D::Error> {
        Vec::<Arg>::deserialize(d).map(Typed)
    }
}

impl Typed {
    fn into_command(self) -> Option<Command> {
        (!self.0.is_empty()).then(|| self.0.into_iter().map(|a| a.0).collect())
    }
}

/// Parses one command from the JSON text of a request body.
///
/// The same as parsing the text into [`Json`] and calling [`from_json`], errors included, but a
/// well-formed command goes straight into bytes without building a [`Json`] tree first.
pub fn from_json_text(body: &[u8]) -> Result<Command, CommandError> {
    if let Some(command) = serde_json::from_slice::<Typed>(body)
        .ok()
        .and_then(Typed::into_command)
    {
        return Ok(command);
    }
    from_json(&parse_json(body)?)
}

/// Parses a list of commands from the JSON text of a `/pipeline` or `/multi-exec` body.
///
/// The same as parsing the text into [`Json`] and calling [`list_from_json`], errors included
/// (anything the fast path does not take goes that way), without the [`Json`] tree.
pub fn list_from_json_text(body: &[u8], max: usize) -> Result<Vec<Command>, CommandError> {
    if let Ok(list) = serde_json::from_slice::<Vec<Typed>>(body) {
        if !list.is_empty() && list.len() <= max && list.iter().all(|c| !c.0.is_empty()) {
            return Ok(list.into_iter().filter_map(Typed::into_command).collect());
        }
    }
    list_from_json(&parse_json(body)?, max)
}

/// The body as JSON.
pub fn parse_json(body: &[u8]) -> Result<Json, CommandError> {
    serde_json::from_slice(body).map_err(|e| CommandError::Json(e.to_string()))
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

/// Longest name [`Upper`] holds without allocating (no Redis command or subcommand is longer).
const NAME_BUFFER: usize = 32;

/// A name upper-cased as [`name`] does, on the stack when it is short and valid UTF-8.
enum Upper {
    Inline([u8; NAME_BUFFER], usize),
    Heap(String),
}

impl Upper {
    fn of(bytes: &[u8]) -> Upper {
        if bytes.len() <= NAME_BUFFER && std::str::from_utf8(bytes).is_ok() {
            let mut buffer = [0u8; NAME_BUFFER];
            buffer[..bytes.len()].copy_from_slice(bytes);
            buffer[..bytes.len()].make_ascii_uppercase();
            Upper::Inline(buffer, bytes.len())
        } else {
            Upper::Heap(String::from_utf8_lossy(bytes).to_ascii_uppercase())
        }
    }

    fn as_str(&self) -> &str {
        match self {
            // Valid UTF-8 upper-cased byte by byte in the ASCII range stays valid UTF-8.
            Upper::Inline(buffer, len) => std::str::from_utf8(&buffer[..*len]).unwrap_or(""),
            Upper::Heap(s) => s,
        }
    }
}

/// Checks the command against the allow-list and the token's access.
pub fn check_allowed(
    command: &Command,
    config: &Config,
    access: Access,
) -> Result<(), CommandError> {
    let upper = Upper::of(&command[0]);
    let name = upper.as_str();
    let allowed = config.allowed.contains(name)
        && (access == Access::Full || READ_ONLY_COMMANDS.contains(&name));
    if !allowed {
        return Err(CommandError::NotAllowed(name.to_string()));
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

/// Script rewrites: scripts whose `#!lua` shebang carries `UPSTASH_ONLY_FLAG` run without it,
/// and the client's SHA (of the script it sent) maps to the SHA Redis knows it by.
#[derive(Debug, Default)]
pub struct Scripts {
    client_to_loaded: Mutex<HashMap<String, String>>,
    // Whether `client_to_loaded` ever got an entry: until then an EVALSHA has nothing to map
    // and need not take the lock (the common case: scripts without the Upstash-only flag).
    any: AtomicBool,
}

impl Scripts {
    /// Rewrites EVAL/EVAL_RO/SCRIPT LOAD sources and EVALSHA/EVALSHA_RO/SCRIPT EXISTS SHAs in
    /// place. Returns the client's SHA when a SCRIPT LOAD was rewritten: the reply must carry it,
    /// since that is the SHA the client will call.
    pub fn rewrite(&self, command: &mut Command) -> Option<String> {
        let upper = Upper::of(command.first()?);
        let name = upper.as_str();
        match name {
            "EVAL" | "EVAL_RO" | "SCRIPT" => {}
            "EVALSHA" | "EVALSHA_RO" if self.any.load(Ordering::SeqCst) => {}
            _ => return None,
        }
        let mut map = self
            .client_to_loaded
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        match name {
            "EVAL" | "EVAL_RO" => {
                let source = command.get_mut(1)?;
                let (client_sha, loaded_sha) = strip(source)?;
                map.insert(client_sha, loaded_sha);
                self.any.store(true, Ordering::SeqCst);
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
                        self.any.store(true, Ordering::SeqCst);
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
    fn parsing_text_is_parsing_json_then_commands() {
        let bodies: &[&str] = &[
            r#"[["SET","k",1,2.5,true,false,-3,1e3,18446744073709551615,-9223372036854775808]]"#,
            r#"[["GET","a\"b\u00e9\n"],["PING"]]"#,
            r#" [ [ "EVALSHA" , "abc" , 0 ] ] "#,
            r#"[]"#,
            r#"[[]]"#,
            r#"[["GET","k"],[]]"#,
            r#"[["GET",null]]"#,
            r#"[["GET",{"a":1}]]"#,
            r#"[["GET",["x"]]]"#,
            r#"["GET"]"#,
            r#"{"a":1}"#,
            r#"[["GET","k"]"#,
            r#"[["GET","k"]] x"#,
            r#"[["GET",1e400]]"#,
            r#""#,
            r#"[["A"],["B"],["C"]]"#,
        ];
        for body in bodies {
            let expected = parse_json(body.as_bytes()).and_then(|j| list_from_json(&j, 2));
            assert_eq!(list_from_json_text(body.as_bytes(), 2), expected, "{body}");
            let one = body
                .trim()
                .strip_prefix('[')
                .and_then(|b| b.strip_suffix(']'));
            if let Some(one) = one {
                let expected = parse_json(one.as_bytes()).and_then(|j| from_json(&j));
                assert_eq!(from_json_text(one.as_bytes()), expected, "{one}");
            }
        }
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
