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
    // The ServiceMonitor is the opt-in component deploy/monitoring (it needs the Prometheus Operator's CRDs).
    let monitoring = documents("monitoring/servicemonitor.yaml");
    let monitor = of_kind(&monitoring, "ServiceMonitor")[0];
    let selector = labels(&monitor["spec"]["selector"]["matchLabels"]);
    let monitored: Vec<&&Value> =
        services.iter().filter(|s| selects(&selector, &labels(&s["metadata"]["labels"]))).collect();
    let port = monitor["spec"]["endpoints"][0]["port"].as_str().unwrap();
    assert!(monitored.iter().all(|s| service_port(s["metadata"]["name"].as_str().unwrap(), port)));
    // Every Service with the metrics port is scraped (the webhook's, HTTPS only, has none).
    let with_metrics = services.iter().filter(|s| service_port(s["metadata"]["name"].as_str().unwrap(), port)).count();
    assert_eq!(monitored.len(), with_metrics, "every Service with a metrics port is scraped");
}

#[test]
fn the_webhook_reaches_the_controllers_https_port_with_the_services_certificate() {
    let docs = all_documents();
    let webhooks = of_kind(&docs, "ValidatingWebhookConfiguration");
    assert_eq!(webhooks.len(), 1);
    let config = webhooks[0];
    assert_eq!(
        config["metadata"]["annotations"]["service.beta.openshift.io/inject-cabundle"], "true",
        "OpenShift's service CA injects its CA bundle"
    );
    let namespace = documents("kustomization.yaml")[0]["namespace"].as_str().unwrap().to_string();
    for hook in config["webhooks"].as_array().unwrap() {
        let name = hook["name"].as_str().unwrap();
        assert!(name.split('.').count() >= 3, "{name}: a fully qualified name");
        assert_eq!(hook["admissionReviewVersions"], serde_json::json!(["v1"]), "{name}: the version bootstream reads");
        assert_eq!(hook["sideEffects"], "None", "{name}");
        assert_eq!(hook["matchPolicy"], "Equivalent", "{name}");
        assert_eq!(hook["failurePolicy"], "Fail", "{name}: the immutability rules hold even when it is down");
        assert!(hook["timeoutSeconds"].as_u64().is_some_and(|t| (1..=30).contains(&t)), "{name}: timeoutSeconds");

        // The rules name the resources bootstream judges, their writes, never a subresource (a
        // controller's status write does not wait for the webhook).
        for rule in hook["rules"].as_array().unwrap() {
            for op in rule["operations"].as_array().unwrap() {
                assert!(op == "CREATE" || op == "UPDATE", "{name}: {op} has no rule");
            }
            let group = rule["apiGroups"][0].as_str().unwrap();
            for version in rule["apiVersions"].as_array().unwrap() {
                for resource in rule["resources"].as_array().unwrap() {
                    let resource = resource.as_str().unwrap();
                    assert!(!resource.contains('/'), "{name}: {resource}");
                    let kind = bootstream::resources::Kind::from_plural(resource)
                        .unwrap_or_else(|| panic!("{name}: {resource} is not a kind of bootstream's"));
                    assert_eq!(kind.api_version(), format!("{group}/{}", version.as_str().unwrap()), "{name}");
                }
            }
        }
        let covered: Vec<&str> = hook["rules"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|r| r["resources"].as_array().unwrap())
            .filter_map(Value::as_str)
            .collect();
        for resource in ["infraenvs", "nmstateconfigs", "agents", "agentclusterinstalls"] {
            assert!(covered.contains(&resource), "{name}: {resource} is not sent to the webhook");
        }

        // The Service it calls fronts the controller's webhook port, ready or not.
        let service_ref = &hook["clientConfig"]["service"];
        assert_eq!(service_ref["path"], "/admission/validate", "{name}");
        assert_eq!(service_ref["namespace"], namespace.as_str(), "{name}");
        let service = of_kind(&docs, "Service")
            .into_iter()
            .find(|s| s["metadata"]["name"] == service_ref["name"])
            .unwrap_or_else(|| panic!("{name}: no Service {}", service_ref["name"]));
        assert_eq!(service["spec"]["publishNotReadyAddresses"], true, "the webhook answers before the pod is ready");
        let port = service["spec"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["port"] == service_ref["port"])
            .expect("the webhook's port is one of the Service's");
        let deployment = of_kind(&docs, "Deployment")
            .into_iter()
            .find(|d| {
                selects(&labels(&service["spec"]["selector"]), &labels(&d["spec"]["template"]["metadata"]["labels"]))
            })
            .unwrap();
        let pod = &deployment["spec"]["template"]["spec"];
        let container = &pod["containers"][0];
        let container_port = container["ports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == port["targetPort"])
            .unwrap_or_else(|| panic!("the container has no port {}", port["targetPort"]));
        let args: Vec<String> = serde_json::from_value(container["args"].clone()).unwrap();
        let arg = |flag: &str| {
            args.iter()
                .find_map(|a| a.strip_prefix(&format!("{flag}=")))
                .unwrap_or_else(|| panic!("{flag} is not among the controller's arguments"))
                .to_string()
        };
        assert_eq!(args[0], "controller");
        assert_eq!(
            arg("--webhook-listen").rsplit(':').next().unwrap(),
            container_port["containerPort"].to_string(),
            "the webhook listens on the port the Service sends to"
        );

        // Its certificate is the one the service CA writes for that Service.
        let secret = service["metadata"]["annotations"]["service.beta.openshift.io/serving-cert-secret-name"]
            .as_str()
            .expect("the Service asks the service CA for a serving certificate");
        let volume = pod["volumes"].as_array().unwrap().iter().find(|v| v["secret"]["secretName"] == secret).unwrap();
        let mount = container["volumeMounts"].as_array().unwrap().iter().find(|m| m["name"] == volume["name"]).unwrap();
        let dir = mount["mountPath"].as_str().unwrap();
        assert_eq!(arg("--webhook-tls-cert"), format!("{dir}/tls.crt"));
        assert_eq!(arg("--webhook-tls-key"), format!("{dir}/tls.key"));

        // The cert-manager component issues the same Secret for the same Service and injects its CA
        // instead of the service CA's.
        let component = std::fs::read_to_string(repo().join("deploy/cert-manager/kustomization.yaml")).unwrap();
        let component: Value = yaml_serde::from_str(&component).unwrap();
        assert_eq!(component["kind"], "Component");
        let certificate = {
            let text = std::fs::read_to_string(repo().join("deploy/cert-manager/certificate.yaml")).unwrap();
            let docs: Vec<Value> =
                yaml_serde::Deserializer::from_str(&text).map(|d| Value::deserialize(d).unwrap()).collect();
            docs.into_iter().find(|d| d["kind"] == "Certificate").unwrap()
        };
        assert_eq!(certificate["spec"]["secretName"], secret);
        let dns = format!("{}.{namespace}.svc", service_ref["name"].as_str().unwrap());
        assert!(certificate["spec"]["dnsNames"].as_array().unwrap().iter().any(|d| d == dns.as_str()), "{dns}");
        let patches = serde_json::to_string(&component["patches"]).unwrap();
        let inject = format!("{namespace}/{}", certificate["metadata"]["name"].as_str().unwrap());
        assert!(patches.contains("cert-manager.io~1inject-ca-from") && patches.contains(&inject), "{patches}");
        assert!(patches.contains("service.beta.openshift.io~1inject-cabundle"), "{patches}");
        assert!(patches.contains("service.beta.openshift.io~1serving-cert-secret-name"), "{patches}");
    }
}
