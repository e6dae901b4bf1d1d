//! The manifests in deploy/ hang together and start bootstream the way its command line expects:
//! containers' arguments parse, every ConfigMap key is a setting bootstream reads, Services select
//! the pods they front and name their ports, service accounts exist in the RBAC manifest, and the
//! ingress sends image paths to the image servers. (What the roles must allow is checked where the
//! requests are made: the Kubernetes scenario suite and tests/it/lifecycle/kubernetes.rs run under them.)

use crate::common;

use std::collections::BTreeMap;

use common::repo;
use serde::Deserialize;
use serde_json::Value;

fn documents(file: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(repo().join("deploy").join(file)).unwrap();
    yaml_serde::Deserializer::from_str(&text)
        .map(|de| Value::deserialize(de).unwrap_or_else(|e| panic!("{file}: {e}")))
        .filter(|v| !v.is_null())
        .collect()
}

fn all_documents() -> Vec<Value> {
    let mut all = Vec::new();
    for entry in std::fs::read_dir(repo().join("deploy")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        if name.ends_with(".yaml") && name != "kustomization.yaml" {
            all.extend(documents(&name));
        }
    }
    all
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

fn labels(v: &Value) -> BTreeMap<String, String> {
    serde_json::from_value(v.clone()).unwrap_or_default()
}

fn selects(selector: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

#[test]
fn every_file_is_listed_in_the_kustomization() {
    let k = &documents("kustomization.yaml")[0];
    let listed: Vec<&str> = k["resources"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    for entry in std::fs::read_dir(repo().join("deploy")).unwrap() {
        let name = entry.unwrap().file_name().to_str().unwrap().to_string();
        if name.ends_with(".yaml") && name != "kustomization.yaml" {
            assert!(listed.contains(&name.as_str()), "{name} is not in deploy/kustomization.yaml");
        }
    }
    for r in &listed {
        assert!(
            repo().join("deploy").join(r.trim_end_matches('/')).exists(),
            "kustomization lists {r}, which is missing"
        );
    }
}

#[test]
fn containers_start_bootstream_with_arguments_it_accepts() {
    let docs = all_documents();
    let config = of_kind(&docs, "ConfigMap");
    let deployments = of_kind(&docs, "Deployment");
    assert_eq!(deployments.len(), 2, "the controller and the image server");
    for d in deployments {
        let name = d["metadata"]["name"].as_str().unwrap();
        let pod = &d["spec"]["template"];
        assert!(
            selects(&labels(&d["spec"]["selector"]["matchLabels"]), &labels(&pod["metadata"]["labels"])),
            "{name}: the selector does not select its own pods"
        );
        for c in pod["spec"]["containers"].as_array().unwrap() {
            let args: Vec<String> = serde_json::from_value(c["args"].clone()).unwrap();
            bootstream::cli::check_args(args.clone()).unwrap_or_else(|e| panic!("{name}: {args:?}: {e}"));
            // Settings from the ConfigMap must be ones this subcommand reads.
            let known = bootstream::cli::env_settings(&args[0]);
            for from in c["envFrom"].as_array().into_iter().flatten() {
                let cm_name = &from["configMapRef"]["name"];
                let cm = config.iter().find(|m| m["metadata"]["name"] == *cm_name).expect("the ConfigMap exists");
                for key in cm["data"].as_object().unwrap().keys() {
                    assert!(
                        known.contains(key),
                        "{name}: {key} is not a setting of `bootstream {}` ({known:?})",
                        args[0]
                    );
                }
            }
            let volumes: Vec<&str> =
                pod["spec"]["volumes"].as_array().unwrap().iter().filter_map(|v| v["name"].as_str()).collect();
            for m in c["volumeMounts"].as_array().unwrap() {
                assert!(volumes.contains(&m["name"].as_str().unwrap()), "{name}: mount {m} has no volume");
            }
            // Paths the arguments name are mounted.
            for arg in &args {
                if let Some(path) = arg.split_once('=').map(|(_, p)| p).filter(|p| p.starts_with('/')) {
                    assert!(
                        c["volumeMounts"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .any(|m| path.starts_with(m["mountPath"].as_str().unwrap())),
                        "{name}: {arg} is not on a mounted volume"
                    );
                }
            }
            // Probes and Services name ports the container has.
            let ports: Vec<&str> = c["ports"].as_array().unwrap().iter().filter_map(|p| p["name"].as_str()).collect();
            for probe in ["livenessProbe", "readinessProbe"] {
                assert!(ports.contains(&c[probe]["httpGet"]["port"].as_str().unwrap()), "{name}: {probe} port");
            }
        }
        let account = pod["spec"]["serviceAccountName"].as_str().unwrap();
        assert!(
            of_kind(&docs, "ServiceAccount").iter().any(|a| a["metadata"]["name"] == account),
            "{name}: service account {account} is not in rbac.yaml"
        );
    }
}

#[test]
fn services_ingress_and_monitoring_reach_the_pods() {
    let docs = all_documents();
    let services = of_kind(&docs, "Service");
    let pods: Vec<BTreeMap<String, String>> =
        of_kind(&docs, "Deployment").iter().map(|d| labels(&d["spec"]["template"]["metadata"]["labels"])).collect();
    for s in &services {
        let selector = labels(&s["spec"]["selector"]);
        assert_eq!(
            pods.iter().filter(|p| selects(&selector, p)).count(),
            1,
            "{} selects one Deployment's pods",
            s["metadata"]["name"]
        );
    }
    let service_port = |name: &str, port: &str| {
        services.iter().any(|s| {
            s["metadata"]["name"] == name && s["spec"]["ports"].as_array().unwrap().iter().any(|p| p["name"] == port)
        })
    };
    let ingress = of_kind(&docs, "Ingress")[0];
    let mut routes = BTreeMap::new();
    for p in ingress["spec"]["rules"][0]["http"]["paths"].as_array().unwrap() {
        let backend = &p["backend"]["service"];
        let (svc, port) = (backend["name"].as_str().unwrap(), backend["port"]["name"].as_str().unwrap());
        assert!(service_port(svc, port), "the ingress routes to {svc}:{port}, which does not exist");
        routes.insert(p["path"].as_str().unwrap().to_string(), svc.to_string());
    }
    for image_path in ["/images", "/byid", "/boot-artifacts"] {
        assert_eq!(routes.get(image_path).map(String::as_str), Some("bootstream-image-server"), "{image_path}");
    }
    assert_eq!(routes.get("/").map(String::as_str), Some("bootstream-controller"));
    let monitor = of_kind(&docs, "ServiceMonitor")[0];
    let selector = labels(&monitor["spec"]["selector"]["matchLabels"]);
    let monitored: Vec<&&Value> =
        services.iter().filter(|s| selects(&selector, &labels(&s["metadata"]["labels"]))).collect();
    assert_eq!(monitored.len(), services.len(), "every Service is scraped");
    let port = monitor["spec"]["endpoints"][0]["port"].as_str().unwrap();
    assert!(monitored.iter().all(|s| service_port(s["metadata"]["name"].as_str().unwrap(), port)));
}
