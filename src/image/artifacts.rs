//! Each artifact of an InfraEnv as a plan over a base image: full and minimal ISO, PXE initrd,
//! kernel, rootfs, Ignition, static-network config and iPXE script; and the one verdict on whether
//! an InfraEnv's image can be made, which the status and every download share.

use std::sync::Arc;
use std::time::SystemTime;

use sha2::{Digest, Sha256};

use super::content::kib;
use super::{DiscoveryContent, ImageError, Images, StaticNetworkFiles, ipxe_kernel_arguments, render_ipxe_script};
use crate::formats::liveiso::{Area, LiveIso};
use crate::image::catalog::BaseImage;
use crate::keylocks::Locked as _;
use crate::plan::Representation;
use crate::plan::{Part, Plan, PlanBuilder, Segment};
use crate::resources::{ImageType, InfraEnv};
use crate::store::Store;

/// One of the files served under `/boot-artifacts/`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BootArtifact {
    Kernel,
    Rootfs,
}

impl<S: Store> Images<S> {
    /// The digest the InfraEnv status records (`imageDigest`): the discovery content, the base image and
    /// the ISO type.
    pub fn image_digest(content: &DiscoveryContent, base: &BaseImage, image_type: ImageType) -> String {
        let mut h = Sha256::new();
        h.update(content.digest);
        h.update(base.file.sha256);
        h.update(format!("{image_type:?}").as_bytes());
        hex::encode(&h.finalize()[..16])
    }

    /// When the content of `ie`'s images last changed: `createdTime` if the status describes this very
    /// content, else now (the controller has not caught up; a later Last-Modified is the safe answer).
    fn content_modified(&self, ie: &InfraEnv, content: &DiscoveryContent, base: &BaseImage) -> SystemTime {
        let status = ie.status.as_ref();
        let digest = Self::image_digest(content, base, self.image_type(ie));
        match status.and_then(|s| s.created_time.as_ref()) {
            Some(t) if status.map(|s| s.image_digest.as_str()) == Some(digest.as_str()) => {
                SystemTime::from(t.0).max(base.modified)
            }
            _ => SystemTime::now(),
        }
    }

    /// The Ignition embed area's new bytes: the Ignition archive, the static-network ramdisk, zeros.
    fn embed_area(&self, area: Area, content: &DiscoveryContent) -> Result<Vec<Segment>, ImageError> {
        let ign = content.archive.bytes.len();
        crate::content::ignition::check_archive_size(ign, area.len).map_err(ImageError::IgnitionArchive)?;
        let ram = content.ramdisk.as_ref().map(|r| r.bytes.len()).unwrap_or(0);
        if (ign + ram) as u64 > area.len {
            return Err(ImageError::Invalid(format!(
                "The ignition archive ({} KiB) and the static network ramdisk ({} KiB, {} NMStateConfigs) add up to {} KiB, over the size of the ISO's Ignition embed area ({} KiB)",
                kib(ign as u64),
                kib(ram as u64),
                content.static_hosts,
                kib((ign + ram) as u64),
                kib(area.len)
            )));
        }
        let mut segs = vec![Segment::Part { part: content.archive.clone(), offset: 0, len: ign }];
        if let Some(r) = &content.ramdisk {
            segs.push(Segment::Part { part: r.clone(), offset: 0, len: ram });
        }
        segs.push(Segment::Zeros(area.len - (ign + ram) as u64));
        Ok(segs)
    }

    /// The discovery ISO (full or minimal) of `ie` over `base`.
    pub async fn iso(
        &self,
        ie: &InfraEnv,
        base: &Arc<BaseImage>,
        content: &DiscoveryContent,
        kind: ImageType,
    ) -> Result<Representation, ImageError> {
        base.check_unchanged()?;
        let template;
        let (plan, live, kargs): (Plan, &LiveIso, Option<String>) = match kind {
            ImageType::FullIso => (Plan::from_file(&base.file), &base.live, None),
            ImageType::MinimalIso => {
                template = self.minimal.get(base, &self.config.data_dir).await?;
                let rootfs = format!("coreos.live.rootfs_url={}", self.minimal_rootfs_url(base));
                let kargs = format!("{} {rootfs}", template.kargs_without_liveiso).trim().to_string();
                (template.plan.clone(), &template.live, Some(kargs))
            }
        };
        let mut overlays: Vec<(u64, Vec<Segment>)> =
            vec![(live.ignition_area.offset, self.embed_area(live.ignition_area, content)?)];
        if kargs.is_some() || !content.karg_ops.is_empty() {
            let Some(areas) = &live.kargs else {
                return Err(ImageError::Invalid(format!(
                    "OS image {} ({}) has no kernel argument embed areas, so kernel arguments cannot be set",
                    base.version, base.arch
                )));
            };
            let current = kargs.unwrap_or_else(|| areas.current.clone());
            let kargs_error = |source| ImageError::KernelArguments { index: None, source };
            let new = crate::formats::kargs::apply_ops(&current, &content.karg_ops).map_err(kargs_error)?;
            for a in &areas.areas {
                let bytes = crate::formats::kargs::render_area(&new, areas.size, a.end, a.pad).map_err(kargs_error)?;
                let part = self.shared_part(bytes);
                let len = part.bytes.len();
                overlays.push((a.offset, vec![Segment::Part { part, offset: 0, len }]));
            }
        }
        let plan = plan.overlay(&mut overlays)?;
        Ok(Representation {
            etag: hex::encode(plan.digest()),
            plan,
            last_modified: self.content_modified(ie, content, base),
            content_type: "application/x-iso9660-image",
            filename: Some(format!("{}-discovery.iso", ie.metadata.uid.as_deref().unwrap_or("infraenv"))),
        })
    }

    /// Whether `ie`'s image over `base` can be made whole: the checks the InfraEnv controller makes
    /// before it reports `ImageCreated=True` (the ISO of the InfraEnv's type, with its embed area
    /// and karg area sizes; the PXE initrd; the iPXE kernel command line). Every download of an
    /// InfraEnv's files asks this first (over the base it is for, else the InfraEnv's), so that an
    /// InfraEnv whose image failed answers all of them with the error its condition shows, never
    /// some of them with bytes. Remembered per content and base once it holds.
    pub async fn verdict(
        &self,
        ie: &InfraEnv,
        content: &DiscoveryContent,
        base: &Arc<BaseImage>,
    ) -> Result<(), ImageError> {
        let kind = self.image_type(ie);
        let key = (base.file.sha256, kind);
        if content.verified.locked().contains(&key) {
            return Ok(());
        }
        self.iso(ie, base, content, kind).await?;
        self.pxe_initrd(ie, base, content)?;
        ipxe_kernel_arguments(&self.urls_with_token(ie, base, None).rootfs, content)?;
        let mut verified = content.verified.locked();
        if !verified.contains(&key) {
            verified.push(key);
        }
        Ok(())
    }

    /// The PXE initrd: the base initrd, the Ignition archive, the static-network ramdisk.
    pub fn pxe_initrd(
        &self,
        ie: &InfraEnv,
        base: &BaseImage,
        content: &DiscoveryContent,
    ) -> Result<Representation, ImageError> {
        base.check_unchanged()?;
        crate::content::ignition::check_archive_size(
            content.archive.bytes.len(),
            crate::content::ignition::IGNITION_ARCHIVE_LIMIT as u64,
        )
        .map_err(ImageError::IgnitionArchive)?;
        let initrd = base.live.initrd;
        let mut b = PlanBuilder::default();
        b.file(&base.file, initrd.offset, initrd.len);
        b.part(content.archive.clone());
        if let Some(r) = &content.ramdisk {
            b.part(r.clone());
        }
        let plan = b.build();
        Ok(Representation {
            etag: hex::encode(plan.digest()),
            plan,
            last_modified: self.content_modified(ie, content, base),
            content_type: "application/octet-stream",
            filename: Some(format!("{}-initrd.img", ie.metadata.uid.as_deref().unwrap_or("infraenv"))),
        })
    }

    /// s390x `initrd.addrsize` (spec-images.md §5.4): the image's 8-byte load address, then the big-endian
    /// length of the PXE initrd served for the same request.
    pub fn initrd_addrsize(
        &self,
        ie: &InfraEnv,
        base: &BaseImage,
        content: &DiscoveryContent,
    ) -> Result<Representation, ImageError> {
        let Some(area) = base.live.initrd_addrsize.filter(|a| a.len >= 8) else {
            return Err(ImageError::NotAvailable(format!(
                "OS image {} ({}) has no images/initrd.addrsize",
                base.version, base.arch
            )));
        };
        let initrd = self.pxe_initrd(ie, base, content)?;
        let mut bytes = vec![0u8; 8];
        std::os::unix::fs::FileExt::read_exact_at(&base.file.file, &mut bytes, area.offset)
            .map_err(|source| ImageError::Io { what: "reading initrd.addrsize".into(), source })?;
        bytes.extend_from_slice(&initrd.plan.len().to_be_bytes());
        let plan = Plan::from_part(Arc::new(Part::new(bytes)));
        Ok(Representation {
            etag: hex::encode(plan.digest()),
            plan,
            last_modified: initrd.last_modified,
            content_type: "application/octet-stream",
            filename: Some(format!("{}-initrd.addrsize", ie.metadata.uid.as_deref().unwrap_or("infraenv"))),
        })
    }

    /// Kernel or rootfs of a base image, as they are.
    pub fn boot_artifact(&self, base: &BaseImage, which: BootArtifact) -> Result<Representation, ImageError> {
        base.check_unchanged()?;
        let (area, name) = match which {
            BootArtifact::Kernel => (base.live.kernel, "vmlinuz"),
            // The catalog only loads images with a rootfs.
            BootArtifact::Rootfs => (
                base.live.rootfs.ok_or_else(|| ImageError::Internal("base image without rootfs".into()))?,
                "rootfs.img",
            ),
        };
        let mut b = PlanBuilder::default();
        b.file(&base.file, area.offset, area.len);
        let plan = b.build();
        Ok(Representation {
            etag: hex::encode(plan.digest()),
            plan,
            last_modified: base.modified,
            content_type: "application/octet-stream",
            filename: Some(name.to_string()),
        })
    }

    /// The `static-network-config` download: the per-host network files as a tar.
    pub fn static_network_config(
        &self,
        ie: &InfraEnv,
        content: &DiscoveryContent,
    ) -> Result<Representation, ImageError> {
        let tar = content.static_network.as_ref().map(StaticNetworkFiles::tar).ok_or_else(|| {
            ImageError::NotAvailable("this InfraEnv has no static network config (no NMStateConfig selected)".into())
        })?;
        let plan = Plan::from_part(tar);
        Ok(Representation {
            etag: hex::encode(plan.digest()),
            plan,
            last_modified: ie
                .status
                .as_ref()
                .and_then(|s| s.created_time.as_ref())
                .map(|t| SystemTime::from(t.0))
                .unwrap_or_else(SystemTime::now),
            content_type: "application/x-tar",
            filename: Some(format!("{}-static-network-config.tar", ie.metadata.uid.as_deref().unwrap_or("infraenv"))),
        })
    }

    /// The discovery Ignition config as a download.
    pub fn discovery_ignition(&self, ie: &InfraEnv, content: &DiscoveryContent) -> Representation {
        let part = Arc::new(Part::new(content.ignition.as_bytes().to_vec()));
        let plan = Plan::from_part(part);
        Representation {
            etag: hex::encode(plan.digest()),
            plan,
            last_modified: ie
                .status
                .as_ref()
                .and_then(|s| s.created_time.as_ref())
                .map(|t| SystemTime::from(t.0))
                .unwrap_or_else(SystemTime::now),
            content_type: "application/vnd.coreos.ignition+json",
            filename: Some("discovery.ign".to_string()),
        }
    }

    /// The iPXE boot script (spec-controllers.md §8.1): initrd, kernel with the fixed arguments and the
    /// InfraEnv's edits, boot. Its initrd URL carries `token`: the token of the request being
    /// answered, so that a script never holds a URL that outlives the URL it was fetched with.
    pub fn ipxe_script(
        &self,
        ie: &InfraEnv,
        base: &BaseImage,
        content: &DiscoveryContent,
        token: Option<&str>,
    ) -> Result<String, ImageError> {
        let urls = self.urls_with_token(ie, base, token);
        let kargs = ipxe_kernel_arguments(&urls.rootfs, content)?;
        render_ipxe_script(&urls.initrd, &urls.kernel, &kargs)
    }
}
