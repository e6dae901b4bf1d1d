//! What the pool records as events, as assisted-service's event handler does: a host's
//! registration, binding and unbinding, each status change and each installation stage it
//! reports; a cluster's registration and status changes. They are computed from a record before
//! and after its change and written in the same transaction as the record (see
//! `store/sqlite/events.rs`), so the events of a host are in the order of its changes, and none is
//! seen without its change. The Agent's, InfraEnv's and AgentClusterInstall's `eventsURL` read them
//! (`api/events.rs`).
//!
//! What is kept is bounded: a host keeps its newest [`HOST_EVENTS_KEPT`], a cluster its newest
//! [`CLUSTER_EVENTS_KEPT`] of its own, so an agent that flaps between two states for weeks
//! costs the same room as one that does not. A host's events go with its record, a cluster's own
//! with its record.

use jiff::Timestamp;
use serde::Serialize;

use super::Cluster;
use crate::hosts::{Host, HostStatus};
use crate::store::sqlite::{EventRow, Keep};

/// Events a host keeps: a lifecycle (registration, binding, validation, installation with its ten
/// or so stages, reboot) records a few dozen.
pub const HOST_EVENTS_KEPT: Keep = Keep(256);
/// A cluster's own events kept (its hosts' are counted per host).
pub const CLUSTER_EVENTS_KEPT: Keep = Keep(256);
/// assisted-service's column is `varchar(4096)`.
const MAX_MESSAGE_BYTES: usize = 4096;

/// The category of every event recorded here (assisted's other, `metrics`, is not recorded).
pub const CATEGORY_USER: &str = "user";

/// assisted's `GetEventSeverityFromHostStatus`: the state a host arrives in.
pub fn severity_of(status: HostStatus) -> &'static str {
    match status {
        HostStatus::Disconnected | HostStatus::InstallingPendingUserAction | HostStatus::Insufficient => "warning",
        HostStatus::Error => "error",
        _ => "info",
    }
}

/// An event's time as assisted's API writes it (RFC 3339, UTC, milliseconds).
fn event_time(now: Timestamp) -> String {
    now.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

fn bounded(mut message: String) -> String {
    if message.len() > MAX_MESSAGE_BYTES {
        let mut end = MAX_MESSAGE_BYTES;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
    }
    message
}

/// The events of a host's change from `before` (None: the record is new) to `after`;
/// `registered` when the change is a registration (every agent start).
pub fn host_change(before: Option<&Host>, after: &Host, registered: bool, now: Timestamp) -> Vec<EventRow> {
    let name = match after.hostname() {
        n if n.is_empty() => after.id.clone(),
        n => n,
    };
    let before_cluster = before.and_then(|b| b.cluster_id.clone());
    // An unbinding clears the host's cluster: its events still tell the cluster the host left.
    let cluster_id = after.cluster_id.clone().or(before_cluster.clone()).unwrap_or_default();
    let event = |event_name: &str, severity: &str, message: String| EventRow {
        name: event_name.to_string(),
        cluster_id: cluster_id.clone(),
        host_id: after.id.clone(),
        infra_env_id: after.infra_env_id.clone(),
        severity: severity.to_string(),
        category: CATEGORY_USER.to_string(),
        message: bounded(message),
        event_time: event_time(now),
    };
    let mut out = Vec::new();
    if registered {
        out.push(event("host_registration_succeeded", "info", format!("Host {name}: Successfully registered")));
    }
    match (&before_cluster, &after.cluster_id) {
        (None, Some(c)) if before.is_some() => {
            out.push(event("host_bind_succeeded", "info", format!("Host {name}: Successfully bound to cluster {c}")))
        }
        (Some(_), None) => {
            out.push(event("host_unbind_succeeded", "info", format!("Host {name}: Successfully unbound from cluster")))
        }
        _ => {}
    }
    if let Some(before) = before
        && before.status != after.status
    {
        let info = if after.status_info.is_empty() { String::new() } else { format!(" ({})", after.status_info) };
        out.push(event(
            "host_status_updated",
            severity_of(after.status),
            format!("Host {name}: updated status from {} to {}{info}", before.status.as_str(), after.status.as_str()),
        ));
    }
    let (stage, info) = (&after.progress.current_stage, &after.progress.progress_info);
    let progressed = before.is_some_and(|b| b.progress.current_stage != *stage || b.progress.progress_info != *info);
    if progressed && !stage.is_empty() {
        let info = if info.is_empty() { String::new() } else { format!(": {info}") };
        out.push(event(
            "host_install_progress_updated",
            "info",
            format!("Host: {name}, reached installation stage {stage}{info}"),
        ));
    }
    out
}

/// The events of a cluster record's change from `before` (None: new) to `after`.
pub fn cluster_change(before: Option<&Cluster>, after: &Cluster, now: Timestamp) -> Vec<EventRow> {
    let event = |event_name: &str, message: String| EventRow {
        name: event_name.to_string(),
        cluster_id: after.id.clone(),
        host_id: String::new(),
        infra_env_id: String::new(),
        severity: "info".to_string(),
        category: CATEGORY_USER.to_string(),
        message: bounded(message),
        event_time: event_time(now),
    };
    let mut out = Vec::new();
    if before.is_none() {
        out.push(event("cluster_registration_succeeded", "Successfully registered cluster".to_string()));
    }
    if before.is_none_or(|b| b.status != after.status) {
        out.push(event("cluster_status_updated", format!("Updated status of the cluster to {}", after.status)));
    }
    out
}

/// An event as assisted's API lists it (swagger `event`): ids that do not apply are left out, as
/// its nullable fields are.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct EventView<'a> {
    pub name: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    pub cluster_id: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    pub host_id: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    pub infra_env_id: &'a str,
    pub severity: &'a str,
    pub category: &'a str,
    pub message: &'a str,
    pub event_time: &'a str,
}

impl<'a> From<&'a EventRow> for EventView<'a> {
    fn from(r: &'a EventRow) -> EventView<'a> {
        EventView {
            name: &r.name,
            cluster_id: &r.cluster_id,
            host_id: &r.host_id,
            infra_env_id: &r.infra_env_id,
            severity: &r.severity,
            category: &r.category,
            message: &r.message,
            event_time: &r.event_time,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: &str = "2025-03-04T05:06:07.089Z";

    fn host() -> Host {
        Host::new_registered("h-1", "ie-a", None, "v1", NOW.parse().unwrap())
    }

    fn names(events: &[EventRow]) -> Vec<&str> {
        events.iter().map(|e| e.name.as_str()).collect()
    }

    #[test]
    fn a_hosts_changes_are_its_events_in_assisteds_words() {
        let now: Timestamp = NOW.parse().unwrap();
        let new = host();
        let first = host_change(None, &new, true, now);
        assert_eq!(names(&first), ["host_registration_succeeded"]);
        assert_eq!(first[0].message, "Host h-1: Successfully registered");
        assert_eq!(first[0].event_time, NOW);
        assert_eq!((first[0].infra_env_id.as_str(), first[0].cluster_id.as_str()), ("ie-a", ""));

        // A status change with its info; the severity is the destination's.
        let mut insufficient = new.clone();
        insufficient.status = HostStatus::Insufficient;
        insufficient.status_info = "Host does not meet the minimum hardware requirements".into();
        insufficient.requested_hostname = "master-0".into();
        let e = host_change(Some(&new), &insufficient, false, now);
        assert_eq!(names(&e), ["host_status_updated"]);
        assert_eq!(
            e[0].message,
            format!(
                "Host master-0: updated status from {} to insufficient (Host does not meet the minimum hardware requirements)",
                new.status.as_str()
            )
        );
        assert_eq!(e[0].severity, "warning");
        let mut failed = insufficient.clone();
        failed.status = HostStatus::Error;
        failed.status_info.clear();
        let e = host_change(Some(&insufficient), &failed, false, now);
        assert_eq!(
            (e[0].severity.as_str(), e[0].message.as_str()),
            ("error", "Host master-0: updated status from insufficient to error")
        );

        // Binding, then unbinding: both in the cluster's history.
        let mut bound = new.clone();
        bound.cluster_id = Some("c-1".into());
        bound.status = HostStatus::Binding;
        let e = host_change(Some(&new), &bound, false, now);
        assert_eq!(names(&e), ["host_bind_succeeded", "host_status_updated"]);
        assert!(e.iter().all(|e| e.cluster_id == "c-1"));
        let mut left = bound.clone();
        left.cluster_id = None;
        left.status = HostStatus::Unbinding;
        let e = host_change(Some(&bound), &left, false, now);
        assert_eq!(names(&e), ["host_unbind_succeeded", "host_status_updated"]);
        assert!(e.iter().all(|e| e.cluster_id == "c-1"), "{e:?}");

        // An installation stage, and nothing for a change that is none of these.
        let mut installing = bound.clone();
        installing.progress.current_stage = "Writing image to disk".into();
        installing.progress.progress_info = "42%".into();
        let e = host_change(Some(&bound), &installing, false, now);
        assert_eq!(e[0].message, "Host: h-1, reached installation stage Writing image to disk: 42%");
        let mut touched = installing.clone();
        touched.approved = true;
        assert!(host_change(Some(&installing), &touched, false, now).is_empty());

        // A message never exceeds assisted's column, whatever the status info holds.
        let mut long = insufficient.clone();
        long.status = HostStatus::Known;
        long.status_info = "é".repeat(5000);
        assert!(host_change(Some(&insufficient), &long, false, now)[0].message.len() <= 4096);
    }

    #[test]
    fn a_clusters_registration_and_status_changes_are_its_own_events() {
        let now: Timestamp = NOW.parse().unwrap();
        let c = Cluster {
            id: "c-1".into(),
            namespace: "ns".into(),
            name: "sno".into(),
            aci_name: "sno".into(),
            openshift_version: "4.20".into(),
            cpu_architecture: "x86_64".into(),
            kind: "Cluster".into(),
            status: "insufficient".into(),
            status_info: String::new(),
            status_updated_at: now,
            install_started_at: None,
            install_completed_at: None,
        };
        let e = cluster_change(None, &c, now);
        assert_eq!(names(&e), ["cluster_registration_succeeded", "cluster_status_updated"]);
        assert!(e.iter().all(|e| e.cluster_id == "c-1" && e.host_id.is_empty() && e.infra_env_id.is_empty()));
        let mut ready = c.clone();
        ready.status = "ready".into();
        assert_eq!(cluster_change(Some(&c), &ready, now)[0].message, "Updated status of the cluster to ready");
        let mut same = ready.clone();
        same.status_info = "other".into();
        assert!(cluster_change(Some(&ready), &same, now).is_empty());
    }

    #[test]
    fn an_event_lists_with_assisteds_field_names() {
        let row = host_change(None, &host(), true, NOW.parse().unwrap()).remove(0);
        let json = serde_json::to_value(EventView::from(&row)).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "name": "host_registration_succeeded",
                "host_id": "h-1",
                "infra_env_id": "ie-a",
                "severity": "info",
                "category": "user",
                "message": "Host h-1: Successfully registered",
                "event_time": NOW,
            })
        );
    }
}
