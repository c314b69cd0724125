//! Structured-field lists as the `RateLimit` and `RateLimit-Policy` headers carry them
//! (`"name";q=5;w=3600, "other";r=0`): read back by a test to assert on each limit's parameters.
//! Only the shapes those headers use: an sf-string name per item, parameters `key=value`.

use std::collections::BTreeMap;

/// One item of a list: its name (unquoted) and its parameters, in order, values as written
/// (strings keep their quotes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    /// The item's name, its sf-string unquoted.
    pub name: String,
    /// `key=value` parameters in order; a bare `key` has the value `?1` (true).
    pub params: Vec<(String, String)>,
}

impl Item {
    /// The parameter `key` as written, if present.
    pub fn param(&self, key: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// The items of `field`. An error names what is not a `"name";key=value` item.
pub fn items(field: &str) -> Result<Vec<Item>, String> {
    field
        .split(',')
        .map(|item| {
            let mut parts = item.trim().split(';');
            let name = parts.next().unwrap_or_default();
            let name = name
                .strip_prefix('"')
                .and_then(|n| n.strip_suffix('"'))
                .ok_or_else(|| format!("item name `{name}` is not an sf-string in `{field}`"))?;
            let params = parts
                .map(|p| match p.split_once('=') {
                    Some((k, v)) => (k.to_string(), v.to_string()),
                    None => (p.to_string(), "?1".to_string()),
                })
                .collect();
            Ok(Item {
                name: name.to_string(),
                params,
            })
        })
        .collect()
}

/// `field` as item name → integer parameters. Panics unless every item is named by an
/// sf-string and every parameter is `key=<integer>` (so `RateLimit` fields, and policies
/// without a quota unit).
pub fn parse_sf_list(field: &str) -> BTreeMap<String, BTreeMap<String, u64>> {
    items(field)
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .map(|item| {
            let params = item
                .params
                .into_iter()
                .map(|(k, v)| {
                    let v = v
                        .parse::<u64>()
                        .unwrap_or_else(|_| panic!("parameter {k}={v} is no integer in `{field}`"));
                    (k, v)
                })
                .collect();
            (item.name, params)
        })
        .collect()
}

/// The integer parameter `key` of the item named `name` in `field`: `None` when the field does
/// not parse, has no such item, or the item no such integer.
pub fn int_param(field: &str, name: &str, key: &str) -> Option<u64> {
    items(field)
        .ok()?
        .into_iter()
        .find(|item| item.name == name)?
        .param(key)?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_read_back_by_item_and_parameter() {
        let field = r#""fixed";q=5;w=3600, "inflight";q=2;qu="concurrent-requests""#;
        let all = items(field).unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all[1].param("qu"), Some("\"concurrent-requests\""));
        assert_eq!(int_param(field, "fixed", "w"), Some(3600));
        assert_eq!(int_param(field, "inflight", "qu"), None);
        assert_eq!(int_param(field, "missing", "q"), None);
        let state = parse_sf_list(r#""a";r=0;t=59, "b";r=7"#);
        assert_eq!(state["a"]["t"], 59);
        assert_eq!(state["b"]["r"], 7);
        assert!(items("fixed;q=5").unwrap_err().contains("not an sf-string"));
    }

    #[test]
    #[should_panic(expected = "no integer")]
    fn a_string_parameter_is_no_integer() {
        parse_sf_list(r#""a";qu="requests""#);
    }
}
