//! Signed image URLs: an ES256 JWT per InfraEnv, with an expiry, in the `/byapikey/<token>/…` and
//! `/bytoken/<token>/…` paths and the `api_key` / `image_token` query parameters (spec-controllers
//! spec-controllers.md §3.8). A discovery image carries the InfraEnv's pull secret, so whoever holds its URL holds the
//! secret: a signed URL names one InfraEnv, stops working after its expiry, and can be revoked for
//! everyone by rotating the key.
//!
//! Two kinds of URL are handed to machines rather than people, and do not expire, as assisted-service's
//! local-auth URLs never do: the ISO URL a BareMetalHost boots from (metal3 and the BMC may fetch it
//! again days later, and a new URL would reprovision the host), and an Agent's logsURL (set once).
//! Both still name one InfraEnv or one cluster and die with a key rotation.
//!
//! Rotation without downtime: the service signs with one key and verifies with it and any number of
//! previous keys. Tokens name their key (`kid`, from the public key), so a previous key keeps the
//! URLs it signed working until they expire (at most [`TOKEN_LIFETIME`]); after that it can be
//! dropped from the configuration.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, DecodingKey, Header, Validation};
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// How long a signed URL is valid (assisted-service's ISO token expiry).
pub const TOKEN_LIFETIME: Duration = Duration::from_secs(4 * 3600);
/// A URL in a status is signed again once less than this is left of it, so that what a reader
/// copies from the status stays valid for at least this long.
pub const REFRESH_BEFORE: Duration = Duration::from_secs(3600);

/// Why a request's token is not accepted. `http_status` is 401 for every reason but a valid token
/// for another InfraEnv (403).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TokenError {
    #[error("this image needs a signed URL (api_key or image_token); unsigned URLs are turned off")]
    Missing,
    #[error("the image token is not a valid JWT: {0}")]
    Malformed(String),
    #[error("the image token was signed with a key this service does not know (rotated out?)")]
    UnknownKey,
    #[error("the image token's signature is not valid")]
    BadSignature,
    #[error("the image token expired at {0} (Unix time); get a new URL from the InfraEnv's status")]
    Expired(u64),
    #[error("the image token is for another InfraEnv")]
    OtherInfraEnv,
    #[error("the token is for another cluster")]
    OtherCluster,
    #[error("the token is for reading events only")]
    EventsOnly,
}

impl TokenError {
    pub fn http_status(&self) -> http::StatusCode {
        match self {
            TokenError::OtherInfraEnv | TokenError::OtherCluster | TokenError::EventsOnly => {
                http::StatusCode::FORBIDDEN
            }
            _ => http::StatusCode::UNAUTHORIZED,
        }
    }
}

/// The claims of a token: assisted-service's local-auth claim (`infra_env_id`, or `cluster_id` for a
/// cluster's logs), `sub` naming the same, as its image-token flavor has, the expiry if any, and a
/// scope that narrows what the token opens: [`EVENTS_SCOPE`] for the lasting tokens of the
/// eventsURLs, which must not open images or logs.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub infra_env_id: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cluster_id: String,
    pub sub: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exp: Option<u64>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub scope: String,
}

/// The scope of the tokens in eventsURLs: they read events, and open nothing else.
pub const EVENTS_SCOPE: &str = "events";

/// A verification key, named by `kid`.
struct VerifyingKey {
    kid: String,
    key: DecodingKey,
}

/// Signs and verifies image tokens.
pub struct UrlSigner {
    kid: String,
    /// Parsed once: `jsonwebtoken::encode` parses its PKCS#8 key at every signature, which doubled
    /// the cost of the token a new InfraEnv's status carries. Tokens are checked with
    /// `jsonwebtoken`, which is also what the tests read them with.
    signing: EcdsaKeyPair,
    rng: ring::rand::SystemRandom,
    /// The token header (`alg` ES256, `kid`), base64url-encoded.
    header: String,
    verifying: Vec<VerifyingKey>,
    /// Claims of tokens whose signature checked out. An ES256 verification costs about 50 µs, a
    /// third of a cached download's time to first byte, and the same few URLs are fetched over and
    /// over (BMCs read virtual media in ranges); expiry is still checked at every use.
    verified: std::sync::Mutex<std::collections::HashMap<String, Claims>>,
}

/// Verified tokens remembered at most; past it the memory starts over.
const MAX_VERIFIED: usize = 10_000;

impl std::fmt::Debug for UrlSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kids: Vec<&str> = self.verifying.iter().map(|k| k.kid.as_str()).collect();
        f.debug_struct("UrlSigner").field("kid", &self.kid).field("verifies", &kids).finish()
    }
}

/// A key file that could not be used.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct KeyError {
    pub path: PathBuf,
    pub reason: String,
}

/// The name of a public key in tokens: the first 8 bytes of the SHA-256 of its point, in hex.
fn kid_of(public_point: &[u8]) -> String {
    hex::encode(&Sha256::digest(public_point)[..8])
}

/// What a PEM key file holds, as keys.
enum Loaded {
    Private(Box<EcdsaKeyPair>),
    Public { point: Vec<u8> },
}

fn load_pem(path: &Path) -> Result<Loaded, KeyError> {
    let err = |reason: String| KeyError { path: path.to_path_buf(), reason };
    let text = std::fs::read(path).map_err(|e| err(format!("reading: {e}")))?;
    let block = pem::parse(&text).map_err(|e| err(format!("not a PEM file: {e}")))?;
    match block.tag() {
        "PRIVATE KEY" => {
            let rng = ring::rand::SystemRandom::new();
            let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, block.contents(), &rng)
                .map_err(|e| err(format!("not a PKCS#8 P-256 key ({e}); make one with `openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256`")))?;
            Ok(Loaded::Private(Box::new(pair)))
        }
        "PUBLIC KEY" => {
            // SubjectPublicKeyInfo of a P-256 key: a fixed 26-byte prefix, then the 65-byte point.
            const P256_SPKI_PREFIX: [u8; 26] = [
                0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a, 0x86,
                0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
            ];
            let der = block.contents();
            match der.strip_prefix(&P256_SPKI_PREFIX[..]) {
                Some(point) if point.len() == 65 && point[0] == 4 => Ok(Loaded::Public { point: point.to_vec() }),
                _ => Err(err("not a P-256 public key".into())),
            }
        }
        "EC PRIVATE KEY" => Err(err(
            "an SEC1 key; convert it to PKCS#8 with `openssl pkcs8 -topk8 -nocrypt -in KEY -out KEY.p8`".into(),
        )),
        other => Err(err(format!("a PEM {other:?}, expected \"PRIVATE KEY\" (PKCS#8 P-256)"))),
    }
}

impl UrlSigner {
    /// Signs with the PKCS#8 P-256 private key in `current` (PEM); also verifies tokens signed with
    /// the keys in `previous` (PEM private or public keys).
    pub fn from_files(current: &Path, previous: &[PathBuf]) -> Result<UrlSigner, KeyError> {
        let Loaded::Private(signing) = load_pem(current)? else {
            return Err(KeyError { path: current.to_path_buf(), reason: "a public key cannot sign".into() });
        };
        let mut verifying = Vec::new();
        for path in previous {
            let point = match load_pem(path)? {
                Loaded::Private(pair) => pair.public_key().as_ref().to_vec(),
                Loaded::Public { point } => point,
            };
            verifying.push(VerifyingKey { kid: kid_of(&point), key: DecodingKey::from_ec_der(&point) });
        }
        Ok(Self::new(*signing, verifying))
    }

    /// The key in `dir/url-signing.pem`, made (mode 0600) on first start: the embedded default.
    pub fn load_or_create(dir: &Path, previous: &[PathBuf]) -> Result<UrlSigner, KeyError> {
        let path = dir.join("url-signing.pem");
        if !path.exists() {
            let rng = ring::rand::SystemRandom::new();
            let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
                .map_err(|e| KeyError { path: path.clone(), reason: format!("generating a key: {e}") })?;
            let text = pem::encode(&pem::Pem::new("PRIVATE KEY", pkcs8.as_ref().to_vec()));
            crate::auth::write_private_file(&path, text.as_bytes())
                .map_err(|e| KeyError { path: path.clone(), reason: format!("writing: {e}") })?;
        }
        Self::from_files(&path, previous)
    }

    fn new(signing: EcdsaKeyPair, mut verifying: Vec<VerifyingKey>) -> UrlSigner {
        let point = signing.public_key().as_ref();
        let kid = kid_of(point);
        verifying.insert(0, VerifyingKey { kid: kid.clone(), key: DecodingKey::from_ec_der(point) });
        let rng = ring::rand::SystemRandom::new();
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(kid.clone());
        let header = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&header).expect("a JWT header is JSON"));
        UrlSigner { kid, signing, rng, header, verifying, verified: Default::default() }
    }

    /// A token for `infra_env_id`, valid until `now` + [`TOKEN_LIFETIME`].
    pub fn sign(&self, infra_env_id: &str, now: SystemTime) -> String {
        let exp = Some(unix(now) + TOKEN_LIFETIME.as_secs());
        self.encode(&Claims {
            infra_env_id: infra_env_id.into(),
            cluster_id: String::new(),
            sub: infra_env_id.into(),
            exp,
            scope: String::new(),
        })
    }

    /// A token for `infra_env_id` that does not expire: for the URL a BareMetalHost boots from.
    pub fn sign_lasting(&self, infra_env_id: &str) -> String {
        self.encode(&Claims {
            infra_env_id: infra_env_id.into(),
            cluster_id: String::new(),
            sub: infra_env_id.into(),
            exp: None,
            scope: String::new(),
        })
    }

    /// A token for cluster `cluster_id` that does not expire: for the Agents' logsURL.
    pub fn sign_cluster(&self, cluster_id: &str) -> String {
        self.encode(&Claims {
            infra_env_id: String::new(),
            cluster_id: cluster_id.into(),
            sub: cluster_id.into(),
            exp: None,
            scope: String::new(),
        })
    }

    /// A token that reads the events of InfraEnv `infra_env_id` (and its hosts') and opens
    /// nothing else, without expiry: for the InfraEnv's and its Agents' eventsURL, which are set
    /// once (spec-controllers.md §2.2, §3).
    pub fn sign_infra_env_events(&self, infra_env_id: &str) -> String {
        self.encode(&Claims {
            infra_env_id: infra_env_id.into(),
            cluster_id: String::new(),
            sub: infra_env_id.into(),
            exp: None,
            scope: EVENTS_SCOPE.into(),
        })
    }

    /// A token that reads the events of cluster `cluster_id` and opens nothing else, without
    /// expiry: for the AgentClusterInstall's eventsURL.
    pub fn sign_cluster_events(&self, cluster_id: &str) -> String {
        self.encode(&Claims {
            infra_env_id: String::new(),
            cluster_id: cluster_id.into(),
            sub: cluster_id.into(),
            exp: None,
            scope: EVENTS_SCOPE.into(),
        })
    }

    /// A JWS compact token (RFC 7515): header, claims and the P-256 signature of both (`r || s`, as
    /// JWA ES256 wants), each base64url without padding.
    fn encode(&self, claims: &Claims) -> String {
        let claims_json = serde_json::to_vec(claims).expect("claims are JSON");
        let mut token = format!("{}.{}", self.header, URL_SAFE_NO_PAD.encode(claims_json));
        let signature = self.signing.sign(&self.rng, token.as_bytes()).expect("ES256 signing with a checked key");
        token.push('.');
        URL_SAFE_NO_PAD.encode_string(signature.as_ref(), &mut token);
        // A token goes into a status as it is made, and its first GET often comes right after (a new
        // InfraEnv's ISO): its claims are known here, so that GET need not check the signature.
        self.remember(&token, claims.clone());
        token
    }

    fn remember(&self, token: &str, claims: Claims) {
        let mut verified = self.verified.lock().unwrap();
        if verified.len() >= MAX_VERIFIED {
            verified.clear();
        }
        verified.insert(token.to_string(), claims);
    }

    /// The claims of `token` if one of our keys signed it, it has not expired at `now`, and it is
    /// not narrowed to a scope (an events token opens no image and no logs).
    pub fn verify(&self, token: &str, now: SystemTime) -> Result<Claims, TokenError> {
        let claims = self.verify_any_scope(token, now)?;
        if !claims.scope.is_empty() {
            return Err(TokenError::EventsOnly);
        }
        Ok(claims)
    }

    /// The claims of `token` for reading events: one of ours, not expired, unscoped (an image or
    /// logs token reads the events of what it names) or of the events scope.
    pub fn verify_events(&self, token: &str, now: SystemTime) -> Result<Claims, TokenError> {
        let claims = self.verify_any_scope(token, now)?;
        if !claims.scope.is_empty() && claims.scope != EVENTS_SCOPE {
            return Err(TokenError::Malformed(format!("unknown scope {:?}", claims.scope)));
        }
        Ok(claims)
    }

    fn verify_any_scope(&self, token: &str, now: SystemTime) -> Result<Claims, TokenError> {
        let known = self.verified.lock().unwrap().get(token).cloned();
        let claims = match known {
            Some(claims) => claims,
            None => {
                let claims = self.verify_signature(token)?;
                self.remember(token, claims.clone());
                claims
            }
        };
        if let Some(exp) = claims.exp
            && exp <= unix(now)
        {
            return Err(TokenError::Expired(exp));
        }
        Ok(claims)
    }

    /// The claims of `token` if one of our keys signed it, whatever its expiry.
    fn verify_signature(&self, token: &str) -> Result<Claims, TokenError> {
        let header = jsonwebtoken::decode_header(token).map_err(|e| TokenError::Malformed(e.to_string()))?;
        if header.alg != Algorithm::ES256 {
            return Err(TokenError::Malformed(format!("algorithm {:?}, expected ES256", header.alg)));
        }
        let kid = header.kid.ok_or_else(|| TokenError::Malformed("no kid".into()))?;
        let key = self.verifying.iter().find(|k| k.kid == kid).ok_or(TokenError::UnknownKey)?;
        // Expiry is checked below against `now`, so that tests and callers agree on the clock.
        let mut validation = Validation::new(Algorithm::ES256);
        validation.validate_exp = false;
        validation.required_spec_claims.clear();
        let data = jsonwebtoken::decode::<Claims>(token, &key.key, &validation).map_err(|e| match e.kind() {
            jsonwebtoken::errors::ErrorKind::InvalidSignature => TokenError::BadSignature,
            _ => TokenError::Malformed(e.to_string()),
        })?;
        let claims = data.claims;
        let named = match (claims.infra_env_id.is_empty(), claims.cluster_id.is_empty()) {
            (false, true) => &claims.infra_env_id,
            (true, false) => &claims.cluster_id,
            _ => return Err(TokenError::Malformed("the token must name one InfraEnv or one cluster".into())),
        };
        if claims.sub != *named {
            return Err(TokenError::Malformed("sub must name the token's InfraEnv or cluster".into()));
        }
        Ok(claims)
    }

    /// Verifies `token` and that it is for `infra_env_id`.
    pub fn verify_for(&self, token: &str, infra_env_id: &str, now: SystemTime) -> Result<Claims, TokenError> {
        let claims = self.verify(token, now)?;
        if claims.infra_env_id != infra_env_id {
            return Err(TokenError::OtherInfraEnv);
        }
        Ok(claims)
    }

    /// Verifies `token` and that it is for cluster `cluster_id`.
    pub fn verify_cluster(&self, token: &str, cluster_id: &str, now: SystemTime) -> Result<Claims, TokenError> {
        let claims = self.verify(token, now)?;
        if claims.cluster_id != cluster_id {
            return Err(TokenError::OtherCluster);
        }
        Ok(claims)
    }
}

impl Claims {
    /// When the token expires; None for one that does not.
    pub fn expires_at(&self) -> Option<SystemTime> {
        self.exp.map(|exp| UNIX_EPOCH + Duration::from_secs(exp))
    }
}

/// The token of a signed ISO URL (`…/byapikey/<token>/…`) or of an `api_key=` query parameter.
pub fn token_of_url(url: &str) -> Option<&str> {
    if let Some((_, rest)) = url.split_once("/byapikey/") {
        return rest.split('/').next().filter(|t| !t.is_empty());
    }
    let query = url.split_once('?')?.1;
    query.split('&').find_map(|kv| kv.strip_prefix("api_key=")).filter(|t| !t.is_empty())
}

/// `url` without its token, for telling whether two URLs name the same image: a token refresh
/// must not look like a new image to a BareMetalHost (that would reprovision it).
pub fn without_token(url: &str) -> String {
    match token_of_url(url) {
        Some(t) => url.replacen(t, "", 1),
        None => url.to_string(),
    }
}

fn unix(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signer(dir: &Path) -> UrlSigner {
        UrlSigner::load_or_create(dir, &[]).unwrap()
    }

    #[test]
    fn lasting_and_cluster_tokens_do_not_expire_and_name_only_what_they_were_made_for() {
        let dir = tempfile::tempdir().unwrap();
        let s = signer(dir.path());
        let years = SystemTime::now() + Duration::from_secs(3 * 365 * 24 * 3600);
        let host = s.sign_lasting("ie-a");
        assert_eq!(s.verify_for(&host, "ie-a", years).unwrap().exp, None);
        assert_eq!(s.verify_for(&host, "ie-b", years), Err(TokenError::OtherInfraEnv));
        assert_eq!(s.verify_cluster(&host, "ie-a", years), Err(TokenError::OtherCluster));
        let logs = s.sign_cluster("c-1");
        assert_eq!(s.verify_cluster(&logs, "c-1", years).unwrap().cluster_id, "c-1");
        assert_eq!(s.verify_cluster(&logs, "c-2", years), Err(TokenError::OtherCluster));
        // A cluster's token opens no InfraEnv's image, even one with the cluster's id.
        assert_eq!(s.verify_for(&logs, "c-1", years), Err(TokenError::OtherInfraEnv));
        // A key rotated out takes them with it.
        let other = tempfile::tempdir().unwrap();
        assert_eq!(signer(other.path()).verify_cluster(&logs, "c-1", years), Err(TokenError::UnknownKey));
    }

    #[test]
    fn events_tokens_read_events_and_open_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let s = signer(dir.path());
        let years = SystemTime::now() + Duration::from_secs(3 * 365 * 24 * 3600);
        let ie = s.sign_infra_env_events("ie-a");
        let claims = s.verify_events(&ie, years).unwrap();
        assert_eq!((claims.infra_env_id.as_str(), claims.exp, claims.scope.as_str()), ("ie-a", None, EVENTS_SCOPE));
        // Not an image token (the ISO carries the pull secret), nor a logs token.
        assert_eq!(s.verify_for(&ie, "ie-a", years), Err(TokenError::EventsOnly));
        assert_eq!(s.verify(&ie, years), Err(TokenError::EventsOnly));
        let cluster = s.sign_cluster_events("c-1");
        assert_eq!(s.verify_cluster(&cluster, "c-1", years), Err(TokenError::EventsOnly));
        assert_eq!(s.verify_events(&cluster, years).unwrap().cluster_id, "c-1");
        // Image and logs tokens read events of what they name.
        assert_eq!(s.verify_events(&s.sign_cluster("c-1"), years).unwrap().scope, "");
        let image = s.sign("ie-a", SystemTime::now());
        assert!(matches!(s.verify_events(&image, years), Err(TokenError::Expired(_))), "expiry still holds");
        // A key rotated out takes them with it.
        let other = tempfile::tempdir().unwrap();
        assert_eq!(signer(other.path()).verify_events(&ie, years), Err(TokenError::UnknownKey));
    }

    #[test]
    fn a_token_names_one_infraenv_until_it_expires() {
        let dir = tempfile::tempdir().unwrap();
        let s = signer(dir.path());
        let now = SystemTime::now();
        let t = s.sign("ie-a", now);
        assert_eq!(s.verify_for(&t, "ie-a", now).unwrap().infra_env_id, "ie-a");
        assert_eq!(s.verify_for(&t, "ie-b", now), Err(TokenError::OtherInfraEnv));
        let later = now + TOKEN_LIFETIME + Duration::from_secs(1);
        assert!(matches!(s.verify(&t, later), Err(TokenError::Expired(_))));
        assert!(s.verify(&t, now + TOKEN_LIFETIME - Duration::from_secs(2)).is_ok());
        // The same key file again: tokens survive a restart.
        assert!(signer(dir.path()).verify(&t, now).is_ok());
    }

    #[test]
    fn a_token_signed_here_is_known_without_checking_its_signature() {
        let dir = tempfile::tempdir().unwrap();
        let s = signer(dir.path());
        let now = SystemTime::now();
        let t = s.sign("ie-a", now);
        assert_eq!(s.verified.lock().unwrap().get(&t).map(|c| c.infra_env_id.as_str()), Some("ie-a"));
        // Another signer with the same key has to check it, and does.
        let restarted = signer(dir.path());
        assert!(restarted.verified.lock().unwrap().is_empty());
        assert_eq!(restarted.verify_for(&t, "ie-a", now).unwrap().infra_env_id, "ie-a");
    }

    #[test]
    fn tampered_and_foreign_tokens_are_refused() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (sa, sb) = (signer(a.path()), signer(b.path()));
        let now = SystemTime::now();
        let t = sa.sign("ie-a", now);
        assert_eq!(sb.verify(&t, now), Err(TokenError::UnknownKey));
        // Another payload under the same signature.
        let parts: Vec<&str> = t.split('.').collect();
        let other = sa.sign("ie-b", now);
        let forged = format!("{}.{}.{}", parts[0], other.split('.').nth(1).unwrap(), parts[2]);
        assert_eq!(sa.verify(&forged, now), Err(TokenError::BadSignature));
        // One changed signature byte.
        let mut sig = parts[2].as_bytes().to_vec();
        sig[10] = if sig[10] == b'A' { b'B' } else { b'A' };
        let flipped = format!("{}.{}.{}", parts[0], parts[1], String::from_utf8(sig).unwrap());
        assert_eq!(sa.verify(&flipped, now), Err(TokenError::BadSignature));
        for junk in ["", "abc", "a.b.c", "...."] {
            assert!(matches!(sa.verify(junk, now), Err(TokenError::Malformed(_))), "{junk:?}");
        }
        // alg none is not ours.
        let none = format!(
            "{}.{}.",
            base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, br#"{"alg":"none","typ":"JWT"}"#),
            parts[1]
        );
        assert!(matches!(sa.verify(&none, now), Err(TokenError::Malformed(_))));
    }

    #[test]
    fn rotation_keeps_the_previous_key_valid_until_it_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let old_dir = dir.path().join("old");
        let new_dir = dir.path().join("new");
        std::fs::create_dir_all(&old_dir).unwrap();
        std::fs::create_dir_all(&new_dir).unwrap();
        let old = signer(&old_dir);
        let now = SystemTime::now();
        let old_token = old.sign("ie-a", now);
        // New key, old one kept for verification.
        let rotated = UrlSigner::load_or_create(&new_dir, &[old_dir.join("url-signing.pem")]).unwrap();
        assert!(rotated.verify(&old_token, now).is_ok());
        let new_token = rotated.sign("ie-a", now);
        assert_ne!(new_token.split('.').next(), old_token.split('.').next(), "a new kid");
        assert!(rotated.verify(&new_token, now).is_ok());
        // The grace period over: the old key is dropped, its tokens stop working.
        let after = UrlSigner::load_or_create(&new_dir, &[]).unwrap();
        assert_eq!(after.verify(&old_token, now), Err(TokenError::UnknownKey));
        assert!(after.verify(&new_token, now).is_ok());
    }

    #[test]
    fn bad_key_files_say_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "hello").unwrap();
        let e = UrlSigner::from_files(&junk, &[]).unwrap_err();
        assert!(e.to_string().contains("not a PEM file"), "{e}");
        let rsa = dir.path().join("sec1.pem");
        std::fs::write(&rsa, "-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n").unwrap();
        let e = UrlSigner::from_files(&rsa, &[]).unwrap_err();
        assert!(e.to_string().contains("PKCS#8"), "{e}");
    }
}
