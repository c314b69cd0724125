//! A minimal RESP client (std only) for setting up and asserting on a Redis a test started:
//! one command on a fresh connection, its reply read whole. Not for speed: the stores under test
//! have their own clients, and a test's setup must not depend on them.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A RESP reply, as [`command`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+OK`-style status.
    Status(String),
    /// `-ERR …`.
    Error(String),
    /// `:42`.
    Int(i64),
    /// `$…` bulk string.
    Bulk(Vec<u8>),
    /// `$-1` / `*-1`.
    Nil,
    /// `*…` array.
    Array(Vec<Reply>),
}

impl Reply {
    /// The reply as text, for bulk and status replies.
    pub fn text(&self) -> Option<String> {
        match self {
            Reply::Status(s) => Some(s.clone()),
            Reply::Bulk(b) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        }
    }
}

/// Sends one command to `127.0.0.1:port` on a fresh connection and reads its reply. For setup
/// and assertions in tests (`SCAN`, `TTL`, `SCRIPT FLUSH`, `MEMORY USAGE`), not for speed.
pub fn command(port: u16, args: &[&str]) -> io::Result<Reply> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    stream.write_all(&out)?;
    read_reply(&mut BufReader::new(stream))
}

fn read_reply(reader: &mut BufReader<TcpStream>) -> io::Result<Reply> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed",
        ));
    }
    let line = line.trim_end_matches(['\r', '\n']);
    let bad = || io::Error::new(io::ErrorKind::InvalidData, format!("bad reply `{line}`"));
    let (kind, rest) = line.split_at_checked(1).ok_or_else(bad)?;
    Ok(match kind {
        "+" => Reply::Status(rest.to_string()),
        "-" => Reply::Error(rest.to_string()),
        ":" => Reply::Int(rest.parse().map_err(|_| bad())?),
        "$" => {
            let len: i64 = rest.parse().map_err(|_| bad())?;
            if len < 0 {
                Reply::Nil
            } else {
                let mut buf = vec![0; len as usize + 2];
                reader.read_exact(&mut buf)?;
                buf.truncate(len as usize);
                Reply::Bulk(buf)
            }
        }
        "*" => {
            let len: i64 = rest.parse().map_err(|_| bad())?;
            if len < 0 {
                Reply::Nil
            } else {
                let mut items = Vec::with_capacity(len as usize);
                for _ in 0..len {
                    items.push(read_reply(reader)?);
                }
                Reply::Array(items)
            }
        }
        _ => return Err(bad()),
    })
}
