//! The rest of the image path: kernel-argument edits, iPXE variants, the ironic agent (converged flow)
//! and the s390x initrd.addrsize file.

use crate::common;

use common::*;
use serde_json::Value;

fn server_with(fixture: &str, version: &str) -> (Server, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = fixture_iso(fixture, dir.path());
    let server = Server::start(&["--os-image", &format!("{version}:x86_64:{}", path.display())]);
    server.apply_ok(&pull_secret_yaml("n"));
    (server, dir)
}

fn ignition_of(server: &Server, ie: &Value) -> Value {
    let id = ie["metadata"]["uid"].as_str().unwrap();
    let r = server.get(&format!("/api/assisted-install/v2/infra-envs/{id}/downloads/files?file_name=discovery.ign"));
    assert_eq!(r.status, 200, "{}", r.text());
    serde_json::from_slice(&r.body).unwrap()
}

#[test]
fn kernel_arguments_append_replace_delete_in_the_iso_and_the_ipxe_script() {
    let (server, dir) = server_with("embed-areas-2023-07.x86_64", "4.19");
    // The fixture's default: mitigations=auto,nosmt coreos.liveiso=<label> ignition.firstboot ignition.platform.id=metal
    server.apply_ok(&infraenv_yaml(
        "n",
        "ie",
        "  kernelArguments:
  - operation: append
    value: rd.net.timeout.carrier=60
  - operation: replace
    value: mitigations=auto,nosmt=off
  - operation: delete
    value: ignition.firstboot
",
    ));
    let ie = server.wait_image_created("n", "ie", "True");
    let iso = server.get(&server.path_of(ie["status"]["isoDownloadURL"].as_str().unwrap()));
    let path = dir.path().join("k.iso");
    std::fs::write(&path, &iso.body).unwrap();
    let kargs = String::from_utf8(coreos_installer(&["iso", "kargs", "show", path.to_str().unwrap()])).unwrap();
    assert_eq!(
        kargs.trim(),
        "mitigations=off coreos.liveiso=fedora-coreos-38.20230718.dev.0 ignition.platform.id=metal rd.net.timeout.carrier=60"
    );

    let script = server.get(&server.path_of(ie["status"]["bootArtifacts"]["ipxeScript"].as_str().unwrap())).text();
    let kernel_line = script.lines().nth(2).unwrap().to_string();
    assert!(kernel_line.ends_with(" rd.net.timeout.carrier=60"), "{kernel_line}");
    assert!(!kernel_line.contains("ignition.firstboot"), "{kernel_line}");
}

#[test]
fn ipxe_boot_order_control_redirects_through_the_mac() {
    let (server, _dir) = server_with("embed-areas-2023-07.x86_64", "4.19");
    server.apply_ok(&infraenv_yaml("n", "ie", "  ipxeScriptType: BootOrderControl\n"));
    let ie = server.wait_image_created("n", "ie", "True");
    let id = ie["metadata"]["uid"].as_str().unwrap();
    let url = ie["status"]["bootArtifacts"]["ipxeScript"].as_str().unwrap();
    assert_eq!(
        url,
        format!(
            "{}/api/assisted-install/v2/infra-envs/{id}/downloads/files?file_name=ipxe-script&ipxe_script_type=boot-order-control",
            server.url
        )
    );
    let redirect = server.get(&server.path_of(url));
    assert_eq!(redirect.status, 200);
    assert_eq!(
        redirect.text(),
        format!(
            "#!ipxe\nchain {}/api/assisted-install/v2/infra-envs/{id}/downloads/files?file_name=ipxe-script&mac=${{net0/mac}}\n",
            server.url
        )
    );
    // With a MAC no host has registered with, the boot script is served.
    let boot = server.get(&format!("{}&mac=52:54:00:12:34:56", server.path_of(url)));
    assert!(boot.text().starts_with("#!ipxe\ninitrd --name initrd "), "{}", boot.text());
    // ipxe_script_type only goes with file_name=ipxe-script.
    let bad = server.get(&format!("/api/assisted-install/v2/infra-envs/{id}/downloads/files?file_name=discovery.ign&ipxe_script_type=boot-order-control"));
    assert_eq!(bad.status, 400);
}

#[test]
fn ironic_agent_is_added_when_the_infraenv_asks_for_it() {
    let (server, _dir) = server_with("embed-areas-2023-07.x86_64", "4.19");
    let annotated = |extra_annotations: &str| {
        infraenv_yaml("n", "ie", "").replace(
            "  namespace: n\n",
            &format!("  namespace: n\n  annotations:\n    infraenv.agent-install.openshift.io/enable-ironic-agent: \"true\"\n{extra_annotations}"),
        )
    };
    // No ironic URL configured anywhere: a clear condition.
    server.apply_ok(&annotated(""));
    let ie = server.wait_image_created("n", "ie", "False");
    let msg = condition(&ie, "ImageCreated").unwrap()["message"].as_str().unwrap().to_string();
    assert!(msg.contains("Could not add ironic agent to image") && msg.contains("IRONIC_BASE_URL"), "{msg}");

    // The image-customization secret metal3 uses provides the URLs and the image.
    server.apply_ok(
        "apiVersion: v1
kind: Secret
metadata:
  name: metal3-image-customization-config
  namespace: openshift-machine-api
stringData:
  IRONIC_BASE_URL: https://192.168.111.3
  IRONIC_INSPECTOR_BASE_URL: https://192.168.111.3
  IRONIC_AGENT_IMAGE: quay.io/metal3-io/ironic-agent:icc
",
    );
    let ie = server.wait_image_created("n", "ie", "True");
    let ign = ignition_of(&server, &ie);
    let units = ign["systemd"]["units"].as_array().unwrap();
    let unit = |name: &str| units.iter().find(|u| u["name"] == name).unwrap_or_else(|| panic!("no {name}: {units:#?}"));
    assert_eq!(unit("ironic-agent.service")["enabled"], true);
    assert!(unit("ironic-agent.service")["contents"].as_str().unwrap().contains("quay.io/metal3-io/ironic-agent:icc"));
    assert_ne!(unit("agent.service")["enabled"], true, "the discovery agent waits for ironic's deploy step");
    let conf = ign["storage"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == "/etc/ironic-python-agent.conf")
        .unwrap();
    let text = String::from_utf8(
        bootstream::content::ignition::decode_data_url(conf["contents"]["source"].as_str().unwrap()).unwrap(),
    )
    .unwrap();
    assert!(text.contains("api_url = https://192.168.111.3:6385\n"), "{text}");
    assert!(text.contains("inspection_callback_url = https://192.168.111.3:5050/v1/continue\n"), "{text}");

    // The InfraEnv's override annotation wins over the secret's image.
    server.apply_ok(&annotated(
        "    infraenv.agent-install.openshift.io/ironic-agent-image-override: quay.io/me/ipa:mine\n",
    ));
    let ie = server.wait_image_created("n", "ie", "True");
    let ign = ignition_of(&server, &ie);
    let contents = ign["systemd"]["units"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["name"] == "ironic-agent.service")
        .unwrap()["contents"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(contents.contains("quay.io/me/ipa:mine"), "{contents}");
}

/// s390x: `initrd.addrsize` is the image's load address and the length of the PXE initrd served.
#[test]
fn s390x_initrd_addrsize() {
    use bootstream::formats::iso9660::writer::IsoBuilder;
    let dir = tempfile::tempdir().unwrap();
    let mut b = IsoBuilder::new("rhcos-419.s390x.test").unwrap();
    b.add_file("COREOS/IGNINFO.JSO", r#"{"file": "images/cdboot.img", "length": 262144, "offset": 4096}"#).unwrap();
    b.add_file("IMAGES/CDBOOT.IMG", vec![0u8; 4096 + 262144]).unwrap();
    let mut addrsize = vec![0, 0, 0, 0, 0x02, 0, 0, 0];
    addrsize.extend_from_slice(&1234u64.to_be_bytes());
    b.add_file("IMAGES/INITRD.ADD", addrsize).unwrap();
    b.add_file("IMAGES/PXEBOOT/KERNEL.IMG", b"kernel".to_vec()).unwrap();
    b.add_file("IMAGES/PXEBOOT/INITRD.IMG", b"initrd-placeholder".to_vec()).unwrap();
    b.add_file("IMAGES/PXEBOOT/ROOTFS.IMG", b"rootfs".to_vec()).unwrap();
    let iso = dir.path().join("s390x.iso");
    b.write_to(std::fs::File::create(&iso).unwrap()).unwrap();
    let server = Server::start(&["--os-image", &format!("4.19:s390x:{}", iso.display())]);
    server.apply_ok(&pull_secret_yaml("z"));
    server.apply_ok(&infraenv_yaml("z", "ie", "  cpuArchitecture: s390x\n"));
    let ie = server.wait_image_created("z", "ie", "True");
    let id = ie["metadata"]["uid"].as_str().unwrap();
    let initrd = server.get(&format!("/images/{id}/pxe-initrd?version=4.19&arch=s390x"));
    assert_eq!(initrd.status, 200);
    let r = server.get(&format!("/images/{id}/s390x-initrd-addrsize?version=4.19"));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.body.len(), 16);
    assert_eq!(&r.body[..8], &[0, 0, 0, 0, 0x02, 0, 0, 0]);
    assert_eq!(u64::from_be_bytes(r.body[8..].try_into().unwrap()), initrd.body.len() as u64);
    assert_eq!(r.header("content-disposition").unwrap(), format!("attachment; filename={id}-initrd.addrsize"));
    // A minimal ISO is not offered for s390x.
    let m = server.get(&format!("/byid/{id}/4.19/s390x/minimal.iso"));
    assert_eq!(m.status, 404, "{}", m.text());
}
