//! The gateway's own accept loop (`listener::serve`: header-read and idle timeouts, connection
//! cap) beside `axum::serve` (none of them) with the same router, in the same run: `INCR` over 32
//! keep-alive connections, rounds interleaved so both see the same machine. What the watchdog
//! costs per request. Run: `cargo bench -p edgelimit-gateway --bench accept_loop`.

use std::net::SocketAddr;
use std::time::Instant;

use edgelimit_gateway::listener::ConnectionLimits;
use edgelimit_gateway::metrics::ConnectionCounters;
use edgelimit_gateway::{router, serve};
use edgelimit_testkit::http::KeepAlive;
use edgelimit_testkit::{gateway, task, RedisServer};

const TOKEN: &str = "bench-token-0123456789";
const CLIENTS: usize = 32;
const REQUESTS: usize = 20_000;
const ROUNDS: usize = 5;

/// Requests per second through the server at `addr`.
async fn load(addr: SocketAddr) -> f64 {
    let request = format!(
        "POST /incr/bench HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Length: 0\r\n\r\n"
    );
    let started = Instant::now();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let request = request.clone();
            tokio::spawn(async move {
                let mut client = KeepAlive::connect(addr).await;
                for _ in 0..REQUESTS / CLIENTS {
                    let (status, _) = client.send(request.as_bytes()).await.unwrap();
                    assert_eq!(status, 200);
                }
            })
        })
        .collect();
    for client in clients {
        client.await.unwrap();
    }
    (REQUESTS / CLIENTS * CLIENTS) as f64 / started.elapsed().as_secs_f64()
}

/// One round through `axum::serve` (`ours == false`) or `listener::serve`.
async fn round(redis: &RedisServer, ours: bool) -> f64 {
    let mut config = gateway::config(redis.url(), TOKEN);
    // Not one of the limiter's commands: allowed as an operator would.
    config.allowed.insert("INCR".into());
    let limits = ConnectionLimits::from(&config);
    let app = router(config).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let stopped = async {
        let _ = stopped.await;
    };
    let server = tokio::spawn(async move {
        if ours {
            serve(
                listener,
                app,
                limits,
                ConnectionCounters::default(),
                stopped,
            )
            .await
            .unwrap();
        } else {
            axum::serve(listener, app)
                .with_graceful_shutdown(stopped)
                .await
                .unwrap();
        }
    });
    let per_s = load(addr).await;
    let _ = stop.send(());
    server.await.unwrap();
    per_s
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let runtime = task::runtime();
    let redis = RedisServer::start();
    runtime.block_on(async {
        round(&redis, true).await; // warm-up
        let (mut axum, mut ours) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            axum.push(round(&redis, false).await);
            ours.push(round(&redis, true).await);
        }
        println!("\n{REQUESTS} INCR per round over {CLIENTS} keep-alive connections, {ROUNDS} rounds each, interleaved");
        println!("| accept loop | median req/s | rounds |");
        println!("|---|---|---|");
        let rounds = |v: &[f64]| v.iter().map(|x| format!("{x:.0}")).collect::<Vec<_>>().join(" ");
        println!("| axum::serve (baseline) | {:.0} | {} |", median(axum.clone()), rounds(&axum));
        println!("| listener::serve | {:.0} | {} |", median(ours.clone()), rounds(&ours));
        println!("| ratio | {:.2} | |", median(ours) / median(axum));
    });
}
