//! The gateway under abuse, from outside: connections that hold places without a token, and
//! scripts that would grow its memory. Each test starts its own redis-server and gateway on free
//! loopback ports; attackers connect from other loopback addresses than the client with the
//! token (127.0.0.0/8 is all this machine's), so the cap per address is not what saves it. Every
//! loop is bounded in count and time.
//!
//! - 1,000 TLS connections that send a wrong token and then try to hold on are all closed after
//!   their 401; then 1,000 connections to the TLS port that never begin their handshake take
//!   every place, and a client with the token, on a fresh connection per request (each kept, so
//!   each needs a place), is answered within 100 ms at p99, each of its connections taking one
//!   idle handshake's place. (The client's requests during the wrong tokens' 1,000 handshakes
//!   are printed, not asserted: that measures the CPU, not the places.)
//! - One address holds at most its share; a 401 closes its connection; a connection without a
//!   token is closed after the short timeout while one with it stays.
//! - Far more distinct scripts than the script map's bound, from the read-only token: the map
//!   stays within its bound, counts what it let go, and still serves recent scripts.

mod common;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{READ_ONLY, TOKEN};
use edgelimit_gateway::MetricsPage;
use edgelimit_testkit::dir::TempDir;
use edgelimit_testkit::http::{closed_within, parse_answer, raw_post, KeepAlive};
use edgelimit_testkit::metrics::Samples;
use edgelimit_testkit::task;
use edgelimit_testkit::tls::Authority;
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{ClientConfig, RootCertStore};
use tokio_rustls::TlsConnector;

/// Connections that get a 401 and hold on, and connections that never handshake.
const ATTACKERS: usize = 1000;
/// Loopback addresses each kind of attacker spreads over: 125 connections each, below the
/// default cap per address (256), so only the timeouts, the 401 and the global cap's eviction
/// stand in their way.
const ATTACKER_ADDRESSES: u8 = 8;
/// Requests the client with the token times.
const SAMPLES: usize = 200;
/// The goal, and the slack the assertion allows it: this is a debug build on two cores shared
/// with the attackers and everything else the machine runs.
const P99_GOAL: Duration = Duration::from_millis(100);
const P99_SLACK: Duration = Duration::from_millis(50);

/// Held by each test here for its whole run: the load test's timings are its own, not shared
/// with another test's load on the same two cores.
static ALONE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Raises this process's soft limit on open files to `needed` (the hard limit allowing): the
/// attackers' sockets and the gateway's are all in this process.
fn raise_open_files(needed: u64) {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current.is_none_or(|current| current >= needed) {
        return;
    }
    let hard = limit.maximum.unwrap_or(u64::MAX);
    assert!(
        hard >= needed,
        "this test needs {needed} open files and the hard limit (ulimit -Hn) is {hard}"
    );
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(needed),
            maximum: limit.maximum,
        },
    )
    .expect("the soft open-file limit raised");
}

/// A TCP connection to `to` from the loopback address `from`.
async fn connect_from(from: Ipv4Addr, to: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::from((from, 0)))?;
    let stream = socket.connect(to).await?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// A TLS client trusting `authority` only.
fn tls_client(authority: &Authority) -> TlsConnector {
    let mut roots = RootCertStore::empty();
    roots.add(CertificateDer::from(authority.der())).unwrap();
    let provider = Arc::new(tokio_rustls::rustls::crypto::aws_lc_rs::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    TlsConnector::from(Arc::new(config))
}

fn server_name() -> ServerName<'static> {
    ServerName::try_from("127.0.0.1").unwrap()
}

/// One raw HTTP/1.1 POST.
fn request(path: &str, token: &str, body: &[u8], close: bool) -> Vec<u8> {
    let connection = if close { "Connection: close\r\n" } else { "" };
    let mut request = format!(
        "POST {path} HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer {token}\r\n\
         {connection}Content-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    request
}

/// Reads one answer with a Content-Length body from `stream`: its status, head and body.
async fn read_answer<S: AsyncRead + Unpin>(stream: &mut S) -> std::io::Result<(u16, String)> {
    let mut answer = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&answer);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if body.len() >= length {
                return Ok((parse_answer(&answer).0, head.to_ascii_lowercase()));
            }
        }
        let n = stream.read(&mut buffer).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        answer.extend_from_slice(&buffer[..n]);
    }
}

/// Waits until the peer closes `stream` (EOF or an error), at most `limit`; whether it did.
async fn closed_by_peer<S: AsyncRead + Unpin>(stream: &mut S, limit: Duration) -> bool {
    let mut buffer = [0u8; 1024];
    tokio::time::timeout(limit, async {
        loop {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .is_ok()
}

/// What became of one connection sent a wrong token.
#[derive(Debug)]
enum Refused {
    /// It got its 401 and was closed this long after.
    ClosedAfter401(Duration),
    /// It got its 401 and was still open after the bound.
    HeldOn,
    /// Closed before its answer: it gave its place up to a newer connection.
    ClosedBeforeAnswer,
}

/// A connection with a wrong token that tries to hold on after its 401.
async fn wrong_token(tls: TlsConnector, from: Ipv4Addr, to: SocketAddr) -> Refused {
    let Ok(tcp) = connect_from(from, to).await else {
        return Refused::ClosedBeforeAnswer;
    };
    let Ok(mut stream) = tls.connect(server_name(), tcp).await else {
        return Refused::ClosedBeforeAnswer;
    };
    let sent = stream
        .write_all(&request(
            "/pipeline",
            "wrong-token",
            br#"[["GET","k"]]"#,
            false,
        ))
        .await;
    let answer = match sent {
        Ok(()) => read_answer(&mut stream).await,
        Err(e) => Err(e),
    };
    match answer {
        Ok((401, head)) => {
            assert!(head.contains("connection: close"), "{head}");
            let answered = Instant::now();
            match closed_by_peer(&mut stream, Duration::from_secs(5)).await {
                true => Refused::ClosedAfter401(answered.elapsed()),
                false => Refused::HeldOn,
            }
        }
        Ok((status, head)) => panic!("a wrong token got {status}: {head}"),
        Err(_) => Refused::ClosedBeforeAnswer,
    }
}

/// A connection to the TLS port that never begins its handshake, held until the gateway closes
/// it; counted while open.
async fn idle_handshake(from: Ipv4Addr, to: SocketAddr, open: Arc<AtomicUsize>) {
    let mut stream = connect_from(from, to)
        .await
        .expect("an idle attacker connects");
    open.fetch_add(1, Ordering::Relaxed);
    closed_by_peer(&mut stream, Duration::from_secs(120)).await;
    open.fetch_sub(1, Ordering::Relaxed);
}

/// A TLS connection of the client with the token, kept open after its answer.
type Kept = tokio_rustls::client::TlsStream<TcpStream>;

/// One request with the token on a fresh TLS connection from `from`: the time from connecting
/// to the whole answer, and the connection, kept open (so the client's next request needs
/// another place); or what failed.
async fn timed_request(
    tls: &TlsConnector,
    from: Ipv4Addr,
    to: SocketAddr,
) -> Result<(Duration, Kept), String> {
    let started = Instant::now();
    let tcp = connect_from(from, to)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let mut stream = tls
        .connect(server_name(), tcp)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    stream
        .write_all(&request("/pipeline", TOKEN, br#"[["GET","k"]]"#, false))
        .await
        .map_err(|e| format!("request: {e}"))?;
    match read_answer(&mut stream).await {
        Ok((200, _)) => Ok((started.elapsed(), stream)),
        Ok((status, head)) => Err(format!("{status}: {head}")),
        Err(e) => Err(format!("answer: {e}")),
    }
}

/// `GET /metrics` with the token over `tls`, parsed.
async fn scrape_tls(tls: &TlsConnector, to: SocketAddr) -> Samples {
    let tcp = connect_from(Ipv4Addr::new(127, 0, 0, 2), to).await.unwrap();
    let mut stream = tls.connect(server_name(), tcp).await.unwrap();
    let head = format!(
        "GET /metrics HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer {TOKEN}\r\n\
         Connection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut page = Vec::new();
    stream.read_to_end(&mut page).await.unwrap();
    let (status, body) = parse_answer(&page);
    assert_eq!(status, 200, "{body}");
    Samples::parse(&body).unwrap()
}

fn attacker_address(kind: u8, i: usize) -> Ipv4Addr {
    Ipv4Addr::new(
        127,
        0,
        kind,
        1 + (i % usize::from(ATTACKER_ADDRESSES)) as u8,
    )
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

#[test]
fn held_401s_and_idle_handshakes_keep_no_client_with_the_token_waiting() {
    let _alone = ALONE.blocking_lock();
    // Both kinds of attacker, the client and the gateway's side of each: about 4,500.
    raise_open_files(8192);
    // The gateway on a runtime of its own, as in its own process; the clients on another.
    let gateway_runtime = task::runtime();
    let dir = TempDir::new("gateway-abuse");
    let authority = Authority::new("abuse");
    let files = authority.server_pair().gateway_files(&dir);
    let server = gateway_runtime.block_on(common::start_with_defaults(|c| {
        c.tls = Some(files);
        c.metrics = MetricsPage::Token;
        // Long enough that the idle handshakes hold their places through the whole test: only
        // making room can free them (the short timeout has its own test below).
        c.unauthenticated_timeout = Duration::from_secs(60);
        c.header_read_timeout = Duration::from_secs(60);
    }));
    let to = server.addr();
    let tls = tls_client(&authority);
    let client = Ipv4Addr::new(127, 0, 0, 2);
    let clients = task::runtime();
    clients.block_on(async {
        // 1,000 connections that send a wrong token and try to hold on. The client's requests
        // meanwhile are reported apart, not asserted: the gateway is busy with 1,000 TLS
        // handshakes then, which is a flood of work (CPU), not a hold on places.
        let refused: Vec<_> = (0..ATTACKERS)
            .map(|i| tokio::spawn(wrong_token(tls.clone(), attacker_address(2, i), to)))
            .collect();
        let mut during_burst = Vec::new();
        let mut failed_during_burst = Vec::new();
        while refused.iter().any(|r| !r.is_finished()) {
            match timed_request(&tls, client, to).await {
                Ok((took, _closed_now)) => during_burst.push(took),
                Err(e) => failed_during_burst.push(e),
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mut outcomes = Vec::with_capacity(ATTACKERS);
        for refused in refused {
            outcomes.push(refused.await.unwrap());
        }
        // 1,000 connections that never begin their handshake take every place.
        let open = Arc::new(AtomicUsize::new(0));
        let idle: Vec<_> = (0..ATTACKERS)
            .map(|i| tokio::spawn(idle_handshake(attacker_address(1, i), to, open.clone())))
            .collect();
        let filling = Instant::now();
        while open.load(Ordering::Relaxed) < ATTACKERS
            && filling.elapsed() < Duration::from_secs(20)
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(
            open.load(Ordering::Relaxed),
            ATTACKERS,
            "the idle attackers are in"
        );
        // Connected is not yet accepted: let the gateway take them all.
        tokio::time::sleep(Duration::from_millis(500)).await;
        // The client with the token times a fresh connection per request while they hold, and
        // keeps each open: every request needs a place of its own, taken from an idle one.
        let mut latencies = Vec::with_capacity(SAMPLES);
        let mut kept = Vec::with_capacity(SAMPLES);
        for _ in 0..SAMPLES {
            let (took, connection) = timed_request(&tls, client, to)
                .await
                .expect("the client is served");
            latencies.push(took);
            kept.push(connection);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let idle_left = open.load(Ordering::Relaxed);
        let page = scrape_tls(&tls, to).await;
        for task in &idle {
            task.abort();
        }

        if !during_burst.is_empty() {
            during_burst.sort();
            println!(
                "during the wrong tokens' 1,000 handshakes (not asserted: CPU, not places): {} \
                 requests, p50 {:?}, p99 {:?}, max {:?}; {} failed {:?}",
                during_burst.len(),
                percentile(&during_burst, 0.50),
                percentile(&during_burst, 0.99),
                during_burst[during_burst.len() - 1],
                failed_during_burst.len(),
                failed_during_burst.first(),
            );
        }
        latencies.sort();
        let (p50, p99, max) = (
            percentile(&latencies, 0.50),
            percentile(&latencies, 0.99),
            latencies[latencies.len() - 1],
        );
        let after_401: Vec<Duration> = outcomes
            .iter()
            .filter_map(|o| match o {
                Refused::ClosedAfter401(d) => Some(*d),
                _ => None,
            })
            .collect();
        let held = outcomes
            .iter()
            .filter(|o| matches!(o, Refused::HeldOn))
            .count();
        let before_answer = outcomes
            .iter()
            .filter(|o| matches!(o, Refused::ClosedBeforeAnswer))
            .count();
        let slowest_close = after_401.iter().max().copied().unwrap_or_default();
        let metric = |name: &str| page.value(&format!("edgelimit_gateway_{name}"), &[]);
        println!(
            "wrong-token connections: {} answered 401 and closed (the slowest {slowest_close:?} \
             after its answer), {before_answer} closed before their answer, {held} held on",
            after_401.len()
        );
        println!(
            "every place held by idle handshakes: client with the token, {SAMPLES} requests on \
             fresh TLS connections: p50 {p50:?}, p99 {p99:?}, max {max:?} (goal: p99 within \
             {P99_GOAL:?}; asserted with {P99_SLACK:?} slack)"
        );
        println!(
            "idle handshakes: {idle_left} of {ATTACKERS} still open at the end; gateway: {} \
             evicted, {} unauthenticated timeouts, {} refused per address, {} 401s, {} open",
            metric("connections_evicted_total"),
            metric("connections_unauthenticated_timeouts_total"),
            metric("connections_refused_total"),
            metric("auth_failures_total"),
            metric("connections_open"),
        );
        assert_eq!(held, 0, "no connection holds on after its 401");
        // At once, give or take the scheduling of 1,000 handshakes on a shared machine: far
        // below any timeout.
        assert!(
            slowest_close < Duration::from_secs(2),
            "a 401 closes its connection at once: {slowest_close:?}"
        );
        assert!(
            after_401.len() >= ATTACKERS * 9 / 10,
            "nearly all got their 401 (a few may give their place up to the client): {outcomes:?}"
        );
        assert!(
            p99 <= P99_GOAL + P99_SLACK,
            "the client with the token waited {p99:?} at p99"
        );
        // Each of the client's connections took one idle handshake's place, no more (give or
        // take one accepted late).
        assert!(
            idle_left + SAMPLES + 2 >= ATTACKERS,
            "{idle_left} idle handshakes left"
        );
        drop(kept);
    });
    drop(clients);
    drop(server);
    drop(gateway_runtime);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_holds_at_most_its_share() {
    let _alone = ALONE.lock().await;
    let s = common::start(|c| {
        c.max_connections_per_address = 8;
        c.metrics = MetricsPage::Token;
    })
    .await;
    let greedy = Ipv4Addr::new(127, 0, 0, 3);
    let mut held = Vec::new();
    for _ in 0..8 {
        held.push(connect_from(greedy, s.addr()).await.unwrap());
    }
    // Let the gateway take all eight before the ninth arrives.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut ninth = connect_from(greedy, s.addr()).await.unwrap();
    let started = Instant::now();
    assert!(
        closed_within(&mut ninth, Duration::from_secs(1)).await,
        "the ninth from one address is closed"
    );
    assert!(started.elapsed() < Duration::from_millis(500), "at once");
    // Another address is served, and the first gets its share back as its connections close.
    let ping = request("/", TOKEN, br#"["PING"]"#, false);
    let mut other = connect_from(Ipv4Addr::new(127, 0, 0, 4), s.addr())
        .await
        .unwrap();
    other.write_all(&ping).await.unwrap();
    assert_eq!(read_answer(&mut other).await.unwrap().0, 200);
    drop(held.pop());
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut again = connect_from(greedy, s.addr()).await.unwrap();
    again.write_all(&ping).await.unwrap();
    assert_eq!(read_answer(&mut again).await.unwrap().0, 200);
    let page = edgelimit_testkit::metrics::scrape(&s.addr().to_string(), Some(TOKEN)).unwrap();
    assert_eq!(
        page.value("edgelimit_gateway_connections_refused_total", &[]),
        1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_401_closes_its_connection_and_without_a_token_the_wait_is_short() {
    let _alone = ALONE.lock().await;
    let short = Duration::from_millis(600);
    let s = common::start(|c| {
        c.unauthenticated_timeout = short;
        c.metrics = MetricsPage::Token;
    })
    .await;
    // HTTP/1.1: the 401 says `Connection: close`, and the connection is closed.
    let mut refused = KeepAlive::connect(s.addr()).await;
    let (status, _) = refused
        .send(&request("/", "wrong", br#"["PING"]"#, false))
        .await
        .unwrap();
    assert_eq!(status, 401);
    assert!(closed_within(refused.stream(), Duration::from_millis(500)).await);
    // HTTP/2: a GOAWAY, then the connection is closed; the next request gets a new one.
    let h2c = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let refused = h2c
        .post(s.url("/"))
        .bearer_auth("wrong")
        .body(r#"["PING"]"#)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status().as_u16(), 401);
    let admitted = h2c
        .post(s.url("/"))
        .bearer_auth(TOKEN)
        .body(r#"["PING"]"#)
        .send()
        .await
        .unwrap();
    assert_eq!(admitted.status().as_u16(), 200);

    // Without a token: a silent connection, and one whose request was answered without one
    // (405, before any token is asked for), are closed after the short wait; one that presented
    // the token stays idle past it.
    let opened = Instant::now();
    let mut silent = TcpStream::connect(s.addr()).await.unwrap();
    let mut answered = KeepAlive::connect(s.addr()).await;
    let get = b"GET /pipeline HTTP/1.1\r\nHost: gateway\r\n\r\n";
    assert_eq!(answered.send(get).await.unwrap().0, 405);
    let mut authenticated = KeepAlive::connect(s.addr()).await;
    let ping = request("/", TOKEN, br#"["PING"]"#, false);
    assert_eq!(authenticated.send(&ping).await.unwrap().0, 200);
    assert!(closed_within(&mut silent, Duration::from_secs(3)).await);
    assert!(closed_within(answered.stream(), Duration::from_secs(3)).await);
    let waited = opened.elapsed();
    assert!(waited >= short, "not before the short timeout: {waited:?}");
    assert!(waited < short + Duration::from_secs(2), "{waited:?}");
    tokio::time::sleep(short).await;
    assert_eq!(
        authenticated.send(&ping).await.unwrap().0,
        200,
        "the connection with the token waited past the short timeout"
    );
    let page = edgelimit_testkit::metrics::scrape(&s.addr().to_string(), Some(TOKEN)).unwrap();
    assert_eq!(
        page.value(
            "edgelimit_gateway_connections_unauthenticated_timeouts_total",
            &[]
        ),
        2.0
    );
}

/// Distinct scripts sent by the test: far past the bound, bounded in time (about two seconds);
/// a million were measured by hand (docs/gateway.md).
const SCRIPTS: usize = 20_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_past_the_bound_leave_the_map_within_it() {
    let _alone = ALONE.lock().await;
    let s = common::start_with_defaults(|c| {
        // A read-only token's scripts: what a dashboard with it could send.
        c.allowed.insert("EVAL_RO".into());
        c.allowed.insert("EVALSHA_RO".into());
        c.metrics = MetricsPage::Token;
    })
    .await;
    let bound = edgelimit_gateway::config::DEFAULT_MAX_SCRIPTS;
    let script = |i: usize| format!("#!lua flags=allow-key-locking\nreturn {i}");
    for batch in (0..SCRIPTS).collect::<Vec<_>>().chunks(1000) {
        let commands: Vec<Value> = batch
            .iter()
            .map(|&i| json!(["EVAL_RO", script(i), 0]))
            .collect();
        let body = serde_json::to_vec(&commands).unwrap();
        let (status, answer) = raw_post(s.addr(), "/pipeline", READ_ONLY, &body)
            .await
            .unwrap();
        assert_eq!(status, 200, "{answer:.200}");
        let answers: Vec<Value> = serde_json::from_str(&answer).unwrap();
        assert_eq!(answers[0], json!({"result": batch[0]}), "each script ran");
    }
    let page = edgelimit_testkit::metrics::scrape(&s.addr().to_string(), Some(TOKEN)).unwrap();
    let kept = page.value("edgelimit_gateway_scripts", &[]);
    let evicted = page.value("edgelimit_gateway_scripts_evicted_total", &[]);
    println!("{SCRIPTS} distinct scripts: {kept} remembered (bound {bound}), {evicted} let go");
    assert!(kept <= bound as f64 && kept >= (bound / 2) as f64, "{kept}");
    assert_eq!(kept + evicted, SCRIPTS as f64);
    // The newest is still called by the SHA its client knows; the first is forgotten, so its
    // client gets NOSCRIPT (and would send it again).
    let sha = |i: usize| sha1_smol::Sha1::from(script(i)).digest().to_string();
    let evalsha = |i: usize| serde_json::to_vec(&json!(["EVALSHA_RO", sha(i), 0])).unwrap();
    let (status, answer) = raw_post(s.addr(), "/", READ_ONLY, &evalsha(SCRIPTS - 1))
        .await
        .unwrap();
    assert_eq!(
        (status, answer),
        (200, format!(r#"{{"result":{}}}"#, SCRIPTS - 1))
    );
    let (status, answer) = raw_post(s.addr(), "/", READ_ONLY, &evalsha(0))
        .await
        .unwrap();
    assert_eq!(status, 400, "{answer}");
    assert!(answer.contains("NOSCRIPT"), "{answer}");
}
