//! The configuration as native tools read it from a file (`sim replay --config`,
//! `edgelimit-admin --config`): a `wrangler.toml` (its `[vars.EDGELIMIT_CONFIG]` table, or that
//! var as a JSON string), a `wrangler.json` with `vars.EDGELIMIT_CONFIG`, or the table alone as
//! TOML or JSON. Validation is the Worker's own (`Config::from_value`), so a bad configuration
//! fails with the very message the Worker would answer its 500 with. Native only: the Worker
//! itself gets the var from its environment.

use std::path::Path;

use serde_json::Value;

use crate::config::{Config, CONFIG_VAR};

/// A configuration file that could not be read or is not a valid configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}: {message}")]
pub struct ConfigFileError {
    /// The file, as given.
    pub file: String,
    /// What is wrong (`EDGELIMIT_CONFIG: rules[0] "api" → …` for the Worker's checks).
    pub message: String,
}

/// Reads and validates the configuration in `path`.
pub fn load(path: &Path) -> Result<Config, ConfigFileError> {
    let text = std::fs::read_to_string(path).map_err(|e| ConfigFileError {
        file: path.display().to_string(),
        message: e.to_string(),
    })?;
    parse(&text, &path.display().to_string())
}

/// Validates the configuration in `text`; `name` is the file, for messages.
pub fn parse(text: &str, name: &str) -> Result<Config, ConfigFileError> {
    let fail = |message: String| ConfigFileError {
        file: name.to_string(),
        message,
    };
    let document = if text.trim_start().starts_with('{') {
        serde_json::from_str::<Value>(text).map_err(|e| {
            fail(format!(
                "line {}, column {}: not valid JSON: {e}",
                e.line(),
                e.column()
            ))
        })?
    } else {
        let table: toml::Table = toml::from_str(text)
            .map_err(|e| fail(format!("not valid TOML: {}", e.to_string().trim_end())))?;
        toml_to_json(toml::Value::Table(table))
    };
    let config = match document.get("vars") {
        Some(vars) => match vars.get(CONFIG_VAR) {
            // A string var is taken as JSON, as the Worker takes it.
            Some(Value::String(json)) => Config::from_json(json),
            Some(table) => Config::from_value(table.clone()),
            None => return Err(fail(not_set())),
        },
        // A wrangler file without the var; anything else is the table itself.
        None if ["name", "main", "compatibility_date"]
            .iter()
            .any(|k| document.get(k).is_some()) =>
        {
            return Err(fail(not_set()))
        }
        None => Config::from_value(document),
    };
    config.map_err(|e| fail(e.to_string()))
}

/// The Worker's message for a deployment without the var.
fn not_set() -> String {
    format!("{CONFIG_VAR}: (var): is not set: add a [vars.{CONFIG_VAR}] table to wrangler.toml")
}

/// A TOML value as the JSON wrangler hands the Worker (dates become their text).
fn toml_to_json(value: toml::Value) -> Value {
    match value {
        toml::Value::String(s) => Value::String(s),
        toml::Value::Integer(i) => Value::from(i),
        toml::Value::Float(f) => serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number),
        toml::Value::Boolean(b) => Value::Bool(b),
        toml::Value::Datetime(d) => Value::String(d.to_string()),
        toml::Value::Array(items) => Value::Array(items.into_iter().map(toml_to_json).collect()),
        toml::Value::Table(table) => Value::Object(
            table
                .into_iter()
                .map(|(k, v)| (k, toml_to_json(v)))
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULE: &str = r#"
[[rules]]
name = "api"
path_prefix = "/api/"
limits = [{ name = "per-ip", policy = "gcra 10/1s burst 20", identifier = "ip" }]
"#;

    #[test]
    fn reads_every_shape_the_worker_accepts() {
        let alone = parse(RULE, "rules.toml").unwrap();
        let wrangler = format!(
            "name = \"edge\"\nmain = \"build/worker/shim.mjs\"\n[vars]\nORIGIN = \"http://x\"\n\n{}",
            RULE.replace("[[rules]]", "[[vars.EDGELIMIT_CONFIG.rules]]")
        );
        assert_eq!(parse(&wrangler, "wrangler.toml").unwrap(), alone);
        let json = r#"{"rules":[{"name":"api","path_prefix":"/api/","limits":[{"name":"per-ip","policy":"gcra 10/1s burst 20","identifier":"ip"}]}]}"#;
        assert_eq!(parse(json, "c.json").unwrap(), alone);
        let string_var = format!("[vars]\nEDGELIMIT_CONFIG = '{json}'\n");
        assert_eq!(parse(&string_var, "wrangler.toml").unwrap(), alone);
        let jsonc = format!(r#"{{"name":"edge","vars":{{"EDGELIMIT_CONFIG":{json}}}}}"#);
        assert_eq!(parse(&jsonc, "wrangler.json").unwrap(), alone);
    }

    #[test]
    fn invalid_configurations_fail_with_the_workers_message() {
        let bad = RULE.replace("identifier = \"ip\"", "identifier = \"cookie:session\"");
        let worker = Config::from_value(toml_to_json(toml::Value::Table(
            toml::from_str(&bad).unwrap(),
        )))
        .unwrap_err()
        .to_string();
        let e = parse(&bad, "rules.toml").unwrap_err().to_string();
        assert_eq!(e, format!("rules.toml: {worker}"));
        assert!(
            e.contains(r#"EDGELIMIT_CONFIG: rules[0] "api" → limits[0] "per-ip" → identifier"#),
            "{e}"
        );
        let e = parse("name = \"edge\"\n", "wrangler.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("EDGELIMIT_CONFIG: (var): is not set"), "{e}");
        let e = parse("[[rules]\n", "x.toml").unwrap_err().to_string();
        assert!(e.starts_with("x.toml: not valid TOML"), "{e}");
        let e = parse("{\"rules\": [", "x.json").unwrap_err().to_string();
        assert!(e.contains("line 1"), "{e}");
        let typo = RULE.replace("path_prefix", "path_prefx");
        let e = parse(&typo, "x.toml").unwrap_err().to_string();
        assert!(e.contains("rules[0].path_prefx"), "{e}");
    }
}
