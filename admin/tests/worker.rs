//! The CLI through a Worker's admin route (`--worker`), for state in the Worker's Durable
//! Objects: every shared behaviour (common/suite.rs) against the built Worker under
//! `wrangler dev` — the CLI writes through the route, the objects decide the library's checks
//! sent through the same route, and their storage (read from `--persist-to`) shows what was, and
//! was not, written — then the route's own failures: a missing or wrong token, an unreachable
//! or silent Worker, an answer that is not one.
//!
//! The tests that need the Worker are `#[ignore]`d in a plain `cargo test` (like the Worker's
//! own end-to-end suites, they need it built and wrangler installed):
//! `scripts/test.d/worker.sh` runs them. The rest need no Worker and always run.

mod common;

use std::time::Duration;

use common::suite::Backend;
use common::{Admin, Stored, CONFIG};
use edgelimit_admin::worker::{AdminRoute, Token};
use edgelimit_engine::wire::calls::Calls;
use edgelimit_testkit::edge::{durable_vars, ADMIN_PATH, ADMIN_TOKEN};
use edgelimit_testkit::net::{free_port, SilentServer};
use edgelimit_testkit::origin::start_origin;
use edgelimit_testkit::{task, WranglerDev};

const TOKEN_VAR: &str = "EDGELIMIT_ADMIN_TOKEN";

/// [`CONFIG`] with the admin route on at [`ADMIN_PATH`] (as the CLI and the Worker read it).
fn worker_config() -> String {
    CONFIG.replace(
        "namespace = \"admtest\"",
        &format!("namespace = \"admtest\"\nadmin_path = \"{ADMIN_PATH}\""),
    )
}

/// The Worker under `wrangler dev` on `config` (a bare table, as [`common::config_file_of`]
/// takes it), its state in its Durable Objects, admitted requests going to `origin`.
fn start_worker(config: &str, origin: std::net::SocketAddr) -> WranglerDev {
    let table = config.replace("[[rules]]", "[[vars.EDGELIMIT_CONFIG.rules]]");
    WranglerDev::start(&durable_vars(origin, &table))
}

fn with_backend(body: fn(&Backend<'_>)) {
    // Two threads of its own, so the origin serves while the test blocks on the binary.
    let rt = task::runtime();
    let origin = rt.block_on(start_origin());
    let config = worker_config();
    let worker = start_worker(&config, origin);
    let store = Calls(AdminRoute::new(
        format!("{}{ADMIN_PATH}", worker.url()),
        Token::new(ADMIN_TOKEN),
        Duration::from_secs(30),
    ));
    body(&Backend {
        admin: Admin::worker(&worker.url(), &config).with_env(TOKEN_VAR, ADMIN_TOKEN),
        store: Box::new(store),
        rt: &rt,
        stored: Stored::Objects(&worker),
    });
}

shared_suite!(
    with_backend,
    #[ignore = "needs the built Worker and wrangler: scripts/test.d/worker.sh runs it"]
);

#[test]
#[ignore = "needs the built Worker and wrangler: scripts/test.d/worker.sh runs it"]
fn a_wrong_token_is_refused_by_the_worker_and_never_shown() {
    with_backend(|b| {
        let mut wrong = b.admin.clone();
        wrong.env.clear();
        let wrong = wrong.with_env(TOKEN_VAR, "not-the-token-5e1");
        for args in [
            &["deny", "add", "country CN"][..],
            &["peek", "per-ip", "203.0.113.7"],
        ] {
            let run = wrong.run(args);
            assert_eq!(run.code, 1, "{run:?}");
            assert!(
                run.stderr.starts_with("edgelimit-admin: store: ")
                    && run.stderr.contains("refused the admin token")
                    && run.stderr.contains(TOKEN_VAR),
                "{run:?}"
            );
            assert!(!run.stderr.contains("not-the-token"), "{run:?}");
            assert!(run.stdout.is_empty(), "{run:?}");
        }
        assert_eq!(b.stored.keys(), Vec::<String>::new(), "nothing was written");
        // --token stands in for the variable, and wins over it.
        let flag = wrong.run(&[
            "--json",
            "--token",
            ADMIN_TOKEN,
            "deny",
            "add",
            "country CN",
        ]);
        assert_eq!(flag.json()["entry"], "country CN");
        assert_eq!(b.stored.keys(), ["{el:admtest:list:deny}"]);
        // A route the Worker does not serve (another admin_path in the CLI's configuration) is an
        // ordinary request: forwarded, and its answer is not the route's.
        let mut elsewhere = b.admin.clone();
        elsewhere.config = common::config_file_of(
            &worker_config().replace(ADMIN_PATH, "/__edgelimit/not-the-route"),
        );
        let run = elsewhere.run(&["deny", "list"]);
        assert_eq!(run.code, 1, "{run:?}");
        assert!(run.stderr.contains("not an admin answer"), "{run:?}");
        assert!(run.stderr.contains("\"origin\":true"), "{run:?}");
    });
}

/// The CLI on a Worker at `url` with [`worker_config`] and the right token.
fn admin_at(url: &str) -> Admin {
    Admin::worker(url, &worker_config()).with_env(TOKEN_VAR, ADMIN_TOKEN)
}

#[test]
fn an_unreachable_a_silent_and_a_foreign_server_are_store_failures() {
    let gone = admin_at(&format!("http://127.0.0.1:{}", free_port()));
    let run = gone.run(&["deny", "list"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("store unreachable"), "{run:?}");

    let silent = SilentServer::start();
    let run = admin_at(&format!("http://{}", silent.addr())).run(&[
        "--timeout",
        "300ms",
        "tier",
        "get",
        "per-ip",
        "203.0.113.7",
    ]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("timed out after 300 ms"), "{run:?}");

    // Something answering 200 that is no Worker's admin route (here an echo origin).
    let rt = task::runtime();
    let origin = rt.block_on(start_origin());
    let run = admin_at(&format!("http://{origin}")).run(&["peek", "per-ip", "203.0.113.7"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr.contains("not an admin answer") && run.stderr.contains("admin_path"),
        "{run:?}"
    );
    assert!(!run.stderr.contains(ADMIN_TOKEN), "{run:?}");
}

#[test]
fn worker_arguments_are_checked_before_anything_is_sent() {
    let silent = SilentServer::start();
    let url = format!("http://{}", silent.addr());
    let mut no_token = admin_at(&url);
    no_token.env.clear();
    let upstash = worker_config().replace(
        "namespace = \"admtest\"",
        "namespace = \"admtest\"\nstore = \"upstash\"",
    );
    let cases: Vec<(Admin, Vec<&str>, &str, &str)> = vec![
        (
            no_token,
            vec![],
            "--token",
            "EDGELIMIT_ADMIN_TOKEN is not set",
        ),
        (
            Admin::worker(&url, CONFIG).with_env(TOKEN_VAR, ADMIN_TOKEN),
            vec![],
            "--worker",
            "names no admin_path",
        ),
        (
            admin_at(&format!("{url}/admin")),
            vec![],
            "--worker",
            "has a path",
        ),
        (
            admin_at("edge.example.com"),
            vec![],
            "--worker",
            "is not a URL",
        ),
        (
            Admin::worker(&url, &upstash).with_env(TOKEN_VAR, ADMIN_TOKEN),
            vec![],
            "--worker",
            "keeps the state in Redis",
        ),
    ];
    for (admin, extra, argument, problem) in cases {
        let mut args = extra;
        args.extend(["peek", "per-ip", "203.0.113.7"]);
        let run = admin.run(&args);
        assert_eq!(run.code, 2, "{args:?}: {run:?}");
        assert!(
            run.stderr
                .starts_with(&format!("edgelimit-admin: {argument}: "))
                && run.stderr.contains(problem),
            "{argument} {problem}: {run:?}"
        );
    }
    if !cfg!(feature = "tls") {
        let run = admin_at("https://edge.example.com").run(&["deny", "list"]);
        assert_eq!(run.code, 2, "{run:?}");
        assert!(
            run.stderr.contains("without its default `tls` feature"),
            "{run:?}"
        );
    }
    // --worker excludes --store (clap's usage error), and --token needs --worker.
    let mut both = admin_at(&url);
    both.store = "redis://127.0.0.1:6379".into();
    assert_eq!(both.run(&["deny", "list"]).code, 2);
    let mut token_alone = Admin::new("redis://127.0.0.1:6379");
    token_alone.env.clear();
    let run = token_alone.run(&["--token", "x", "deny", "list"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(
        run.stderr.starts_with("edgelimit-admin: --token: ") && run.stderr.contains("--worker"),
        "{run:?}"
    );
    // Bad input is refused before the Worker is contacted, as for every store.
    common::refuses_bad_input(&admin_at(&url));
}

#[test]
fn help_documents_the_worker_and_its_token() {
    let run = admin_at("http://127.0.0.1:1").run(&["--help"]);
    assert_eq!(run.code, 0, "{run:?}");
    for needle in [
        "--worker <URL>",
        "--token <TOKEN>",
        "admin_path",
        "EDGELIMIT_ADMIN_TOKEN",
        "Durable Objects",
    ] {
        assert!(
            run.stdout.contains(needle),
            "`{needle}` in:\n{}",
            run.stdout
        );
    }
    assert!(!run.stdout.contains(ADMIN_TOKEN), "{}", run.stdout);
}
