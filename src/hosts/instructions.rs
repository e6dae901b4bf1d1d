//! The steps an agent is told to run next (spec-controllers.md §1.4), serialised as the swagger `steps`
//! model. Unbound hosts use the pool table; bound hosts the install (day 1) or add-hosts (day 2) table.

use serde::Serialize;
use serde_json::json;

use super::{Host, HostKind, HostStatus};

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Steps {
    pub next_instruction_seconds: i64,
    pub post_step_action: &'static str,
    pub instructions: Vec<Step>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Step {
    pub step_type: &'static str,
    pub step_id: String,
    pub args: Vec<String>,
}

/// The discovery artifacts a reclaimed node downloads.
#[derive(Clone, Debug, PartialEq)]
pub struct BootArtifactUrls {
    pub kernel_url: String,
    pub initrd_url: String,
    pub rootfs_url: String,
}

/// Where the reclaim agent mounts the node's root file system (assisted's hostFSMountDir).
pub const HOST_FS_MOUNT_DIR: &str = "/host";

fn step(step_type: &'static str, args: Vec<String>) -> Step {
    let id = uuid::Uuid::new_v4().simple().to_string();
    Step { step_type, step_id: format!("{step_type}-{}", &id[..8]), args }
}

fn steps(seconds: i64, action: &'static str, instructions: Vec<Step>) -> Steps {
    Steps { next_instruction_seconds: seconds, post_step_action: action, instructions }
}

/// The next steps of `host`. `urls` must be given for a host in `reclaiming`;
/// `openshift_version` is the version of the host's cluster, for the install step.
pub fn next_steps(host: &Host, urls: Option<&BootArtifactUrls>, openshift_version: Option<&str>) -> Steps {
    use HostStatus::*;
    let noop_exit = || steps(0, "exit", vec![]);
    match host.status {
        // Pool table (and the transient states both tables share).
        Binding | Unbinding | UnbindingPendingUserAction => noop_exit(),
        Reclaiming => match urls {
            Some(u) => steps(
                60,
                "continue",
                vec![step(
                    "download-boot-artifacts",
                    vec![
                        json!({"kernel_url": u.kernel_url, "initrd_url": u.initrd_url, "rootfs_url": u.rootfs_url,
                               "host_fs_mount_dir": HOST_FS_MOUNT_DIR})
                        .to_string(),
                    ],
                )],
            ),
            None => steps(60, "continue", vec![]),
        },
        ReclaimingRebooting => steps(
            120,
            "exit",
            vec![step("reboot-for-reclaim", vec![json!({"host_fs_mount_dir": HOST_FS_MOUNT_DIR}).to_string()])],
        ),
        DiscoveringUnbound | InsufficientUnbound | KnownUnbound => {
            steps(60, "continue", vec![step("inventory", vec![]), step("ntp-synchronizer", vec![])])
        }
        DisconnectedUnbound => steps(120, "continue", vec![step("inventory", vec![])]),
        DisabledUnbound => steps(120, "continue", vec![]),
        // Install / add-hosts tables.
        Discovering | Known | Insufficient | PendingForInput => {
            steps(60, "continue", vec![step("inventory", vec![]), step("ntp-synchronizer", vec![])])
        }
        Disconnected => steps(120, "continue", vec![step("inventory", vec![])]),
        PreparingForInstallation | PreparingSuccessful => steps(10, "continue", vec![]),
        Installing => steps(60, "continue", vec![install_step(host, openshift_version.unwrap_or(""))]),
        _ => steps(60, "continue", vec![]),
    }
}

/// `seconds` moved by a random amount of at most `fraction` of it either way (rounded to whole
/// seconds; `fraction` is taken within 0..=0.5).
///
/// Agents sleep exactly the interval they are given, so agents that polled together keep polling
/// together: a fleet booted in the same minute, or held up together by a slow moment of the server,
/// comes back as one burst every interval, and each burst makes the next moment slow. A random
/// interval around the same mean spreads them apart again within a few polls, at no cost to any
/// single agent.
pub fn jittered(seconds: i64, fraction: f64) -> i64 {
    let fraction = fraction.clamp(0.0, 0.5);
    if seconds <= 0 || fraction == 0.0 {
        return seconds;
    }
    let spread = seconds as f64 * fraction;
    (seconds as f64 + spread * (2.0 * fastrand::f64() - 1.0)).round().max(1.0) as i64
}

/// The `install` step: what the installer on the host needs to know.
fn install_step(host: &Host, openshift_version: &str) -> Step {
    let role =
        if host.role == "auto-assign" && !host.suggested_role.is_empty() { &host.suggested_role } else { &host.role };
    let disk = if !host.installation_disk_path.is_empty() {
        host.installation_disk_path.clone()
    } else {
        host.parsed_inventory()
            .and_then(|inv| {
                inv.disks
                    .iter()
                    .find(|d| d.installation_eligibility.as_ref().is_none_or(|e| e.eligible))
                    .map(|d| if d.by_path.is_empty() { d.path.clone() } else { d.by_path.clone() })
            })
            .unwrap_or_default()
    };
    let mut args = json!({
        "cluster_id": host.cluster_id,
        "infra_env_id": host.infra_env_id,
        "host_id": host.id,
        "role": if host.bootstrap { "bootstrap" } else { role.as_str() },
        "boot_device": disk,
        "openshift_version": openshift_version,
        "high_availability_mode": "",
        "installer_args": host.installer_args,
        "day2": host.kind == HostKind::AddToExistingClusterHost,
    });
    // What the installer needs to fetch and complete the host's Ignition: the Agent's
    // `ignitionConfigOverrides` (merged into it), and the token and headers the machine config
    // server wants (Agent `ignitionEndpointTokenReference`, `ignitionEndpointHTTPHeaders`), which
    // assisted-service puts in the host's pointer Ignition as an `Authorization: Bearer` header.
    // Each only when set: the step of a host without them is as before.
    if !host.ignition_config_overrides.is_empty() {
        args["ignition_config_overrides"] = json!(host.ignition_config_overrides);
    }
    let mut headers: Vec<serde_json::Value> =
        serde_json::from_str(&host.ignition_endpoint_http_headers).unwrap_or_default();
    if !host.ignition_endpoint_token.is_empty() {
        args["ignition_endpoint_token"] = json!(host.ignition_endpoint_token);
        headers.push(json!({"key": "Authorization", "value": format!("Bearer {}", host.ignition_endpoint_token)}));
    }
    if !headers.is_empty() {
        args["ignition_endpoint_http_headers"] = json!(headers);
    }
    step("install", vec![args.to_string()])
}
