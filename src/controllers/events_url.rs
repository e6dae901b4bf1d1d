//! The eventsURL of a status (an Agent's, an InfraEnv's, an AgentClusterInstall's): where
//! `GET /api/assisted-install/v2/events` lists what the pool recorded (`api/events.rs`), with an
//! `api_key` that reads those events and opens nothing else (`auth/urlsign.rs`, events scope).
//!
//! assisted-service sets it once. Here it is kept while it names the same query and its token still
//! reads what it names, and made again otherwise: after a key rotation (a lasting token dies with
//! its key), for a host that moved to another InfraEnv, or for a status written before URLs were
//! signed. So a status write does not change it, and what a user copies from it works.

use std::time::SystemTime;

use crate::auth::urlsign::{Claims, UrlSigner, token_of_url};

/// What an eventsURL reads, and so what its token names.
#[derive(Clone, Copy, Debug)]
pub enum EventsOf<'a> {
    /// A host: `?host_id=…&infra_env_id=…`, with a token for its InfraEnv (assisted's claim
    /// `infra_env_id`). The InfraEnv is in the query too, so that the URL is exact without a token
    /// (unsigned URLs, or the API token), where the same machine may be a host of two InfraEnvs.
    Host { host_id: &'a str, infra_env_id: &'a str },
    /// An InfraEnv and its hosts: `?infra_env_id=…`.
    InfraEnv(&'a str),
    /// A cluster and its hosts: `?cluster_id=…`, with a token for the cluster.
    Cluster(&'a str),
}

impl EventsOf<'_> {
    fn query(&self) -> String {
        match self {
            EventsOf::Host { host_id, infra_env_id } => format!("host_id={host_id}&infra_env_id={infra_env_id}"),
            EventsOf::InfraEnv(id) => format!("infra_env_id={id}"),
            EventsOf::Cluster(id) => format!("cluster_id={id}"),
        }
    }

    fn names(&self, claims: &Claims) -> bool {
        match self {
            EventsOf::Host { infra_env_id: id, .. } | EventsOf::InfraEnv(id) => claims.infra_env_id == *id,
            EventsOf::Cluster(id) => claims.cluster_id == *id,
        }
    }

    fn sign(&self, signer: &UrlSigner) -> String {
        match self {
            EventsOf::Host { infra_env_id: id, .. } | EventsOf::InfraEnv(id) => signer.sign_infra_env_events(id),
            EventsOf::Cluster(id) => signer.sign_cluster_events(id),
        }
    }
}

/// The eventsURL of `of` on `base_url`: `current` while it is still right, else a new one.
pub fn events_url(current: &str, base_url: &str, of: EventsOf<'_>, signer: Option<&UrlSigner>) -> String {
    let unsigned = format!("{base_url}/api/assisted-install/v2/events?{}", of.query());
    let Some(signer) = signer else { return unsigned };
    if let Some(token) = token_of_url(current)
        && current == format!("{unsigned}&api_key={token}")
        && signer.verify_events(token, SystemTime::now()).is_ok_and(|c| of.names(&c))
    {
        return current.to_string();
    }
    format!("{unsigned}&api_key={}", of.sign(signer))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_events_url_is_kept_while_right_and_made_again_when_not() {
        let dir = tempfile::tempdir().unwrap();
        let signer = UrlSigner::load_or_create(dir.path(), &[]).unwrap();
        let base = "https://hub.example";
        let host = EventsOf::Host { host_id: "h-1", infra_env_id: "ie-a" };
        let url = events_url("", base, host, Some(&signer));
        let token = token_of_url(&url).unwrap();
        assert_eq!(url, format!("{base}/api/assisted-install/v2/events?host_id=h-1&infra_env_id=ie-a&api_key={token}"));
        let claims = signer.verify_events(token, SystemTime::now()).unwrap();
        assert_eq!((claims.infra_env_id.as_str(), claims.exp, claims.scope.as_str()), ("ie-a", None, "events"));
        assert_eq!(events_url(&url, base, host, Some(&signer)), url, "kept");

        // The host moved to another InfraEnv; the key was rotated; the status predates signing.
        let moved = EventsOf::Host { host_id: "h-1", infra_env_id: "ie-b" };
        assert!(events_url(&url, base, moved, Some(&signer)).contains("infra_env_id=ie-b&api_key="));
        let rotated = UrlSigner::load_or_create(tempfile::tempdir().unwrap().path(), &[]).unwrap();
        let again = events_url(&url, base, host, Some(&rotated));
        assert_ne!(again, url);
        assert!(rotated.verify_events(token_of_url(&again).unwrap(), SystemTime::now()).is_ok());
        let old = format!("{base}/api/assisted-install/v2/events?host_id=h-1");
        assert!(events_url(&old, base, host, Some(&signer)).contains("&api_key="));

        // A cluster's names the cluster; unsigned, none.
        let c = events_url("", base, EventsOf::Cluster("c-1"), Some(&signer));
        assert_eq!(signer.verify_events(token_of_url(&c).unwrap(), SystemTime::now()).unwrap().cluster_id, "c-1");
        assert_eq!(
            events_url(&c, base, EventsOf::InfraEnv("ie-a"), None),
            format!("{base}/api/assisted-install/v2/events?infra_env_id=ie-a")
        );
    }
}
