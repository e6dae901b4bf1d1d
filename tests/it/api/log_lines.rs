//! What the server logs: values from requests cannot forge log lines or send terminal escapes to
//! whoever reads the log, run against the real binary with its real log on standard error.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};

const NS: &str = "fleet";

/// A registered host's agent reports a failed reclaim download whose error holds a line break,
/// a carriage return and terminal escapes: the server logs the error, and every line of the log
/// is one the server wrote (the forged text stays inside the warning, escaped).
const FORGED: &str = "FAKE LOG LINE level=ERROR";

/// A registered host's agent reports a reclaim download that failed with `error`; returns the
/// server's log once it has logged that.
fn log_of_an_agent_error(s: &Server, error: &str) -> String {
    s.apply_ok(&format!("{}---\n{}", pull_secret_yaml(NS), infraenv_yaml(NS, "pool", "")));
    let ie = s.wait_image_created(NS, "pool", "True");
    let uid = ie["metadata"]["uid"].as_str().unwrap().to_string();

    // The agent's token, as a booted host reads it from its discovery Ignition.
    let ignition = s.get(&s.path_of(ie["status"]["bootArtifacts"]["discoveryIgnitionURL"].as_str().unwrap()));
    assert_eq!(ignition.status, 200, "{}", ignition.text());
    let ignition: Value = serde_json::from_slice(&ignition.body).unwrap();
    let token = bootstream::cli::simulate::agent_token(&ignition).expect("the agent token");
    let agent = |method: &str, path: &str, body: &Value| {
        let path = format!("/api/assisted-install/v2/infra-envs/{uid}/hosts{path}");
        let headers = [("X-Secret-Key", token.as_str()), ("Content-Type", "application/json")];
        request(&s.addr, method, &path, &headers, body.to_string().as_bytes())
    };
    let host_id = "5d0c2a4e-8b1f-4c3a-9e6d-7f2b1a0c9e11";
    let registered = agent("POST", "", &json!({"host_id": host_id, "discovery_agent_version": "v1"}));
    assert_eq!(registered.status, 201, "{}", registered.text());

    let reply =
        json!({"step_type": "download-boot-artifacts", "step_id": "download-1", "exit_code": 1, "error": error});
    agent("POST", &format!("/{host_id}/instructions"), &reply);

    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let log = s.log();
        if log.contains("reclaim download failed") {
            return log;
        }
        assert!(Instant::now() < deadline, "the server never logged the failed download:\n{log}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn an_agents_error_cannot_start_a_log_line() {
    let s = Server::start_logged(&[]);
    let forged = FORGED;
    let log = log_of_an_agent_error(&s, &format!("disk full\n{forged}\r{forged}\u{2028}{forged}\x1b[2J\x1b[31m"));
    // Lines as a terminal would show them, and as tools splitting at any line break would.
    for line in log.split(['\n', '\r', '\u{2028}', '\u{2029}', '\u{85}']) {
        assert!(!line.trim_start().starts_with(forged), "a forged log line: {line:?}\nin:\n{log}");
    }
    // No terminal escapes either: neither the agent's nor colors (which a reader could not tell apart).
    assert!(!log.contains('\x1b'), "a terminal escape in the log:\n{log:?}");
    let warning = log.lines().find(|l| l.contains("reclaim download failed")).unwrap();
    assert!(warning.contains("WARN"), "{warning}");
    assert!(warning.contains(&format!("disk full\\n{forged}\\r{forged}\\u{{2028}}{forged}")), "{warning}");
}

/// With `--log-format json` every line of the log is one JSON object, and the agent's error, line
/// breaks and escapes included, is a string inside one of them.
#[test]
fn json_logs_keep_an_agents_error_inside_one_object() {
    let s = Server::start_logged(&["--log-format", "json"]);
    let error = format!("disk full\n{FORGED}\r{FORGED}\u{2028}{FORGED}\x1b[2J");
    let log = log_of_an_agent_error(&s, &error);
    let mut found = false;
    for line in log.lines() {
        let event: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON object: {line:?}: {e}"));
        assert!(event["level"].is_string() && event["fields"].is_object(), "{line}");
        if event["fields"]["message"].as_str().is_some_and(|m| m.contains("reclaim download failed")) {
            assert!(event["fields"]["message"].as_str().unwrap().contains(&error), "{line}");
            found = true;
        }
    }
    assert!(found, "no event of the failed download in:\n{log}");
    assert!(!log.contains('\x1b'), "a raw terminal escape in the log:\n{log:?}");
}
