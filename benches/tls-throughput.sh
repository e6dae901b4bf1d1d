#!/usr/bin/env bash
# HTTPS throughput and server CPU: bootstream (rustls, image bytes read and encrypted per download)
# beside nginx with `ssl` serving a pre-built copy of the same ISO (nginx cannot sendfile over TLS
# without kTLS either), same certificate, same client (wrk), side by side, alternating rounds.
#
#   bash benches/tls-throughput.sh [ISO] [SECONDS] [ROUNDS]
#
# ISO defaults to the 1 GiB base ISO `cargo bench --bench serve` generates in target/bench-serve/.
# Needs nginx-light, wrk, openssl and curl (Debian packages) and a release build (cargo build --release).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

ISO=${1:-$(ls target/bench-serve/base-*.iso 2>/dev/null | head -1)}
SECONDS_EACH=${2:-4}
ROUNDS=${3:-3}
BIN=${BOOTSTREAM_BIN:-target/release/bootstream}
[ -f "$ISO" ] || { echo "no base ISO: run cargo bench --bench serve first, or pass one" >&2; exit 1; }
[ -x "$BIN" ] || { echo "no $BIN: cargo build --release" >&2; exit 1; }

W=$(mktemp -d /tmp/bootstream-tls-bench.XXXXXX)
chmod 755 "$W" # nginx's workers run as nobody
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$W"
}
trap cleanup EXIT

# A CA and a server certificate it signed (ECDSA P-256, as both servers will use).
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$W/ca.key" -out "$W/ca.pem" \
    -days 1 -subj "/CN=bench CA" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$W/key.pem" -out "$W/srv.csr" \
    -subj /CN=localhost 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' > "$W/ext.cnf"
openssl x509 -req -in "$W/srv.csr" -CA "$W/ca.pem" -CAkey "$W/ca.key" -CAcreateserial -out "$W/cert.pem" \
    -days 1 -extfile "$W/ext.cnf" 2>/dev/null

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
BS_PORT=$(free_port)
NG_PORT=$(free_port)

"$BIN" serve --data-dir "$W/data" --listen "127.0.0.1:$BS_PORT" --tls-cert "$W/cert.pem" --tls-key "$W/key.pem" \
    --os-image "4.20:x86_64:$ISO" > "$W/serve.out" 2> "$W/serve.err" &
BS_PID=$!
PIDS+=("$BS_PID")
BS="https://127.0.0.1:$BS_PORT"
for _ in $(seq 600); do
    curl -sf --cacert "$W/ca.pem" "$BS/ready" > /dev/null && break
    sleep 0.1
done
cat > "$W/ie.yaml" <<'EOF'
apiVersion: v1
kind: Secret
metadata: {name: ps, namespace: bench}
stringData:
  .dockerconfigjson: '{"auths":{"quay.io":{"auth":"dXNlcjpwYXNz"}}}'
---
apiVersion: agent-install.openshift.io/v1beta1
kind: InfraEnv
metadata: {name: ie, namespace: bench}
spec:
  pullSecretRef: {name: ps}
EOF
CLI=("$BIN" --token-file "$W/data/api-token" --certificate-authority "$W/ca.pem")
"${CLI[@]}" apply --server "$BS" -f "$W/ie.yaml" > /dev/null
ISO_URL=""
for _ in $(seq 600); do
    ISO_URL=$("${CLI[@]}" get --server "$BS" infraenv ie -n bench -o json |
        python3 -c 'import json,sys; print(json.load(sys.stdin).get("status",{}).get("isoDownloadURL",""))')
    [ -n "$ISO_URL" ] && break
    sleep 0.1
done
ISO_PATH="/${ISO_URL#https://*/}"

# nginx serves the same bytes: the discovery ISO as bootstream assembles it, downloaded once.
mkdir -p "$W/www" "$W/tmp"
curl -sf --cacert "$W/ca.pem" -o "$W/www/full.iso" "$BS$ISO_PATH"
chmod 644 "$W/www/full.iso" "$W/key.pem"
cat > "$W/nginx.conf" <<EOF
worker_processes auto;
daemon off;
pid $W/nginx.pid;
error_log $W/nginx-error.log;
events { worker_connections 4096; }
http {
  sendfile on;
  tcp_nopush on;
  access_log off;
  keepalive_requests 1000000;
  client_body_temp_path $W/tmp; proxy_temp_path $W/tmp; fastcgi_temp_path $W/tmp;
  uwsgi_temp_path $W/tmp; scgi_temp_path $W/tmp;
  server {
    listen 127.0.0.1:$NG_PORT ssl;
    ssl_certificate $W/cert.pem;
    ssl_certificate_key $W/key.pem;
    root $W/www;
  }
}
EOF
nginx -c "$W/nginx.conf" &
NG_PID=$!
PIDS+=("$NG_PID")
for _ in $(seq 100); do curl -sf -o /dev/null --cacert "$W/ca.pem" -r 0-0 "https://127.0.0.1:$NG_PORT/full.iso" && break; sleep 0.1; done

BYTES=$(stat -c %s "$W/www/full.iso")
echo "ISO $BYTES bytes; bootstream $BS, nginx https://127.0.0.1:$NG_PORT; $SECONDS_EACH s per measurement, $ROUNDS rounds"

# Server CPU in clock ticks: utime + stime of the process and its children's threads (nginx: all its processes).
ticks() {
    local total=0
    for p in "$@"; do
        for t in /proc/"$p"/task/*/stat; do
            total=$((total + $(awk '{print $14 + $15}' "$t" 2>/dev/null || echo 0)))
        done
    done
    echo "$total"
}
nginx_pids() { echo "$NG_PID" $(pgrep -P "$NG_PID" || true); }
HZ=$(getconf CLK_TCK)

measure() { # name url clients pids...
    local name=$1 url=$2 clients=$3
    shift 3
    local before after out gbytes secs
    before=$(ticks "$@")
    out=$(wrk -t "$(( clients < 2 ? 1 : 2 ))" -c "$clients" -d "${SECONDS_EACH}s" "$url" 2>&1)
    after=$(ticks "$@")
    if echo "$out" | grep -q "Non-2xx"; then
        echo "$name answered errors: $out" >&2
        exit 1
    fi
    # wrk counts bytes read, response heads included: negligible beside 1 GiB bodies.
    gbytes=$(echo "$out" | awk '/Requests\/sec/ {r=$2} /read/ {for(i=1;i<=NF;i++) if($i=="read") {v=$(i-1)}} END {print v}')
    secs=$SECONDS_EACH
    python3 - "$name" "$clients" "$gbytes" "$secs" "$before" "$after" "$HZ" <<'PY'
import sys
name, clients, read, secs, before, after, hz = sys.argv[1:]
units = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}
num = read.rstrip("KMGTB")
unit = read[len(num):] or "B"
gb = float(num) * units[unit] / 1e9
cpu = (int(after) - int(before)) / int(hz)
print(f"{name:10s} clients {clients:>2s}: {gb / float(secs):6.2f} GB/s, server CPU {cpu / gb if gb else float('nan'):.3f} s/GB")
PY
}

for round in $(seq "$ROUNDS"); do
    for clients in 1 8; do
        measure bootstream "$BS$ISO_PATH" "$clients" "$BS_PID"
        measure nginx "https://127.0.0.1:$NG_PORT/full.iso" "$clients" $(nginx_pids)
    done
done
