//! Minimal ISO templates, one per base image, made on first use (never at start-up):
//! - when the base ISO carries `coreos/miniso.dat`, the minimal ISO is a plan over the full ISO and a
//!   small unpacked part ([`crate::formats::miniso`]), bit-identical to `coreos-installer iso extract minimal-iso`;
//! - otherwise it is re-mastered once ([`crate::formats::remaster`]) into the data directory, named by the base
//!   image's digest, and reused across restarts.
//!
//! Either way the template's karg areas still hold the full ISO's arguments; the image code rewrites
//! them per request from `kargs_without_liveiso` plus `coreos.live.rootfs_url`.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use super::ImageError;
use crate::formats::liveiso::LiveIso;
use crate::image::catalog::BaseImage;
use crate::keylocks::Locked as _;
use crate::plan::{BaseFile, Plan};

/// Bumped whenever the re-master output changes, so old files in the data directory are not reused.
const REMASTER_FORMAT: u32 = 1;

pub struct MinimalTemplate {
    pub plan: Plan,
    /// Embed areas of the minimal ISO (offsets within `plan`).
    pub live: LiveIso,
    /// The current kernel arguments without `coreos.liveiso=...`.
    pub kargs_without_liveiso: String,
}

/// Why a base image cannot give a minimal ISO.
#[derive(Debug, thiserror::Error)]
pub enum Unavailable {
    /// Its `miniso.dat` does not give one.
    #[error(transparent)]
    Miniso(#[from] crate::formats::miniso::MinisoError),
    /// It cannot be re-mastered into one.
    #[error(transparent)]
    Remaster(#[from] crate::formats::remaster::RemasterError),
    #[error("no kernel argument embed areas")]
    NoKargAreas,
    #[error("minimal ISO does not have coreos.liveiso= karg")]
    NoLiveIsoKarg,
}

/// A template being built or built, shared by the requests that need it.
type TemplateCell = Arc<tokio::sync::OnceCell<Arc<MinimalTemplate>>>;

/// Templates by base-image digest.
#[derive(Default)]
pub struct Templates {
    cells: Mutex<HashMap<[u8; 32], TemplateCell>>,
}

impl Templates {
    /// The template of `base`, built on first use; concurrent callers wait for the same build, and a
    /// failed build is retried by the next caller.
    pub async fn get(&self, base: &Arc<BaseImage>, data_dir: &Path) -> Result<Arc<MinimalTemplate>, ImageError> {
        if base.arch == "s390x" {
            return Err(ImageError::NotAvailable("minimal ISOs are not available for s390x; use the full ISO".into()));
        }
        let cell = self.cells.locked().entry(base.file.sha256).or_default().clone();
        let (base, data_dir) = (base.clone(), data_dir.to_path_buf());
        cell.get_or_try_init(|| async move {
            tokio::task::spawn_blocking(move || build(&base, &data_dir))
                .await
                .map_err(|source| ImageError::Task { what: "building the minimal ISO", source })?
        })
        .await
        .cloned()
    }
}

fn build(base: &BaseImage, data_dir: &Path) -> Result<Arc<MinimalTemplate>, ImageError> {
    let unavailable = |source: Unavailable| ImageError::NoMinimalIso {
        version: base.version.clone(),
        arch: base.arch.clone(),
        source: Box::new(source),
    };
    if let Some(area) = base.live.miniso {
        let started = std::time::Instant::now();
        let m = crate::formats::miniso::minimal_iso(&base.file, area).map_err(|e| unavailable(e.into()))?;
        tracing::info!(version = %base.version, arch = %base.arch, elapsed_ms = started.elapsed().as_millis() as u64,
            "minimal ISO derived from miniso.dat");
        return Ok(Arc::new(MinimalTemplate {
            plan: m.plan,
            live: m.live,
            kargs_without_liveiso: m.kargs_without_liveiso,
        }));
    }

    let dir = data_dir.join("minimal");
    std::fs::create_dir_all(&dir)
        .map_err(|source| ImageError::Io { what: format!("creating {}", dir.display()), source })?;
    let out = dir.join(format!("{}-v{REMASTER_FORMAT}.iso", base.sha256_hex()));
    if !out.exists() {
        let started = std::time::Instant::now();
        crate::formats::remaster::remaster_minimal(base.path(), &out).map_err(|e| unavailable(e.into()))?;
        tracing::info!(version = %base.version, arch = %base.arch, path = %out.display(),
            elapsed_ms = started.elapsed().as_millis() as u64, "minimal ISO re-mastered");
    }
    let io_error = |source| ImageError::Io { what: out.display().to_string(), source };
    let file = std::fs::File::open(&out).map_err(io_error)?;
    let len = file.metadata().map_err(io_error)?.len();
    let sha256 = crate::image::catalog::sha256_file(&file).map_err(io_error)?;
    let live = LiveIso::inspect(file.try_clone().map_err(io_error)?)
        .map_err(|source| ImageError::RemasteredIso { path: out.clone(), source })?;
    let current =
        live.kargs.as_ref().map(|k| k.current.clone()).ok_or_else(|| unavailable(Unavailable::NoKargAreas))?;
    let kargs_without_liveiso = without_liveiso(&current).ok_or_else(|| unavailable(Unavailable::NoLiveIsoKarg))?;
    let file = Arc::new(BaseFile { path: out, file, len, sha256 });
    Ok(Arc::new(MinimalTemplate { plan: Plan::from_file(&file), live, kargs_without_liveiso }))
}

/// `kargs` without its `coreos.liveiso=` token, or None if it has none.
fn without_liveiso(kargs: &str) -> Option<String> {
    let tokens: Vec<&str> = kargs.split_whitespace().collect();
    let kept: Vec<&str> = tokens.iter().copied().filter(|t| !t.starts_with("coreos.liveiso=")).collect();
    (kept.len() < tokens.len()).then(|| kept.join(" "))
}

#[cfg(test)]
mod tests {
    #[test]
    fn liveiso_token_removal() {
        assert_eq!(super::without_liveiso("a coreos.liveiso=X b").as_deref(), Some("a b"));
        assert_eq!(super::without_liveiso("a b"), None);
    }
}
