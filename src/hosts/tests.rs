//! The host state machine scenarios of spec-controllers.md §10 (1–17), named after them.

use jiff::{SignedDuration, Timestamp};

use super::instructions::{BootArtifactUrls, next_steps};
use super::machine::{Context, Event, INFO_BINDING, INFO_RECLAIM_REBOOTING, INFO_UNBINDING, fire, fire_new};
use super::*;

fn t0() -> Timestamp {
    "2026-01-01T00:00:00Z".parse().unwrap()
}

fn ctx() -> Context {
    Context::new(t0())
}

fn good_inventory() -> String {
    serde_json::json!({
        "hostname": "node-1",
        "cpu": {"count": 4, "architecture": "x86_64"},
        "memory": {"physical_bytes": 17179869184u64},
        "disks": [{"path": "/dev/sda", "drive_type": "SSD", "size_bytes": 128849018880u64,
                   "installation_eligibility": {"eligible": true}}]
    })
    .to_string()
}

fn host(status: HostStatus, cluster: Option<&str>) -> Host {
    let mut h = Host::new_registered("h1", "ie1", cluster.map(str::to_string), "v1", t0());
    h.status = status;
    h.checked_in_at = Some(t0());
    h.role = "master".into();
    h.inventory = Some(good_inventory().into());
    h
}

const BOUND_PRE_INSTALL: [HostStatus; 5] = [
    HostStatus::Known,
    HostStatus::Discovering,
    HostStatus::Disconnected,
    HostStatus::Insufficient,
    HostStatus::PendingForInput,
];
const UNBOUND: [HostStatus; 5] = [
    HostStatus::DiscoveringUnbound,
    HostStatus::InsufficientUnbound,
    HostStatus::KnownUnbound,
    HostStatus::DisconnectedUnbound,
    HostStatus::DisabledUnbound,
];

#[test]
fn scenario_01_bind_known_unbound_host() {
    let mut h = host(HostStatus::KnownUnbound, None);
    fire(&mut h, &Event::BindHost { cluster_id: "c1".into() }, &ctx()).unwrap();
    assert_eq!(h.status, HostStatus::Binding);
    assert_eq!(h.cluster_id.as_deref(), Some("c1"));
    assert_eq!(h.status_info, INFO_BINDING);
    assert_eq!(h.inventory, None, "PostBindHost resets the inventory");
}

#[test]
fn scenario_02_bind_from_any_other_state_fails_and_changes_nothing() {
    for &s in HostStatus::ALL.iter().filter(|s| **s != HostStatus::KnownUnbound) {
        let mut h = host(s, None);
        let before = h.clone();
        assert!(fire(&mut h, &Event::BindHost { cluster_id: "c1".into() }, &ctx()).is_err(), "{s}");
        assert_eq!(h, before, "{s}");
    }
}

#[test]
fn scenario_03_unbind_before_installation_goes_to_unbinding() {
    for reclaim in [false, true] {
        for s in BOUND_PRE_INSTALL {
            let mut h = host(s, Some("c1"));
            h.kind = HostKind::AddToExistingClusterHost;
            let ev = if reclaim { Event::ReclaimHost } else { Event::UnbindHost };
            fire(&mut h, &ev, &ctx()).unwrap();
            assert_eq!(h.status, HostStatus::Unbinding, "{s} reclaim={reclaim}");
            assert_eq!(h.cluster_id, None);
            assert_eq!(h.role, "auto-assign");
            assert_eq!(h.kind, HostKind::Host);
            assert_eq!(h.status_info, INFO_UNBINDING);
        }
    }
}

#[test]
fn scenario_04_unbind_error_or_cancelled_waits_for_the_user() {
    for ev in [Event::UnbindHost, Event::ReclaimHost] {
        for s in [HostStatus::Error, HostStatus::Cancelled] {
            let mut h = host(s, Some("c1"));
            fire(&mut h, &ev, &ctx()).unwrap();
            assert_eq!(h.status, HostStatus::UnbindingPendingUserAction, "{s} {ev:?}");
            assert_eq!(h.cluster_id, None);
        }
    }
}

#[test]
fn scenario_05_unbind_installing_or_installed_waits_for_the_user() {
    for s in [
        HostStatus::Installing,
        HostStatus::InstallingInProgress,
        HostStatus::Installed,
        HostStatus::AddedToExistingCluster,
    ] {
        let mut h = host(s, Some("c1"));
        h.validations_info = Some("{}".into());
        fire(&mut h, &Event::UnbindHost, &ctx()).unwrap();
        assert_eq!(h.status, HostStatus::UnbindingPendingUserAction, "{s}");
        assert_eq!(h.validations_info.as_deref(), Some("{}"), "validations are kept");
    }
}

#[test]
fn scenario_06_reclaim_installed_host() {
    for s in [HostStatus::Installed, HostStatus::AddedToExistingCluster] {
        let mut h = host(s, Some("c1"));
        fire(&mut h, &Event::ReclaimHost, &ctx()).unwrap();
        assert_eq!(h.status, HostStatus::Reclaiming);
        assert_eq!(h.cluster_id, None);
    }
}

#[test]
fn scenario_07_reclaim_during_installation_is_refused() {
    let mut h = host(HostStatus::Installing, Some("c1"));
    assert!(fire(&mut h, &Event::ReclaimHost, &ctx()).is_err());
    assert_eq!(h.status, HostStatus::Installing);
    assert_eq!(h.cluster_id.as_deref(), Some("c1"));
}

#[test]
fn scenario_08_unbind_unbound_or_resetting_host_fails() {
    for s in
        UNBOUND.into_iter().chain([HostStatus::Resetting, HostStatus::ResettingPendingUserAction, HostStatus::Binding])
    {
        let mut h = host(s, None);
        assert!(fire(&mut h, &Event::UnbindHost, &ctx()).is_err(), "{s}");
        assert_eq!(h.status, s);
    }
}

#[test]
fn scenario_09_reclaim_download_succeeds() {
    let mut h = host(HostStatus::Reclaiming, None);
    fire(&mut h, &Event::RebootingForReclaim, &ctx()).unwrap();
    assert_eq!(h.status, HostStatus::ReclaimingRebooting);
    assert_eq!(h.status_info, INFO_RECLAIM_REBOOTING);
}

#[test]
fn scenario_10_reclaim_download_fails() {
    for s in [HostStatus::Reclaiming, HostStatus::ReclaimingRebooting] {
        let mut h = host(s, None);
        fire(&mut h, &Event::ReclaimHostFailed, &ctx()).unwrap();
        assert_eq!(h.status, HostStatus::UnbindingPendingUserAction);
    }
}

#[test]
fn scenario_11_reclaim_times_out_after_60_minutes() {
    for s in [HostStatus::Reclaiming, HostStatus::ReclaimingRebooting] {
        let mut h = host(s, None);
        let mut c = ctx();
        c.now = t0() + SignedDuration::from_mins(59);
        h.checked_in_at = Some(c.now);
        fire(&mut h, &Event::RefreshHost, &c).unwrap();
        assert_eq!(h.status, s, "not yet");
        c.now = t0() + SignedDuration::from_mins(70);
        fire(&mut h, &Event::RefreshHost, &c).unwrap();
        assert_eq!(h.status, HostStatus::UnbindingPendingUserAction);
    }
}

#[test]
fn scenario_12_registration_returns_hosts_to_the_pool() {
    let mut new = Host::new_registered("h1", "ie1", None, "v2", t0());
    fire_new(&mut new, &Event::RegisterHost { agent_version: "v2".into() }, &ctx()).unwrap();
    assert_eq!(new.status, HostStatus::DiscoveringUnbound);
    for s in [
        HostStatus::Unbinding,
        HostStatus::UnbindingPendingUserAction,
        HostStatus::ReclaimingRebooting,
        HostStatus::DiscoveringUnbound,
        HostStatus::InsufficientUnbound,
        HostStatus::KnownUnbound,
        HostStatus::DisconnectedUnbound,
    ] {
        let mut h = host(s, None);
        fire(&mut h, &Event::RegisterHost { agent_version: "v2".into() }, &ctx()).unwrap();
        assert_eq!(h.status, HostStatus::DiscoveringUnbound, "{s}");
        assert_eq!(h.inventory, None);
        assert_eq!(h.discovery_agent_version, "v2");
    }
    let mut h = host(HostStatus::Binding, Some("c1"));
    fire(&mut h, &Event::RegisterHost { agent_version: "v2".into() }, &ctx()).unwrap();
    assert_eq!(h.status, HostStatus::Discovering);
    // A reclaiming host cannot register (its runner is not an agent).
    let mut h = host(HostStatus::Reclaiming, None);
    assert!(fire(&mut h, &Event::RegisterHost { agent_version: "v2".into() }, &ctx()).is_err());
}

#[test]
fn scenario_13_silent_pool_hosts_disconnect_after_3_minutes() {
    for s in [HostStatus::DiscoveringUnbound, HostStatus::InsufficientUnbound] {
        let mut h = host(s, None);
        let mut c = ctx();
        c.now = t0() + SignedDuration::from_secs(179);
        fire(&mut h, &Event::RefreshHost, &c).unwrap();
        assert_ne!(h.status, HostStatus::DisconnectedUnbound, "{s} at 2:59");
        c.now = t0() + SignedDuration::from_mins(4);
        fire(&mut h, &Event::RefreshHost, &c).unwrap();
        assert_eq!(h.status, HostStatus::DisconnectedUnbound, "{s}");
        assert_eq!(h.status_info, "Host has stopped communicating with the installation service");
    }
}

#[test]
fn scenario_14_refresh_decides_known_or_insufficient_unbound() {
    let mut h = host(HostStatus::DiscoveringUnbound, None);
    fire(&mut h, &Event::RefreshHost, &ctx()).unwrap();
    assert_eq!(h.status, HostStatus::KnownUnbound);
    assert_eq!(h.status_info, "Host is ready to be bound to a cluster");
    assert!(h.validations_info.as_deref().unwrap().contains("has-min-cpu-cores"));

    let mut h = host(HostStatus::KnownUnbound, None);
    let mut inv: serde_json::Value = serde_json::from_str(&good_inventory()).unwrap();
    inv["cpu"]["count"] = 1.into();
    h.inventory = Some(inv.to_string().into());
    fire(&mut h, &Event::RefreshHost, &ctx()).unwrap();
    assert_eq!(h.status, HostStatus::InsufficientUnbound);
    assert!(h.status_info.starts_with("Host does not meet the minimum hardware requirements: "), "{}", h.status_info);
    assert!(h.status_info.contains("CPU"), "{}", h.status_info);

    // No inventory yet: still discovering.
    let mut h = host(HostStatus::DiscoveringUnbound, None);
    h.inventory = None;
    fire(&mut h, &Event::RefreshHost, &ctx()).unwrap();
    assert_eq!(h.status, HostStatus::DiscoveringUnbound);
}

#[test]
fn scenario_15_transient_states_tell_the_agent_to_exit() {
    for s in [HostStatus::Unbinding, HostStatus::UnbindingPendingUserAction, HostStatus::Binding] {
        let steps = next_steps(&host(s, None), None, None);
        assert_eq!(steps.post_step_action, "exit", "{s}");
        assert_eq!(steps.next_instruction_seconds, 0);
        assert!(steps.instructions.is_empty());
    }
}

#[test]
fn scenario_16_reclaiming_host_downloads_boot_artifacts() {
    let urls = BootArtifactUrls {
        kernel_url: "http://x/kernel".into(),
        initrd_url: "http://x/initrd".into(),
        rootfs_url: "http://x/rootfs".into(),
    };
    let steps = next_steps(&host(HostStatus::Reclaiming, None), Some(&urls), None);
    assert_eq!(steps.next_instruction_seconds, 60);
    assert_eq!(steps.post_step_action, "continue");
    assert_eq!(steps.instructions.len(), 1);
    assert_eq!(steps.instructions[0].step_type, "download-boot-artifacts");
    let arg: serde_json::Value = serde_json::from_str(&steps.instructions[0].args[0]).unwrap();
    assert_eq!(arg["kernel_url"], "http://x/kernel");
    assert_eq!(arg["initrd_url"], "http://x/initrd");
    assert_eq!(arg["rootfs_url"], "http://x/rootfs");
    assert_eq!(arg["host_fs_mount_dir"], "/host");
}

#[test]
fn scenario_17_reclaiming_rebooting_host_reboots() {
    let steps = next_steps(&host(HostStatus::ReclaimingRebooting, None), None, None);
    assert_eq!(steps.next_instruction_seconds, 120);
    assert_eq!(steps.post_step_action, "exit");
    assert_eq!(steps.instructions[0].step_type, "reboot-for-reclaim");
    let arg: serde_json::Value = serde_json::from_str(&steps.instructions[0].args[0]).unwrap();
    assert_eq!(arg, serde_json::json!({"host_fs_mount_dir": "/host"}));
}

#[test]
fn pool_hosts_poll_inventory_and_ntp() {
    for s in [HostStatus::DiscoveringUnbound, HostStatus::InsufficientUnbound, HostStatus::KnownUnbound] {
        let steps = next_steps(&host(s, None), None, None);
        let types: Vec<_> = steps.instructions.iter().map(|i| i.step_type).collect();
        assert_eq!(types, ["inventory", "ntp-synchronizer"]);
        assert_eq!(steps.next_instruction_seconds, 60);
    }
    let steps = next_steps(&host(HostStatus::DisconnectedUnbound, None), None, None);
    assert_eq!(steps.instructions.iter().map(|i| i.step_type).collect::<Vec<_>>(), ["inventory"]);
    assert_eq!(steps.next_instruction_seconds, 120);
}

#[test]
fn installation_reaches_installed_or_added_by_stage() {
    let mut h = host(HostStatus::Known, Some("c1"));
    for ev in [Event::PrepareForInstallation, Event::PreparingSucceeded, Event::InstallHost] {
        fire(&mut h, &ev, &ctx()).unwrap();
    }
    assert_eq!(h.status, HostStatus::Installing);
    fire(&mut h, &Event::HostProgressChanged { stage: "Writing image to disk".into(), info: "40%".into() }, &ctx())
        .unwrap();
    assert_eq!(h.status, HostStatus::InstallingInProgress);
    assert_eq!(h.progress.current_stage, "Writing image to disk");
    fire(&mut h, &Event::HostProgressChanged { stage: "Done".into(), info: String::new() }, &ctx()).unwrap();
    assert_eq!(h.status, HostStatus::Installed);
    assert_eq!(h.progress.installation_percentage, 100);

    let mut h = host(HostStatus::Known, Some("c1"));
    h.kind = HostKind::AddToExistingClusterHost;
    fire(&mut h, &Event::InstallHost, &ctx()).unwrap();
    fire(&mut h, &Event::HostProgressChanged { stage: "Done".into(), info: String::new() }, &ctx()).unwrap();
    assert_eq!(h.status, HostStatus::AddedToExistingCluster);
}

#[test]
fn status_strings_round_trip() {
    for &s in HostStatus::ALL {
        assert_eq!(s.as_str().parse::<HostStatus>().unwrap(), s);
        assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
    }
}

#[test]
fn status_time_moves_only_with_the_status() {
    let mut h = host(HostStatus::KnownUnbound, None);
    let mut c = ctx();
    c.now = t0() + SignedDuration::from_secs(30);
    h.checked_in_at = Some(c.now);
    fire(&mut h, &Event::RefreshHost, &c).unwrap();
    assert_eq!(h.status_updated_at, t0());
}

#[test]
fn no_rule_is_shadowed_by_an_earlier_unconditional_rule() {
    use super::machine::{Guard, RULES, Src};
    // First match wins, so a rule every source of which an earlier unguarded rule of the same
    // transition already claims can never fire: a table edit that did that would be a silent bug.
    for (i, rule) in RULES.iter().enumerate() {
        let claimed = |src: &Src| {
            RULES[..i].iter().any(|earlier| {
                earlier.transition == rule.transition
                    && matches!(earlier.guard, Guard::Always)
                    && earlier.sources.contains(src)
            })
        };
        assert!(
            !rule.sources.iter().all(claimed),
            "rule {i} ({:?} from {:?}) can never fire",
            rule.transition,
            rule.sources
        );
    }
}

#[test]
fn memory_within_the_tolerance_and_small_or_unsupported_disks() {
    use super::validations::{Requirements, validate};
    let req = Requirements::default();
    let check = |memory: i64, disks: serde_json::Value| {
        let inv: Inventory = serde_json::from_value(serde_json::json!({
            "cpu": {"count": 4, "architecture": "x86_64"},
            "memory": {"physical_bytes": memory},
            "disks": disks,
        }))
        .unwrap();
        let h = host(HostStatus::DiscoveringUnbound, None);
        validate(&h, &inv, &req).into_iter().map(|v| (v.id, v.passed)).collect::<Vec<_>>()
    };
    let ssd = |size: i64, ty: &str| serde_json::json!([{"path": "/dev/sda", "drive_type": ty, "size_bytes": size}]);
    // 8 GiB less 64 MiB of firmware reservation still passes; 8 GiB less 200 MiB does not.
    assert!(check((8192 - 64) << 20, ssd(60_000_000_000, "SSD")).contains(&("has-min-memory", true)));
    assert!(check((8192 - 200) << 20, ssd(60_000_000_000, "SSD")).contains(&("has-min-memory", false)));
    assert!(check(16 << 30, ssd(49_000_000_000, "SSD")).contains(&("has-min-valid-disks", false)));
    assert!(check(16 << 30, ssd(60_000_000_000, "ODD")).contains(&("has-min-valid-disks", false)));
    assert!(check(16 << 30, ssd(60_000_000_000, "ECKD")).contains(&("has-min-valid-disks", false)));
    assert!(check(16 << 30, ssd(60_000_000_000, "Multipath")).contains(&("has-min-valid-disks", true)));
}

#[test]
fn jittered_intervals_stay_within_the_fraction_and_spread() {
    use super::instructions::jittered;
    assert_eq!(jittered(60, 0.0), 60);
    assert_eq!(jittered(0, 0.2), 0, "an immediate exit stays immediate");
    let seen: std::collections::BTreeSet<i64> = (0..2000).map(|_| jittered(60, 0.1)).collect();
    assert!(seen.iter().all(|s| (54..=66).contains(s)), "{seen:?}");
    // Every whole second of the range comes up: the intervals are spread, not two values.
    assert_eq!(seen.len(), 13, "{seen:?}");
    // Out-of-range fractions are clamped: never a zero or negative interval.
    assert!((0..500).map(|_| jittered(10, 3.0)).all(|s| (5..=15).contains(&s)));
}
