//! What the probe suites share beyond edgelimit-testkit (which has the servers and the raw
//! HTTP/1.1 client): their two tokens, and a gateway that knows both.

use edgelimit_gateway::Config;
use edgelimit_testkit::GatewayServer;

pub const TOKEN: &str = "probe-token-5f1c9a0e7b2d4c6a";
pub const READ_ONLY: &str = "probe-read-only-3e8b1d7f";

/// A redis-server and a gateway in front of it with both tokens, on free loopback ports;
/// `configure` adjusts the gateway's other defaults.
pub async fn start(configure: impl FnOnce(&mut Config)) -> GatewayServer {
    GatewayServer::start_with(TOKEN, |config| {
        config.read_only_token = Some(READ_ONLY.into());
        configure(config);
    })
    .await
}
