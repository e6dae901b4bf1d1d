//! The URLs an InfraEnv's status hands out for its artifacts, signed where URLs are signed.

use std::time::SystemTime;

use super::Images;
use crate::image::catalog::BaseImage;
use crate::resources::{ImageType, InfraEnv, IpxeScriptType};
use crate::store::Store;

/// Where each artifact of an InfraEnv is served, as its status lists them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArtifactUrls {
    pub iso: String,
    pub kernel: String,
    pub rootfs: String,
    pub initrd: String,
    pub ipxe_script: String,
    pub discovery_ignition: String,
    pub static_network_config: String,
}

/// RFC 3986 unreserved characters stay as they are (`4.18`, `x86_64`); everything else is escaped.
const URL_COMPONENT: &percent_encoding::AsciiSet =
    &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

pub fn enc(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, URL_COMPONENT).to_string()
}

impl<S: Store> Images<S> {
    /// The rootfs URL minimal ISOs boot with: a path without `?` or `&`, because GRUB's script syntax
    /// treats `&` as a metacharacter on the unquoted kernel command line.
    pub fn minimal_rootfs_url(&self, base: &BaseImage) -> String {
        format!("{}/boot-artifacts/{}/{}/rootfs.img", self.config.base_url, enc(&base.version), enc(&base.arch))
    }

    /// The URLs of `ie`'s artifacts over `base` (spec-controllers.md §3.8), signed with a new token when
    /// URLs are signed.
    pub fn urls(&self, ie: &InfraEnv, base: &BaseImage) -> ArtifactUrls {
        let id = ie.metadata.uid.as_deref().unwrap_or_default();
        let token = self.config.url_signer.as_ref().map(|s| s.sign(id, SystemTime::now()));
        self.urls_with_token(ie, base, token.as_deref())
    }

    /// The token `ie`'s status URLs should carry, and how long until it must be replaced: the one
    /// the status has while more than [`crate::auth::urlsign::REFRESH_BEFORE`] of it is left (so that a
    /// status write does not change every URL, and BareMetalHosts do not see a new image), else a
    /// new one. None when URLs are not signed.
    pub fn status_token(&self, ie: &InfraEnv, now: SystemTime) -> Option<(String, std::time::Duration)> {
        let signer = self.config.url_signer.as_ref()?;
        let id = ie.metadata.uid.as_deref().unwrap_or_default();
        let current = ie.status.as_ref().and_then(|s| crate::auth::urlsign::token_of_url(&s.iso_download_url));
        let kept = current.and_then(|t| {
            let left = signer.verify_for(t, id, now).ok()?.expires_at()?.duration_since(now).ok()?;
            (left > crate::auth::urlsign::REFRESH_BEFORE)
                .then(|| (t.to_string(), left - crate::auth::urlsign::REFRESH_BEFORE))
        });
        Some(kept.unwrap_or_else(|| {
            (signer.sign(id, now), crate::auth::urlsign::TOKEN_LIFETIME - crate::auth::urlsign::REFRESH_BEFORE)
        }))
    }

    /// The URLs of `ie`'s artifacts: signed with `token` (`/byapikey/` ISO path, `api_key` on the
    /// initrd and the downloads) when there is one; kernel and rootfs are never signed.
    pub fn urls_with_token(&self, ie: &InfraEnv, base: &BaseImage, token: Option<&str>) -> ArtifactUrls {
        let b = &self.config.base_url;
        let ipxe = self.config.ipxe_base_url();
        let id = ie.metadata.uid.as_deref().unwrap_or_default();
        let q = format!("arch={}&version={}", enc(&base.arch), enc(&base.version));
        let files = format!("{b}/api/assisted-install/v2/infra-envs/{id}/downloads/files");
        let ipxe_files = format!("{ipxe}/api/assisted-install/v2/infra-envs/{id}/downloads/files");
        let api_key = token.map(|t| format!("&api_key={}", enc(t))).unwrap_or_default();
        let ipxe_type = if ie.spec.ipxe_script_type == Some(IpxeScriptType::BootOrderControl) {
            "&ipxe_script_type=boot-order-control"
        } else {
            ""
        };
        let iso_file = match self.image_type(ie) {
            ImageType::FullIso => "full.iso",
            ImageType::MinimalIso => "minimal.iso",
        };
        let iso_path = match token {
            Some(t) => format!("byapikey/{}", enc(t)),
            None => format!("byid/{id}"),
        };
        ArtifactUrls {
            iso: format!("{b}/{iso_path}/{}/{}/{iso_file}", enc(&base.version), enc(&base.arch)),
            kernel: format!("{ipxe}/boot-artifacts/kernel?{q}"),
            rootfs: format!("{ipxe}/boot-artifacts/rootfs?{q}"),
            initrd: format!("{ipxe}/images/{id}/pxe-initrd?{q}{api_key}"),
            ipxe_script: format!("{ipxe_files}?file_name=ipxe-script{ipxe_type}{api_key}"),
            discovery_ignition: format!("{files}?file_name=discovery.ign{api_key}"),
            static_network_config: format!("{files}?file_name=static-network-config{api_key}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use crate::image::ServiceConfig;
    #[test]
    fn status_tokens_are_kept_until_an_hour_before_expiry() {
        use crate::auth::urlsign::{REFRESH_BEFORE, TOKEN_LIFETIME, UrlSigner};
        use std::time::Duration;
        let dir = tempfile::tempdir().unwrap();
        let signer = Arc::new(UrlSigner::load_or_create(dir.path(), &[]).unwrap());
        let mut config = ServiceConfig::new("http://hub.example", dir.path().into());
        config.url_signer = Some(signer.clone());
        let store = crate::store::sqlite::SqliteStore::open_in_memory().unwrap();
        let images = Images::new(store, crate::image::catalog::Catalog::new(vec![]), Arc::new(config));
        let mut ie = InfraEnv::new("pool", Default::default());
        ie.metadata.uid = Some("2b4f5fd6-1111-4c5e-9a4e-000000000001".into());
        let t0 = SystemTime::now();

        // No status yet: a new token, to be replaced in 3 hours.
        let (first, refresh_in) = images.status_token(&ie, t0).unwrap();
        assert_eq!(refresh_in, TOKEN_LIFETIME - REFRESH_BEFORE);
        let status = ie.status.get_or_insert_default();
        status.iso_download_url = format!("http://hub.example/byapikey/{first}/4.20/x86_64/full.iso");

        // Two hours on: kept, with an hour to go before its refresh.
        let (kept, refresh_in) = images.status_token(&ie, t0 + Duration::from_secs(2 * 3600)).unwrap();
        assert_eq!(kept, first);
        assert!(refresh_in <= Duration::from_secs(3600) && refresh_in > Duration::from_secs(3590), "{refresh_in:?}");

        // Three hours and a minute on: less than an hour left, a new token valid for 4 more hours.
        let later = t0 + Duration::from_secs(3 * 3600 + 60);
        let (renewed, _) = images.status_token(&ie, later).unwrap();
        assert_ne!(renewed, first);
        let claims = signer.verify(&renewed, later).unwrap();
        assert!(claims.expires_at().unwrap() >= later + TOKEN_LIFETIME - Duration::from_secs(1));

        // A status token for another InfraEnv is never reused.
        let other = signer.sign("2b4f5fd6-1111-4c5e-9a4e-000000000002", t0);
        ie.status.as_mut().unwrap().iso_download_url =
            format!("http://hub.example/byapikey/{other}/4.20/x86_64/full.iso");
        assert_ne!(images.status_token(&ie, t0).unwrap().0, other);
    }
}
