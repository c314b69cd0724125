//! The demo tables of README.md and docs/sim.md are the output of the commands shown with them,
//! run now: each page is read at test time, its commands run on the `sim` this test builds, and
//! what they print is compared line by line with what the page shows. A number changed in the
//! code or in the page fails here, naming the page, the line and both texts.
//!
//! What a page may leave out or cannot pin, and only that, is not compared:
//! - a line `…` in a transcript stands for any number of lines the page leaves out;
//! - `replayed in N ms` is the replay's wall time, different on every run and machine;
//! - the README's demo block leaves out the timing line (`store   memory; replayed in …`) and
//!   everything after the table (its legend and the report's path), as its prose says;
//! - a local Redis URL's port is the one this test's own redis-server listens on.

use std::path::{Path, PathBuf};
use std::process::Command;

use edgelimit_testkit::dir::TempDir;
use edgelimit_testkit::RedisServer;

/// The checkout's root, where the pages and `sim/data` are.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn page(name: &str) -> String {
    let path = root().join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// One command of a page's transcript and the output the page shows for it.
#[derive(Debug)]
struct Shown {
    /// The page's line of the command (1-based).
    line: usize,
    command: String,
    output: Vec<String>,
}

/// The commands of the page's transcripts (fenced blocks without a language, or `text` or
/// `console`, holding `$ ` lines), in page order; a command continued with `\` is joined.
fn transcripts(text: &str) -> Vec<Shown> {
    let lines: Vec<&str> = text.lines().collect();
    let mut shown = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(lang) = lines[i].strip_prefix("```") else {
            i += 1;
            continue;
        };
        let end = (i + 1..lines.len())
            .find(|&j| lines[j].starts_with("```"))
            .unwrap_or(lines.len());
        let body = &lines[i + 1..end];
        let first = i + 2;
        i = end + 1;
        if !matches!(lang.trim(), "" | "text" | "console") {
            continue;
        }
        let mut k = 0;
        while k < body.len() {
            let Some(start) = body[k].strip_prefix("$ ") else {
                k += 1;
                continue;
            };
            let line = first + k;
            let mut command = start.to_string();
            while command.trim_end().ends_with('\\') && k + 1 < body.len() {
                k += 1;
                command = format!(
                    "{} {}",
                    command.trim_end().trim_end_matches('\\'),
                    body[k].trim()
                );
            }
            k += 1;
            let mut output = Vec::new();
            while k < body.len() && !body[k].starts_with("$ ") {
                output.push(body[k].to_string());
                k += 1;
            }
            shown.push(Shown {
                line,
                command,
                output,
            });
        }
    }
    shown
}

/// The fenced block right after `heading`'s line (its first line, its lines).
fn block_after(text: &str, heading: &str) -> (usize, Vec<String>) {
    let lines: Vec<&str> = text.lines().collect();
    let at = lines
        .iter()
        .position(|l| *l == heading)
        .unwrap_or_else(|| panic!("no heading `{heading}`"));
    let open = (at..lines.len())
        .find(|&j| lines[j].starts_with("```"))
        .unwrap_or_else(|| panic!("no block after `{heading}`"));
    let close = (open + 1..lines.len())
        .find(|&j| lines[j].starts_with("```"))
        .unwrap_or_else(|| panic!("the block after `{heading}` is not closed"));
    (
        open + 2,
        lines[open + 1..close]
            .iter()
            .map(|l| l.to_string())
            .collect(),
    )
}

/// A scratch directory that sees the checkout's `sim/` (the bundled trace and configurations),
/// as the pages' commands expect to run from the checkout's root.
fn scratch() -> TempDir {
    let dir = TempDir::new("edgelimit-demo-tables");
    std::os::unix::fs::symlink(root().join("sim"), dir.join("sim")).unwrap();
    dir
}

/// Runs `command` through bash in `dir`, with this build's `sim` first on the PATH: its standard
/// output then its standard error, as lines. A command that fails fails the test.
fn run(command: &str, dir: &Path, at: &str) -> Vec<String> {
    let bin = Path::new(env!("CARGO_BIN_EXE_sim")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("bash")
        .args(["-o", "pipefail", "-c", command])
        .current_dir(dir)
        .env("PATH", path)
        .output()
        .unwrap_or_else(|e| panic!("{at}: cannot run bash: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{at}: `{command}` failed ({}):\n{stderr}",
        out.status
    );
    stdout.lines().chain(stderr.lines()).map(mask).collect()
}

/// The line with its wall time masked: the only figure of the output that changes between runs.
fn mask(line: &str) -> String {
    let Some(at) = line.find("replayed in ") else {
        return line.to_string();
    };
    let rest = &line[at + "replayed in ".len()..];
    let digits = rest.chars().take_while(char::is_ascii_digit).count();
    if digits == 0 || !rest[digits..].starts_with(" ms") {
        return line.to_string();
    }
    format!(
        "{}replayed in N ms{}",
        &line[..at],
        &rest[digits + " ms".len()..]
    )
}

/// Why `actual` is not what the page shows, or None: equal line for line (trailing spaces
/// aside), a shown line `…` standing for any number of lines.
fn mismatch(shown: &[String], actual: &[String]) -> Option<String> {
    let shown: Vec<String> = shown.iter().map(|l| mask(l.trim_end())).collect();
    let actual: Vec<&str> = actual.iter().map(|l| l.trim_end()).collect();
    if matches_from(&shown, &actual) {
        return None;
    }
    // The first shown line the output lacks, for the message: matched in order, skipping at `…`.
    let mut at = 0;
    for (n, line) in shown.iter().enumerate() {
        if line == "…" {
            continue;
        }
        let gap = n > 0 && shown[n - 1] == "…";
        match actual[at.min(actual.len())..]
            .iter()
            .position(|a| a == line)
        {
            Some(p) if p == 0 || gap => at += p + 1,
            _ => {
                // After a `…` the output's nearest line is the one sharing the longest start.
                let rest = &actual[at.min(actual.len())..];
                let nearest = if gap {
                    rest.iter().max_by_key(|a| common_start(a, line)).copied()
                } else {
                    rest.first().copied()
                };
                return Some(format!(
                    "shown line {} is not in the output where the page puts it:\n  shown:  {line}\n  output: {}",
                    n + 1,
                    nearest.unwrap_or("(nothing)")
                ));
            }
        }
    }
    Some("the output has lines the page does not show (and no `…` stands for them)".into())
}

fn common_start(a: &str, b: &str) -> usize {
    a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count()
}

fn matches_from(shown: &[String], actual: &[&str]) -> bool {
    match shown.split_first() {
        None => actual.is_empty(),
        Some((first, rest)) if first == "…" => {
            (0..=actual.len()).any(|skip| matches_from(rest, &actual[skip..]))
        }
        Some((first, rest)) => {
            actual.first() == Some(&first.as_str()) && matches_from(rest, &actual[1..])
        }
    }
}

fn report(page: &str, failures: Vec<String>, compared: usize) {
    assert!(compared > 0, "{page}: no demo output found to compare");
    assert!(
        failures.is_empty(),
        "{page}: {} of {compared} shown outputs differ from what the commands print now \
         (the code is the truth: fix the page)\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// The README's "What the demo shows": `scripts/demo` (which is `sim` with no arguments, on the
/// bundled trace) up to the end of its table, without its timing line.
#[test]
fn readme_demo_table_is_what_scripts_demo_prints() {
    let text = page("README.md");
    let (line, shown) = block_after(&text, "## What the demo shows");
    assert!(
        text.contains("`scripts/demo` on the bundled trace (its timing line and legend left out)"),
        "README.md: the demo block's prose no longer says what it leaves out; update this test"
    );
    let dir = scratch();
    let output = run("sim", dir.path(), "README.md");
    let table_end = output
        .iter()
        .position(|l| l.starts_with("policy "))
        .and_then(|p| output[p..].iter().position(|l| l.is_empty()).map(|e| p + e))
        .expect("sim's output has a policy table");
    let actual: Vec<String> = output[..table_end]
        .iter()
        .filter(|l| !l.starts_with("store   memory; replayed in"))
        .cloned()
        .collect();
    let failures: Vec<String> = mismatch(&shown, &actual)
        .map(|why| format!("README.md:{line}: `scripts/demo`\n{why}"))
        .into_iter()
        .collect();
    report("README.md", failures, 1);
}

/// Every transcript of docs/sim.md: each `$ ` command runs in one scratch directory, in page
/// order (a later command reads what an earlier one wrote), and prints what the page shows. A
/// `$ cat FILE` of a file no earlier command wrote is the page giving the file: it is written.
#[test]
fn sim_guide_transcripts_are_what_the_commands_print() {
    let text = page("docs/sim.md");
    let dir = scratch();
    let mut redis: Option<RedisServer> = None;
    let mut failures = Vec::new();
    let mut compared = 0;
    for shown in transcripts(&text) {
        let at = format!("docs/sim.md:{}", shown.line);
        let words: Vec<&str> = shown.command.split_whitespace().collect();
        if let ["cat", file] = words[..] {
            if !dir.join(file).exists() {
                let mut body = shown.output.join("\n");
                body.push('\n');
                std::fs::write(dir.join(file), body).unwrap();
                continue;
            }
        }
        let (mut command, mut output) = (shown.command.clone(), shown.output.clone());
        // The page's Redis is the reader's; this test's is on a free port.
        const SHOWN_REDIS: &str = "redis://127.0.0.1:6391/";
        if command.contains(SHOWN_REDIS) {
            let url = redis.get_or_insert_with(RedisServer::start).url();
            command = command.replace(SHOWN_REDIS, &url);
            output = output
                .iter()
                .map(|l| l.replace(SHOWN_REDIS, &url))
                .collect();
        }
        let actual = run(&command, dir.path(), &at);
        compared += 1;
        if let Some(why) = mismatch(&output, &actual) {
            failures.push(format!(
                "{at}: `{}`\n{why}\n--- the whole output:\n{}",
                shown.command,
                actual.join("\n")
            ));
        }
    }
    report("docs/sim.md", failures, compared);
}

#[test]
fn a_changed_number_or_a_missing_line_is_a_mismatch() {
    let output: Vec<String> = ["a 1", "b 2", "c 3"].map(String::from).into();
    let shown = |lines: &[&str]| lines.iter().map(|l| l.to_string()).collect::<Vec<_>>();
    assert_eq!(mismatch(&shown(&["a 1", "b 2", "c 3"]), &output), None);
    assert_eq!(mismatch(&shown(&["…", "b 2", "…"]), &output), None);
    assert_eq!(mismatch(&shown(&["a 1", "…"]), &output), None);
    assert!(mismatch(&shown(&["a 1", "b 9", "c 3"]), &output).is_some());
    assert!(mismatch(&shown(&["a 1", "c 3"]), &output).is_some());
    assert!(mismatch(&shown(&["a 1", "b 2"]), &output).is_some());
    assert!(mismatch(&shown(&["…", "b 2"]), &output).is_some());
    assert_eq!(
        mask("store   memory; replayed in 194 ms"),
        "store   memory; replayed in N ms"
    );
}
