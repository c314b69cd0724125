//! HTTPS from `--tls-cert`/`--tls-key`: certificates made at test time (a CA and a server
//! certificate for 127.0.0.1 it signs), clients trusting that CA only, a gateway on a free
//! loopback port. Commands run over TLS on HTTP/1.1 and HTTP/2 (by ALPN); a cleartext client
//! gets no answer; a reload swaps the certificate for new connections while an open connection
//! keeps serving; a reload with a mismatched key is refused and the old pair keeps serving; a
//! client that never finishes its handshake is cut off at the header-read timeout; the binary
//! takes the pair from its environment and reloads it on SIGHUP.

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use edgelimit_gateway::{Gateway, GatewayError, TlsFiles};
use edgelimit_testkit::dir::TempDir;
use edgelimit_testkit::http::{closed_within, parse_answer};
use edgelimit_testkit::tls::{Authority, ServerPair};
use edgelimit_testkit::GatewayServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{ClientConfig, RootCertStore};
use tokio_rustls::TlsConnector;

use common::TOKEN;

/// A reqwest client trusting `authority` only (no system roots).
fn client(authority: &Authority) -> reqwest::Client {
    let ca = reqwest::Certificate::from_pem(authority.pem().as_bytes()).unwrap();
    reqwest::Client::builder()
        .tls_certs_only([ca])
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

async fn set(client: &reqwest::Client, server: &GatewayServer, key: &str) -> reqwest::Result<u16> {
    let url = format!("https://127.0.0.1:{}/", server.addr().port());
    let response = client
        .post(url)
        .bearer_auth(TOKEN)
        .body(format!(r#"["SET","{key}","over-tls"]"#))
        .send()
        .await?;
    Ok(response.status().as_u16())
}

async fn tls_gateway(files: TlsFiles) -> GatewayServer {
    common::start(|config| {
        config.tls = Some(files);
        config.header_read_timeout = Duration::from_millis(400);
    })
    .await
}

#[tokio::test]
async fn commands_run_over_https_on_http1_and_http2() {
    let dir = TempDir::new("gateway-tls");
    let authority = Authority::new("a");
    let server = tls_gateway(authority.server_pair().gateway_files(&dir)).await;
    assert_eq!(server.gateway.scheme(), "https");

    assert_eq!(set(&client(&authority), &server, "h1").await.unwrap(), 200);
    assert_eq!(server.get("h1").as_deref(), Some("over-tls"));

    let url = format!("https://127.0.0.1:{}/", server.addr().port());
    let ca = reqwest::Certificate::from_pem(authority.pem().as_bytes()).unwrap();
    let h2 = reqwest::Client::builder()
        .tls_certs_only([ca])
        .build()
        .unwrap();
    let response = h2
        .post(&url)
        .bearer_auth(TOKEN)
        .body(r#"["SET","h2","over-tls"]"#)
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.version(),
        reqwest::Version::HTTP_2,
        "ALPN picks h2"
    );
    assert_eq!(response.status(), 200);
    assert_eq!(server.get("h2").as_deref(), Some("over-tls"));

    // The token is still required behind TLS.
    let refused = h2.post(&url).body(r#"["GET","h2"]"#).send().await.unwrap();
    assert_eq!(refused.status(), 401);
}

#[tokio::test]
async fn cleartext_and_untrusting_clients_get_nothing() {
    let dir = TempDir::new("gateway-tls");
    let authority = Authority::new("a");
    let server = tls_gateway(authority.server_pair().gateway_files(&dir)).await;

    let plain = reqwest::Client::new()
        .post(format!("http://{}/", server.addr()))
        .bearer_auth(TOKEN)
        .body(r#"["SET","plain","x"]"#)
        .timeout(Duration::from_secs(5))
        .send()
        .await;
    assert!(plain.is_err(), "a cleartext request got {plain:?}");

    let stranger = Authority::new("stranger");
    let error = set(&client(&stranger), &server, "stranger")
        .await
        .unwrap_err();
    assert!(error.is_connect(), "{error:?}");
    assert_eq!(server.get("plain"), None);
    assert_eq!(server.get("stranger"), None);
}

/// One TLS connection written to by hand, so the test knows the connection it reuses.
struct Connection {
    stream: tokio_rustls::client::TlsStream<TcpStream>,
}

impl Connection {
    async fn open(server: &GatewayServer, trusted: &Authority) -> std::io::Result<Connection> {
        let mut roots = RootCertStore::empty();
        roots.add(CertificateDer::from(trusted.der())).unwrap();
        let provider = Arc::new(tokio_rustls::rustls::crypto::aws_lc_rs::default_provider());
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let tcp = TcpStream::connect(server.addr()).await?;
        let name = ServerName::try_from("127.0.0.1").unwrap();
        let stream = TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await?;
        Ok(Connection { stream })
    }

    /// `["SET", key, value]` on this connection, kept alive; the answer's status and body.
    async fn set(&mut self, key: &str) -> (u16, String) {
        let body = format!(r#"["SET","{key}","over-tls"]"#);
        let head = format!(
            "POST / HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer {TOKEN}\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        );
        self.stream.write_all(head.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        let mut buffer = [0u8; 4096];
        // The gateway's answers here are small and carry Content-Length: read until it is met.
        while !complete(&answer) {
            let n = tokio::time::timeout(Duration::from_secs(10), self.stream.read(&mut buffer))
                .await
                .expect("an answer within 10 s")
                .expect("the connection stays open");
            assert!(n > 0, "the connection closed mid-answer");
            answer.extend_from_slice(&buffer[..n]);
        }
        parse_answer(&answer)
    }
}

fn complete(answer: &[u8]) -> bool {
    let text = String::from_utf8_lossy(answer);
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return false;
    };
    let length = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().ok())?
        })
        .expect("the gateway's answers carry Content-Length");
    body.len() >= length
}

#[tokio::test]
async fn a_reload_serves_the_new_certificate_and_keeps_open_connections() {
    let dir = TempDir::new("gateway-tls");
    let old = Authority::new("old");
    let new = Authority::new("new");
    let server = tls_gateway(old.server_pair().gateway_files(&dir)).await;

    let mut open = Connection::open(&server, &old).await.unwrap();
    assert_eq!(open.set("before").await.0, 200);

    new.server_pair().write(&dir);
    assert!(server.gateway.reload_tls().unwrap());

    // The open connection goes on with the session it negotiated.
    assert_eq!(open.set("after-on-open").await.0, 200);
    assert_eq!(server.get("after-on-open").as_deref(), Some("over-tls"));
    // New connections get the new certificate: trusted by the new CA, refused by the old.
    assert!(Connection::open(&server, &old).await.is_err());
    let mut fresh = Connection::open(&server, &new).await.unwrap();
    assert_eq!(fresh.set("after-on-new").await.0, 200);
    assert_eq!(
        set(&client(&new), &server, "reqwest-new").await.unwrap(),
        200
    );
}

#[tokio::test]
async fn a_failed_reload_keeps_the_pair_in_use() {
    let dir = TempDir::new("gateway-tls");
    let authority = Authority::new("a");
    let server = tls_gateway(authority.server_pair().gateway_files(&dir)).await;

    // A certificate with another certificate's key: rustls sees they do not match.
    let mismatched = ServerPair {
        key: authority.server_pair().key,
        ..authority.server_pair()
    };
    mismatched.write(&dir);
    let error = server.gateway.reload_tls().unwrap_err().to_string();
    assert!(error.contains("key.pem"), "{error}");
    assert!(error.contains("not the certificate's"), "{error}");
    assert!(error.contains("cert.pem"), "{error}");
    // A missing file names itself.
    std::fs::remove_file(dir.join("cert.pem")).unwrap();
    let error = server.gateway.reload_tls().unwrap_err().to_string();
    assert!(
        error.contains("cert.pem") && error.contains("certificate chain"),
        "{error}"
    );

    let mut connection = Connection::open(&server, &authority).await.unwrap();
    assert_eq!(connection.set("still").await.0, 200);
}

#[tokio::test]
async fn a_bad_pair_stops_the_start_with_the_file_named() {
    let dir = TempDir::new("gateway-tls");
    let files = TlsFiles {
        cert: dir.write("cert.pem", "not a certificate\n"),
        key: dir.write("key.pem", "not a key\n"),
    };
    let mut config = edgelimit_testkit::gateway::config("redis://127.0.0.1:1/", TOKEN);
    config.tls = Some(files);
    let error = Gateway::start(config).await.unwrap_err();
    assert!(matches!(error, GatewayError::Tls(_)), "{error:?}");
    assert!(error.to_string().contains("cert.pem"), "{error}");
}

#[tokio::test]
async fn a_stalled_handshake_is_cut_off_at_the_header_read_timeout() {
    let dir = TempDir::new("gateway-tls");
    let authority = Authority::new("a");
    let server = tls_gateway(authority.server_pair().gateway_files(&dir)).await;
    // Timed from before the connection: the gateway's clock starts later, so the lower bound
    // holds however slowly this test runs on a loaded machine.
    let began = std::time::Instant::now();
    let mut silent = TcpStream::connect(server.addr()).await.unwrap();
    // Half a ClientHello record header, then nothing.
    silent.write_all(&[0x16, 0x03, 0x01]).await.unwrap();
    assert!(closed_within(&mut silent, Duration::from_secs(5)).await);
    // Closed by the 400 ms timeout, not refused at once.
    assert!(
        began.elapsed() >= Duration::from_millis(400),
        "{:?}",
        began.elapsed()
    );
    // Still serving others.
    assert_eq!(set(&client(&authority), &server, "k").await.unwrap(), 200);
}

#[test]
fn the_paths_in_errors_are_the_files_given() {
    let files = TlsFiles {
        cert: PathBuf::from("/nonexistent/fullchain.pem"),
        key: PathBuf::from("/nonexistent/privkey.pem"),
    };
    let error = edgelimit_gateway::Certificates::load(files)
        .unwrap_err()
        .to_string();
    assert!(
        error.starts_with("/nonexistent/fullchain.pem: certificate chain"),
        "{error}"
    );
}

/// The binary: `--tls-cert`/`--tls-key`, the address it prints, and SIGHUP reloading the pair.
#[tokio::test]
async fn the_binary_serves_https_and_reloads_on_sighup() {
    use std::io::BufRead;
    use std::process::{Command, Stdio};

    let redis = edgelimit_testkit::RedisServer::start();
    let dir = TempDir::new("gateway-tls-bin");
    let old = Authority::new("old");
    let new = Authority::new("new");
    let files = old.server_pair().gateway_files(&dir);
    let mut child = Stopped(
        Command::new(env!("CARGO_BIN_EXE_gateway"))
            .args(["--listen", "127.0.0.1:0", "--redis-url", &redis.url()])
            .env("GATEWAY_TOKEN", TOKEN)
            .env("GATEWAY_TLS_CERT", &files.cert)
            .env("GATEWAY_TLS_KEY", &files.key)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut first = String::new();
    std::io::BufReader::new(child.0.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let url = first
        .trim()
        .strip_prefix("listening on ")
        .unwrap()
        .to_string();
    assert!(url.starts_with("https://127.0.0.1:"), "{first}");

    let post = |trusted: &Authority, key: &str| {
        let request = client(trusted)
            .post(format!("{url}/"))
            .bearer_auth(TOKEN)
            .body(format!(r#"["SET","{key}","v"]"#));
        async move { request.send().await.map(|r| r.status().as_u16()) }
    };
    assert_eq!(post(&old, "before").await.unwrap(), 200);

    new.server_pair().write(&dir);
    let hup = Command::new("kill")
        .args(["-HUP", &child.0.id().to_string()])
        .status()
        .unwrap();
    assert!(hup.success());
    // The reload happens on the gateway's own time: wait for the new pair, bounded.
    let mut reloaded = false;
    for _ in 0..100 {
        if post(&new, "after").await.ok() == Some(200) {
            reloaded = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let still_running = child.0.try_wait().unwrap().is_none();
    assert!(still_running, "SIGHUP stopped the gateway");
    assert!(
        reloaded,
        "the new certificate was not served within 5 s of SIGHUP"
    );
}

/// A child process killed and reaped when dropped, whatever the test's outcome.
struct Stopped(std::process::Child);

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
