//! One throwaway nginx (Debian's `nginx` package, which `scripts/test` installs): a single
//! process on a free loopback port, its pid, logs and temporary files in its own directory,
//! killed on drop.

use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use edgelimit_testkit::dir::TempDir;
use edgelimit_testkit::net::free_port;
use edgelimit_testkit::wait;

/// Where Debian's package installs the server.
pub const NGINX: &str = "/usr/sbin/nginx";

/// How often nginx is tried on a new port (another process may take the free port between the
/// probe and nginx's bind).
const START_ATTEMPTS: usize = 5;

/// One nginx process on `127.0.0.1:<port>`, killed on drop.
#[derive(Debug)]
pub struct Nginx {
    addr: SocketAddr,
    dir: TempDir,
    child: Child,
}

impl Nginx {
    /// Starts nginx with `servers`, the `server` blocks of its `http` block, each holding
    /// `listen {listen}` where it should listen (replaced by `127.0.0.1:<port>`). Panics when
    /// nginx is missing or does not come up, with its error log.
    pub fn start(servers: &str) -> Nginx {
        let mut last_error = String::new();
        for _ in 0..START_ATTEMPTS {
            match Nginx::start_on(free_port(), servers) {
                Ok(nginx) => return nginx,
                Err(error) => last_error = error,
            }
        }
        panic!("nginx did not start after {START_ATTEMPTS} attempts: {last_error}");
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// What nginx has logged (warnings and errors), for a failing test's message.
    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("error.log")).unwrap_or_default()
    }

    fn start_on(port: u16, servers: &str) -> Result<Nginx, String> {
        let dir = TempDir::new("edgelimit-nginx");
        let at = |name: &str| dir.join(name).display().to_string();
        // One process (no master), every file it writes in `dir`, so no root is needed.
        let config = format!(
            "master_process off;\n\
             pid {pid};\n\
             error_log {log} warn;\n\
             events {{ worker_connections 256; }}\n\
             http {{\n\
             access_log off;\n\
             client_body_temp_path {body};\n\
             proxy_temp_path {proxy};\n\
             fastcgi_temp_path {fastcgi};\n\
             uwsgi_temp_path {uwsgi};\n\
             scgi_temp_path {scgi};\n\
             keepalive_requests 1000000;\n\
             default_type text/plain;\n\
             {servers}\n\
             }}\n",
            pid = at("nginx.pid"),
            log = at("error.log"),
            body = at("body"),
            proxy = at("proxy"),
            fastcgi = at("fastcgi"),
            uwsgi = at("uwsgi"),
            scgi = at("scgi"),
            servers = servers.replace("{listen}", &format!("127.0.0.1:{port}")),
        );
        let conf = dir.write("nginx.conf", &config);
        let mut child = Command::new(NGINX)
            .arg("-p")
            .arg(dir.path())
            .arg("-e")
            .arg(at("error.log"))
            .arg("-c")
            .arg(&conf)
            .args(["-g", "daemon off;"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                format!(
                    "cannot run {NGINX} ({e}): install it with `apt-get install nginx` or run \
                     scripts/test"
                )
            })?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let mut exited = false;
        let up = wait::until(Duration::from_secs(20), Duration::from_millis(20), || {
            exited = !matches!(child.try_wait(), Ok(None));
            exited || TcpStream::connect(addr).is_ok()
        });
        if up && !exited {
            return Ok(Nginx { addr, dir, child });
        }
        let _ = child.kill();
        let _ = child.wait();
        let log = std::fs::read_to_string(dir.join("error.log")).unwrap_or_default();
        Err(format!(
            "nginx on port {port} did not come up; its log:\n{log}"
        ))
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // `dir` goes after this body: once the process that wrote in it is gone.
    }
}
