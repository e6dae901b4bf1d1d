//! The OS image catalog: base live ISOs per (OpenShift version, CPU architecture).
//!
//! Each image is given as a local path or as a URL with its SHA-256 (downloaded once into the data
//! directory). At load every image is inspected ([`crate::formats::liveiso`]): an image without an Ignition embed
//! area, kernel, initrd or rootfs is reported with its path and the reason and is not served; the others
//! are. Images are never copied or repacked: responses are plans over the file as it is.
//!
//! Base files must only ever be replaced by rename. Each request checks the file at the path still is
//! the one we loaded (device, inode, size, mtime); if not, the image is answered with 503 until restart,
//! never with bytes we did not validate.

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::errors::chain;
use crate::formats::liveiso::{LiveIso, LiveIsoError};
use crate::keylocks::{Locked as _, LockedRw as _};
use crate::plan::BaseFile;
use crate::resources::normalize_arch;

/// Why an `--os-image` argument does not parse (clap prints it after the argument's name).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct OsImageArgError(pub String);

/// One `--os-image VERSION:ARCH:PATH_OR_URL[:SHA256]` argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OsImageSpec {
    pub version: String,
    pub arch: String,
    pub source: ImageSource,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ImageSource {
    Path(PathBuf),
    Url { url: String, sha256: String },
}

impl std::fmt::Display for ImageSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ImageSource::Path(p) => write!(f, "{}", p.display()),
            ImageSource::Url { url, .. } => write!(f, "{url}"),
        }
    }
}

// The error is the message of a command-line value (clap shows it as it is); nothing else uses it.
impl std::str::FromStr for OsImageSpec {
    type Err = OsImageArgError;

    fn from_str(s: &str) -> Result<Self, OsImageArgError> {
        let usage = "expected VERSION:ARCH:PATH_OR_URL[:SHA256], e.g. 4.18:x86_64:/srv/rhcos-418.iso";
        let mut parts = s.splitn(3, ':');
        let (Some(version), Some(arch), Some(rest)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(OsImageArgError(format!("{s:?}: {usage}")));
        };
        if version.is_empty() || arch.is_empty() || rest.is_empty() {
            return Err(OsImageArgError(format!("{s:?}: {usage}")));
        }
        if !version.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-+".contains(&b)) {
            return Err(OsImageArgError(format!(
                "{s:?}: version {version:?} may only hold letters, digits and . _ - +"
            )));
        }
        let arch = normalize_arch(arch);
        if !["x86_64", "arm64", "ppc64le", "s390x"].contains(&arch.as_str()) {
            return Err(OsImageArgError(format!(
                "{s:?}: unknown architecture {arch:?} (x86_64, arm64, ppc64le, s390x)"
            )));
        }
        let is_url = rest.starts_with("http://") || rest.starts_with("https://");
        let (location, sha) = match rest.rsplit_once(':') {
            Some((loc, sha)) if sha.len() == 64 && sha.bytes().all(|b| b.is_ascii_hexdigit()) => {
                (loc, Some(sha.to_ascii_lowercase()))
            }
            _ => (rest, None),
        };
        let source = if is_url {
            let Some(sha256) = sha else {
                return Err(OsImageArgError(format!(
                    "{s:?}: an image URL needs its SHA-256 after the URL (URL:SHA256)"
                )));
            };
            ImageSource::Url { url: location.to_string(), sha256 }
        } else {
            if sha.is_some() {
                return Err(OsImageArgError(format!("{s:?}: a SHA-256 is only taken with a URL")));
            }
            ImageSource::Path(PathBuf::from(location))
        };
        Ok(OsImageSpec { version: version.to_string(), arch, source })
    }
}

/// Identity of a file on disk; any change (replace by rename, touch, truncate) changes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileIdentity {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime_ns: i128,
}

impl FileIdentity {
    pub fn of(meta: &std::fs::Metadata) -> FileIdentity {
        FileIdentity {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime_ns: meta.mtime() as i128 * 1_000_000_000 + meta.mtime_nsec() as i128,
        }
    }
}

/// Why a catalog image could not be loaded; its Display says what failed, its source why.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot open")]
    Open(#[source] std::io::Error),
    #[error("cannot stat")]
    Stat(#[source] std::io::Error),
    #[error("not a regular file")]
    NotAFile,
    #[error(transparent)]
    Io(std::io::Error),
    /// Not a CoreOS live ISO we can serve.
    #[error(transparent)]
    Inspect(#[from] LiveIsoError),
    #[error("missing {}", crate::formats::liveiso::ROOTFS_PATH)]
    NoRootfs,
    #[error("reading for checksum")]
    Checksum(#[source] std::io::Error),
    #[error(transparent)]
    Download(#[from] download::DownloadError),
    #[error("loading panicked")]
    Panicked(#[source] tokio::task::JoinError),
    #[error("content SHA-256 {found} does not match the expected {expected}")]
    WrongDigest { found: String, expected: String },
}

/// The file of a loaded base image is no longer the one that was loaded.
#[derive(Debug, thiserror::Error)]
pub enum BaseImageChanged {
    #[error(
        "base image {} changed on disk since it was loaded; restart bootstream to load the new file",
        .path.display()
    )]
    Changed { path: PathBuf },
    #[error("base image {} is gone", .path.display())]
    Gone {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A loaded, validated base image.
#[derive(Debug)]
pub struct BaseImage {
    pub version: String,
    pub arch: String,
    pub file: Arc<BaseFile>,
    pub live: LiveIso,
    pub modified: SystemTime,
    identity: FileIdentity,
}

impl BaseImage {
    pub fn path(&self) -> &Path {
        &self.file.path
    }
    pub fn sha256_hex(&self) -> String {
        hex::encode(self.file.sha256)
    }

    /// Opens and validates `path`. The content hash comes from `digests` when the file is unchanged
    /// since it was last hashed, so restarts do not re-read every image.
    pub fn load(version: &str, arch: &str, path: &Path, digests: &DigestCache) -> Result<BaseImage, LoadError> {
        let file = File::open(path).map_err(LoadError::Open)?;
        let meta = file.metadata().map_err(LoadError::Stat)?;
        if !meta.is_file() {
            return Err(LoadError::NotAFile);
        }
        let identity = FileIdentity::of(&meta);
        let live = LiveIso::inspect(file.try_clone().map_err(LoadError::Io)?)?;
        if live.rootfs.is_none() {
            return Err(LoadError::NoRootfs);
        }
        let sha256 = digests.get_or_compute(path, identity, &file).map_err(LoadError::Checksum)?;
        let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        Ok(BaseImage {
            version: version.to_string(),
            arch: arch.to_string(),
            file: Arc::new(BaseFile { path: path.to_path_buf(), file, len: meta.len(), sha256 }),
            live,
            modified,
            identity,
        })
    }

    /// Fails if the file at our path is no longer the file we loaded.
    pub fn check_unchanged(&self) -> Result<(), BaseImageChanged> {
        match std::fs::metadata(&self.file.path) {
            Ok(meta) if FileIdentity::of(&meta) == self.identity => Ok(()),
            Ok(_) => Err(BaseImageChanged::Changed { path: self.file.path.clone() }),
            Err(source) => Err(BaseImageChanged::Gone { path: self.file.path.clone(), source }),
        }
    }
}

/// SHA-256 of base images by path and identity, persisted in the data directory.
pub struct DigestCache {
    path: Option<PathBuf>,
    entries: Mutex<HashMap<PathBuf, (FileIdentity, String)>>,
}

#[derive(Serialize, Deserialize)]
struct DigestEntry {
    path: PathBuf,
    identity: FileIdentity,
    sha256: String,
}

impl DigestCache {
    pub fn in_memory() -> DigestCache {
        DigestCache { path: None, entries: Mutex::new(HashMap::new()) }
    }

    pub fn open(path: PathBuf) -> DigestCache {
        let entries = std::fs::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice::<Vec<DigestEntry>>(&b).ok())
            .unwrap_or_default()
            .into_iter()
            .map(|e| (e.path, (e.identity, e.sha256)))
            .collect();
        DigestCache { path: Some(path), entries: Mutex::new(entries) }
    }

    /// The SHA-256 of `file` (at `path`, with `identity`): from the cache, else read and remembered.
    pub fn get_or_compute(&self, path: &Path, identity: FileIdentity, file: &File) -> std::io::Result<[u8; 32]> {
        if let Some((id, sha)) = self.entries.locked().get(path)
            && *id == identity
            && let Ok(bytes) = hex::decode(sha)
            && let Ok(arr) = <[u8; 32]>::try_from(bytes.as_slice())
        {
            return Ok(arr);
        }
        let started = std::time::Instant::now();
        let digest = sha256_file(file)?;
        tracing::info!(path = %path.display(), elapsed_ms = started.elapsed().as_millis() as u64, "hashed base image");
        self.insert(path, identity, digest);
        Ok(digest)
    }

    pub fn insert(&self, path: &Path, identity: FileIdentity, digest: [u8; 32]) {
        let mut entries = self.entries.locked();
        entries.insert(path.to_path_buf(), (identity, hex::encode(digest)));
        if let Some(cache_path) = &self.path {
            let list: Vec<DigestEntry> = entries
                .iter()
                .map(|(p, (id, sha))| DigestEntry { path: p.clone(), identity: *id, sha256: sha.clone() })
                .collect();
            let tmp = cache_path.with_extension("tmp");
            let ok = std::fs::write(&tmp, serde_json::to_vec_pretty(&list).expect("serializable"))
                .and_then(|_| std::fs::rename(&tmp, cache_path));
            if let Err(e) = ok {
                tracing::warn!("cannot save {}: {}", cache_path.display(), chain(&e));
            }
        }
    }
}

pub fn sha256_file(file: &File) -> std::io::Result<[u8; 32]> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut reader = file;
    loop {
        let n = reader.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().into())
}

#[derive(Clone, Debug)]
pub enum EntryState {
    Loading,
    Ready(Arc<BaseImage>),
    Failed(Arc<LoadError>),
}

#[derive(Clone, Debug)]
pub struct Entry {
    pub spec: OsImageSpec,
    pub state: EntryState,
}

/// Why a lookup found no image.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    #[error("No OS images are available for CPU architecture {arch}{available}")]
    NoImages { arch: String, available: String },
    #[error(
        "The requested OS image for version ({version}) and CPU architecture ({arch}) isn't specified in OS images list{available}"
    )]
    NotFound { version: String, arch: String, available: String },
    #[error("OS image {version} ({arch}) is still loading")]
    Loading { version: String, arch: String },
}

impl LookupError {
    pub fn http_status(&self) -> http::StatusCode {
        match self {
            LookupError::Loading { .. } => http::StatusCode::SERVICE_UNAVAILABLE,
            _ => http::StatusCode::NOT_FOUND,
        }
    }
}

/// The set of base images, shared by the image server and the controllers.
pub struct Catalog {
    entries: RwLock<Vec<Entry>>,
    changed: tokio::sync::watch::Sender<u64>,
}

impl Catalog {
    pub fn new(specs: Vec<OsImageSpec>) -> Arc<Catalog> {
        let entries = specs.into_iter().map(|spec| Entry { spec, state: EntryState::Loading }).collect();
        Arc::new(Catalog { entries: RwLock::new(entries), changed: tokio::sync::watch::channel(0).0 })
    }

    pub fn entries(&self) -> Vec<Entry> {
        self.entries.read_locked().clone()
    }

    /// True once every image finished loading (successfully or not).
    pub fn is_settled(&self) -> bool {
        self.entries.read_locked().iter().all(|e| !matches!(e.state, EntryState::Loading))
    }

    /// Notified (with a new epoch) whenever an image finishes loading.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }

    pub fn set_state(&self, index: usize, state: EntryState) {
        {
            let mut entries = self.entries.write_locked();
            let e = &mut entries[index];
            match &state {
                EntryState::Ready(img) => tracing::info!(
                    version = %e.spec.version, arch = %e.spec.arch, path = %img.path().display(),
                    volume_id = %img.live.volume_id, "OS image ready"
                ),
                EntryState::Failed(error) => tracing::error!(
                    version = %e.spec.version, arch = %e.spec.arch, source = %e.spec.source,
                    "OS image not served: {}: {}", e.spec.source, chain(&**error)
                ),
                EntryState::Loading => {}
            }
            e.state = state;
        }
        self.changed.send_modify(|epoch| *epoch += 1);
    }

    /// One line per image: `VERSION ARCH ready PATH`, `... loading SOURCE`, `... failed: REASON`.
    pub fn report(&self) -> String {
        let entries = self.entries.read_locked();
        let mut out = String::new();
        for e in entries.iter() {
            let (v, a) = (&e.spec.version, &e.spec.arch);
            let line = match &e.state {
                EntryState::Ready(img) => format!("{v} {a} ready {}", img.path().display()),
                EntryState::Loading => format!("{v} {a} loading {}", e.spec.source),
                EntryState::Failed(error) => format!("{v} {a} failed: {}: {}", e.spec.source, chain(&**error)),
            };
            out.push_str(&line);
            out.push('\n');
        }
        out
    }

    /// "4.18 (x86_64), 4.19 (x86_64)": what exists, for error messages.
    pub fn available(&self) -> String {
        self.available_locked(&self.entries.read_locked())
    }

    /// Finds the image for `version` (empty ⇒ the latest) and `arch`, as assisted-service's
    /// `GetOsImageOrLatest`: exact version, then `x.y`, then the highest patch release within `x.y`.
    pub fn lookup(&self, version: &str, arch: &str) -> Result<Arc<BaseImage>, LookupError> {
        let arch = normalize_arch(arch);
        let entries = self.entries.read_locked();
        let same_arch: Vec<&Entry> = entries.iter().filter(|e| e.spec.arch == arch).collect();
        let available = || format!("; available: {}", self.available_locked(&entries));
        let pick = |candidates: Vec<&Entry>| -> Option<Result<Arc<BaseImage>, LookupError>> {
            let best = candidates.into_iter().max_by(|a, b| compare_versions(&a.spec.version, &b.spec.version))?;
            Some(match &best.state {
                EntryState::Ready(img) => Ok(img.clone()),
                EntryState::Loading => {
                    Err(LookupError::Loading { version: best.spec.version.clone(), arch: arch.clone() })
                }
                EntryState::Failed(_) => unreachable!("failed entries are filtered out"),
            })
        };
        let usable: Vec<&Entry> = same_arch.into_iter().filter(|e| !matches!(e.state, EntryState::Failed(_))).collect();
        if usable.is_empty() {
            return Err(LookupError::NoImages { arch: arch.clone(), available: available() });
        }
        if version.is_empty() {
            return pick(usable).expect("non-empty");
        }
        let exact: Vec<&Entry> = usable.iter().copied().filter(|e| e.spec.version == version).collect();
        if let Some(found) = pick(exact) {
            return found;
        }
        let minor = major_minor(version);
        let same_minor: Vec<&Entry> =
            usable.iter().copied().filter(|e| major_minor(&e.spec.version) == minor && minor.is_some()).collect();
        if let Some(found) = pick(same_minor) {
            return found;
        }
        Err(LookupError::NotFound { version: version.to_string(), arch, available: available() })
    }

    fn available_locked(&self, entries: &[Entry]) -> String {
        let list: Vec<String> = entries
            .iter()
            .filter(|e| matches!(e.state, EntryState::Ready(_)))
            .map(|e| format!("{} ({})", e.spec.version, e.spec.arch))
            .collect();
        if list.is_empty() { "none".to_string() } else { list.join(", ") }
    }
}

fn major_minor(version: &str) -> Option<(u64, u64)> {
    let mut it = version.split(['.', '-']);
    let major = it.next()?.parse().ok()?;
    let minor = it.next()?.parse().ok()?;
    Some((major, minor))
}

/// Orders versions like `4.9 < 4.18 < 4.18.0-ec.0 < 4.18.0 < 4.18.3` (numeric components, and a
/// pre-release sorts before its release, as hashicorp/go-version does).
pub fn compare_versions(a: &str, b: &str) -> std::cmp::Ordering {
    fn split(v: &str) -> (Vec<u64>, Option<&str>) {
        let (core, pre) = match v.split_once('-') {
            Some((c, p)) => (c, Some(p)),
            None => (v, None),
        };
        (core.split('.').map(|p| p.parse().unwrap_or(0)).collect(), pre)
    }
    let (ca, pa) = split(a);
    let (cb, pb) = split(b);
    let n = ca.len().max(cb.len());
    for i in 0..n {
        let (x, y) = (ca.get(i).copied().unwrap_or(0), cb.get(i).copied().unwrap_or(0));
        if x != y {
            return x.cmp(&y);
        }
    }
    match (pa, pb) {
        (None, None) => std::cmp::Ordering::Equal,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (Some(_), None) => std::cmp::Ordering::Less,
        (Some(x), Some(y)) => x.cmp(y),
    }
}

/// Loads every image of the catalog: local paths directly, URLs after downloading them into
/// `images_dir`. Returns when all are settled.
pub async fn load_all(catalog: Arc<Catalog>, images_dir: PathBuf, digests: Arc<DigestCache>) {
    let mut tasks = Vec::new();
    for (index, entry) in catalog.entries().into_iter().enumerate() {
        let catalog = catalog.clone();
        let images_dir = images_dir.clone();
        let digests = digests.clone();
        tasks.push(tokio::spawn(async move {
            let spec = entry.spec;
            let state = match load_one(&spec, &images_dir, digests).await {
                Ok(img) => EntryState::Ready(Arc::new(img)),
                Err(error) => EntryState::Failed(Arc::new(error)),
            };
            catalog.set_state(index, state);
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
}

async fn load_one(spec: &OsImageSpec, images_dir: &Path, digests: Arc<DigestCache>) -> Result<BaseImage, LoadError> {
    let (path, expected) = match &spec.source {
        ImageSource::Path(p) => (p.clone(), None),
        ImageSource::Url { url, sha256 } => {
            let path = crate::image::catalog::download::fetch(url, sha256, images_dir, &digests).await?;
            (path, Some(sha256.clone()))
        }
    };
    let (version, arch) = (spec.version.clone(), spec.arch.clone());
    let img = tokio::task::spawn_blocking(move || BaseImage::load(&version, &arch, &path, &digests))
        .await
        .map_err(LoadError::Panicked)??;
    if let Some(expected) = expected
        && img.sha256_hex() != expected
    {
        return Err(LoadError::WrongDigest { found: img.sha256_hex(), expected });
    }
    Ok(img)
}

pub mod download {
    //! Downloading an OS image into the data directory: streamed to a temporary file next to its final
    //! name, hashed on the way, verified, then renamed into place, so a partial or wrong file never
    //! carries the final name.
    //!
    //! A download holds an exclusive `flock` on its temporary file until the file is renamed or
    //! removed. A process killed mid-download cannot remove its file; the next download of the same
    //! image removes the temporary files no live download holds, so kills do not leak disk.

    use std::collections::HashMap;
    use std::os::fd::AsRawFd;
    use std::path::{Path, PathBuf};
    use std::sync::{Arc, Mutex, OnceLock};

    use futures_util::StreamExt;
    use sha2::{Digest, Sha256};
    use tokio::io::AsyncWriteExt;

    use super::{DigestCache, FileIdentity};
    use crate::keylocks::Locked as _;

    /// Why an image could not be downloaded; its Display says what failed, its source why.
    #[derive(Debug, thiserror::Error)]
    pub enum DownloadError {
        #[error("creating {}", .0.display())]
        CreateDir(PathBuf, #[source] std::io::Error),
        #[error("HTTP client")]
        Client(#[source] reqwest::Error),
        #[error("downloading")]
        Request(#[source] reqwest::Error),
        #[error("downloading: HTTP {0}")]
        Status(http::StatusCode),
        #[error("creating {}", .0.display())]
        Create(PathBuf, #[source] std::io::Error),
        #[error("locking {}", .0.display())]
        Lock(PathBuf, #[source] std::io::Error),
        #[error("writing {}", .0.display())]
        Write(PathBuf, #[source] std::io::Error),
        #[error("downloading: got {got} bytes, expected {expected}")]
        Length { got: u64, expected: u64 },
        #[error("downloaded content has SHA-256 {found}, expected {expected}")]
        Digest { found: String, expected: String },
        #[error("renaming into place")]
        Rename(#[source] std::io::Error),
    }

    /// One download at a time per digest: several catalog entries may name the same image (from the same
    /// or from different URLs); the first to finish provides it to the others.
    fn digest_lock(sha256: &str) -> Arc<tokio::sync::Mutex<()>> {
        static LOCKS: OnceLock<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>> = OnceLock::new();
        let mut locks = LOCKS.get_or_init(Default::default).locked();
        locks.entry(sha256.to_string()).or_default().clone()
    }

    /// Returns the path of the verified image named by its SHA-256 in `dir`, downloading it if needed.
    pub async fn fetch(url: &str, sha256: &str, dir: &Path, digests: &DigestCache) -> Result<PathBuf, DownloadError> {
        let dest = dir.join(format!("{sha256}.iso"));
        let lock = digest_lock(sha256);
        let _guard = lock.lock().await;
        remove_abandoned_partials(dir, sha256);
        if tokio::fs::metadata(&dest).await.is_ok() {
            return Ok(dest);
        }
        tokio::fs::create_dir_all(dir).await.map_err(|e| DownloadError::CreateDir(dir.to_path_buf(), e))?;
        let tmp = dir.join(format!("{}{}", partial_prefix(sha256), uuid::Uuid::new_v4()));
        let result = download_to(url, sha256, &tmp).await;
        match result {
            // The file stays open (and locked) until it has its final name.
            Ok((digest, _locked)) => {
                tokio::fs::rename(&tmp, &dest).await.map_err(DownloadError::Rename)?;
                if let Ok(dirf) = std::fs::File::open(dir) {
                    let _ = dirf.sync_all();
                }
                if let Ok(meta) = std::fs::metadata(&dest) {
                    digests.insert(&dest, FileIdentity::of(&meta), digest);
                }
                Ok(dest)
            }
            Err(e) => {
                let _ = tokio::fs::remove_file(&tmp).await;
                Err(e)
            }
        }
    }

    fn partial_prefix(sha256: &str) -> String {
        format!(".{sha256}.iso.partial-")
    }

    /// Takes an exclusive lock on `file` without waiting; false if another open file description holds it.
    fn try_lock(file: &impl AsRawFd) -> bool {
        // SAFETY: flock on a descriptor that stays open for the call.
        unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
    }

    /// Removes the temporary files of downloads of this image that no live download holds: those of a
    /// process killed mid-download.
    fn remove_abandoned_partials(dir: &Path, sha256: &str) {
        let prefix = partial_prefix(sha256);
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for entry in entries.flatten() {
            if !entry.file_name().to_string_lossy().starts_with(&prefix) {
                continue;
            }
            let path = entry.path();
            let Ok(file) = std::fs::File::open(&path) else { continue };
            if try_lock(&file) {
                tracing::info!(path = %path.display(), "removing the partial download of an earlier run");
                let _ = std::fs::remove_file(&path);
            }
        }
    }

    /// Downloads `url` into `tmp` and returns its digest and the still open, locked file.
    async fn download_to(url: &str, sha256: &str, tmp: &Path) -> Result<([u8; 32], tokio::fs::File), DownloadError> {
        let client = reqwest::Client::builder()
            .connect_timeout(std::time::Duration::from_secs(30))
            .read_timeout(std::time::Duration::from_secs(120))
            .build()
            .map_err(DownloadError::Client)?;
        let resp = client.get(url).send().await.map_err(DownloadError::Request)?;
        if !resp.status().is_success() {
            return Err(DownloadError::Status(resp.status()));
        }
        let expected_len = resp.content_length();
        let bar =
            indicatif::ProgressBar::with_draw_target(expected_len, indicatif::ProgressDrawTarget::stderr_with_hz(4));
        bar.set_style(
            indicatif::ProgressStyle::with_template("{msg} {bar:30} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
                .expect("valid template"),
        );
        bar.set_message(format!("downloading {url}"));
        let mut file = tokio::fs::File::create(tmp).await.map_err(|e| DownloadError::Create(tmp.to_path_buf(), e))?;
        if !try_lock(&file) {
            return Err(DownloadError::Lock(tmp.to_path_buf(), std::io::Error::last_os_error()));
        }
        let mut hasher = Sha256::new();
        let mut got = 0u64;
        let mut stream = resp.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(DownloadError::Request)?;
            hasher.update(&chunk);
            file.write_all(&chunk).await.map_err(|e| DownloadError::Write(tmp.to_path_buf(), e))?;
            got += chunk.len() as u64;
            bar.set_position(got);
        }
        file.sync_all().await.map_err(|e| DownloadError::Write(tmp.to_path_buf(), e))?;
        bar.finish_and_clear();
        if let Some(n) = expected_len
            && n != got
        {
            return Err(DownloadError::Length { got, expected: n });
        }
        let digest: [u8; 32] = hasher.finalize().into();
        if hex::encode(digest) != sha256 {
            return Err(DownloadError::Digest { found: hex::encode(digest), expected: sha256.to_string() });
        }
        tracing::info!(url, bytes = got, "downloaded OS image");
        Ok((digest, file))
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn abandoned_partial_downloads_are_removed_and_live_ones_kept() {
            let dir = tempfile::tempdir().unwrap();
            let sha = "a".repeat(64);
            let live = dir.path().join(format!("{}live", partial_prefix(&sha)));
            let held = std::fs::File::create(&live).unwrap();
            assert!(try_lock(&held));
            let abandoned = dir.path().join(format!("{}abandoned", partial_prefix(&sha)));
            std::fs::write(&abandoned, b"x").unwrap();
            let other_image = dir.path().join(format!("{}other", partial_prefix(&"b".repeat(64))));
            std::fs::write(&other_image, b"x").unwrap();
            remove_abandoned_partials(dir.path(), &sha);
            assert!(live.exists(), "a download in progress keeps its file");
            assert!(!abandoned.exists());
            assert!(other_image.exists(), "only this image's files are looked at");
            drop(held);
            remove_abandoned_partials(dir.path(), &sha);
            assert!(!live.exists());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cmp::Ordering::*;

    #[test]
    fn parses_os_image_arguments() {
        let s: OsImageSpec = "4.18:x86_64:/srv/a.iso".parse().unwrap();
        assert_eq!(s.source, ImageSource::Path("/srv/a.iso".into()));
        let sha = "a".repeat(64);
        let s: OsImageSpec = format!("4.18:aarch64:https://h:8443/x.iso:{sha}").parse().unwrap();
        assert_eq!(s.arch, "arm64");
        assert_eq!(s.source, ImageSource::Url { url: "https://h:8443/x.iso".into(), sha256: sha });
        assert!("4.18:x86_64:https://h/x.iso".parse::<OsImageSpec>().unwrap_err().0.contains("SHA-256"));
        assert!("4.18:sparc:/a".parse::<OsImageSpec>().is_err());
        assert!("4.18:/a".parse::<OsImageSpec>().is_err());
    }

    #[test]
    fn version_order() {
        assert_eq!(compare_versions("4.9", "4.18"), Less);
        assert_eq!(compare_versions("4.18.0-ec.0", "4.18.0"), Less);
        assert_eq!(compare_versions("4.18", "4.18.0"), Equal);
        assert_eq!(compare_versions("4.18.3", "4.18.10"), Less);
    }
}
