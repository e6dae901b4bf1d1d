//! BareMetalHosts end to end, run the way a user runs it: `bootstream serve`, the CLI (`apply`, `get`,
//! `patch --subresource status` standing in for metal3's bare metal operator) and `bootstream simulate`
//! playing the machine's discovery agent over the real agent API.

use crate::common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_bootstream");
const NS: &str = "metal";
/// The NIC MAC of the first machine `bootstream simulate` plays.
const MAC: &str = "52:54:00:00:00:00";

fn bmh_yaml(name: &str) -> String {
    format!(
        "apiVersion: metal3.io/v1alpha1\nkind: BareMetalHost\nmetadata:\n  name: {name}\n  namespace: {NS}\n  labels:\n    infraenvs.agent-install.openshift.io: pool\n  annotations:\n    bmac.agent-install.openshift.io/role: master\n    bmac.agent-install.openshift.io/hostname: master-0.example.com\nspec:\n  online: false\n  bootMACAddress: {}\n  bmc:\n    address: redfish-virtualmedia://192.0.2.10/redfish/v1/Systems/1\n    credentialsName: {name}-bmc-secret\n",
        MAC.to_ascii_uppercase()
    )
}

fn wait_for(s: &Server, kind: &str, name: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = cli(&["get", "--kubeconfig", &s.kubeconfig, kind, name, "-n", NS, "-o", "json"], None);
        if out.status.success() {
            let v: Value = serde_json::from_slice(&out.stdout).unwrap();
            if done(&v) {
                return v;
            }
            assert!(Instant::now() < deadline, "{kind} {name} never got {what}: {v:#}");
        } else {
            assert!(Instant::now() < deadline, "{kind} {name}: {}", String::from_utf8_lossy(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_bare_metal_host_boots_the_infraenv_iso_and_its_agent_takes_the_bmh_settings() {
    // The ISO flow: without the converged flow (on by default), a BMH boots the InfraEnv's ISO.
    let s = Server::start(&["--image-cooldown-seconds", "1", "--converged-flow=false"]);
    s.apply_ok(&format!("{}---\n{}", pull_secret_yaml(NS), infraenv_yaml(NS, "pool", "")));
    s.apply_ok(&bmh_yaml("host-0"));
    // Metal3 has not reported the host yet: the BMAC only prepares it.
    let bmh = wait_for(&s, "bmh", "host-0", "the BMAC's finalizer and inspection disabled", |b| {
        b["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| f.iter().any(|f| f == "bmac.agent-install.openshift.io/deprovision"))
            && b["metadata"]["annotations"]["inspect.metal3.io"] == "disabled"
    });
    assert!(bmh["spec"].get("image").is_none(), "{bmh:#}");

    // Metal3 reports the host available: it gets the InfraEnv's ISO and is powered on.
    let ie = s.wait_image_created(NS, "pool", "True");
    let iso_url = ie["status"]["isoDownloadURL"].as_str().unwrap().to_string();
    metal3_reports_available(&s, "host-0");
    let bmh = wait_for(&s, "bmh", "host-0", "the ISO", |b| b["spec"]["image"]["url"] == iso_url.as_str());
    assert!(bmh["spec"].get("customDeploy").is_none(), "{bmh:#}");
    assert_eq!(bmh["spec"]["image"]["format"], "live-iso");
    assert_eq!(bmh["spec"]["online"], true);
    assert_eq!(bmh["spec"]["automatedCleaningMode"], "disabled");
    assert_eq!(bmh["status"]["provisioning"]["state"], "available", "the status metal3 wrote stays");
    // The ISO the BMC is given is served.
    assert_eq!(s.request("HEAD", &s.path_of(&iso_url), &[]).status, 200);

    // The machine boots it and its agent registers: the Agent takes the BMH's settings.
    let _fleet = KillOnDrop(
        Command::new(BIN)
            .env("BOOTSTREAM_TOKEN", TEST_API_TOKEN)
            .args([
                "simulate",
                "--server",
                &s.url,
                "--kubeconfig",
                &s.kubeconfig,
                "--infraenv",
                &format!("{NS}/pool"),
                "--hosts",
                "1",
            ])
            .args(["--time-scale", "0.02", "--seed", "bmh"])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let agent = {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let out = cli(&["get", "--kubeconfig", &s.kubeconfig, "agents", "-n", NS, "-o", "json"], None);
            let list: Value = serde_json::from_slice(&out.stdout).unwrap();
            let found = list["items"].as_array().and_then(|items| {
                items.iter().find(|a| a["metadata"]["labels"]["agent-install.openshift.io/bmh"] == "host-0").cloned()
            });
            if let Some(a) = found.filter(|a| a["spec"]["role"] == "master") {
                break a;
            }
            assert!(Instant::now() < deadline, "no Agent took the BMH's settings: {list:#}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    assert_eq!(agent["spec"]["hostname"], "master-0.example.com");
    assert_eq!(agent["spec"]["approved"], true);
    let bmh = wait_for(&s, "bmh", "host-0", "hardware details", |b| {
        b["metadata"]["annotations"]["inspect.metal3.io/hardwaredetails"].is_string()
    });
    let details: Value =
        serde_json::from_str(bmh["metadata"]["annotations"]["inspect.metal3.io/hardwaredetails"].as_str().unwrap())
            .unwrap();
    assert_eq!(details["nics"][0]["mac"], MAC);
    assert_eq!(details["hostname"], "master-0.example.com");

    // The table view names the state metal3 reported.
    let out = cli(&["get", "--kubeconfig", &s.kubeconfig, "bmh", "-n", NS], None);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("host-0") && table.contains("available"), "{table}");
}

#[test]
fn bad_bare_metal_documents_and_status_writes_are_refused_with_the_field_named() {
    let s = Server::start(&[]);
    s.apply_ok(&pull_secret_yaml(NS));
    let out = s.apply(&bmh_yaml("host-0").replace("bootMACAddress", "bootMacAddress"));
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("bootMacAddress"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    s.apply_ok(&bmh_yaml("host-0"));
    let out = cli(
        &[
            "patch",
            "--kubeconfig",
            &s.kubeconfig,
            "bmh",
            "host-0",
            "-n",
            NS,
            "--subresource",
            "status",
            "--type",
            "merge",
            "-p",
            r#"{"status": {"provisioning": {"state": 7}}}"#,
        ],
        None,
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("status") && err.contains("state"), "{err}");
    // Nothing was lost: the BMH is as applied.
    let bmh = s.get_json("bmh", NS, "host-0");
    assert_eq!(bmh["spec"]["bootMACAddress"], MAC.to_ascii_uppercase());
    assert!(bmh.get("status").is_none_or(|st| st.get("provisioning").is_none()), "{bmh:#}");
    // Kinds without a status have no status subresource.
    let out = cli(
        &[
            "patch",
            "--kubeconfig",
            &s.kubeconfig,
            "secret",
            "pull-secret",
            "-n",
            NS,
            "--subresource",
            "status",
            "--type",
            "merge",
            "-p",
            "{}",
        ],
        None,
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    // As the API server answers for a kind without a status subresource.
    assert!(err.contains("the server could not find the requested resource"), "{err}");
}

/// metal3 reports `name` available, as the bare metal operator does once it has inspected it.
fn metal3_reports_available(s: &Server, name: &str) {
    let out = cli(
        &[
            "patch",
            "--kubeconfig",
            &s.kubeconfig,
            "bmh",
            name,
            "-n",
            NS,
            "--subresource",
            "status",
            "--type",
            "merge",
            "-p",
            r#"{"status": {"operationalStatus": "OK", "provisioning": {"state": "available"}, "poweredOn": false,
                         "errorCount": 0, "errorMessage": "", "hardwareProfile": ""}}"#,
        ],
        None,
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// The converged flow's settings: the ironic agent's URL and image.
const CONVERGED: &[&str] = &[
    "--image-cooldown-seconds",
    "1",
    "--ironic-base-url",
    "https://ironic.example:6385",
    "--ironic-agent-image",
    "quay.io/example/ironic-agent:1",
];

/// The pool InfraEnv's image made, and BMH host-0 available as metal3 reports it.
fn available_host_0(s: &Server) {
    s.apply_ok(&format!("{}---\n{}", pull_secret_yaml(NS), infraenv_yaml(NS, "pool", "")));
    s.apply_ok(&bmh_yaml("host-0"));
    s.wait_image_created(NS, "pool", "True");
    metal3_reports_available(s, "host-0");
}

/// metal3 asks for host-0's image (an ISO, x86_64): the PreprovisioningImage once it has one.
fn preprovisioning_image_of_host_0(s: &Server) -> Value {
    let uid = s.get_json("bmh", NS, "host-0")["metadata"]["uid"].as_str().unwrap().to_string();
    s.apply_ok(&format!(
        "apiVersion: metal3.io/v1alpha1\nkind: PreprovisioningImage\nmetadata:\n  name: host-0\n  namespace: {NS}\n  labels:\n    infraenvs.agent-install.openshift.io: pool\n  ownerReferences:\n  - apiVersion: metal3.io/v1alpha1\n    kind: BareMetalHost\n    name: host-0\n    uid: {uid}\nspec:\n  acceptFormats: [iso]\n  architecture: x86_64\n"
    ));
    wait_for(s, "preprovisioningimage", "host-0", "an image", |p| p["status"]["imageUrl"].is_string())
}

/// The converged flow is on unless turned off: with no flag, an available BMH gets no ISO; metal3's
/// PreprovisioningImage for it gets the InfraEnv's image (with the ironic agent), and the BMH the
/// custom deploy method that starts the discovery agent.
#[test]
fn by_default_bare_metal_hosts_boot_through_their_preprovisioning_image() {
    let s = Server::start(CONVERGED);
    available_host_0(&s);
    let ppi = preprovisioning_image_of_host_0(&s);
    assert_eq!(ppi["status"]["format"], "iso", "{ppi:#}");
    let ie = s.get_json("infraenv", NS, "pool");
    assert_eq!(ie["metadata"]["annotations"]["infraenv.agent-install.openshift.io/enable-ironic-agent"], "true");
    let bmh = wait_for(&s, "bmh", "host-0", "the assisted deploy method", |b| {
        b["spec"]["customDeploy"]["method"] == "start_assisted_install"
    });
    assert!(bmh["spec"].get("image").is_none(), "the converged flow sets no ISO: {bmh:#}");
}

/// `ALLOW_CONVERGED_FLOW=false` in the environment (as deploy/config.yaml would set it) turns the
/// converged flow off: the BMH boots the InfraEnv's ISO.
#[test]
fn allow_converged_flow_false_in_the_environment_boots_bare_metal_hosts_from_the_iso() {
    let s = Server::start_with_env(&["--image-cooldown-seconds", "1"], &[("ALLOW_CONVERGED_FLOW", "false")]);
    s.apply_ok(&format!("{}---\n{}", pull_secret_yaml(NS), infraenv_yaml(NS, "pool", "")));
    s.apply_ok(&bmh_yaml("host-0"));
    let ie = s.wait_image_created(NS, "pool", "True");
    let iso_url = ie["status"]["isoDownloadURL"].as_str().unwrap().to_string();
    metal3_reports_available(&s, "host-0");
    let bmh = wait_for(&s, "bmh", "host-0", "the ISO", |b| b["spec"]["image"]["url"] == iso_url.as_str());
    assert_eq!(bmh["spec"]["image"]["format"], "live-iso");
}

/// Issue 43: BMCs that mount virtual media take short URLs only (Dell iDRAC: at most 255 characters, no
/// query string, no redirect, a path ending in `.iso`). With signed URLs (the default) and a 40-character
/// base URL, the PreprovisioningImage's ISO URL is at most 128 characters, path only, and serves the bytes
/// the InfraEnv's long URL serves; a forged short URL is refused.
#[test]
fn a_preprovisioning_image_gets_a_short_signed_iso_url_a_bmc_accepts() {
    const BASE: &str = "https://assisted-image.apps.hub1.example";
    assert_eq!(BASE.len(), 40);
    let s = Server::start_signed(&[&["--base-url", BASE][..], CONVERGED].concat());
    available_host_0(&s);
    let ppi = preprovisioning_image_of_host_0(&s);
    let short = ppi["status"]["imageUrl"].as_str().unwrap().to_string();
    assert!(short.len() <= 128, "{} characters: {short}", short.len());
    assert!(short.starts_with(&format!("{BASE}/s/")) && short.ends_with(".iso"), "{short}");
    assert!(!short.contains(['?', '&', '#']), "{short}");

    // The long URL of the InfraEnv's status keeps working, and both serve the same image.
    let ie = s.get_json("infraenv", NS, "pool");
    let long = ie["status"]["isoDownloadURL"].as_str().unwrap().to_string();
    assert!(long.contains("/byapikey/") && long.len() > 255, "{} characters: {long}", long.len());
    let (by_short, by_long) = (s.get(&s.path_of(&short)), s.get(&s.path_of(&long)));
    assert_eq!((by_short.status, by_long.status), (200, 200), "{}", by_short.text());
    assert_eq!(by_short.header("etag"), by_long.header("etag"));
    assert!(by_short.body == by_long.body && by_short.body.len() > 32 * 1024, "the same ISO bytes");
    // A BMC reads virtual media in ranges.
    let r = s.request("GET", &s.path_of(&short), &[("Range", "bytes=32768-32773")]);
    assert_eq!((r.status, &r.body[..]), (206, &by_long.body[32768..32774]));

    // Any changed character of the token is refused, and says why.
    let path = s.path_of(&short);
    let token = path.split('/').nth(2).unwrap().to_string();
    for i in [0, 20, 29, 50] {
        let mut forged: Vec<char> = token.chars().collect();
        forged[i] = if forged[i] == 'A' { 'B' } else { 'A' };
        let forged: String = forged.into_iter().collect();
        let r = s.get(&path.replacen(&token, &forged, 1));
        assert!(matches!(r.status, 401 | 403), "{i}: {} {}", r.status, r.text());
    }
    let r = s.get(&path.replacen(&token, "short", 1));
    assert_eq!(r.status, 401, "{}", r.text());
    assert!(r.text().contains("short token"), "{}", r.text());
}
