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
//! BMCs that mount the ISO as virtual media take short URLs only (Dell iDRAC: at most 255 characters,
//! no query string, a path ending in `.iso`), where a JWT alone is longer than that. For them a
//! [`ShortToken`] names the InfraEnv and the expiry in 22 bytes and proves them with a 16-byte HMAC
//! under a key derived from the signing key: `/s/<51 characters>/<version>/<arch>/full.iso`. The
//! expiry rules are those of the JWT of the same URL (see [`UrlSigner::shorten`]).
//!
//! Rotation without downtime: the service signs with one key and verifies with it and any number of
//! previous keys. Tokens name their key (`kid`, from the public key), so a previous key keeps the
//! URLs it signed working until they expire (at most [`TOKEN_LIFETIME`]); after that it can be
//! dropped from the configuration.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::Mac as _;
use jsonwebtoken::{Algorithm, DecodingKey, Header, Validation};
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::keylocks::Locked as _;

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
    /// The keys of short tokens: the signing key's first, then those of previous private keys.
    short_keys: Vec<ShortKey>,
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
    Private(Box<EcdsaKeyPair>, ShortKey),
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
            let short = ShortKey::derive(block.contents(), pair.public_key().as_ref());
            Ok(Loaded::Private(Box::new(pair), short))
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
        let Loaded::Private(signing, short) = load_pem(current)? else {
            return Err(KeyError { path: current.to_path_buf(), reason: "a public key cannot sign".into() });
        };
        let mut verifying = Vec::new();
        // Short tokens are checked with a secret: only previous keys given as private keys keep theirs.
        let mut short_keys = vec![short];
        for path in previous {
            let point = match load_pem(path)? {
                Loaded::Private(pair, short) => {
                    short_keys.push(short);
                    pair.public_key().as_ref().to_vec()
                }
                Loaded::Public { point } => point,
            };
            verifying.push(VerifyingKey { kid: kid_of(&point), key: DecodingKey::from_ec_der(&point) });
        }
        Ok(Self::new(*signing, verifying, short_keys))
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

    fn new(signing: EcdsaKeyPair, mut verifying: Vec<VerifyingKey>, short_keys: Vec<ShortKey>) -> UrlSigner {
        let point = signing.public_key().as_ref();
        let kid = kid_of(point);
        verifying.insert(0, VerifyingKey { kid: kid.clone(), key: DecodingKey::from_ec_der(point) });
        let rng = ring::rand::SystemRandom::new();
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(kid.clone());
        let header = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&header).expect("a JWT header is JSON"));
        UrlSigner { kid, signing, rng, header, verifying, verified: Default::default(), short_keys }
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
        let mut verified = self.verified.locked();
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
        let known = self.verified.locked().get(token).cloned();
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

impl UrlSigner {
    /// A short token for `infra_env_id` (a UUID, as InfraEnv uids are) expiring at `exp` (Unix time; None:
    /// never). None for an id that is not a UUID: such an InfraEnv keeps its long URLs.
    pub fn sign_short(&self, infra_env_id: &str, exp: Option<u64>) -> Option<String> {
        let id = uuid::Uuid::try_parse(infra_env_id).ok()?;
        // An expiry past what 32 bits hold is no expiry a BMC will see; 0 is kept for "never".
        let exp = match exp {
            None => 0,
            Some(e) => u32::try_from(e).unwrap_or(u32::MAX).max(1),
        };
        let key = &self.short_keys[0];
        let mut token = [0u8; SHORT_TOKEN_LEN];
        token[..16].copy_from_slice(id.as_bytes());
        token[16..20].copy_from_slice(&exp.to_be_bytes());
        token[20..22].copy_from_slice(&key.id);
        let tag = key.mac(&token[..SHORT_SIGNED_LEN]).finalize().into_bytes();
        token[SHORT_SIGNED_LEN..].copy_from_slice(&tag[..SHORT_TAG_LEN]);
        Some(URL_SAFE_NO_PAD.encode(token))
    }

    /// The claims of a short token if one of our keys made it and it has not expired at `now`.
    pub fn verify_short(&self, token: &str, now: SystemTime) -> Result<Claims, TokenError> {
        if token.len() != SHORT_TOKEN_CHARS {
            return Err(TokenError::Malformed(format!("a short token has {SHORT_TOKEN_CHARS} characters")));
        }
        let bytes = URL_SAFE_NO_PAD.decode(token).map_err(|e| TokenError::Malformed(e.to_string()))?;
        let bytes: [u8; SHORT_TOKEN_LEN] =
            bytes.try_into().map_err(|_| TokenError::Malformed("a short token has 38 bytes".into()))?;
        let (signed, tag) = bytes.split_at(SHORT_SIGNED_LEN);
        let mut known = false;
        let mut valid = false;
        // Two keys may share the 2-byte id: any of them that made the tag will do.
        for key in self.short_keys.iter().filter(|k| k.id == signed[20..22]) {
            known = true;
            // Compared in constant time.
            valid |= key.mac(signed).verify_truncated_left(tag).is_ok();
        }
        if !known {
            return Err(TokenError::UnknownKey);
        }
        if !valid {
            return Err(TokenError::BadSignature);
        }
        let id = uuid::Uuid::from_slice(&signed[..16]).expect("16 bytes").to_string();
        let exp = u32::from_be_bytes(signed[16..20].try_into().expect("4 bytes"));
        let exp = (exp != 0).then_some(u64::from(exp));
        if let Some(exp) = exp
            && exp <= unix(now)
        {
            return Err(TokenError::Expired(exp));
        }
        // Short tokens open images only (an events token is never shortened: `shorten` verifies as for images).
        Ok(Claims { infra_env_id: id.clone(), cluster_id: String::new(), sub: id, exp, scope: String::new() })
    }

    /// The short form of a signed ISO URL (`<base>/byapikey/<JWT>/<version>/<arch>/<file>.iso`, as an
    /// InfraEnv's status has it): `<base>/s/<short token>/<version>/<arch>/<file>.iso`, for the same
    /// InfraEnv and expiring when the JWT does (never, with `lasting`). None for a URL of another shape,
    /// or whose token is not valid at `now`.
    pub fn shorten(&self, iso_url: &str, lasting: bool, now: SystemTime) -> Option<String> {
        let (base, rest) = iso_url.split_once("/byapikey/")?;
        let (token, path) = rest.split_once('/')?;
        if path.split('/').count() != 3 || !path.ends_with(".iso") || path.contains(['?', '#']) {
            return None;
        }
        let token = percent_encoding::percent_decode_str(token).decode_utf8().ok()?;
        let claims = self.verify(&token, now).ok()?;
        if claims.infra_env_id.is_empty() {
            return None;
        }
        let short = self.sign_short(&claims.infra_env_id, if lasting { None } else { claims.exp })?;
        Some(format!("{base}/{SHORT_PREFIX}/{short}/{path}"))
    }
}

/// The path segment of short ISO URLs.
pub const SHORT_PREFIX: &str = "s";
/// A short token: InfraEnv uid (16 bytes), expiry (4, big-endian Unix seconds; 0 for none), key id (2), tag (16).
const SHORT_SIGNED_LEN: usize = 22;
const SHORT_TAG_LEN: usize = 16;
const SHORT_TOKEN_LEN: usize = SHORT_SIGNED_LEN + SHORT_TAG_LEN;
/// Its base64url length (no padding).
const SHORT_TOKEN_CHARS: usize = (SHORT_TOKEN_LEN * 8).div_ceil(6);

/// The secret short tokens are made with, derived from a signing key (so that rotating the signing key
/// rotates it, and image servers sharing the key share it), and the 2 bytes that name it in tokens.
struct ShortKey {
    id: [u8; 2],
    secret: [u8; 32],
}

impl ShortKey {
    fn derive(pkcs8: &[u8], public_point: &[u8]) -> ShortKey {
        let mut secret = Sha256::new();
        secret.update(b"bootstream short image URL key v1\0");
        secret.update(pkcs8);
        let point = Sha256::digest(public_point);
        ShortKey { id: [point[0], point[1]], secret: secret.finalize().into() }
    }

    fn mac(&self, data: &[u8]) -> hmac::Hmac<Sha256> {
        use hmac::KeyInit as _;
        let mut mac = hmac::Hmac::<Sha256>::new_from_slice(&self.secret).expect("HMAC takes any key length");
        mac.update(data);
        mac
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

/// The short token of a short ISO URL (`…/s/<token>/<version>/<arch>/<file>`).
pub fn short_token_of_url(url: &str) -> Option<&str> {
    let (_, rest) = url.split_once(&format!("/{SHORT_PREFIX}/"))?;
    let (token, path) = rest.split_once('/')?;
    (token.len() == SHORT_TOKEN_CHARS && path.split('/').count() == 3).then_some(token)
}

/// `url` without its token, for telling whether two URLs name the same image: a token refresh
/// must not look like a new image to a BareMetalHost (that would reprovision it). A short ISO URL
/// and the long one it was made from come out the same.
pub fn without_token(url: &str) -> String {
    if let Some(t) = short_token_of_url(url) {
        return url.replacen(&format!("/{SHORT_PREFIX}/{t}/"), "/byapikey//", 1);
    }
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
    fn short_tokens_name_one_infraenv_until_they_expire_and_die_with_their_key() {
        let dir = tempfile::tempdir().unwrap();
        let s = signer(dir.path());
        let id = "2b4f5fd6-1111-4c5e-9a4e-000000000001";
        let now = SystemTime::now();
        let exp = unix(now) + TOKEN_LIFETIME.as_secs();
        let t = s.sign_short(id, Some(exp)).unwrap();
        assert_eq!(t.len(), SHORT_TOKEN_CHARS);
        assert_eq!(SHORT_TOKEN_CHARS, 51);
        assert_eq!(
            s.verify_short(&t, now).unwrap(),
            Claims {
                infra_env_id: id.into(),
                cluster_id: String::new(),
                sub: id.into(),
                exp: Some(exp),
                scope: String::new()
            }
        );
        assert_eq!(s.verify_short(&t, now + TOKEN_LIFETIME), Err(TokenError::Expired(exp)));
        let lasting = s.sign_short(id, None).unwrap();
        assert_eq!(s.verify_short(&lasting, now + Duration::from_secs(20 * 365 * 24 * 3600)).unwrap().exp, None);
        // The same key file again: tokens survive a restart.
        assert!(signer(dir.path()).verify_short(&t, now).is_ok());
        // Only InfraEnv uids (UUIDs) have short tokens.
        assert_eq!(s.sign_short("ie-a", None), None);

        // Every changed character of the token is refused (the id, the expiry, the key id, the tag).
        let chars: Vec<char> = t.chars().collect();
        for i in 0..chars.len() {
            let mut forged = chars.clone();
            forged[i] = if forged[i] == 'A' { 'B' } else { 'A' };
            let forged: String = forged.into_iter().collect();
            assert!(s.verify_short(&forged, now).is_err(), "{i}: {forged}");
        }
        for junk in [String::new(), "abc".into(), "A".repeat(50), "*".repeat(51), format!("{t}A")] {
            assert!(matches!(s.verify_short(&junk, now), Err(TokenError::Malformed(_))), "{junk:?}");
        }
        // Another service's key (its key id may collide, 1 in 65,536: then its tag does not).
        let other = tempfile::tempdir().unwrap();
        assert!(matches!(
            signer(other.path()).verify_short(&t, now),
            Err(TokenError::UnknownKey | TokenError::BadSignature)
        ));

        // Rotation: a previous private key keeps its short tokens; a previous public key cannot.
        let new_dir = dir.path().join("new");
        std::fs::create_dir_all(&new_dir).unwrap();
        let rotated = UrlSigner::load_or_create(&new_dir, &[dir.path().join("url-signing.pem")]).unwrap();
        assert!(rotated.verify_short(&t, now).is_ok());
        let public = dir.path().join("public.pem");
        let point = s.signing.public_key().as_ref().to_vec();
        let mut spki = vec![
            0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a, 0x86, 0x48,
            0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
        ];
        spki.extend(point);
        std::fs::write(&public, pem::encode(&pem::Pem::new("PUBLIC KEY", spki))).unwrap();
        let public_only = UrlSigner::load_or_create(&new_dir, &[public]).unwrap();
        assert!(public_only.verify(&s.sign(id, now), now).is_ok(), "the JWTs of a public key still verify");
        assert!(public_only.verify_short(&t, now).is_err());
    }

    #[test]
    fn shorten_keeps_the_image_and_the_expiry_of_a_long_iso_url() {
        let dir = tempfile::tempdir().unwrap();
        let s = signer(dir.path());
        let id = "2b4f5fd6-1111-4c5e-9a4e-000000000001";
        let now = SystemTime::now();
        let jwt = s.sign(id, now);
        let base = "https://assisted-image.apps.hub1.example";
        assert_eq!(base.len(), 40);
        let long = format!("{base}/byapikey/{jwt}/4.20/x86_64/full.iso");
        let short = s.shorten(&long, false, now).unwrap();
        assert!(short.len() <= 128, "{} characters: {short}", short.len());
        assert!(short.starts_with(&format!("{base}/s/")) && short.ends_with("/4.20/x86_64/full.iso"), "{short}");
        assert_eq!(without_token(&short), without_token(&long), "the same image");
        let claims = s.verify_short(short_token_of_url(&short).unwrap(), now).unwrap();
        assert_eq!((claims.infra_env_id.as_str(), claims.exp), (id, s.verify(&jwt, now).unwrap().exp));
        let lasting = s.shorten(&long, true, now).unwrap();
        assert_eq!(s.verify_short(short_token_of_url(&lasting).unwrap(), now).unwrap().exp, None);
        // Not a signed ISO URL, or a token that is not valid: no short form.
        for url in [
            format!("{base}/byid/{id}/4.20/x86_64/full.iso"),
            format!("{base}/byapikey/{jwt}/4.20/x86_64/full.iso?x=1"),
            format!("{base}/byapikey/{jwt}/x86_64/full.iso"),
            format!("{base}/byapikey/{}/4.20/x86_64/full.iso", s.sign(id, now - TOKEN_LIFETIME)),
            format!("{base}/byapikey/{}/4.20/x86_64/full.iso", s.sign_cluster(id)),
            format!("{base}/byapikey/{}/4.20/x86_64/full.iso", s.sign_infra_env_events(id)),
        ] {
            assert_eq!(s.shorten(&url, false, now), None, "{url}");
        }
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
