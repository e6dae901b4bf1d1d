#!/usr/bin/env bash
# Fills fuzz/corpus/<target>/ with seed inputs, at run time, from the shared read-only fixtures
# next to the repository (../shared/fixtures, or $SHARED/fixtures) and from hand-written
# examples below. Nothing here is committed: corpus/ is in fuzz/.gitignore.
#
# Needs: xz, xorriso (to pull files out of the fixture ISOs), jq, cpio, gzip; python3 with
# PyYAML is optional (JSON variants of the example CRs and of the NMStateConfig's spec.config).
#
# Usage: bash fuzz/seed.sh        (idempotent: existing seeds are overwritten, nothing removed)
set -euo pipefail

FUZZ_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$FUZZ_DIR")
SHARED=${SHARED:-$REPO/../shared}
FIX=$SHARED/fixtures
CORPUS=$FUZZ_DIR/corpus
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

TARGETS=(iso9660 kargs_igninfo miniso initrd_cpio nmstate_keyfiles ignition_merge range_header cr_intake kube_write)
for t in "${TARGETS[@]}"; do mkdir -p "$CORPUS/$t"; done

if [ ! -d "$FIX" ]; then
    echo "seed.sh: no fixtures at $FIX; only hand-written seeds" >&2
fi

sep() { printf '\0--\0'; }

# Extracts /$2 of ISO $1 to stdout (empty output if it does not exist).
iso_cat() {
    local out="$TMP/extract.$$"
    rm -f "$out"
    xorriso -osirrox on -indev "$1" -extract "/$2" "$out" >/dev/null 2>&1 || true
    [ -f "$out" ] && cat "$out"
    rm -f "$out"
}

# ---------------------------------------------------------------- ISO fixtures
for xzfile in "$FIX"/coreos-installer/iso/*.iso.xz; do
    [ -e "$xzfile" ] || continue
    name=$(basename "$xzfile" .iso.xz)
    iso="$TMP/$name.iso"
    xz -dc "$xzfile" >"$iso"

    # iso9660: the image from block 16 on (the target puts a zero system area in front).
    tail -c +32769 "$iso" >"$CORPUS/iso9660/$name"

    # kargs_igninfo: igninfo | kargs | features | system-area tail | edits | files...
    {
        iso_cat "$iso" coreos/igninfo.json; sep
        iso_cat "$iso" coreos/kargs.json; sep
        iso_cat "$iso" coreos/features.json; sep
        head -c 32768 "$iso" | tail -c 96; sep
        printf 'a console=ttyS0,115200n8\nd ignition.firstboot\nr ignition.platform.id=metal=qemu\n'
        for path in $(xorriso -osirrox on -indev "$iso" -find / -type f 2>/dev/null | tr -d "'" |
            grep -Ei '\.cfg$|zipl\.prm$'); do
            sep; printf '%s\n' "${path#/}"; iso_cat "$iso" "${path#/}"
        done
    } >"$CORPUS/kargs_igninfo/$name"

    # miniso: the packed minimal ISO, where there is one.
    iso_cat "$iso" coreos/miniso.dat >"$CORPUS/miniso/$name"
    [ -s "$CORPUS/miniso/$name" ] || rm -f "$CORPUS/miniso/$name"
done
# The full ISO the miniso target unpacks against (its own miniso.dat verifies). Not a seed.
if [ -e "$FIX/coreos-installer/iso/embed-areas-2023-07.x86_64.iso.xz" ]; then
    xz -dc "$FIX/coreos-installer/iso/embed-areas-2023-07.x86_64.iso.xz" >"$CORPUS/miniso-full.iso"
fi
# Hand-written miniso.dat headers: bad version, empty table, one entry with a tiny xz stream.
printf 'MINISO\0\0\002\005hello' >"$CORPUS/miniso/bad-version"
printf 'MINISO\0\0\001\0050.1.0\000' >"$CORPUS/miniso/empty-table"
{
    printf 'MINISO\0\0\001\0050.1.0\001\020\030\001'
    head -c 32 /dev/zero
    printf 'minimal iso bytes' | xz --format=xz --check=crc64 >"$TMP/s.xz"
    printf "\\$(printf '%03o' "$(stat -c %s "$TMP/s.xz")")"
    cat "$TMP/s.xz"
} >"$CORPUS/miniso/one-entry"

# ---------------------------------------------------------------- initrds
for f in "$FIX"/coreos-installer/initrd/*; do
    [ -e "$f" ] || continue
    case "$f" in
    *.xz) xz -dc "$f" >"$CORPUS/initrd_cpio/$(basename "$f" .xz)" ;;
    *) cp "$f" "$CORPUS/initrd_cpio/$(basename "$f")" ;;
    esac
done
mkdir -p "$TMP/tree/etc/coreos" "$TMP/tree/usr/bin"
printf '{"ignition":{"version":"3.2.0"}}' >"$TMP/tree/config.ign"
printf 'x' >"$TMP/tree/etc/coreos-live-initramfs"
ln -s ../etc/coreos "$TMP/tree/usr/bin/link"
(cd "$TMP/tree" && find . -mindepth 1 | sort | cpio --quiet -o -H newc --reproducible) >"$TMP/a.cpio"
cp "$TMP/a.cpio" "$CORPUS/initrd_cpio/plain.cpio"
gzip -9n <"$TMP/a.cpio" >"$CORPUS/initrd_cpio/plain.cpio.gz"
{
    gzip -9n <"$TMP/a.cpio"
    head -c 3 /dev/zero # pad the gzip member ...
    cat "$TMP/a.cpio"    # ... then an uncompressed archive (the next one must be 4-aligned)
} >"$CORPUS/initrd_cpio/concatenated"

# ---------------------------------------------------------------- nmstate
for f in "$FIX"/coreos-installer/customize/*nmstate*; do
    [ -e "$f" ] && cp "$f" "$CORPUS/nmstate_keyfiles/$(basename "$f")"
done
if python3 -c 'import yaml' 2>/dev/null && [ -e "$FIX/assisted/examples/nmstate.yaml" ]; then
    python3 - "$FIX/assisted/examples/nmstate.yaml" "$CORPUS/nmstate_keyfiles/example-nmstateconfig.yaml" <<'EOF'
import sys, yaml
doc = yaml.safe_load(open(sys.argv[1]))
open(sys.argv[2], "w").write(yaml.safe_dump(doc["spec"]["config"], sort_keys=False))
EOF
fi
cat >"$CORPUS/nmstate_keyfiles/bond-vlan.yaml" <<'EOF'
# map: eth0 eth1
interfaces:
  - name: bond0
    type: bond
    state: up
    link-aggregation:
      mode: active-backup
      port: [eth0, eth1]
    ipv4: {enabled: false}
  - name: bond0.100
    type: vlan
    state: up
    vlan: {base-iface: bond0, id: 100}
    ipv4:
      enabled: true
      dhcp: false
      address: [{ip: 10.0.100.5, prefix-length: 24}]
    ipv6:
      enabled: true
      autoconf: false
      dhcp: false
      address: [{ip: "fd00::5", prefix-length: 64}]
dns-resolver:
  config:
    server: [10.0.100.1]
routes:
  config:
    - {destination: 0.0.0.0/0, next-hop-address: 10.0.100.1, next-hop-interface: bond0.100}
EOF
cat >"$CORPUS/nmstate_keyfiles/mac-identifier.yaml" <<'EOF'
interfaces:
  - name: ens3
    type: ethernet
    state: up
    identifier: mac-address
    mac-address: "52:54:00:aa:bb:cc"
    ipv4: {enabled: true, dhcp: true}
EOF

# ---------------------------------------------------------------- ignition
for f in "$FIX"/coreos-installer/customize/*.ign; do
    [ -e "$f" ] && cp "$f" "$CORPUS/ignition_merge/$(basename "$f")"
done
cat >"$CORPUS/ignition_merge/override-files.json" <<'EOF'
{"ignition":{"version":"3.2.0"},"storage":{"files":[{"path":"/etc/motd","overwrite":true,"mode":420,"contents":{"source":"data:,hello%20world"}},{"path":"/etc/hosts","append":[{"source":"data:text/plain;base64,MTI3LjAuMC4xIGZ1enoK"}]}],"links":[{"path":"/usr/local/bin/x","target":"/bin/true"}],"directories":[{"path":"/var/lib/fuzz","mode":493}]}}
EOF
cat >"$CORPUS/ignition_merge/override-units.json" <<'EOF'
{"ignition":{"version":"3.1.0","config":{"merge":[{"source":"http://example.com/a.ign","httpHeaders":[{"name":"X-A","value":"1"}]}]},"security":{"tls":{"certificateAuthorities":[{"source":"data:,pem"}]}},"proxy":{"httpProxy":"http://p:3128","noProxy":["a","b"]}},"systemd":{"units":[{"name":"agent.service","enabled":false,"dropins":[{"name":"10-x.conf","contents":"[Service]\nEnvironment=A=1\n"}]},{"name":"fuzz.service","enabled":true,"contents":"[Unit]\nDescription=x\n[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n"}]},"passwd":{"users":[{"name":"core","sshAuthorizedKeys":["ssh-rsa AAAA x"]},{"name":"fuzz","groups":["wheel"]}],"groups":[{"name":"g","gid":1234}]}}
EOF
cat >"$CORPUS/ignition_merge/override-storage.json" <<'EOF'
{"ignition":{"version":"3.2.0"},"storage":{"disks":[{"device":"/dev/vdb","wipeTable":true,"partitions":[{"number":1,"label":"data","sizeMiB":1024,"resize":true}]}],"filesystems":[{"device":"/dev/disk/by-partlabel/data","format":"xfs","path":"/var/data","options":["-L","data"],"wipeFilesystem":true}],"luks":[{"name":"data","device":"/dev/vdb1","clevis":{"tpm2":true}}],"raid":[{"name":"md0","level":"raid1","devices":["/dev/vdc","/dev/vdd"]}]},"kernelArguments":{"shouldExist":["a=1"],"shouldNotExist":["b"]}}
EOF
printf '{"ignition":{"version":"3.2.0"},"passwd":{"users":[{"name":"core","sshAuthorizedKeys":["k1"]}]}}\0{"ignition":{"version":"3.1.0"},"passwd":{"users":[{"name":"core","sshAuthorizedKeys":["k2"]}]},"storage":{"files":[{"path":"/a","contents":{"source":"data:,x"}}]}}' \
    >"$CORPUS/ignition_merge/parent-child"

# ---------------------------------------------------------------- Range headers
i=0
while IFS= read -r line; do
    i=$((i + 1))
    printf '%b' "$line" >"$CORPUS/range_header/seed-$i"
done <<'EOF'
1000\nbytes=0-99
1000\nbytes=-500
1000\nbytes=500-
1000\nbytes=0-0,-1
1000\nbytes=0-99, 200-299 ,900-
1000\nbytes=1000-
0\nbytes=0-
1000\nitems=0-1
1000\nbytes=5-4
18446744073709551615\nbytes=0-,0-
1048576\nBYTES = 1-2,3-4,5-6,7-8,9-10
1000\nbytes=,,,
1000\nbytes=-0
EOF

# ---------------------------------------------------------------- custom resources
for f in "$FIX"/assisted/examples/*.yaml; do
    [ -e "$f" ] && cp "$f" "$CORPUS/cr_intake/$(basename "$f")"
done
if ls "$FIX"/assisted/examples/*.yaml >/dev/null 2>&1; then
    for f in "$FIX"/assisted/examples/*.yaml; do printf -- '---\n'; cat "$f"; printf '\n'; done \
        >"$CORPUS/cr_intake/all-examples.multidoc.yaml"
    if python3 -c 'import yaml' 2>/dev/null; then
        python3 - "$CORPUS/cr_intake" "$FIX"/assisted/examples/*.yaml <<'EOF'
import json, os, sys, yaml
out = sys.argv[1]
for path in sys.argv[2:]:
    for i, doc in enumerate(yaml.safe_load_all(open(path))):
        if doc is not None:
            name = os.path.basename(path).rsplit(".", 1)[0]
            with open(os.path.join(out, f"{name}.{i}.json"), "w") as f:
                json.dump(doc, f, default=str)
EOF
    fi
fi
cat >"$CORPUS/cr_intake/secret.json" <<'EOF'
{"apiVersion":"v1","kind":"Secret","metadata":{"name":"pull-secret","namespace":"spoke","labels":{"a":"b"}},"type":"kubernetes.io/dockerconfigjson","stringData":{".dockerconfigjson":"{\"auths\":{}}"}}
EOF
cat >"$CORPUS/cr_intake/infraenv-status.json" <<'EOF'
{"apiVersion":"agent-install.openshift.io/v1beta1","kind":"InfraEnv","metadata":{"name":"ie","namespace":"ns","annotations":{"x":"y"}},"spec":{"pullSecretRef":{"name":"pull-secret"},"cpuArchitecture":"aarch64","kernelArguments":[{"operation":"append","value":"console=ttyS0"}],"nmStateConfigLabelSelector":{"matchLabels":{"a":"b"},"matchExpressions":[{"key":"k","operator":"In","values":["v"]}]},"ignitionConfigOverride":"{\"ignition\":{\"version\":\"3.2.0\"}}","proxy":{"httpProxy":"http://p:3128","noProxy":"a,b"}},"status":{"conditions":[{"type":"ImageCreated","status":"True","reason":"InfraEnvAvailable","message":"ok","lastTransitionTime":"2026-01-01T00:00:00Z"}],"isoDownloadURL":"http://x/y.iso"}}
EOF

# ---------------------------------------------------------------- the API's write path
# Each seed: a selector byte (bits 0-1 target: InfraEnv, Secret, Event, Namespace; bits 2-6 content
# type: JSON, merge, JSON patch, strategic, apply YAML, protobuf; bit 7 the status), a flags byte
# (bit 0 dryRun, bits 1-2 fieldValidation, bit 3 force, bit 4 fieldManager, bits 5-7 verb: POST,
# PUT, DELETE, PATCH), then the body; up to four requests joined by \0--\0.
python3 - "$CORPUS/kube_write" "$REPO/fixtures/kubectl-protobuf" <<'EOF'
import json, os, sys
out, pb = sys.argv[1], sys.argv[2]
PATCH, PUT, DELETE, POST = 3 << 5, 1 << 5, 2 << 5, 0
IE, SECRET, EVENT, NS = 0, 1, 2, 3
JSON, MERGE, JPATCH, SMP, APPLY, PROTO = (i << 2 for i in range(6))
def req(selector, flags, body):
    return bytes([selector, flags]) + (body if isinstance(body, bytes) else body.encode())
seeds = {
    "merge-infraenv": [req(IE | MERGE, PATCH, json.dumps({"spec": {"sshAuthorizedKey": "k", "additionalNTPSources": ["a"]}}))],
    "copy-event": [req(EVENT | JPATCH, PATCH | 1, json.dumps([{"op": "copy", "from": "/note", "path": "/note2"}, {"op": "add", "path": "/l", "value": [1]}, {"op": "copy", "from": "/l", "path": "/l/-"}]))],
    "apply-infraenv": [req(IE | APPLY, PATCH | 16 | 8, "apiVersion: agent-install.openshift.io/v1beta1\nkind: InfraEnv\nmetadata: {name: ie}\nspec:\n  pullSecretRef: {name: s}\n  kernelArguments:\n  - {operation: append, value: quiet}\n")],
    "apply-event-json": [req(EVENT | APPLY, PATCH | 16, json.dumps({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e", "finalizers": ["a/b"]}, "note": [[["x"]]]}))],
    "smp-secret": [req(SECRET | SMP, PATCH, json.dumps({"metadata": {"finalizers": ["a/b", "c/d"], "$setElementOrder/finalizers": ["c/d", "a/b"], "labels": {"x": None}}, "stringData": {"k": "v"}}))],
    "create-event": [req(EVENT | JSON, POST, json.dumps({"apiVersion": "v1", "kind": "Event", "metadata": {"generateName": "ev-"}, "involvedObject": {"name": "x", "namespace": "ns"}}))],
    "status-infraenv": [req(0x80 | IE | MERGE, PATCH, json.dumps({"status": {"isoDownloadURL": "http://x", "conditions": [{"type": "ImageCreated", "status": "True", "reason": "r", "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}))],
    "delete-secret": [req(SECRET | JSON, DELETE, json.dumps({"dryRun": ["All"], "preconditions": {"uid": "x"}}))],
    "update-then-patch": [req(NS | JSON, PUT, json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n", "resourceVersion": "1"}})),
                           req(NS | JPATCH, PATCH, json.dumps([{"op": "replace", "path": "/metadata/name", "value": "m"}]))],
}
pbfile = os.path.join(pb, "namespace.pb")
if os.path.exists(pbfile):
    seeds["protobuf-namespace"] = [req(NS | PROTO, POST, open(pbfile, "rb").read())]
for name, reqs in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(b"\0--\0".join(reqs))
EOF

for t in "${TARGETS[@]}"; do
    printf '%-18s %3d seeds\n' "$t" "$(find "$CORPUS/$t" -type f | wc -l)"
done
