//! The six conditions of an AgentClusterInstall (assisted-service's `clusterdeployments_controller.go`:
//! `clusterSpecSynced`, `clusterRequirementsMet`, `clusterValidated`, `clusterCompleted`,
//! `clusterFailed`, `clusterStopped`, `setClusterConditionsUnknown`), as tables over the cluster
//! record's state. Types, reasons and messages are API (`agentclusterinstall_types.go`): Hive reads
//! `Completed`, `Failed` and `Stopped`, users and tools read the rest.

use crate::resources::Condition;

pub const SPEC_SYNCED: &str = "SpecSynced";
pub const REQUIREMENTS_MET: &str = "RequirementsMet";
pub const VALIDATED: &str = "Validated";
pub const COMPLETED: &str = "Completed";
pub const FAILED: &str = "Failed";
pub const STOPPED: &str = "Stopped";

pub const REASON_SYNC_OK: &str = "SyncOK";
pub const REASON_BACKEND_ERROR: &str = "BackendError";
pub const REASON_INPUT_ERROR: &str = "InputError";
pub const MESSAGE_BACKEND_ERROR: &str = "The Spec could not be synced due to backend error:";
pub const MESSAGE_INPUT_ERROR: &str = "The Spec could not be synced due to an input error:";

pub const REASON_NOT_AVAILABLE: &str = "NotAvailable";
pub const MESSAGE_NOT_AVAILABLE: &str = "Information not available";

pub const REASON_UNKNOWN_STATUS: &str = "UnknownStatus";
pub const MESSAGE_UNKNOWN_STATUS: &str = "The installation status is currently not recognized:";

/// The role counts of a cluster's hosts: what the AgentClusterInstall asks for, or what the hosts
/// would be given.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RoleCounts {
    pub masters: usize,
    pub arbiters: usize,
    pub workers: usize,
}

/// What the conditions are computed from besides the cluster's state.
#[derive(Clone, Debug, Default)]
pub struct ClusterFacts {
    pub status: String,
    pub status_info: String,
    /// `spec.holdInstallation`.
    pub hold: bool,
    /// The messages of the cluster's failing validations; None while it has none computed.
    pub validation_failures: Option<Vec<String>>,
    /// Host counts by role the AgentClusterInstall asks for.
    pub expected: RoleCounts,
    /// Host counts by the role each host would get (`ready` only).
    pub planned: RoleCounts,
    /// Hosts that are known and approved (`ready` only).
    pub approved_ready_hosts: usize,
    /// Agents of the cluster whose spec could not be synced (`ready` only).
    pub unsynced_agents: usize,
}

/// Whether the AgentClusterInstall's spec reached the cluster record.
#[derive(Clone, Copy, Debug)]
pub enum SpecSync<'a> {
    Ok,
    /// The user's to fix.
    Input(&'a str),
    /// Ours: retried.
    Backend(&'a str),
}

fn condition(type_: &str, status: &str, reason: &str, message: impl Into<String>) -> Condition {
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time: None,
        last_heartbeat_time: None,
        last_probe_time: None,
    }
}

/// The conditions, in the order assisted-service first sets them. Without `facts` (the spec could
/// not be synced, so there is no cluster record to speak of) the five others are Unknown.
pub fn conditions(sync: SpecSync<'_>, facts: Option<&ClusterFacts>) -> Vec<Condition> {
    let synced = match sync {
        // assisted-service gives the reason as the message here, and clients may match it.
        SpecSync::Ok => condition(SPEC_SYNCED, "True", REASON_SYNC_OK, REASON_SYNC_OK),
        SpecSync::Input(e) => condition(SPEC_SYNCED, "False", REASON_INPUT_ERROR, format!("{MESSAGE_INPUT_ERROR} {e}")),
        SpecSync::Backend(e) => {
            condition(SPEC_SYNCED, "False", REASON_BACKEND_ERROR, format!("{MESSAGE_BACKEND_ERROR} {e}"))
        }
    };
    let Some(f) = facts else {
        let unknown = |type_| condition(type_, "Unknown", REASON_NOT_AVAILABLE, MESSAGE_NOT_AVAILABLE);
        return vec![
            synced,
            unknown(VALIDATED),
            unknown(REQUIREMENTS_MET),
            unknown(COMPLETED),
            unknown(FAILED),
            unknown(STOPPED),
        ];
    };
    vec![synced, requirements_met(f), validated(f), completed(f), failed(f), stopped(f)]
}

fn unknown_status(type_: &str, status: &str) -> Condition {
    condition(type_, "Unknown", REASON_UNKNOWN_STATUS, format!("{MESSAGE_UNKNOWN_STATUS} {status}"))
}

fn requirements_met(f: &ClusterFacts) -> Condition {
    let c = |status, reason, message: String| condition(REQUIREMENTS_MET, status, reason, message);
    match f.status.as_str() {
        "ready" => {
            let (e, p) = (f.expected, f.planned);
            let expected_hosts = e.masters + e.arbiters + e.workers;
            if p != e {
                c(
                    "False",
                    "InsufficientAgents",
                    format!(
                        "The cluster currently requires exactly {} master agents, {} arbiter agents and {} worker agents, but currently registered {} master agents, {} arbiter agents and {} worker agents",
                        e.masters, e.arbiters, e.workers, p.masters, p.arbiters, p.workers
                    ),
                )
            } else if f.unsynced_agents != 0 {
                c(
                    "False",
                    "UnsyncedAgents",
                    format!("The cluster currently has {} agents with spec error", f.unsynced_agents),
                )
            } else if f.approved_ready_hosts < expected_hosts {
                c(
                    "False",
                    "UnapprovedAgents",
                    format!(
                        "The installation is pending on the approval of {} agents",
                        expected_hosts - f.approved_ready_hosts
                    ),
                )
            } else {
                c("True", "ClusterIsReady", "The cluster is ready to begin the installation".into())
            }
        }
        "insufficient" | "pending-for-input" => {
            c("False", "ClusterNotReady", "The cluster is not ready to begin the installation".into())
        }
        "preparing-for-installation"
        | "installing"
        | "installing-pending-user-action"
        | "adding-hosts"
        | "finalizing" => c("True", "ClusterAlreadyInstalling", "The cluster requirements are met".into()),
        "installed" | "error" => c("True", "ClusterInstallationStopped", "The cluster installation stopped".into()),
        other => unknown_status(REQUIREMENTS_MET, other),
    }
}

fn validated(f: &ClusterFacts) -> Condition {
    let c = |status, reason, message: String| condition(VALIDATED, status, reason, message);
    let failures = || f.validation_failures.clone().unwrap_or_default().join(",");
    match f.status.as_str() {
        "insufficient" => {
            c("False", "ValidationsFailing", format!("The cluster's validations are failing: {}", failures()))
        }
        "pending-for-input" => c(
            "False",
            "ValidationsUserPending",
            format!("The cluster's validations are pending for user: {}", failures()),
        ),
        "adding-hosts" => c("True", "ValidationsPassing", "The cluster's validations are passing".into()),
        _ if f.validation_failures.is_none() => {
            c("Unknown", "ValidationsUnknown", "The cluster's validations have not yet been calculated".into())
        }
        _ => c("True", "ValidationsPassing", "The cluster's validations are passing".into()),
    }
}

fn completed(f: &ClusterFacts) -> Condition {
    let c = |status, reason, message: String| condition(COMPLETED, status, reason, message);
    let info = &f.status_info;
    match f.status.as_str() {
        "installed" | "adding-hosts" => {
            c("True", "InstallationCompleted", format!("The installation has completed: {info}"))
        }
        "error" => c("False", "InstallationFailed", format!("The installation has failed: {info}")),
        "ready" if f.hold => c(
            "False",
            "InstallationOnHold",
            "The installation is on hold. To unhold set holdInstallation to false".into(),
        ),
        "ready" | "insufficient" | "pending-for-input" => {
            c("False", "InstallationNotStarted", "The installation has not yet started".into())
        }
        "preparing-for-installation" | "installing" | "finalizing" | "installing-pending-user-action" => {
            c("False", "InstallationInProgress", format!("The installation is in progress: {info}"))
        }
        other => unknown_status(COMPLETED, other),
    }
}

fn failed(f: &ClusterFacts) -> Condition {
    match f.status.as_str() {
        "error" => {
            condition(FAILED, "True", "InstallationFailed", format!("The installation failed: {}", f.status_info))
        }
        _ => condition(FAILED, "False", "InstallationNotFailed", "The installation has not failed"),
    }
}

fn stopped(f: &ClusterFacts) -> Condition {
    let c = |status, reason, message: &str| condition(STOPPED, status, reason, message);
    match f.status.as_str() {
        "error" => c("True", "InstallationFailed", "The installation has stopped due to error"),
        "cancelled" => c("True", "InstallationCancelled", "The installation has stopped because it was cancelled"),
        "installed" | "adding-hosts" => {
            c("True", "InstallationCompleted", "The installation has stopped because it completed successfully")
        }
        _ => c("False", "InstallationNotStopped", "The installation is waiting to start or in progress"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(status: &str, info: &str) -> ClusterFacts {
        ClusterFacts {
            status: status.into(),
            status_info: info.into(),
            validation_failures: Some(vec![]),
            expected: RoleCounts { masters: 3, ..Default::default() },
            planned: RoleCounts { masters: 3, ..Default::default() },
            approved_ready_hosts: 3,
            ..Default::default()
        }
    }

    /// A condition as (type, status, reason, message).
    type Row = (String, String, String, String);

    fn table(sync: SpecSync<'_>, f: Option<&ClusterFacts>) -> Vec<Row> {
        conditions(sync, f).into_iter().map(|c| (c.type_, c.status, c.reason, c.message)).collect()
    }

    fn row(t: &str, s: &str, r: &str, m: &str) -> Row {
        (t.into(), s.into(), r.into(), m.into())
    }

    /// Every cluster state of the installation, with assisted-service's words for each condition.
    #[test]
    fn each_cluster_state_has_assisted_services_six_conditions() {
        let not_failed = row(FAILED, "False", "InstallationNotFailed", "The installation has not failed");
        let not_stopped =
            row(STOPPED, "False", "InstallationNotStopped", "The installation is waiting to start or in progress");
        let passing = row(VALIDATED, "True", "ValidationsPassing", "The cluster's validations are passing");
        let synced = row(SPEC_SYNCED, "True", "SyncOK", "SyncOK");
        let in_progress = |info: &str| {
            row(COMPLETED, "False", "InstallationInProgress", &format!("The installation is in progress: {info}"))
        };
        let installing = row(REQUIREMENTS_MET, "True", "ClusterAlreadyInstalling", "The cluster requirements are met");
        let cases: Vec<(ClusterFacts, Vec<Row>)> = vec![
            (
                ClusterFacts {
                    validation_failures: Some(vec!["a".into(), "b".into()]),
                    ..facts("insufficient", "Cluster is not ready for install")
                },
                vec![
                    synced.clone(),
                    row(
                        REQUIREMENTS_MET,
                        "False",
                        "ClusterNotReady",
                        "The cluster is not ready to begin the installation",
                    ),
                    row(VALIDATED, "False", "ValidationsFailing", "The cluster's validations are failing: a,b"),
                    row(COMPLETED, "False", "InstallationNotStarted", "The installation has not yet started"),
                    not_failed.clone(),
                    not_stopped.clone(),
                ],
            ),
            (
                facts("ready", "Cluster ready to be installed"),
                vec![
                    synced.clone(),
                    row(REQUIREMENTS_MET, "True", "ClusterIsReady", "The cluster is ready to begin the installation"),
                    passing.clone(),
                    row(COMPLETED, "False", "InstallationNotStarted", "The installation has not yet started"),
                    not_failed.clone(),
                    not_stopped.clone(),
                ],
            ),
            (
                ClusterFacts { hold: true, ..facts("ready", "Cluster ready to be installed") },
                vec![
                    synced.clone(),
                    row(REQUIREMENTS_MET, "True", "ClusterIsReady", "The cluster is ready to begin the installation"),
                    passing.clone(),
                    row(
                        COMPLETED,
                        "False",
                        "InstallationOnHold",
                        "The installation is on hold. To unhold set holdInstallation to false",
                    ),
                    not_failed.clone(),
                    not_stopped.clone(),
                ],
            ),
            (
                facts("preparing-for-installation", "Preparing cluster for installation"),
                vec![
                    synced.clone(),
                    installing.clone(),
                    passing.clone(),
                    in_progress("Preparing cluster for installation"),
                    not_failed.clone(),
                    not_stopped.clone(),
                ],
            ),
            (
                facts("installing", "Installation in progress"),
                vec![
                    synced.clone(),
                    installing.clone(),
                    passing.clone(),
                    in_progress("Installation in progress"),
                    not_failed.clone(),
                    not_stopped.clone(),
                ],
            ),
            (
                facts("finalizing", "Finalizing cluster installation"),
                vec![
                    synced.clone(),
                    installing.clone(),
                    passing.clone(),
                    in_progress("Finalizing cluster installation"),
                    not_failed.clone(),
                    not_stopped.clone(),
                ],
            ),
            (
                facts("installed", "Cluster is installed"),
                vec![
                    synced.clone(),
                    row(REQUIREMENTS_MET, "True", "ClusterInstallationStopped", "The cluster installation stopped"),
                    passing.clone(),
                    row(
                        COMPLETED,
                        "True",
                        "InstallationCompleted",
                        "The installation has completed: Cluster is installed",
                    ),
                    not_failed.clone(),
                    row(
                        STOPPED,
                        "True",
                        "InstallationCompleted",
                        "The installation has stopped because it completed successfully",
                    ),
                ],
            ),
            (
                facts("error", "cluster has hosts in error"),
                vec![
                    synced.clone(),
                    row(REQUIREMENTS_MET, "True", "ClusterInstallationStopped", "The cluster installation stopped"),
                    passing.clone(),
                    row(
                        COMPLETED,
                        "False",
                        "InstallationFailed",
                        "The installation has failed: cluster has hosts in error",
                    ),
                    row(FAILED, "True", "InstallationFailed", "The installation failed: cluster has hosts in error"),
                    row(STOPPED, "True", "InstallationFailed", "The installation has stopped due to error"),
                ],
            ),
            (
                facts("cancelled", "Canceled cluster installation"),
                vec![
                    synced.clone(),
                    row(
                        REQUIREMENTS_MET,
                        "Unknown",
                        "UnknownStatus",
                        "The installation status is currently not recognized: cancelled",
                    ),
                    passing.clone(),
                    row(
                        COMPLETED,
                        "Unknown",
                        "UnknownStatus",
                        "The installation status is currently not recognized: cancelled",
                    ),
                    not_failed.clone(),
                    row(
                        STOPPED,
                        "True",
                        "InstallationCancelled",
                        "The installation has stopped because it was cancelled",
                    ),
                ],
            ),
            (
                facts("adding-hosts", "cluster is adding hosts to existing OCP cluster"),
                vec![
                    synced.clone(),
                    installing.clone(),
                    passing.clone(),
                    row(
                        COMPLETED,
                        "True",
                        "InstallationCompleted",
                        "The installation has completed: cluster is adding hosts to existing OCP cluster",
                    ),
                    not_failed.clone(),
                    row(
                        STOPPED,
                        "True",
                        "InstallationCompleted",
                        "The installation has stopped because it completed successfully",
                    ),
                ],
            ),
        ];
        for (f, want) in cases {
            assert_eq!(table(SpecSync::Ok, Some(&f)), want, "cluster {}", f.status);
        }
    }

    /// A ready cluster is ready only with the hosts it asks for, each synced and approved.
    #[test]
    fn a_ready_cluster_names_what_it_still_waits_for() {
        let req = |f: &ClusterFacts| {
            let c = conditions(SpecSync::Ok, Some(f)).into_iter().find(|c| c.type_ == REQUIREMENTS_MET).unwrap();
            (c.status, c.reason, c.message)
        };
        let f = ClusterFacts { planned: RoleCounts { masters: 2, workers: 1, arbiters: 0 }, ..facts("ready", "") };
        assert_eq!(
            req(&f),
            (
                "False".into(),
                "InsufficientAgents".into(),
                "The cluster currently requires exactly 3 master agents, 0 arbiter agents and 0 worker agents, but currently registered 2 master agents, 0 arbiter agents and 1 worker agents".into()
            )
        );
        let f = ClusterFacts { unsynced_agents: 1, ..facts("ready", "") };
        assert_eq!(
            req(&f),
            ("False".into(), "UnsyncedAgents".into(), "The cluster currently has 1 agents with spec error".into())
        );
        let f = ClusterFacts { approved_ready_hosts: 1, ..facts("ready", "") };
        assert_eq!(
            req(&f),
            (
                "False".into(),
                "UnapprovedAgents".into(),
                "The installation is pending on the approval of 2 agents".into()
            )
        );
    }

    /// A spec that cannot be synced: SpecSynced says why, the rest is not available; validations
    /// never computed are Unknown.
    #[test]
    fn an_unsynced_spec_leaves_the_other_conditions_unknown() {
        let got = table(SpecSync::Backend("ClusterImageSet x not found"), None);
        assert_eq!(
            got[0],
            row(
                SPEC_SYNCED,
                "False",
                "BackendError",
                "The Spec could not be synced due to backend error: ClusterImageSet x not found"
            )
        );
        let types: Vec<&str> = got[1..].iter().map(|c| c.0.as_str()).collect();
        assert_eq!(types, [VALIDATED, REQUIREMENTS_MET, COMPLETED, FAILED, STOPPED]);
        assert!(
            got[1..].iter().all(|c| (c.1.as_str(), c.2.as_str(), c.3.as_str())
                == ("Unknown", "NotAvailable", "Information not available"))
        );
        let got = table(SpecSync::Input("bad"), None);
        assert_eq!(got[0].3, "The Spec could not be synced due to an input error: bad");
        let f = ClusterFacts { validation_failures: None, ..facts("installing", "") };
        let v = conditions(SpecSync::Ok, Some(&f)).into_iter().find(|c| c.type_ == VALIDATED).unwrap();
        assert_eq!((v.status.as_str(), v.reason.as_str()), ("Unknown", "ValidationsUnknown"));
    }
}
