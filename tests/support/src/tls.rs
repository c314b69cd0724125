//! Certificates made at test time: a certificate authority of the test's own and server
//! certificates it signs for 127.0.0.1, for servers that speak TLS (the gateway's
//! `--tls-cert`/`--tls-key`) and clients told to trust that authority alone.

use std::path::PathBuf;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

use crate::dir::TempDir;

/// A throwaway certificate authority.
#[derive(Debug)]
pub struct Authority {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A server certificate and its key, both PEM.
#[derive(Debug, Clone)]
pub struct ServerPair {
    /// The certificate.
    pub cert: String,
    /// Its private key (PKCS#8).
    pub key: String,
}

impl Authority {
    /// A new authority whose certificate names `name`.
    pub fn new(name: &str) -> Authority {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("no names to check");
        params
            .distinguished_name
            .push(DnType::CommonName, format!("edgelimit test CA {name}"));
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let key = KeyPair::generate().expect("a key pair");
        let issuer = CertifiedIssuer::self_signed(params, key).expect("a CA certificate");
        Authority { issuer }
    }

    /// A fresh server certificate for `127.0.0.1` and `localhost`, signed by this authority.
    pub fn server_pair(&self) -> ServerPair {
        let key = KeyPair::generate().expect("a key pair");
        let params = CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()])
            .expect("valid names");
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("a server certificate");
        ServerPair {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }

    /// The authority's certificate, PEM: what a client trusts.
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// The authority's certificate, DER.
    pub fn der(&self) -> Vec<u8> {
        self.issuer.der().to_vec()
    }

    /// Writes the authority's certificate to `ca.pem` in `dir` (for `SSL_CERT_FILE`).
    pub fn write_pem(&self, dir: &TempDir) -> PathBuf {
        dir.write("ca.pem", &self.pem())
    }
}

impl ServerPair {
    /// Writes the pair to `cert.pem` and `key.pem` in `dir` (replacing earlier ones) and returns
    /// their paths, certificate first.
    pub fn write(&self, dir: &TempDir) -> (PathBuf, PathBuf) {
        (
            dir.write("cert.pem", &self.cert),
            dir.write("key.pem", &self.key),
        )
    }

    /// [`ServerPair::write`] as the gateway's configuration takes it (`Config::tls`).
    pub fn gateway_files(&self, dir: &TempDir) -> edgelimit_gateway::TlsFiles {
        let (cert, key) = self.write(dir);
        edgelimit_gateway::TlsFiles { cert, key }
    }
}
