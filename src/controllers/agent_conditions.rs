//! The Agent conditions of spec-controllers.md §2.5–spec-controllers.md §2.6 as tables from host state to (status,
//! reason, message): the strings are API (clients and the BMAC key off them).

use crate::hosts::{Host, HostStatus};
use crate::resources::Condition;

pub const SPEC_SYNCED: &str = "SpecSynced";
pub const CONNECTED: &str = "Connected";
pub const REQUIREMENTS_MET: &str = "RequirementsMet";
pub const VALIDATED: &str = "Validated";
pub const INSTALLED: &str = "Installed";
pub const BOUND: &str = "Bound";
pub const CLEANUP: &str = "Cleanup";

pub const REASON_SYNC_OK: &str = "SyncOK";
pub const MESSAGE_SYNC_OK: &str = "The Spec has been successfully applied";
pub const REASON_INPUT_ERROR: &str = "InputError";
pub const MESSAGE_SYNC_INPUT_ERROR: &str = "The Spec could not be synced due to an input error: ";
pub const REASON_BACKEND_ERROR: &str = "BackendError";
pub const MESSAGE_SYNC_BACKEND_ERROR: &str = "The Spec could not be synced due to backend error: ";
pub const REASON_NOT_AVAILABLE: &str = "NotAvailable";
pub const MESSAGE_NOT_AVAILABLE: &str = "Information not available";

const BINDING_MSG: &str = "The agent is currently binding to a cluster deployment";
const UNBINDING_MSG: &str = "The agent is currently unbinding from a cluster deployment";

fn cond(type_: &str, status: &str, reason: &str, message: String) -> Condition {
    Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message,
        last_transition_time: None,
        last_heartbeat_time: None,
        last_probe_time: None,
    }
}

/// The conditions derived from a host (all but SpecSynced, which the caller passes in).
pub fn from_host(host: &Host, approved: bool, spec_synced: Condition) -> Vec<Condition> {
    vec![spec_synced, connected(host), requirements_met(host, approved), validated(host), installed(host), bound(host)]
}

pub fn connected(host: &Host) -> Condition {
    use HostStatus::*;
    match host.status {
        Disconnected | DisconnectedUnbound => cond(
            CONNECTED,
            "False",
            "AgentIsDisconnected",
            "The agent has not contacted the installation service in some time, user action should be taken".into(),
        ),
        _ => cond(
            CONNECTED,
            "True",
            "AgentIsConnected",
            "The agent's connection to the installation service is unimpaired".into(),
        ),
    }
}

pub fn requirements_met(host: &Host, approved: bool) -> Condition {
    use HostStatus::*;
    let (status, reason, message) = match host.status {
        Known | KnownUnbound if approved => {
            ("True", "AgentIsReady", "The agent is ready to begin the installation".to_string())
        }
        Known | KnownUnbound => ("False", "AgentIsNotApproved", "The agent is not approved".into()),
        Insufficient | Disconnected | InsufficientUnbound | DisconnectedUnbound | DiscoveringUnbound | Discovering
        | PendingForInput => ("False", "AgentNotReady", "The agent is not ready to begin the installation".into()),
        PreparingForInstallation
        | PreparingSuccessful
        | Installing
        | InstallingInProgress
        | InstallingPendingUserAction => {
            ("True", "AgentAlreadyInstalling", "Installation already started and is in progress".into())
        }
        Installed | Error | AddedToExistingCluster => {
            ("True", "AgentInstallationStopped", "The agent installation stopped".into())
        }
        Binding => ("False", "Binding", BINDING_MSG.into()),
        Unbinding | UnbindingPendingUserAction => ("False", "Unbinding", UNBINDING_MSG.into()),
        other => (
            "Unknown",
            "UnknownStatus",
            format!("The installation status is currently not recognized: {}", other.as_str()),
        ),
    };
    cond(REQUIREMENTS_MET, status, reason, message)
}

/// Messages of the validations that neither passed nor are disabled, comma-joined.
fn failing_validations(host: &Host) -> String {
    let Some(info) = host.validations_info.as_deref().and_then(|v| serde_json::from_str::<serde_json::Value>(v).ok())
    else {
        return String::new();
    };
    let mut messages = Vec::new();
    if let Some(groups) = info.as_object() {
        for checks in groups.values() {
            for check in checks.as_array().into_iter().flatten() {
                let status = check["status"].as_str().unwrap_or("");
                if status != "success" && status != "disabled" {
                    messages.push(check["message"].as_str().unwrap_or("").to_string());
                }
            }
        }
    }
    messages.join(",")
}

pub fn validated(host: &Host) -> Condition {
    use HostStatus::*;
    let (status, reason, message) = match host.status {
        Binding => ("False", "Binding", BINDING_MSG.to_string()),
        Unbinding | UnbindingPendingUserAction => ("False", "Unbinding", UNBINDING_MSG.into()),
        Insufficient | InsufficientUnbound => (
            "False",
            "ValidationsFailing",
            format!("The agent's validations are failing: {}", failing_validations(host)),
        ),
        PendingForInput => (
            "False",
            "ValidationsUserPending",
            format!("The agent's validations are pending for user: {}", failing_validations(host)),
        ),
        _ if host.validations_info.as_deref().is_none_or(|v| v.is_empty()) => {
            ("Unknown", "ValidationsUnknown", "The agent's validations have not yet been calculated".into())
        }
        _ => ("True", "ValidationsPassing", "The agent's validations are passing".into()),
    };
    cond(VALIDATED, status, reason, message)
}

pub fn installed(host: &Host) -> Condition {
    use HostStatus::*;
    let info = &host.status_info;
    let (status, reason, message) = match host.status {
        Installed | AddedToExistingCluster => {
            ("True", "InstallationCompleted", format!("The installation has completed: {info}"))
        }
        Error => ("False", "InstallationFailed", format!("The installation has failed: {info}")),
        Insufficient | InsufficientUnbound | Disconnected | DisconnectedUnbound | Discovering | DiscoveringUnbound
        | Known | KnownUnbound | PendingForInput => {
            ("False", "InstallationNotStarted", "The installation has not yet started".into())
        }
        PreparingForInstallation
        | PreparingSuccessful
        | Installing
        | InstallingInProgress
        | InstallingPendingUserAction => {
            ("False", "InstallationInProgress", format!("The installation is in progress: {info}"))
        }
        Binding => ("False", "Binding", BINDING_MSG.into()),
        Unbinding | UnbindingPendingUserAction => ("False", "Unbinding", UNBINDING_MSG.into()),
        other => (
            "Unknown",
            "UnknownStatus",
            format!("The installation status is currently not recognized: {}", other.as_str()),
        ),
    };
    cond(INSTALLED, status, reason, message)
}

/// spec-controllers.md §2.6. Reclaiming hosts report Bound (their cluster_id is already cleared): kept as upstream
/// does, since clients only key off `UnbindingPendingUserAction`.
pub fn bound(host: &Host) -> Condition {
    use HostStatus::*;
    let (status, reason, message) = match host.status {
        Binding => ("False", "Binding", BINDING_MSG),
        Unbinding => ("False", "Unbinding", UNBINDING_MSG),
        UnbindingPendingUserAction => {
            let waiting = "The agent is currently unbinding; Pending host reboot from infraenv image";
            // Upstream's message, and why the host was not reclaimed where the controller decided against it.
            let message = match host.not_reclaimed.as_str() {
                "" => waiting.to_string(),
                why => format!("{waiting}; {why}"),
            };
            return cond(BOUND, "False", "UnbindingPendingUserAction", message);
        }
        DisconnectedUnbound | KnownUnbound | InsufficientUnbound | DisabledUnbound | DiscoveringUnbound => {
            ("False", "Unbound", "The agent is not bound to any cluster deployment")
        }
        _ => ("True", "Bound", "The agent is bound to a cluster deployment"),
    };
    cond(BOUND, status, reason, message.to_string())
}

#[cfg(test)]
mod tests {
    //! spec-controllers.md §10 scenarios 18–24.
    use super::*;

    fn host(status: HostStatus) -> Host {
        let mut h = Host::new_registered("h", "ie", None, "", "2026-01-01T00:00:00Z".parse().unwrap());
        h.status = status;
        h
    }

    fn synced() -> Condition {
        cond(SPEC_SYNCED, "True", REASON_SYNC_OK, MESSAGE_SYNC_OK.into())
    }

    fn get<'a>(cs: &'a [Condition], t: &str) -> (&'a str, &'a str) {
        let c = cs.iter().find(|c| c.type_ == t).unwrap();
        (c.status.as_str(), c.reason.as_str())
    }

    #[test]
    fn scenario_18_insufficient_unbound() {
        let mut h = host(HostStatus::InsufficientUnbound);
        h.validations_info = Some(r#"{"hardware":[{"id":"has-min-cpu-cores","status":"failure","message":"too few cores"},{"id":"x","status":"success","message":"ok"}]}"#.into());
        let cs = from_host(&h, false, synced());
        assert_eq!(get(&cs, BOUND), ("False", "Unbound"));
        assert_eq!(get(&cs, REQUIREMENTS_MET), ("False", "AgentNotReady"));
        assert_eq!(get(&cs, VALIDATED), ("False", "ValidationsFailing"));
        assert_eq!(get(&cs, INSTALLED), ("False", "InstallationNotStarted"));
        let v = cs.iter().find(|c| c.type_ == VALIDATED).unwrap();
        assert_eq!(v.message, "The agent's validations are failing: too few cores");
    }

    #[test]
    fn scenario_19_known_unbound_approved_or_not() {
        let cs = from_host(&host(HostStatus::KnownUnbound), true, synced());
        assert_eq!(get(&cs, REQUIREMENTS_MET), ("True", "AgentIsReady"));
        assert_eq!(get(&cs, BOUND), ("False", "Unbound"));
        let cs = from_host(&host(HostStatus::KnownUnbound), false, synced());
        assert_eq!(get(&cs, REQUIREMENTS_MET), ("False", "AgentIsNotApproved"));
    }

    #[test]
    fn scenario_20_binding() {
        let cs = from_host(&host(HostStatus::Binding), true, synced());
        for t in [REQUIREMENTS_MET, VALIDATED, INSTALLED, BOUND] {
            assert_eq!(get(&cs, t), ("False", "Binding"), "{t}");
        }
        assert_eq!(get(&cs, CONNECTED), ("True", "AgentIsConnected"));
    }

    #[test]
    fn scenario_21_unbinding() {
        let cs = from_host(&host(HostStatus::Unbinding), true, synced());
        for t in [REQUIREMENTS_MET, VALIDATED, INSTALLED, BOUND] {
            assert_eq!(get(&cs, t), ("False", "Unbinding"), "{t}");
        }
    }

    #[test]
    fn scenario_22_unbinding_pending_user_action() {
        let cs = from_host(&host(HostStatus::UnbindingPendingUserAction), true, synced());
        assert_eq!(get(&cs, BOUND), ("False", "UnbindingPendingUserAction"));
        let b = cs.iter().find(|c| c.type_ == BOUND).unwrap();
        assert_eq!(b.message, "The agent is currently unbinding; Pending host reboot from infraenv image");
        for t in [REQUIREMENTS_MET, VALIDATED, INSTALLED] {
            assert_eq!(get(&cs, t), ("False", "Unbinding"), "{t}");
        }
    }

    #[test]
    fn scenario_23_disconnected_unbound() {
        let cs = from_host(&host(HostStatus::DisconnectedUnbound), true, synced());
        assert_eq!(get(&cs, CONNECTED), ("False", "AgentIsDisconnected"));
        assert_eq!(get(&cs, BOUND), ("False", "Unbound"));
    }

    #[test]
    fn scenario_24_installed_and_added() {
        for s in [HostStatus::Installed, HostStatus::AddedToExistingCluster] {
            let mut h = host(s);
            h.cluster_id = Some("c".into());
            h.status_info = "Done".into();
            let cs = from_host(&h, true, synced());
            assert_eq!(get(&cs, INSTALLED), ("True", "InstallationCompleted"));
            assert_eq!(
                cs.iter().find(|c| c.type_ == INSTALLED).unwrap().message,
                "The installation has completed: Done"
            );
            assert_eq!(get(&cs, REQUIREMENTS_MET), ("True", "AgentInstallationStopped"));
            assert_eq!(get(&cs, BOUND), ("True", "Bound"));
        }
    }
}
