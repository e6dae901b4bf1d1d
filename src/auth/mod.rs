//! Agent authentication: each InfraEnv's discovery image carries a token (`PULL_SECRET_TOKEN`, sent by
//! the agent as `X-Secret-Key`) that is valid for that InfraEnv only. Tokens are HMAC-SHA256 of the
//! InfraEnv id under a key generated once per data dir, so they survive restarts, need no storage per
//! InfraEnv, and a token leaked from one InfraEnv's image cannot register hosts into another.

pub mod urlsign;

use std::io::Write;
use std::path::Path;

use base64::Engine;
use hmac::{KeyInit, Mac};

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// The header the discovery agent authenticates with (swagger `agentAuth`).
pub const AGENT_AUTH_HEADER: &str = "X-Secret-Key";

#[derive(Clone)]
pub struct AgentAuth {
    key: [u8; 32],
}

impl std::fmt::Debug for AgentAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AgentAuth(..)")
    }
}

impl AgentAuth {
    pub fn from_key(key: [u8; 32]) -> AgentAuth {
        AgentAuth { key }
    }

    /// Loads a key that must exist: on Kubernetes the controller and every image server share one,
    /// mounted from a Secret.
    pub fn load(path: &Path) -> std::io::Result<AgentAuth> {
        let bytes = std::fs::read(path)
            .map_err(|e| std::io::Error::new(e.kind(), format!("reading the agent key {}: {e}", path.display())))?;
        Self::from_file_bytes(path, bytes)
    }

    fn from_file_bytes(path: &Path, bytes: Vec<u8>) -> std::io::Result<AgentAuth> {
        let key: [u8; 32] = bytes.as_slice().try_into().map_err(|_| {
            std::io::Error::other(format!(
                "{} holds {} bytes, expected 32 (`head -c 32 /dev/urandom`); a new key makes existing discovery images stop working",
                path.display(),
                bytes.len()
            ))
        })?;
        Ok(AgentAuth { key })
    }

    /// Loads the key from `dir/agent-auth.key`, creating it (mode 0600) on first start.
    pub fn load_or_create(dir: &Path) -> std::io::Result<AgentAuth> {
        let path = dir.join("agent-auth.key");
        match std::fs::read(&path) {
            Ok(bytes) => Self::from_file_bytes(&path, bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut key = [0u8; 32];
                key[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
                key[16..].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
                write_private_file(&path, &key)?;
                Ok(AgentAuth { key })
            }
            Err(e) => Err(e),
        }
    }

    fn mac(&self, infra_env_id: &str) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(&self.key).expect("HMAC takes any key length");
        mac.update(b"bootstream agent token v1\0");
        mac.update(infra_env_id.as_bytes());
        mac
    }

    /// The token agents booted from this InfraEnv's image present.
    pub fn token(&self, infra_env_id: &str) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(self.mac(infra_env_id).finalize().into_bytes())
    }

    /// Checks a presented token in constant time.
    pub fn verify(&self, infra_env_id: &str, token: &str) -> bool {
        let Ok(raw) = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(token.trim()) else {
            return false;
        };
        self.mac(infra_env_id).verify_slice(&raw).is_ok()
    }
}

/// The bearer token of the embedded REST API (`Authorization: Bearer <token>`), kept in `path`
/// (`DATA_DIR/api-token` by default), made on first start: 32 random bytes, base64url. Whoever can
/// read the data directory can use the API, as with a kubeconfig.
pub fn load_or_create_api_token(path: &Path) -> std::io::Result<String> {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let token = text.trim().to_string();
            if token.len() < 16 {
                return Err(std::io::Error::other(format!(
                    "{} holds a token of {} characters; at least 16 are needed",
                    path.display(),
                    token.len()
                )));
            }
            Ok(token)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut raw = [0u8; 32];
            raw[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
            raw[16..].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
            let token = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw);
            write_private_file(path, format!("{token}\n").as_bytes())?;
            Ok(token)
        }
        Err(e) => Err(std::io::Error::new(e.kind(), format!("reading the API token {}: {e}", path.display()))),
    }
}

/// Whether `presented` is `expected`, in time that does not depend on where they differ.
pub fn same_token(presented: &str, expected: &str) -> bool {
    let (a, b) = (presented.as_bytes(), expected.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The API token a client sends: `explicit` (`--token`, `$BOOTSTREAM_TOKEN`), else the first line of
/// `file` when it exists (by default the server's `./bootstream-data/api-token`, so that `apply` next
/// to a `serve` with default settings needs nothing).
pub fn client_token(explicit: Option<&str>, file: &Path) -> Option<String> {
    if let Some(t) = explicit.map(str::trim).filter(|t| !t.is_empty()) {
        return Some(t.to_string());
    }
    std::fs::read_to_string(file).ok().map(|t| t.trim().to_string()).filter(|t| !t.is_empty())
}

/// Writes `bytes` to `path` readable by its owner only, all at once: through a temporary file that
/// is synced and renamed into place, so a crash never leaves a partial key behind.
pub fn write_private_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    {
        let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode_0600().open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}

trait Mode0600 {
    fn mode_0600(&mut self) -> &mut Self;
}

impl Mode0600 for std::fs::OpenOptions {
    fn mode_0600(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.mode(0o600)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_tokens_are_made_once_and_compared_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("api-token");
        let t = load_or_create_api_token(&path).unwrap();
        assert_eq!(t.len(), 43);
        assert_eq!(load_or_create_api_token(&path).unwrap(), t);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert!(same_token(&t, &t));
        assert!(!same_token(&t[1..], &t));
        assert!(!same_token(&format!("{}x", &t[..42]), &t));
        assert!(!same_token("", &t));
        assert_eq!(client_token(None, &path), Some(t.clone()));
        assert_eq!(client_token(Some("explicit"), &path).as_deref(), Some("explicit"));
        assert_eq!(client_token(None, &dir.path().join("missing")), None);
        std::fs::write(&path, "short").unwrap();
        assert!(load_or_create_api_token(&path).unwrap_err().to_string().contains("at least 16"));
    }

    #[test]
    fn tokens_are_per_infraenv_and_survive_reloading_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let auth = AgentAuth::load_or_create(dir.path()).unwrap();
        let t = auth.token("ie-1");
        assert!(auth.verify("ie-1", &t));
        assert!(!auth.verify("ie-2", &t));
        assert!(!auth.verify("ie-1", "not a token"));
        assert!(!auth.verify("ie-1", ""));
        let again = AgentAuth::load_or_create(dir.path()).unwrap();
        assert!(again.verify("ie-1", &t));
        let other = AgentAuth::load_or_create(tempfile::tempdir().unwrap().path()).unwrap();
        assert!(!other.verify("ie-1", &t));
    }
}
