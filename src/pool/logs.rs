//! Host logs: what the installer uploads for a host (`V2UploadLogs` with `logs_type=host`, a
//! multipart/form-data body whose `upfile` part is the archive) and what users download from the
//! Agent's `logsURL` (`V2DownloadClusterLogs`). One file per host under the data directory, written
//! to a temporary name and renamed into place, so that a failed or oversized upload never leaves a
//! partial file where a download would find it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures_util::StreamExt;
use sha2::{Digest, Sha256};

use crate::http::UploadBody;
use crate::plan::Representation;
use crate::plan::{BaseFile, PlanBuilder};

/// The largest upload accepted: the swagger's `maxLength` of `upfile` (250 MB).
pub const MAX_LOGS_BYTES: u64 = 262_144_000;

/// Why an upload was refused, with the HTTP status to answer.
#[derive(Debug)]
pub struct LogsError {
    pub status: u16,
    pub message: String,
}

fn refuse(status: u16, message: impl Into<String>) -> LogsError {
    LogsError { status, message: message.into() }
}

#[derive(Debug)]
pub struct HostLogs {
    dir: PathBuf,
}

/// Removes a temporary upload unless it was moved into place.
struct TempUpload(Option<PathBuf>);

impl Drop for TempUpload {
    fn drop(&mut self) {
        if let Some(path) = self.0.take() {
            let _ = std::fs::remove_file(path);
        }
    }
}

impl HostLogs {
    pub fn new(data_dir: &Path) -> HostLogs {
        HostLogs { dir: data_dir.join("logs") }
    }

    /// Where a host's logs live. Both ids must be UUIDs: they become path components.
    fn path(&self, cluster_id: &str, host_id: &str) -> Result<PathBuf, LogsError> {
        for (what, id) in [("cluster_id", cluster_id), ("host_id", host_id)] {
            uuid::Uuid::parse_str(id).map_err(|_| refuse(400, format!("{what} {id:?} is not a UUID")))?;
        }
        Ok(self.dir.join(cluster_id).join(format!("{host_id}.tar.gz")))
    }

    /// Stores the `upfile` part of a multipart body as the host's logs, replacing earlier ones.
    /// Returns the SHA-256 (hex) of what was stored.
    pub async fn store(
        &self,
        cluster_id: &str,
        host_id: &str,
        content_type: &str,
        body: UploadBody,
    ) -> Result<String, LogsError> {
        let target = self.path(cluster_id, host_id)?;
        let boundary = multer::parse_boundary(content_type)
            .map_err(|_| refuse(400, "the logs must be sent as multipart/form-data with a boundary"))?;
        // Other form fields are read past, but not forever: the whole body is bounded too.
        let limits =
            multer::SizeLimit::new().whole_stream(MAX_LOGS_BYTES + (1 << 20)).for_field("upfile", MAX_LOGS_BYTES);
        let mut parts =
            multer::Multipart::with_constraints(body, boundary, multer::Constraints::new().size_limit(limits));
        let dir = target.parent().expect("logs path has a directory").to_path_buf();
        while let Some(mut field) = parts.next_field().await.map_err(multipart_error)? {
            if field.name() != Some("upfile") {
                // Other form fields carry nothing we keep; read past them.
                while field.chunk().await.map_err(multipart_error)?.is_some() {}
                continue;
            }
            let temp_path = dir.join(format!(".upload-{}", uuid::Uuid::new_v4()));
            let mut temp = TempUpload(Some(temp_path.clone()));
            // The file is written on a blocking thread in a few large writes: one job for a small
            // upload (create, write, fsync, rename), one more per SPOOL_BYTES of a large one. Each
            // file operation on a blocking thread of its own costs a thread handoff, and at the end
            // of a fleet's installation thousands of uploads arrive at once.
            let mut file: Option<std::fs::File> = None;
            let mut spooled: Vec<bytes::Bytes> = Vec::new();
            let mut spooled_len = 0;
            let mut sha = Sha256::new();
            let mut field = field.map(|c| c.map_err(multipart_error));
            while let Some(chunk) = field.next().await {
                let chunk = chunk?;
                sha.update(&chunk);
                spooled_len += chunk.len();
                spooled.push(chunk);
                if spooled_len >= SPOOL_BYTES {
                    let (dir, temp_path, chunks) = (dir.clone(), temp_path.clone(), std::mem::take(&mut spooled));
                    let open = file.take();
                    file = Some(blocking(move || write_chunks(open, &dir, &temp_path, &chunks)).await?);
                    spooled_len = 0;
                }
            }
            let (temp_path, target) = (temp_path.clone(), target.clone());
            let open = file.take();
            blocking(move || {
                let file = write_chunks(open, &dir, &temp_path, &spooled)?;
                file.sync_all().map_err(|e| refuse(500, format!("writing the logs: {e}")))?;
                drop(file);
                std::fs::rename(&temp_path, &target).map_err(|e| refuse(500, format!("storing the logs: {e}")))
            })
            .await?;
            temp.0 = None;
            return Ok(hex::encode(sha.finalize()));
        }
        Err(refuse(400, "the upload has no upfile part"))
    }

    /// Removes the logs of a cluster's hosts (the cluster was deregistered). A cluster of hundreds of
    /// hosts has as many files: they are removed on a blocking thread, not on the one serving requests.
    pub async fn remove_cluster(&self, cluster_id: &str) {
        if uuid::Uuid::parse_str(cluster_id).is_err() {
            return;
        }
        let dir = self.dir.join(cluster_id);
        match tokio::fs::remove_dir_all(&dir).await {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!("removing the host logs in {}: {}", dir.display(), crate::errors::chain(&e)),
        }
    }

    /// The host's stored logs as a downloadable file, if there are any.
    pub fn representation(
        &self,
        cluster_id: &str,
        host_id: &str,
        sha256_hex: &str,
        filename: String,
    ) -> Result<Option<Representation>, LogsError> {
        let path = self.path(cluster_id, host_id)?;
        let file = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(refuse(500, format!("opening {}: {e}", path.display()))),
        };
        let meta = file.metadata().map_err(|e| refuse(500, e.to_string()))?;
        let mut sha256 = [0u8; 32];
        hex::decode_to_slice(sha256_hex, &mut sha256).map_err(|_| refuse(500, "the logs' checksum is missing"))?;
        let base = Arc::new(BaseFile { path, file, len: meta.len(), sha256 });
        let mut plan = PlanBuilder::default();
        plan.file(&base, 0, base.len);
        Ok(Some(Representation {
            plan: plan.build(),
            etag: sha256_hex.to_string(),
            last_modified: meta.modified().unwrap_or(std::time::SystemTime::UNIX_EPOCH),
            content_type: "application/octet-stream",
            filename: Some(filename),
        }))
    }
}

/// How much of an upload is held in memory before it is written out.
const SPOOL_BYTES: usize = 4 << 20;

/// Runs file work on the blocking pool.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, LogsError> + Send + 'static,
) -> Result<T, LogsError> {
    tokio::task::spawn_blocking(work).await.map_err(|e| refuse(500, format!("writing the logs: {e}")))?
}

/// Appends `chunks` to the upload's temporary file, creating it (and its directory) first if `file`
/// is None.
fn write_chunks(
    file: Option<std::fs::File>,
    dir: &Path,
    temp_path: &Path,
    chunks: &[bytes::Bytes],
) -> Result<std::fs::File, LogsError> {
    use std::io::Write;
    let mut file = match file {
        Some(f) => f,
        None => {
            std::fs::create_dir_all(dir).map_err(|e| refuse(500, format!("creating {}: {e}", dir.display())))?;
            std::fs::File::create(temp_path)
                .map_err(|e| refuse(500, format!("creating {}: {e}", temp_path.display())))?
        }
    };
    for chunk in chunks {
        file.write_all(chunk).map_err(|e| refuse(500, format!("writing the logs: {e}")))?;
    }
    Ok(file)
}

fn multipart_error(e: multer::Error) -> LogsError {
    match e {
        multer::Error::FieldSizeExceeded { .. } | multer::Error::StreamSizeExceeded { .. } => {
            refuse(413, format!("the logs are larger than the {MAX_LOGS_BYTES} bytes accepted"))
        }
        // The server ends an upload that stalls (no data for its body timeout) with TimedOut.
        multer::Error::StreamReadFailed(e)
            if e.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::TimedOut) =>
        {
            refuse(408, format!("reading the upload: {e}"))
        }
        multer::Error::StreamReadFailed(e) => refuse(400, format!("reading the upload: {e}")),
        e => refuse(400, format!("the upload is not valid multipart/form-data: {e}")),
    }
}
