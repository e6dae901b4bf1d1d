//! Inventories of simulated machines, for `bootstream simulate`, the fleet benchmark and tests.

use serde_json::{Value, json};

/// The inventory a simulated machine reports: enough to pass the minimum requirements.
pub fn inventory(index: usize) -> Value {
    let mac = format!(
        "52:54:{:02x}:{:02x}:{:02x}:{:02x}",
        (index >> 24) & 0xff,
        (index >> 16) & 0xff,
        (index >> 8) & 0xff,
        index & 0xff
    );
    json!({
        "hostname": format!("sim-{index}"),
        "bmc_address": "0.0.0.0",
        "cpu": {"count": 4, "architecture": "x86_64", "flags": ["vmx"], "model_name": "Simulated CPU", "frequency": 2100.0},
        "memory": {"physical_bytes": 17179869184u64, "usable_bytes": 16744599552u64},
        "disks": [{"id": "/dev/disk/by-path/pci-0000:03:00.0", "name": "sda", "path": "/dev/sda",
                   "by_path": "/dev/disk/by-path/pci-0000:03:00.0", "drive_type": "SSD", "size_bytes": 128849018880u64,
                   "bootable": true, "installation_eligibility": {"eligible": true, "not_eligible_reasons": []}}],
        "interfaces": [{"name": "enp1s0", "mac_address": mac, "ipv4_addresses": [format!("10.{}.{}.{}/8", (index >> 16) & 0xff, (index >> 8) & 0xff, index & 0xff)],
                        "ipv6_addresses": [], "speed_mbps": 10000, "type": "physical"}],
        "boot": {"current_boot_mode": "uefi"},
        "system_vendor": {"manufacturer": "bootstream", "product_name": "simulated", "virtual": true},
    })
}
