#!/bin/sh
# Static network configuration for a bootstream discovery host, run in the live initramfs before
# NetworkManager starts (pre-network-manager-config.service).
#
# /etc/assisted/network holds one directory per configured host (host0, host1, ...). Each has the
# NetworkManager keyfiles generated from that host's nmstate YAML, written with the logical
# interface names the user chose (eth0, ...), and mac_interface.ini, lines "<mac>=<logical name>".
# This script finds the directories whose MACs belong to this machine, rewrites the logical names
# to the names the kernel gave the devices (file names, interface-name=, VLAN parents, ...) and
# installs the result where the live system takes its first-boot network configuration from.
# Keyfiles of mapped interfaces whose MAC is not on this machine (and VLANs on them) are left
# out: their interface name would be a guess.
#
# Paths can be redirected for testing; see common_network_script.sh, which is looked for beside
# this script unless STATICNET_COMMON names it.

set -u
umask 077

case $0 in
*/*) staticnet_bindir=${0%/*} ;;
*) staticnet_bindir=/usr/local/bin ;;
esac
# shellcheck source-path=SCRIPTDIR source=common_network_script.sh
. "${STATICNET_COMMON:-$staticnet_bindir/common_network_script.sh}"

# Copies the keyfiles of host directory $1 into the work directory $2, translated with the
# renames $3, except those of the logical interfaces $5 this machine lacks. With $4 = renamed
# only the files whose name changes are taken, with $4 = others only the rest; the first call
# wins when two files end up with the same name.
collect_keyfiles() {
	for keyfile in "$1"/*.nmconnection; do
		[ -f "$keyfile" ] || continue
		source_name=${keyfile##*/}
		stem=${source_name%.nmconnection}
		if staticnet_stem_of "$stem" "$5"; then
			[ "$4" = others ] && staticnet_log "${1##*/}/$source_name not used: its interface is not on this machine"
			continue
		fi
		new_stem=$(staticnet_translate "$stem" "$3")
		if [ "$new_stem" = "$stem" ]; then
			[ "$4" = others ] || continue
		else
			[ "$4" = renamed ] || continue
		fi
		if [ -e "$2/$new_stem.nmconnection" ]; then
			staticnet_log "warning: ${1##*/}/$source_name not used: $new_stem.nmconnection is taken already"
			continue
		fi
		staticnet_rewrite_keyfile "$keyfile" "$2/$new_stem.nmconnection" "$3"
		staticnet_log "${1##*/}/$source_name becomes $new_stem.nmconnection"
	done
}

staticnet_log "start"
if [ ! -d "$STATICNET_CONFIG_DIR" ]; then
	staticnet_log "no $STATICNET_CONFIG_DIR; nothing to do"
	exit 0
fi

staticnet_wait_for_nics
local_macs=$(staticnet_local_macs)
if [ -z "$local_macs" ]; then
	staticnet_log "no network device with a MAC address; nothing to do"
	exit 0
fi

work_dir=$(mktemp -d "${TMPDIR:-/tmp}/staticnet.XXXXXX") || {
	staticnet_log "error: cannot create a work directory"
	exit 1
}
trap 'rm -rf "$work_dir"' EXIT

matched=""
for host_dir in "$STATICNET_CONFIG_DIR"/host*; do
	[ -d "$host_dir" ] || continue
	host=${host_dir##*/}
	if [ ! -f "$host_dir/$STATICNET_MAP_FILE" ]; then
		staticnet_log "warning: $host has no $STATICNET_MAP_FILE; skipped"
		continue
	fi
	renames=$(staticnet_renames_for "$host_dir/$STATICNET_MAP_FILE" "$local_macs")
	[ -n "$renames" ] || continue
	if [ -n "$matched" ]; then
		staticnet_log "warning: $host matches this machine too (after$matched); its files fill in only names not taken"
	fi
	matched="$matched $host"
	while read -r logical nic; do
		staticnet_log "$host: logical interface $logical is $nic here"
	done <<EOF
$renames
EOF
	absent=$(staticnet_absent_for "$host_dir/$STATICNET_MAP_FILE" "$local_macs")
	collect_keyfiles "$host_dir" "$work_dir" "$renames" renamed "$absent"
	collect_keyfiles "$host_dir" "$work_dir" "$renames" others "$absent"
done

if [ -z "$matched" ]; then
	staticnet_log "no host directory lists a MAC address of this machine; nothing to do"
	exit 0
fi
set -- "$work_dir"/*.nmconnection
if [ ! -f "$1" ]; then
	staticnet_log "warning:$matched matched but provided no keyfiles; nothing to do"
	exit 0
fi

target_dir=$(staticnet_target_dir)
(umask 022 && mkdir -p "$target_dir") || exit 1
# Connections from elsewhere would compete with this host's: whatever was put into the target
# directory before, and the profile nm-initrd-generator writes from kernel arguments.
for old in "$target_dir"/* "${STATICNET_ROOT}/run/NetworkManager/system-connections/default_connection.nmconnection"; do
	if [ -f "$old" ] || [ -L "$old" ]; then
		rm -f "$old" && staticnet_log "removed $old"
	fi
done
status=0
for keyfile in "$@"; do
	if cp "$keyfile" "$target_dir/" && chmod 0600 "$target_dir/${keyfile##*/}"; then
		staticnet_log "installed $target_dir/${keyfile##*/}"
	else
		staticnet_log "error: cannot install $target_dir/${keyfile##*/}"
		status=1
	fi
done
staticnet_log "done"
exit "$status"
