//! The table `bootstream get` prints when no `--output` is asked for: a header and a line per
//! object, with the columns that say most about each kind.

use serde_json::Value;

use crate::resources::Kind;

/// Prints `v`, one object (`single`) or a list's `items`, as a table of `kind`'s columns.
pub(super) fn print_table(kind: Kind, v: &Value, single: bool) {
    let items: Vec<&Value> =
        if single { vec![v] } else { v["items"].as_array().map(|a| a.iter().collect()).unwrap_or_default() };
    if items.is_empty() {
        println!("No resources found.");
        return;
    }
    match kind {
        Kind::InfraEnv => {
            println!("{:<24} {:<24} {:<22} IMAGE", "NAMESPACE", "NAME", "ISO CREATED AT");
            for it in items {
                let cond = it["status"]["conditions"]
                    .as_array()
                    .and_then(|cs| cs.iter().find(|c| c["type"] == "ImageCreated"))
                    .map(|c| format!("{} {}", c["status"].as_str().unwrap_or(""), c["reason"].as_str().unwrap_or("")))
                    .unwrap_or_else(|| "-".into());
                println!(
                    "{:<24} {:<24} {:<22} {}",
                    it["metadata"]["namespace"].as_str().unwrap_or(""),
                    it["metadata"]["name"].as_str().unwrap_or(""),
                    it["status"]["createdTime"].as_str().unwrap_or("-"),
                    cond
                );
            }
        }
        Kind::NMStateConfig => {
            println!("{:<24} {:<24} INTERFACES", "NAMESPACE", "NAME");
            for it in items {
                let ifaces: Vec<String> = it["spec"]["interfaces"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .map(|i| {
                                format!(
                                    "{}={}",
                                    i["name"].as_str().unwrap_or(""),
                                    i["macAddress"].as_str().unwrap_or("")
                                )
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                println!(
                    "{:<24} {:<24} {}",
                    it["metadata"]["namespace"].as_str().unwrap_or(""),
                    it["metadata"]["name"].as_str().unwrap_or(""),
                    ifaces.join(",")
                );
            }
        }
        Kind::Agent => {
            println!(
                "{:<12} {:<38} {:<20} {:<9} {:<8} {:<30} STAGE",
                "NAMESPACE", "NAME", "CLUSTER", "APPROVED", "ROLE", "STATE"
            );
            for it in items {
                println!(
                    "{:<12} {:<38} {:<20} {:<9} {:<8} {:<30} {}",
                    it["metadata"]["namespace"].as_str().unwrap_or(""),
                    it["metadata"]["name"].as_str().unwrap_or(""),
                    it["spec"]["clusterDeploymentName"]["name"].as_str().unwrap_or(""),
                    it["spec"]["approved"].as_bool().unwrap_or(false),
                    it["status"]["role"].as_str().unwrap_or(""),
                    it["status"]["debugInfo"]["state"].as_str().unwrap_or(""),
                    it["status"]["progress"]["currentStage"].as_str().unwrap_or("")
                );
            }
        }
        Kind::ClusterDeployment | Kind::AgentClusterInstall | Kind::ClusterImageSet => {
            println!("{:<24} {:<32} STATUS", "NAMESPACE", "NAME");
            for it in items {
                let status = match kind {
                    Kind::ClusterDeployment => {
                        format!("installed={}", it["spec"]["installed"].as_bool().unwrap_or(false))
                    }
                    Kind::AgentClusterInstall => it["status"]["debugInfo"]["state"].as_str().unwrap_or("").to_string(),
                    _ => it["spec"]["releaseImage"].as_str().unwrap_or("").to_string(),
                };
                println!(
                    "{:<24} {:<32} {}",
                    it["metadata"]["namespace"].as_str().unwrap_or(""),
                    it["metadata"]["name"].as_str().unwrap_or(""),
                    status
                );
            }
        }
        Kind::BareMetalHost => {
            println!("{:<24} {:<32} {:<14} {:<18} ONLINE", "NAMESPACE", "NAME", "STATE", "BOOT MAC");
            for it in items {
                println!(
                    "{:<24} {:<32} {:<14} {:<18} {}",
                    it["metadata"]["namespace"].as_str().unwrap_or(""),
                    it["metadata"]["name"].as_str().unwrap_or(""),
                    it["status"]["provisioning"]["state"].as_str().unwrap_or(""),
                    it["spec"]["bootMACAddress"].as_str().unwrap_or(""),
                    it["spec"]["online"].as_bool().unwrap_or(false)
                );
            }
        }
        Kind::PreprovisioningImage => {
            println!("{:<24} {:<32} {:<7} IMAGE URL", "NAMESPACE", "NAME", "FORMAT");
            for it in items {
                println!(
                    "{:<24} {:<32} {:<7} {}",
                    it["metadata"]["namespace"].as_str().unwrap_or(""),
                    it["metadata"]["name"].as_str().unwrap_or(""),
                    it["status"]["format"].as_str().unwrap_or(""),
                    it["status"]["imageUrl"].as_str().unwrap_or("")
                );
            }
        }
        Kind::Secret => {
            println!("{:<24} {:<24} {:<36} DATA", "NAMESPACE", "NAME", "TYPE");
            for it in items {
                println!(
                    "{:<24} {:<24} {:<36} {}",
                    it["metadata"]["namespace"].as_str().unwrap_or(""),
                    it["metadata"]["name"].as_str().unwrap_or(""),
                    it["type"].as_str().unwrap_or("Opaque"),
                    it["data"].as_object().map(|d| d.len()).unwrap_or(0)
                );
            }
        }
    }
}
