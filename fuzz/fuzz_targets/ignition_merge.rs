//! Ignition override intake and merge: `ignition::merge_override` of the input (an InfraEnv's
//! `ignitionConfigOverride`) into the rendered discovery config, then serialization and the
//! embed archive. When the input holds a NUL byte, the text before it is a parent config and
//! the text after it a child: `parse_config` both and `ignition::merge` them.
#![no_main]

use std::sync::OnceLock;

use bootstream::content::ignition::{self, Config, DiscoveryInput};
use libfuzzer_sys::fuzz_target;

fn base() -> &'static Config {
    static BASE: OnceLock<Config> = OnceLock::new();
    BASE.get_or_init(|| {
        let mut input = DiscoveryInput::new(
            "5f1a2b3c-0000-4000-8000-000000000001",
            "http://10.0.2.2:8080",
            r#"{"auths":{"quay.io":{"auth":"Zm9vOmJhcg=="}}}"#,
        );
        input.ssh_authorized_key = Some("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFuzz fuzz@example".into());
        ignition::render_discovery_config(&input).expect("the discovery config renders")
    })
}

fn check(config: &Config) {
    let json = ignition::to_compact_json(config).expect("a merged config serializes");
    let again = ignition::parse_config(&json).expect("a merged config parses back");
    assert_eq!(&again, config);
    let _ = ignition::sized_ignition_archive(&json, 256 * 1024);
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match text.split_once('\0') {
        None => {
            if let Ok(merged) = ignition::merge_override(base(), text) {
                check(&merged);
            }
        }
        Some((parent, child)) => {
            let (Ok(parent), Ok(child)) = (ignition::parse_config(parent), ignition::parse_config(child)) else {
                return;
            };
            if let Ok(merged) = ignition::merge(&parent, &child) {
                check(&merged);
            }
        }
    }
});
