//! The HTTPS listener's certificate: a PEM chain and its private key, loaded at start and reloaded
//! when the files change, so that a renewed certificate (cert-manager rewriting a mounted Secret, or
//! an admin replacing the files) is served without a restart and without dropping a download.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use anyhow::{Context, bail};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs1KeyDer, PrivatePkcs8KeyDer, PrivateSec1KeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// How often the certificate files are checked for a change.
const RELOAD_CHECK: Duration = Duration::from_secs(10);

/// Reads a PEM certificate chain (leaf first) and its private key (PKCS#8, PKCS#1 RSA or SEC1 EC).
pub fn load_certified_key(cert_path: &Path, key_path: &Path) -> anyhow::Result<CertifiedKey> {
    let cert_text =
        std::fs::read(cert_path).with_context(|| format!("reading TLS certificate {}", cert_path.display()))?;
    let certs: Vec<CertificateDer<'static>> = pem::parse_many(&cert_text)
        .with_context(|| format!("TLS certificate {}: not PEM", cert_path.display()))?
        .into_iter()
        .filter(|p| p.tag() == "CERTIFICATE")
        .map(|p| CertificateDer::from(p.into_contents()))
        .collect();
    if certs.is_empty() {
        bail!("TLS certificate {}: no CERTIFICATE block", cert_path.display());
    }
    let key_text = std::fs::read(key_path).with_context(|| format!("reading TLS key {}", key_path.display()))?;
    let blocks = pem::parse_many(&key_text).with_context(|| format!("TLS key {}: not PEM", key_path.display()))?;
    let key: PrivateKeyDer<'static> = blocks
        .into_iter()
        .find_map(|p| match p.tag() {
            "PRIVATE KEY" => Some(PrivatePkcs8KeyDer::from(p.into_contents()).into()),
            "RSA PRIVATE KEY" => Some(PrivatePkcs1KeyDer::from(p.into_contents()).into()),
            "EC PRIVATE KEY" => Some(PrivateSec1KeyDer::from(p.into_contents()).into()),
            _ => None,
        })
        .with_context(|| {
            format!("TLS key {}: no PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY block", key_path.display())
        })?;
    let provider = rustls::crypto::ring::default_provider();
    let signing_key = provider
        .key_provider
        .load_private_key(key)
        .with_context(|| format!("TLS key {}: not a usable private key", key_path.display()))?;
    let certified = CertifiedKey::new(certs, signing_key);
    certified.keys_match().with_context(|| {
        format!("TLS key {} does not belong to certificate {}", key_path.display(), cert_path.display())
    })?;
    Ok(certified)
}

/// The certificate the listener presents, replaced when its files change.
#[derive(Debug)]
pub struct ReloadingCert {
    cert_path: PathBuf,
    key_path: PathBuf,
    current: RwLock<(Arc<CertifiedKey>, Option<SystemTime>, Option<SystemTime>)>,
}

impl ReloadingCert {
    pub fn load(cert_path: &Path, key_path: &Path) -> anyhow::Result<Arc<ReloadingCert>> {
        let key = load_certified_key(cert_path, key_path)?;
        Ok(Arc::new(ReloadingCert {
            cert_path: cert_path.to_path_buf(),
            key_path: key_path.to_path_buf(),
            current: RwLock::new((Arc::new(key), mtime(cert_path), mtime(key_path))),
        }))
    }

    /// Loads the files again if either changed. A pair that does not load (a half-written renewal,
    /// a key from another certificate) keeps the current certificate and is retried next time.
    pub fn reload_if_changed(&self) -> anyhow::Result<bool> {
        let (cert_m, key_m) = (mtime(&self.cert_path), mtime(&self.key_path));
        {
            let cur = self.current.read().expect("lock");
            if cur.1 == cert_m && cur.2 == key_m {
                return Ok(false);
            }
        }
        let key = load_certified_key(&self.cert_path, &self.key_path)?;
        *self.current.write().expect("lock") = (Arc::new(key), cert_m, key_m);
        Ok(true)
    }

    /// Checks the files every few seconds for as long as the process runs.
    pub fn watch(self: Arc<Self>) {
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(RELOAD_CHECK).await;
                match self.reload_if_changed() {
                    Ok(true) => tracing::info!(cert = %self.cert_path.display(), "loaded the renewed TLS certificate"),
                    Ok(false) => {}
                    Err(e) => tracing::warn!("TLS certificate not reloaded, still serving the previous one: {e:#}"),
                }
            }
        });
    }

    /// A rustls server configuration presenting this certificate, for HTTP/1.1 (TLS 1.2 and 1.3).
    pub fn server_config(self: &Arc<Self>) -> Arc<rustls::ServerConfig> {
        let mut config =
            rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .expect("ring supports the default protocol versions")
                .with_no_client_auth()
                .with_cert_resolver(self.clone());
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Arc::new(config)
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.read().expect("lock").0.clone())
    }
}

fn mtime(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}
