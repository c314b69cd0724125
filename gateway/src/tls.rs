//! TLS on the accept loop: a certificate chain and private key from PEM files, swapped for new
//! ones while serving ([`Certificates::reload`], which the binary runs on `SIGHUP`).
//!
//! A reload replaces the key pair that *new* handshakes get; connections already established
//! keep the session they negotiated and go on serving, so renewing a certificate (certbot,
//! cert-manager, an ACME client's deploy hook) drops nothing. A reload that fails (a missing
//! file, a key not matching the certificate) keeps the pair in use and says why.
//!
//! Both ALPN protocols are offered, `h2` and `http/1.1`; the accept loop tells them apart by
//! the HTTP/2 preface as it does on cleartext connections.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::crypto::{aws_lc_rs, CryptoProvider};
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::{Error, InconsistentKeys, ServerConfig};
use tokio_rustls::TlsAcceptor;

/// Where the certificate chain and its private key are read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM file with the certificate chain, the server's own certificate first (as ACME clients
    /// write `fullchain.pem`).
    pub cert: PathBuf,
    /// PEM file with the private key: PKCS#8, PKCS#1 (RSA) or SEC1 (EC).
    pub key: PathBuf,
}

/// Why a certificate and key could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or holds no well-formed PEM.
    #[error("{}: {what}: {detail}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What was sought in it.
        what: &'static str,
        /// What went wrong.
        detail: String,
    },
    /// The key file's key is unusable, or is not the certificate's.
    #[error("{} with {}: {detail}", key.display(), cert.display())]
    Key {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// What rustls found wrong.
        detail: String,
    },
}

/// The key pair new handshakes get, read from [`TlsFiles`] and replaceable while serving.
#[derive(Debug)]
pub struct Certificates {
    files: TlsFiles,
    provider: Arc<CryptoProvider>,
    current: RwLock<Arc<CertifiedKey>>,
}

impl Certificates {
    /// Reads and checks the certificate chain and key.
    pub fn load(files: TlsFiles) -> Result<Arc<Certificates>, TlsError> {
        let provider = Arc::new(aws_lc_rs::default_provider());
        let current = read_pair(&files, &provider)?;
        Ok(Arc::new(Certificates {
            files,
            provider,
            current: RwLock::new(Arc::new(current)),
        }))
    }

    /// Reads the files again and, if they hold a usable pair, gives it to every handshake from
    /// now on. Established connections are untouched. On an error the pair in use stays.
    pub fn reload(&self) -> Result<(), TlsError> {
        let pair = read_pair(&self.files, &self.provider)?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(pair);
        Ok(())
    }

    /// The files this reads.
    pub fn files(&self) -> &TlsFiles {
        &self.files
    }

    /// An acceptor whose handshakes take the pair in use at the time of each handshake.
    pub fn acceptor(self: &Arc<Self>) -> TlsAcceptor {
        let mut config = ServerConfig::builder_with_provider(self.provider.clone())
            .with_safe_default_protocol_versions()
            .expect("the provider's defaults support TLS 1.2 and 1.3")
            .with_no_client_auth()
            .with_cert_resolver(self.clone());
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        TlsAcceptor::from(Arc::new(config))
    }
}

impl ResolvesServerCert for Certificates {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        )
    }
}

fn read_pair(files: &TlsFiles, provider: &CryptoProvider) -> Result<CertifiedKey, TlsError> {
    let file_error = |path: &Path, what, detail: String| TlsError::File {
        path: path.to_path_buf(),
        what,
        detail,
    };
    let chain = CertificateDer::pem_file_iter(&files.cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| file_error(&files.cert, "certificate chain", e.to_string()))?;
    if chain.is_empty() {
        return Err(file_error(
            &files.cert,
            "certificate chain",
            "no CERTIFICATE block in it".into(),
        ));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| file_error(&files.key, "private key", e.to_string()))?;
    CertifiedKey::from_der(chain, key, provider).map_err(|e| TlsError::Key {
        cert: files.cert.clone(),
        key: files.key.clone(),
        detail: match e {
            Error::InconsistentKeys(InconsistentKeys::KeyMismatch) => {
                "the private key is not the certificate's".to_string()
            }
            other => other.to_string(),
        },
    })
}
