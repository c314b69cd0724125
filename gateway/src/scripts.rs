//! The rewrite of scripts that carry the Upstash-only flag, and the bounded map it keeps.
//!
//! `@upstash/ratelimit`'s scripts open with `#!lua flags=allow-key-locking`, which plain Redis
//! rejects. The gateway strips the flag before Redis sees the script, so Redis knows the script
//! by another SHA than the client computed: the map from the client's SHA to Redis's lets a
//! later `EVALSHA` (and `SCRIPT EXISTS`) with the client's SHA find it.
//!
//! Every client with the token (the read-only one too, through `EVAL_RO`) can add entries, so the
//! map is bounded ([`Config::max_scripts`](crate::Config::max_scripts)) in two generations of half
//! the bound each: a new script enters the young one; when that is full, the old one is dropped
//! whole and the young one becomes the old. A script called from the old generation moves back
//! to the young one, so one called at least once every `max_scripts / 2` new scripts is never
//! forgotten. A forgotten one costs its client one round trip: its `EVALSHA` reaches Redis with
//! the client's SHA, Redis answers `NOSCRIPT`, and the client sends the script again by `EVAL`,
//! as it does after a Redis restart. Each entry is two 20-byte SHAs; the map's size and the
//! entries it let go are in the metrics ([`ScriptCounters`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use crate::command::{Command, Upper};
use crate::config::DEFAULT_MAX_SCRIPTS;
use crate::metrics::ScriptCounters;

/// The Upstash-only script flag plain Redis rejects in a shebang.
const UPSTASH_ONLY_FLAG: &str = "allow-key-locking";

/// A SHA1, as bytes.
type Sha = [u8; 20];

/// Script rewrites: scripts whose `#!lua` shebang carries the Upstash-only flag run without it,
/// and the client's SHA (of the script it sent) maps to the SHA Redis knows it by, for at most
/// [`Scripts::capacity`] scripts (see the module's documentation for which are kept).
#[derive(Debug)]
pub struct Scripts {
    generations: Mutex<Generations>,
    /// Entries per generation: half the capacity.
    half: usize,
    // Whether the map ever got an entry: until then an EVALSHA has nothing to map and need not
    // take the lock (the common case: scripts without the Upstash-only flag).
    any: AtomicBool,
    counters: ScriptCounters,
}

#[derive(Debug, Default)]
struct Generations {
    young: HashMap<Sha, Sha>,
    old: HashMap<Sha, Sha>,
}

impl Default for Scripts {
    fn default() -> Scripts {
        Scripts::new(DEFAULT_MAX_SCRIPTS)
    }
}

impl Scripts {
    /// A map remembering at most `capacity` scripts (at least 2: one per generation).
    pub fn new(capacity: usize) -> Scripts {
        let half = (capacity / 2).max(1);
        Scripts {
            generations: Mutex::new(Generations::default()),
            half,
            any: AtomicBool::new(false),
            counters: ScriptCounters::default(),
        }
    }

    /// Most scripts remembered at once.
    pub fn capacity(&self) -> usize {
        2 * self.half
    }

    /// Scripts remembered now.
    pub fn len(&self) -> usize {
        let generations = self.lock();
        generations.young.len() + generations.old.len()
    }

    /// Whether no script is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Scripts let go so far to stay within the capacity.
    pub fn evicted(&self) -> u64 {
        self.counters.evicted.get()
    }

    /// The map's counters, for the metrics page.
    pub fn counters(&self) -> &ScriptCounters {
        &self.counters
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Generations> {
        // Nothing panics while holding it; if something did, the maps are still whole.
        self.generations.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Rewrites EVAL/EVAL_RO/SCRIPT LOAD sources and EVALSHA/EVALSHA_RO/SCRIPT EXISTS SHAs in
    /// place. Returns the client's SHA when a SCRIPT LOAD was rewritten: the reply must carry it,
    /// since that is the SHA the client will call.
    pub fn rewrite(&self, command: &mut Command) -> Option<String> {
        let upper = Upper::of(command.first()?);
        let name = upper.as_str();
        match name {
            "EVAL" | "EVAL_RO" => {
                let (client, loaded) = strip(command.get_mut(1)?)?;
                self.remember(client, loaded);
                None
            }
            "EVALSHA" | "EVALSHA_RO" if self.any.load(Ordering::SeqCst) => {
                let sha = command.get_mut(1)?;
                if let Some(loaded) = self.loaded_as(sha) {
                    *sha = hex(&loaded).into_bytes();
                }
                None
            }
            "SCRIPT" => {
                let sub = Upper::of(command.get(1)?);
                match sub.as_str() {
                    "LOAD" => {
                        let (client, loaded) = strip(command.get_mut(2)?)?;
                        self.remember(client, loaded);
                        Some(hex(&client))
                    }
                    "EXISTS" if self.any.load(Ordering::SeqCst) => {
                        for sha in command.iter_mut().skip(2) {
                            if let Some(loaded) = self.loaded_as(sha) {
                                *sha = hex(&loaded).into_bytes();
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

    /// Remembers that the script the client calls `client` is `loaded` in Redis.
    fn remember(&self, client: Sha, loaded: Sha) {
        let mut generations = self.lock();
        self.insert(&mut generations, client, loaded);
        self.any.store(true, Ordering::SeqCst);
    }

    /// Redis's SHA for the script a client calls `client_hex`, if remembered; a hit in the old
    /// generation moves back to the young one.
    fn loaded_as(&self, client_hex: &[u8]) -> Option<Sha> {
        let client = parse_hex(client_hex)?;
        let mut generations = self.lock();
        if let Some(loaded) = generations.young.get(&client) {
            return Some(*loaded);
        }
        let loaded = generations.old.remove(&client)?;
        self.insert(&mut generations, client, loaded);
        Some(loaded)
    }

    fn insert(&self, generations: &mut Generations, client: Sha, loaded: Sha) {
        if let Some(entry) = generations.young.get_mut(&client) {
            *entry = loaded;
            return;
        }
        generations.old.remove(&client);
        if generations.young.len() >= self.half {
            let young =
                std::mem::replace(&mut generations.young, HashMap::with_capacity(self.half));
            let dropped = std::mem::replace(&mut generations.old, young);
            self.counters.evicted.inc_by(dropped.len() as u64);
        }
        generations.young.insert(client, loaded);
        let len = generations.young.len() + generations.old.len();
        self.counters.entries.set(len as i64);
    }
}

/// Removes [`UPSTASH_ONLY_FLAG`] from a script's shebang, if there; returns the SHA1 of the
/// script as sent and of the script as rewritten.
fn strip(source: &mut Vec<u8>) -> Option<(Sha, Sha)> {
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
    let client = sha1_smol::Sha1::from(source.as_slice()).digest().bytes();
    let loaded = sha1_smol::Sha1::from(rewritten.as_bytes()).digest().bytes();
    *source = rewritten.into_bytes();
    Some((client, loaded))
}

/// A SHA1 written as 40 hex digits, in either case.
fn parse_hex(text: &[u8]) -> Option<Sha> {
    if text.len() != 40 {
        return None;
    }
    let digit = |b: u8| (b as char).to_digit(16);
    let mut sha = [0u8; 20];
    for (byte, pair) in sha.iter_mut().zip(text.chunks_exact(2)) {
        *byte = (digit(pair[0])? * 16 + digit(pair[1])?) as u8;
    }
    Some(sha)
}

/// A SHA1 as Redis writes it: 40 lower-case hex digits.
fn hex(sha: &Sha) -> String {
    sha.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sha_of(text: &str) -> String {
        sha1_smol::Sha1::from(text).digest().to_string()
    }

    fn eval(source: &str) -> Command {
        vec![b"EVAL".to_vec(), source.as_bytes().to_vec(), b"0".to_vec()]
    }

    fn evalsha(sha: &str) -> Command {
        vec![b"evalsha".to_vec(), sha.as_bytes().to_vec(), b"0".to_vec()]
    }

    /// The SHA an EVALSHA of `client_sha` reaches Redis with.
    fn sent_as(scripts: &Scripts, client_sha: &str) -> String {
        let mut command = evalsha(client_sha);
        scripts.rewrite(&mut command);
        String::from_utf8(command[1].clone()).unwrap()
    }

    fn flagged(n: usize) -> String {
        format!("#!lua flags=allow-key-locking\nreturn {n}")
    }

    #[test]
    fn the_upstash_flag_is_stripped_and_shas_mapped() {
        let scripts = Scripts::default();
        let source = "#!lua flags=allow-key-locking\nreturn 1";
        let mut command = eval(source);
        assert_eq!(scripts.rewrite(&mut command), None);
        assert_eq!(command[1], b"return 1");
        assert_eq!(sent_as(&scripts, &sha_of(source)), sha_of("return 1"));
        // Upper-case hex is the same SHA.
        assert_eq!(
            sent_as(&scripts, &sha_of(source).to_uppercase()),
            sha_of("return 1")
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
            sha_of("#!lua flags=no-writes,allow-key-locking\nreturn 2")
        );
        let mut exists = vec![
            b"script".to_vec(),
            b"exists".to_vec(),
            answered.into_bytes(),
            b"not-a-sha".to_vec(),
        ];
        scripts.rewrite(&mut exists);
        assert_eq!(
            exists[2],
            sha_of("#!lua flags=no-writes\nreturn 2").into_bytes()
        );
        assert_eq!(exists[3], b"not-a-sha");
        // Scripts without the flag pass untouched and are not remembered.
        let mut plain = eval("return 3");
        scripts.rewrite(&mut plain);
        assert_eq!(plain[1], b"return 3");
        assert_eq!(scripts.len(), 2);
        assert_eq!(sent_as(&scripts, &sha_of("return 3")), sha_of("return 3"));
    }

    #[test]
    fn past_the_bound_the_oldest_scripts_go_and_the_count_says_so() {
        let scripts = Scripts::new(8);
        assert_eq!(scripts.capacity(), 8);
        for n in 0..100 {
            scripts.rewrite(&mut eval(&flagged(n)));
            assert!(scripts.len() <= 8, "{} after {n}", scripts.len());
        }
        // 100 distinct scripts, 8 kept at most: the rest were let go, and counted.
        assert_eq!(scripts.evicted() + scripts.len() as u64, 100);
        assert_eq!(scripts.counters().entries.get(), scripts.len() as i64);
        // The newest are known; the first is forgotten, and its EVALSHA goes to Redis as sent
        // (which answers NOSCRIPT: the client sends the script again).
        let newest = sha_of(&flagged(99));
        assert_eq!(sent_as(&scripts, &newest), sha_of("return 99"));
        let first = sha_of(&flagged(0));
        assert_eq!(sent_as(&scripts, &first), first);
    }

    #[test]
    fn a_script_in_use_survives_any_number_of_new_ones() {
        let scripts = Scripts::new(8);
        let kept = flagged(1_000_000);
        scripts.rewrite(&mut eval(&kept));
        for n in 0..1000 {
            scripts.rewrite(&mut eval(&flagged(n)));
            // Called once every few new scripts (fewer than half the bound).
            if n % 3 == 0 {
                assert_eq!(
                    sent_as(&scripts, &sha_of(&kept)),
                    sha_of("return 1000000"),
                    "after {n}"
                );
            }
        }
        assert!(scripts.len() <= 8);
    }

    #[test]
    fn sha_text_is_forty_hex_digits() {
        let sha = sha_of("x");
        assert_eq!(hex(&parse_hex(sha.as_bytes()).unwrap()), sha);
        assert_eq!(parse_hex(&sha.as_bytes()[1..]), None);
        assert_eq!(parse_hex(&[b'g'; 40]), None);
        assert_eq!(parse_hex("é".repeat(20).as_bytes()), None);
    }
}
