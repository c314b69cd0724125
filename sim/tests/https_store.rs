//! `--store upstash+https://…` from the default build: the binary replays through the gateway
//! serving TLS (a certificate authority made at test time, trusted through `SSL_CERT_FILE`, as
//! a reader trusts a private CA), with the same decisions as the in-process steps; a certificate
//! it does not trust is an error, not a silent fallback.

use std::process::Command;

use edgelimit_sim::generate::{write_csv, Generator, Kind};
use edgelimit_testkit::dir::TempDir;
use edgelimit_testkit::tls::Authority;
use edgelimit_testkit::{task, GatewayServer};

const TOKEN: &str = "sim-https-token";

#[test]
fn upstash_https_replays_from_the_default_build() {
    let dir = TempDir::new("sim-https");
    let authority = Authority::new("sim");
    let files = authority.server_pair().gateway_files(&dir);
    let ca = authority.write_pem(&dir);
    // The gateway needs a runtime of its own: `sim` runs as a separate process here, but the
    // gateway serves on this one's threads.
    let runtime = task::runtime();
    let server = runtime.block_on(GatewayServer::start_with(TOKEN, |config| {
        config.tls = Some(files);
    }));
    let store = format!("upstash+https://127.0.0.1:{}", server.addr().port());

    let kind = Kind::Bursty {
        rate: 30.0,
        clients: 4,
        burst_factor: 6.0,
        period_ms: 4_000.0,
    };
    let mut csv = Vec::new();
    write_csv(Generator::new(kind, 5, 500, 1_700_000_000_000), &mut csv).unwrap();
    let trace = dir.join("bursty.csv");
    std::fs::write(&trace, csv).unwrap();
    let replay = |ca: &std::path::Path| {
        Command::new(env!("CARGO_BIN_EXE_sim"))
            .arg("replay")
            .arg(&trace)
            .args(["--policy", "gcra 2/1s burst 10", "--store", &store, "-q"])
            .arg("--json")
            .arg(dir.join("report.json"))
            .env("UPSTASH_REDIS_REST_TOKEN", TOKEN)
            .env("SSL_CERT_FILE", ca)
            .output()
            .unwrap()
    };

    let out = replay(&ca);
    assert!(out.status.success(), "{out:?}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["store_mismatches"], 0, "{report}");

    let stranger = TempDir::new("sim-https-stranger");
    let out = replay(&Authority::new("stranger").write_pem(&stranger));
    assert!(!out.status.success(), "{out:?}");
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("needs TLS"),
        "{out:?}"
    );
    drop(server);
}
