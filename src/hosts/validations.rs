//! The hardware validations that decide whether an unbound host may be bound (spec-controllers.md §1.3,
//! RefreshHost pool rules: minimum disks, CPU, memory and a valid hostname).
//!
//! The thresholds are assisted-service's for a host judged before it has a cluster, i.e. the least
//! any role asks for (its `loadGeneralInfraEnvMinRequirements` over the operator's default hardware
//! requirements): 2 CPU cores (worker), 8192 MiB of RAM (worker) less the 100 MiB tolerance upstream
//! grants for firmware-reserved memory, and one disk of at least 50 GB (decimal; arbiter, the
//! smallest per-role disk) of an installable drive type.

use serde_json::json;

use super::{Host, Inventory};

#[derive(Clone, Debug, PartialEq)]
pub struct Requirements {
    pub min_cpu_cores: i64,
    pub min_memory_bytes: i64,
    /// RAM below `min_memory_bytes` still accepted: firmware and the kernel hide some of it.
    pub memory_tolerance_bytes: i64,
    pub min_disk_bytes: i64,
}

impl Default for Requirements {
    fn default() -> Requirements {
        Requirements {
            min_cpu_cores: 2,
            min_memory_bytes: 8192 << 20,
            memory_tolerance_bytes: 100 << 20,
            min_disk_bytes: 50_000_000_000,
        }
    }
}

/// One validation result, as `validations_info` lists them.
#[derive(Clone, Debug, PartialEq)]
pub struct Validation {
    pub id: &'static str,
    pub passed: bool,
    pub message: String,
}

pub fn validate(host: &Host, inventory: &Inventory, req: &Requirements) -> Vec<Validation> {
    let cores = inventory.cpu.count;
    let memory = inventory.memory.physical_bytes;
    let memory_ok = memory >= req.min_memory_bytes - req.memory_tolerance_bytes;
    let eligible = inventory
        .disks
        .iter()
        .filter(|d| match &d.installation_eligibility {
            // The agent's own verdict may only narrow ours: a small disk is never eligible.
            Some(e) if !e.eligible => false,
            _ => {
                installable_drive_type(&d.drive_type, &inventory.cpu.architecture) && d.size_bytes >= req.min_disk_bytes
            }
        })
        .count();
    // The inventory is already parsed: do not let Host::hostname parse it again.
    let hostname =
        if host.requested_hostname.is_empty() { inventory.hostname.clone() } else { host.requested_hostname.clone() };
    let hostname_problem = hostname_problem(&hostname);
    vec![
        Validation {
            id: "has-min-cpu-cores",
            passed: cores >= req.min_cpu_cores,
            message: if cores >= req.min_cpu_cores {
                "Sufficient CPU cores".into()
            } else {
                format!("The host has {cores} CPU cores; at least {} are required", req.min_cpu_cores)
            },
        },
        Validation {
            id: "has-min-memory",
            passed: memory_ok,
            message: if memory_ok {
                "Sufficient minimum RAM".into()
            } else {
                format!(
                    "The host has {:.2} GiB of RAM; at least {} GiB are required",
                    memory as f64 / (1u64 << 30) as f64,
                    req.min_memory_bytes >> 30
                )
            },
        },
        Validation {
            id: "has-min-valid-disks",
            passed: eligible > 0,
            message: if eligible > 0 {
                "Sufficient disk capacity".into()
            } else {
                format!(
                    "No eligible disks were found; a disk of at least {} GB is required",
                    req.min_disk_bytes / 1_000_000_000
                )
            },
        },
        Validation {
            id: "hostname-valid",
            passed: hostname_problem.is_none(),
            message: match &hostname_problem {
                None => format!("Hostname {hostname} is allowed"),
                Some(p) => p.clone(),
            },
        },
    ]
}

/// Drive types coreos-installer can install to, per CPU architecture (upstream's disk eligibility).
fn installable_drive_type(drive_type: &str, arch: &str) -> bool {
    match drive_type {
        "HDD" | "SSD" | "Multipath" | "RAID" | "iSCSI" => true,
        "FC" => matches!(arch, "x86_64" | "s390x" | ""),
        "ECKD" | "ECKD (ESE)" | "FBA" => arch == "s390x",
        _ => false,
    }
}

/// Why a hostname cannot be a node name (RFC 1123, and never `localhost`), or None.
pub fn hostname_problem(hostname: &str) -> Option<String> {
    if hostname.is_empty() {
        return Some("The host has no hostname".into());
    }
    if matches!(hostname, "localhost" | "localhost.localdomain") {
        return Some(format!("Hostname {hostname} is forbidden"));
    }
    let valid = hostname.len() <= 253
        && hostname.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        });
    (!valid).then(|| format!("Hostname {hostname} does not pass the RFC 1123 validation"))
}

/// `validations_info` JSON text.
pub fn info_json(validations: &[Validation]) -> String {
    let list: Vec<_> = validations
        .iter()
        .map(|v| json!({"id": v.id, "status": if v.passed { "success" } else { "failure" }, "message": v.message}))
        .collect();
    json!({"hardware": list}).to_string()
}

/// The statusInfo of an insufficient host.
pub fn insufficient_info(validations: &[Validation]) -> String {
    let failing: Vec<&str> = validations.iter().filter(|v| !v.passed).map(|v| v.message.as_str()).collect();
    format!("Host does not meet the minimum hardware requirements: {}", failing.join(" ; "))
}
