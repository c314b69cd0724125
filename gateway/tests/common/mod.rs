//! What the probe suites share beyond edgelimit-testkit (which has the servers and the raw
//! HTTP/1.1 client): their two tokens, and a gateway that knows both.

// Each test binary uses its own part of this module.
#![allow(dead_code)]

use edgelimit_gateway::config::UPSTASH_CLIENT_COMMANDS;
use edgelimit_gateway::Config;
use edgelimit_testkit::GatewayServer;

pub const TOKEN: &str = "probe-token-5f1c9a0e7b2d4c6a";
pub const READ_ONLY: &str = "probe-read-only-3e8b1d7f";

/// A redis-server and a gateway in front of it with both tokens, on free loopback ports;
/// `configure` adjusts the gateway's other defaults. The probe suites speak Redis at large
/// through it (`PING`, `INCR`, …), so it allows what the official Upstash clients send besides
/// the limiter's own commands, as an operator serving them would.
pub async fn start(configure: impl FnOnce(&mut Config)) -> GatewayServer {
    start_with_defaults(|config| {
        allow_upstash_clients(config);
        configure(config);
    })
    .await
}

/// [`start`] with the default allow-list: the limiter's commands only.
pub async fn start_with_defaults(configure: impl FnOnce(&mut Config)) -> GatewayServer {
    GatewayServer::start_with(TOKEN, |config| {
        config.read_only_token = Some(READ_ONLY.into());
        configure(config);
    })
    .await
}

/// Widens `config`'s allow-list by what the official Upstash clients send.
pub fn allow_upstash_clients(config: &mut Config) {
    config
        .allowed
        .extend(UPSTASH_CLIENT_COMMANDS.iter().map(|c| c.to_string()));
}
