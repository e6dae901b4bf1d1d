//! Criterion micro-benchmarks of the image-building parts (issue 6): what a cold first request pays
//! to build an InfraEnv's discovery content, what planning and slicing a served ISO costs, and how
//! long nmstate takes to turn YAML into NetworkManager keyfiles.
//!
//! `cargo bench --bench parts` (append a filter such as `archive_build` to run one group). The
//! functions are called the way `Images::content` and `Images::iso` (src/image/mod.rs) call them.

use std::hint::black_box;
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bootstream::auth::AgentAuth;
use bootstream::content::ignition::{DiscoveryInput, render_discovery_ignition};
use bootstream::content::staticnet::{self, HostStaticConfig, MacInterface, RamdiskEntry, RamdiskInput};
use bootstream::formats::initrd::ignition_archive;
use bootstream::http::respond::respond;
use bootstream::plan::Representation;
use bootstream::plan::{BaseFile, Part, Plan, Segment};
use criterion::{BatchSize, BenchmarkId, Criterion, SamplingMode, criterion_group, criterion_main};
use http::{HeaderMap, HeaderValue, Method, header};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const INFRA_ENV_ID: &str = "4f0c5a8e-3b1d-4c2e-9a7f-6d5e4c3b2a19";
const HOST_COUNTS: [usize; 3] = [1, 10, 100];

/// Deterministic base64-alphabet filler of `len` characters (stands in for tokens and keys).
fn filler(seed: u64, len: usize) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ALPHABET[(x % 64) as usize] as char
        })
        .collect()
}

/// A pull secret shaped like an OpenShift one (~3 KB): four registries, two with long JWT-like auths.
fn pull_secret() -> String {
    let auths: serde_json::Map<String, Value> = [
        ("cloud.openshift.com", 180),
        ("quay.io", 180),
        ("registry.connect.redhat.com", 1100),
        ("registry.redhat.io", 1100),
    ]
    .iter()
    .enumerate()
    .map(|(i, (registry, len))| {
        (registry.to_string(), json!({"auth": filler(i as u64 + 1, *len), "email": "admin@example.com"}))
    })
    .collect();
    json!({ "auths": auths }).to_string()
}

/// The discovery Ignition input of an InfraEnv with a pull secret, an RSA SSH key and an agent token,
/// built as `Images::content` builds it.
fn discovery_input() -> DiscoveryInput {
    let auth = AgentAuth::from_key([7u8; 32]);
    let mut input = DiscoveryInput::new(INFRA_ENV_ID, "http://bootstream.example.com:8080", pull_secret());
    input.ssh_authorized_key = Some(format!("ssh-rsa AAAAB3NzaC1yc2E{} admin@example.com", filler(99, 540)));
    input.agent_token = Some(auth.token(INFRA_ENV_ID));
    input
}

/// The MAC of host `i` (as in benches/serve.rs).
fn mac(i: usize) -> String {
    format!("02:00:00:{:02x}:{:02x}:{:02x}", (i >> 16) & 0xff, (i >> 8) & 0xff, i & 0xff)
}

/// `spec.config` of NMStateConfig `i`: one ethernet interface with a MAC and a static IPv4 address.
fn nmstate_config(i: usize) -> Value {
    json!({"interfaces": [{"name": "eth0", "type": "ethernet", "state": "up", "mac-address": mac(i),
        "ipv4": {"enabled": true, "dhcp": false,
                 "address": [{"ip": format!("10.{}.{}.{}", (i >> 16) & 0xff, (i >> 8) & 0xff, i & 0xff), "prefix-length": 8}]}}]})
}

/// NMStateConfig `i` as `Images::content` turns it into a ramdisk host entry.
fn host(i: usize, config: &Value) -> HostStaticConfig {
    HostStaticConfig {
        mac_interface_map: vec![MacInterface { mac_address: mac(i), logical_nic_name: "eth0".into() }],
        network_yaml: yaml_serde::to_string(config).unwrap_or_default(),
    }
}

fn hosts(n: usize) -> Vec<HostStaticConfig> {
    hosts_from(0, n)
}

/// Hosts `first..first + n`. Each NMStateConfig's YAML checks and keyfiles are memoized by content
/// (`staticnet::prepare`), so a bench of configs never seen before takes new ones at every iteration.
fn hosts_from(first: usize, n: usize) -> Vec<HostStaticConfig> {
    (first..first + n).map(|i| host(i, &nmstate_config(i))).collect()
}

/// Counts up from past the hosts of the other benches: fresh host numbers, `n` at a time.
struct Fresh(std::cell::Cell<usize>);

impl Fresh {
    fn new() -> Fresh {
        Fresh(std::cell::Cell::new(1 << 16))
    }

    fn take(&self, n: usize) -> usize {
        let first = self.0.get();
        self.0.set(first + n);
        first
    }
}

/// The static-network ramdisk entries, as `Images::content` makes them: normalize, then validate and
/// lay out in one pass (`ramdisk_files`).
fn ramdisk_entries(hosts: Vec<HostStaticConfig>) -> Vec<RamdiskEntry> {
    let hosts = staticnet::normalize(hosts);
    staticnet::ramdisk_files(&RamdiskInput { hosts: &hosts, proxy: None }).expect("ramdisk files")
}

/// The gzip'd static-network ramdisk for `hosts`.
fn ramdisk(hosts: Vec<HostStaticConfig>) -> Vec<u8> {
    staticnet::archive(&ramdisk_entries(hosts)).expect("ramdisk archive")
}

/// A part as `Images::shared_part` makes it (content-hashed).
fn part(bytes: Vec<u8>) -> Arc<Part> {
    Arc::new(Part::new(bytes))
}

/// The discovery content of an InfraEnv with these NMStateConfigs, as `Images::content` builds it
/// after reading the store: ramdisk, Ignition, Ignition archive and the digest. (The network-files
/// tar is made on its first download, not here.)
fn discovery_content(configs: &[Value], input: &DiscoveryInput) -> [u8; 32] {
    let hosts: Vec<HostStaticConfig> = configs.iter().enumerate().map(|(i, c)| host(i, c)).collect();
    let entries = ramdisk_entries(hosts);
    let ramdisk = (!entries.is_empty()).then(|| part(staticnet::archive(&entries).expect("ramdisk archive")));
    let ignition = render_discovery_ignition(input).expect("discovery ignition");
    let archive = part(ignition_archive(ignition.as_bytes()));
    let mut h = Sha256::new();
    h.update(archive.sha256);
    if let Some(r) = &ramdisk {
        h.update(r.sha256);
    }
    black_box(&ignition);
    h.finalize().into()
}

fn archive_build(c: &mut Criterion) {
    let input = discovery_input();
    let ignition = render_discovery_ignition(&input).expect("discovery ignition");
    eprintln!(
        "discovery Ignition {} bytes, Ignition archive {} bytes, ramdisk for 1/10/100 hosts {:?} bytes",
        ignition.len(),
        ignition_archive(ignition.as_bytes()).len(),
        HOST_COUNTS.map(|n| ramdisk(hosts(n)).len())
    );
    let mut g = c.benchmark_group("archive_build");
    g.bench_function("ignition_render", |b| b.iter(|| render_discovery_ignition(black_box(&input)).unwrap()));
    g.bench_function("ignition_archive", |b| b.iter(|| ignition_archive(black_box(ignition.as_bytes()))));
    // The ramdisk takes milliseconds per host count of 100: flat sampling keeps the run short.
    g.sampling_mode(SamplingMode::Flat);
    // "new": NMStateConfigs never seen (nmstate parses and generates); "prepared": the same ones
    // again (their outcome memoized when they were applied).
    let fresh = Fresh::new();
    for n in HOST_COUNTS {
        g.bench_function(BenchmarkId::new("ramdisk_new", n), |b| {
            b.iter_batched(|| hosts_from(fresh.take(n), n), |hs| ramdisk(black_box(hs)), BatchSize::SmallInput)
        });
        let hs = hosts(n);
        ramdisk(hs.clone());
        g.bench_with_input(BenchmarkId::new("ramdisk_prepared", n), &hs, |b, hs| {
            b.iter(|| ramdisk(black_box(hs.clone())))
        });
    }
    // Where the ramdisk's time goes, for 100 hosts.
    g.bench_function("ramdisk_files_new/100", |b| {
        b.iter_batched(
            || staticnet::normalize(hosts_from(fresh.take(100), 100)),
            |hs| staticnet::ramdisk_files(&RamdiskInput { hosts: black_box(&hs), proxy: None }).unwrap(),
            BatchSize::SmallInput,
        )
    });
    let hs = staticnet::normalize(hosts(100));
    g.bench_function("ramdisk_files_prepared/100", |b| {
        b.iter(|| staticnet::ramdisk_files(&RamdiskInput { hosts: black_box(&hs), proxy: None }).unwrap())
    });
    let entries = ramdisk_entries(hs.clone());
    g.bench_function("ramdisk_cpio_gzip/100", |b| b.iter(|| staticnet::archive(black_box(&entries)).unwrap()));
    g.bench_function("discovery_content_new/100", |b| {
        b.iter_batched(
            || {
                let first = fresh.take(100);
                (first..first + 100).map(nmstate_config).collect::<Vec<Value>>()
            },
            |configs| discovery_content(black_box(&configs), &input),
            BatchSize::SmallInput,
        )
    });
    let configs: Vec<Value> = (0..100).map(nmstate_config).collect();
    discovery_content(&configs, &input);
    g.bench_function("discovery_content_prepared/100", |b| b.iter(|| discovery_content(black_box(&configs), &input)));
    g.finish();
}

/// A 1.2 GB full ISO as `Images::iso` plans it: the whole base file with the Ignition embed area
/// (Ignition archive, static-network ramdisk, zeros) and two kargs areas overlaid.
struct IsoFixture {
    base: Arc<BaseFile>,
    archive: Arc<Part>,
    ramdisk: Arc<Part>,
    kargs: Arc<Part>,
    _file: std::fs::File,
}

const ISO_LEN: u64 = 1_234_567_168;
const KARGS_AREAS: [u64; 2] = [1_050_624, 1_185_792];
const KARGS_AREA_LEN: usize = 1024;
const IGNITION_AREA: u64 = 1_129_472_000;
const IGNITION_AREA_LEN: u64 = 262_144;

impl IsoFixture {
    fn new() -> IsoFixture {
        // Planning never reads the file: a small temp file stands for the ISO, whose length and layout
        // the `BaseFile` describes.
        let mut file = tempfile::tempfile().expect("temp file");
        file.write_all(b"bootstream bench base").expect("write temp file");
        let base = Arc::new(BaseFile {
            path: "rhcos-live.x86_64.iso".into(),
            file: file.try_clone().expect("clone temp file"),
            len: ISO_LEN,
            sha256: Sha256::digest(b"rhcos-live.x86_64.iso").into(),
        });
        let input = discovery_input();
        let ignition = render_discovery_ignition(&input).expect("discovery ignition");
        IsoFixture {
            base,
            archive: part(ignition_archive(ignition.as_bytes())),
            ramdisk: part(ramdisk(hosts(100))),
            kargs: part(vec![b'#'; KARGS_AREA_LEN]),
            _file: file,
        }
    }

    /// The plan and its ETag, as `Images::iso` makes them.
    fn plan(&self) -> (Plan, String) {
        let (ign, ram) = (self.archive.bytes.len(), self.ramdisk.bytes.len());
        let mut overlays: Vec<(u64, Vec<Segment>)> = vec![(
            IGNITION_AREA,
            vec![
                Segment::Part { part: self.archive.clone(), offset: 0, len: ign },
                Segment::Part { part: self.ramdisk.clone(), offset: 0, len: ram },
                Segment::Zeros(IGNITION_AREA_LEN - (ign + ram) as u64),
            ],
        )];
        for offset in KARGS_AREAS {
            overlays.push((offset, vec![Segment::Part { part: self.kargs.clone(), offset: 0, len: KARGS_AREA_LEN }]));
        }
        let plan = Plan::from_file(&self.base).overlay(&mut overlays).expect("overlay");
        let etag = hex::encode(plan.digest());
        (plan, etag)
    }
}

fn range_planning(c: &mut Criterion) {
    let iso = IsoFixture::new();
    let (plan, etag) = iso.plan();
    let rep = Representation {
        plan: plan.clone(),
        etag,
        last_modified: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
        content_type: "application/x-iso9660-image",
        filename: Some(format!("{INFRA_ENV_ID}-discovery.iso")),
    };
    let range = |value: &str| {
        let mut h = HeaderMap::new();
        h.insert(header::RANGE, HeaderValue::from_str(value).unwrap());
        h
    };
    let mid = ISO_LEN / 2;
    let single = range(&format!("bytes={mid}-{}", mid + (1 << 20) - 1));
    let multi =
        range(&format!("bytes=0-32767,{}-{},{}-", IGNITION_AREA - 4096, IGNITION_AREA + 4095, ISO_LEN - (1 << 20)));

    assert_eq!(plan.len(), ISO_LEN);
    for (headers, ranges) in [(&single, 1), (&multi, 3)] {
        let r = respond(&Method::GET, headers, &rep);
        assert_eq!(r.status(), 206);
        assert_eq!(r.headers().contains_key(header::CONTENT_RANGE), ranges == 1);
    }
    eprintln!("full ISO plan: {} segments", plan.segments().len());
    let mut g = c.benchmark_group("range_planning");
    g.bench_function("full_iso_plan", |b| b.iter(|| black_box(&iso).plan()));
    g.bench_function("slice_middle", |b| b.iter(|| black_box(&plan).slice(mid, mid + (1 << 20))));
    // From 4 KiB before the embed area into the middle of the Ignition archive.
    let edge = IGNITION_AREA + iso.archive.bytes.len() as u64 / 2;
    g.bench_function("slice_across_part_edge", |b| b.iter(|| black_box(&plan).slice(IGNITION_AREA - 4096, edge)));
    g.bench_function("respond_single_range", |b| b.iter(|| respond(&Method::GET, black_box(&single), &rep)));
    g.bench_function("respond_multipart_3_ranges", |b| b.iter(|| respond(&Method::GET, black_box(&multi), &rep)));
    g.finish();
}

fn keyfile_generation(c: &mut Criterion) {
    let mut g = c.benchmark_group("keyfile_generation");
    g.sampling_mode(SamplingMode::Flat);
    for n in [1usize, 100] {
        let yamls: Vec<String> = hosts(n).into_iter().map(|h| h.network_yaml).collect();
        g.bench_with_input(BenchmarkId::new("keyfiles", n), &yamls, |b, yamls| {
            b.iter(|| yamls.iter().map(|y| staticnet::keyfiles(black_box(y)).unwrap()).collect::<Vec<_>>())
        });
    }
    g.finish();
}

fn config() -> Criterion {
    Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3)).sample_size(30)
}

criterion_group! {
    name = parts;
    config = config();
    targets = archive_build, range_planning, keyfile_generation
}
criterion_main!(parts);
