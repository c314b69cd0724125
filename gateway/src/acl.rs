//! The Redis ACL user that holds scripts to the allow-list.
//!
//! The gateway checks each command a client sends, but `EVAL` carries Lua that calls
//! `redis.call(…)` inside Redis, out of the gateway's sight: with the token,
//! `["EVAL", "return redis.call('FLUSHALL')", "0"]` would empty the database although `FLUSHALL`
//! is refused. Redis checks every command a script calls against the ACL user running the
//! script, so the gateway runs everything as a user allowed exactly the allow-list (see
//! docs/decisions.md, "The gateway's boundary"): what a token may not send, its scripts may not
//! call either.

use std::collections::BTreeSet;

use sha2::{Digest, Sha256};

use crate::config::{NEVER_ALLOWED, SCRIPT_SUBCOMMANDS};

/// Why the ACL user could not be created.
#[derive(Debug, Clone, thiserror::Error)]
#[error("cannot create the Redis ACL user `{user}` that holds scripts to the allow-list: {reason}. {hint}")]
pub struct AclError {
    /// The user's name.
    pub user: String,
    /// What Redis answered (the password never appears).
    pub reason: String,
    /// What to do about it.
    pub hint: String,
}

/// The ACL user: its name, password and the rules `ACL SETUSER` gives it.
#[derive(Clone)]
pub struct AclUser {
    name: String,
    password: String,
    commands: Vec<String>,
}

impl std::fmt::Debug for AclUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AclUser")
            .field("name", &self.name)
            .field("password", &"<redacted>")
            .field("commands", &self.commands)
            .finish()
    }
}

impl AclUser {
    /// The user `name` for a gateway with this allow-list and token, on database `db`.
    ///
    /// The password is derived from the token, so gateways sharing a Redis, a user name and a
    /// token agree on it and never lock each other out when one restarts; knowing it grants no
    /// more than the token does.
    pub fn new(name: &str, allowed: &BTreeSet<String>, token: &str, db: i64) -> AclUser {
        let mut digest = Sha256::new();
        digest.update(b"edgelimit-gateway ACL password\n");
        digest.update(token.as_bytes());
        let password = digest
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        AclUser {
            name: name.to_string(),
            password,
            commands: acl_commands(allowed, db),
        }
    }

    /// The user's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The user's password.
    pub fn password(&self) -> &str {
        &self.password
    }

    /// `ACL SETUSER` for `commands`: from scratch (`reset`), so the rules are exactly this
    /// gateway's even when the user existed with others; every key, no channel, only `commands`.
    fn setuser(&self, commands: &[String]) -> redis::Cmd {
        let mut cmd = redis::cmd("ACL");
        cmd.arg("SETUSER")
            .arg(&self.name)
            .arg("reset")
            .arg("on")
            .arg(format!(">{}", self.password))
            .arg("~*")
            .arg("resetchannels")
            .arg("-@all");
        for command in commands {
            cmd.arg(format!("+{command}"));
        }
        cmd
    }

    /// Creates or resets the user through `admin` (a connection as the Redis URL's own user).
    /// Returns the allowed commands this Redis does not know (an older version): left out of the
    /// ACL, as Redis could not run them anyway.
    pub async fn create(
        &self,
        admin: &mut impl redis::aio::ConnectionLike,
    ) -> Result<Vec<String>, AclError> {
        let mut commands = self.commands.clone();
        let mut unknown = Vec::new();
        loop {
            let e = match self.setuser(&commands).query_async::<()>(admin).await {
                Ok(()) => return Ok(unknown),
                Err(e) => e.to_string(),
            };
            match unknown_command(&e) {
                Some(name) if commands.contains(&name) => {
                    commands.retain(|c| *c != name);
                    unknown.push(name);
                }
                _ => return Err(self.error(&e)),
            }
        }
    }

    /// The error for Redis's answer `reason`, with the password scrubbed and advice.
    fn error(&self, reason: &str) -> AclError {
        AclError {
            user: self.name.clone(),
            reason: reason.replace(&self.password, "<redacted>"),
            hint: "Give the --redis-url user the right to run ACL SETUSER, or create a restricted \
                   user yourself, put it in --redis-url and pass --redis-acl off"
                .to_string(),
        }
    }
}

/// The command in Redis's answer to an `ACL SETUSER` naming a command it does not know:
/// `ERR Error in ACL SETUSER modifier '+nosuch': Unknown command or category name in ACL`.
fn unknown_command(reason: &str) -> Option<String> {
    if !reason.contains("Unknown command") {
        return None;
    }
    let rest = reason.split("modifier '+").nth(1)?;
    Some(rest.split('\'').next()?.to_string())
}

/// The ACL's command names for an allow-list: each name (`SCRIPT` as its allowed subcommands,
/// `SCRIPT FLUSH` as `script|flush`), plus what the gateway itself sends: `MULTI` and `EXEC`
/// around `/multi-exec`, and, when the URL names a database other than 0, `SELECT` of that
/// database only (`select|3`: the connection selects it when it opens). Redis refuses `MULTI`,
/// `EXEC` and `SELECT` from clients here unless the allow-list names them, and `MULTI`/`EXEC`
/// inside scripts always; a script's `SELECT` of any other database is refused, so a script
/// reaches no database but the URL's. Commands of [`NEVER_ALLOWED`] are left out whatever the
/// list says (the gateway refuses to start with one).
pub fn acl_commands(allowed: &BTreeSet<String>, db: i64) -> Vec<String> {
    let mut commands = BTreeSet::new();
    for entry in allowed {
        let mut words = entry.split_whitespace().map(str::to_ascii_lowercase);
        let Some(name) = words.next() else { continue };
        if NEVER_ALLOWED.iter().any(|n| n.eq_ignore_ascii_case(&name)) {
            continue;
        }
        match words.next() {
            // Only SCRIPT's subcommands are allowed one by one; the gateway ignores other
            // two-word entries, and so does the ACL.
            Some(sub) if name == "script" => {
                commands.insert(format!("script|{sub}"));
            }
            Some(_) => {}
            None if name == "script" => {
                for sub in SCRIPT_SUBCOMMANDS {
                    commands.insert(format!("script|{}", sub.to_ascii_lowercase()));
                }
            }
            None => {
                commands.insert(name);
            }
        }
    }
    commands.insert("multi".into());
    commands.insert("exec".into());
    if db != 0 {
        // Redis's "first argument" rule: SELECT with exactly this argument, as the redis crate
        // sends it (the number in decimal).
        commands.insert(format!("select|{db}"));
    }
    commands.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn the_acl_names_the_allow_list_and_what_the_gateway_sends() {
        assert_eq!(
            acl_commands(&set(&["GET", "SCRIPT", "SCRIPT FLUSH", "EVAL"]), 0),
            [
                "eval",
                "exec",
                "get",
                "multi",
                "script|exists",
                "script|flush",
                "script|load"
            ]
        );
        let on_db_3 = acl_commands(&set(&["GET"]), 3);
        assert!(on_db_3.contains(&"select|3".to_string()), "{on_db_3:?}");
        assert!(!on_db_3.contains(&"select".to_string()), "{on_db_3:?}");
        assert!(!acl_commands(&set(&["GET"]), 0)
            .iter()
            .any(|c| c.starts_with("select")));
        // Never granted, whatever the list says.
        let crossing = acl_commands(&set(&["SELECT", "swapdb", "MOVE", "COPY", "FLUSHALL"]), 0);
        assert_eq!(crossing, ["exec", "multi"]);
    }

    #[test]
    fn the_command_starts_from_scratch_and_errors_hide_the_password() {
        let user = AclUser::new("gw", &set(&["GET"]), "token", 0);
        let packed = user.setuser(&user.commands).get_packed_command();
        let packed = String::from_utf8_lossy(&packed).into_owned();
        for part in [
            "SETUSER",
            "gw",
            "reset",
            "~*",
            "resetchannels",
            "-@all",
            "+get",
        ] {
            assert!(
                packed.contains(&format!("\r\n{part}\r\n")),
                "{part}: {packed}"
            );
        }
        assert_eq!(user.password().len(), 64);
        assert_ne!(
            user.password(),
            AclUser::new("gw", &set(&["GET"]), "other", 0).password()
        );
        let e = user.error(&format!("ERR bad '>{}'", user.password()));
        assert!(!e.to_string().contains(user.password()), "{e}");
        assert_eq!(
            unknown_command(
                "ERR Error in ACL SETUSER modifier '+nosuch': Unknown command or category name"
            )
            .as_deref(),
            Some("nosuch")
        );
        assert_eq!(unknown_command("NOPERM this user has no permissions"), None);
    }
}
