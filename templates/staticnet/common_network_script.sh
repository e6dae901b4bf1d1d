# shellcheck shell=sh
# Helpers for pre-network-manager-config.sh (bootstream static networking). Sourced, not run.
#
# Environment (all optional; the defaults are what the live initramfs needs, tests override them):
#   STATICNET_ROOT           prefix for every path the scripts read or write (default: empty, i.e. /)
#   STATICNET_SYS_CLASS_NET  where the network devices are listed (default: /sys/class/net)
#   STATICNET_SETTLE_MAX     seconds to wait at most for the device list to settle (default: 30)
#   STATICNET_SETTLE_STABLE  seconds the device list must stay unchanged to count as settled (default: 3)
#   STATICNET_TARGET_DIR     where the chosen keyfiles go (default: see staticnet_target_dir)

: "${STATICNET_ROOT:=}"
: "${STATICNET_SYS_CLASS_NET:=/sys/class/net}"
: "${STATICNET_SETTLE_MAX:=30}"
: "${STATICNET_SETTLE_STABLE:=3}"

# One directory per host (host0, host1, ...), each with keyfiles and a mac_interface.ini.
# (Both are used by the sourcing script.)
# shellcheck disable=SC2034
STATICNET_CONFIG_DIR="${STATICNET_ROOT}/etc/assisted/network"
# shellcheck disable=SC2034
STATICNET_MAP_FILE=mac_interface.ini

# Linux limits interface names to 15 bytes (IFNAMSIZ 16 with the terminating NUL).
STATICNET_IFNAME_MAX=15

staticnet_log() {
	printf 'pre-network-manager-config: %s\n' "$*"
}

# In the initramfs the live system picks keyfiles up from /etc/coreos-firstboot-network
# (coreos-copy-firstboot-network.service); on a booted system NetworkManager reads its own directory.
staticnet_target_dir() {
	if [ -n "${STATICNET_TARGET_DIR:-}" ]; then
		printf '%s\n' "$STATICNET_TARGET_DIR"
	elif [ -f "${STATICNET_ROOT}/etc/initrd-release" ]; then
		printf '%s\n' "${STATICNET_ROOT}/etc/coreos-firstboot-network"
	else
		printf '%s\n' "${STATICNET_ROOT}/etc/NetworkManager/system-connections"
	fi
}

# Names of the network devices except loopback, space-separated, in glob (sorted) order.
staticnet_list_nics() {
	nics=""
	for dev in "$STATICNET_SYS_CLASS_NET"/*; do
		[ -e "$dev" ] || continue
		name=${dev##*/}
		[ "$name" = lo ] && continue
		nics="$nics $name"
	done
	printf '%s\n' "${nics# }"
}

# Devices can still be appearing (drivers loading, udev renaming them), so wait until the list
# has not changed for STATICNET_SETTLE_STABLE seconds, giving up after STATICNET_SETTLE_MAX.
staticnet_wait_for_nics() {
	previous=""
	unchanged=0
	waited=0
	while :; do
		current=$(staticnet_list_nics)
		if [ -n "$current" ] && [ "$current" = "$previous" ]; then
			unchanged=$((unchanged + 1))
		else
			[ -n "$current" ] && [ "$current" != "$previous" ] && staticnet_log "network devices: $current"
			previous=$current
			unchanged=0
		fi
		if [ -n "$current" ] && [ "$unchanged" -ge "$STATICNET_SETTLE_STABLE" ]; then
			return 0
		fi
		if [ "$waited" -ge "$STATICNET_SETTLE_MAX" ]; then
			staticnet_log "warning: the device list did not settle within ${STATICNET_SETTLE_MAX}s; using it as it is"
			return 0
		fi
		sleep 1
		waited=$((waited + 1))
	done
}

staticnet_lowercase() {
	printf '%s\n' "$1" | tr '[:upper:]' '[:lower:]'
}

# Prints "<mac> <device>" for every local device that has an address, the MAC in lower case.
staticnet_local_macs() {
	for dev in "$STATICNET_SYS_CLASS_NET"/*; do
		name=${dev##*/}
		[ "$name" = lo ] && continue
		[ -r "$dev/address" ] || continue
		address=""
		read -r address <"$dev/address" || [ -n "$address" ] || continue
		[ -n "$address" ] || continue
		printf '%s %s\n' "$(staticnet_lowercase "$address")" "$name"
	done
}

# Prints the local device whose MAC is $1 (lower case), using the table in $2 (from
# staticnet_local_macs); prints nothing when no device has that MAC.
staticnet_nic_for_mac() {
	while read -r mac nic; do
		if [ -n "$mac" ] && [ "$mac" = "$1" ]; then
			printf '%s\n' "$nic"
			return 0
		fi
	done <<EOF
$2
EOF
	return 0
}

# Prints "<logical name> <device>" for each line "<mac>=<logical name>" of the mapping file $1
# whose MAC belongs to a local device (table $2). Nothing is printed for another host's file.
staticnet_renames_for() {
	while IFS= read -r line || [ -n "$line" ]; do
		case $line in
		*=*) ;;
		*) continue ;;
		esac
		mac=$(staticnet_lowercase "${line%%=*}")
		logical=${line#*=}
		nic=$(staticnet_nic_for_mac "$mac" "$2")
		[ -n "$nic" ] && [ -n "$logical" ] && printf '%s %s\n' "$logical" "$nic"
	done <"$1"
	return 0
}

# Prints the logical names of mapping file $1 whose MAC no local device has (table $2).
staticnet_absent_for() {
	while IFS= read -r line || [ -n "$line" ]; do
		case $line in
		*=*) ;;
		*) continue ;;
		esac
		logical=${line#*=}
		nic=$(staticnet_nic_for_mac "$(staticnet_lowercase "${line%%=*}")" "$2")
		[ -z "$nic" ] && [ -n "$logical" ] && printf '%s\n' "$logical"
	done <"$1"
	return 0
}

# Succeeds when the keyfile stem $1 belongs to one of the names in $2 (one per line): it is the
# name itself or a VLAN on it ("<name>.<id>").
staticnet_stem_of() {
	while read -r name; do
		[ -n "$name" ] || continue
		case $1 in
		"$name" | "$name".?*) return 0 ;;
		esac
	done <<EOF
$2
EOF
	return 1
}

# The name of VLAN <suffix> on device $1: "<device>.<suffix>", the device part shortened when the
# whole would not fit in an interface name.
staticnet_vlan_name() {
	full="$1.$2"
	if [ "${#full}" -le "$STATICNET_IFNAME_MAX" ]; then
		printf '%s\n' "$full"
		return 0
	fi
	keep=$((STATICNET_IFNAME_MAX - ${#2} - 1))
	if [ "$keep" -lt 1 ]; then
		printf '%s\n' "$full"
		return 0
	fi
	printf '%s.%s\n' "$(printf '%s' "$1" | cut -c "1-$keep")" "$2"
}

# Translates the name $1 (an interface or a connection name from a keyfile) with the renames $2:
# a logical name becomes its device, "<logical>.<vlan>" becomes the VLAN name on that device, any
# other name is printed unchanged.
staticnet_translate() {
	while read -r logical nic; do
		if [ -n "$logical" ] && [ "$1" = "$logical" ]; then
			printf '%s\n' "$nic"
			return 0
		fi
	done <<EOF
$2
EOF
	while read -r logical nic; do
		[ -n "$logical" ] || continue
		case $1 in
		"$logical".?*)
			staticnet_vlan_name "$nic" "${1#"$logical".}"
			return 0
			;;
		esac
	done <<EOF
$2
EOF
	printf '%s\n' "$1"
}

# Copies keyfile $1 to $2, translating with the renames $3 the values that name interfaces or
# connections. Each value is translated once, from the original, so swapped names (eth0 <-> eth1)
# come out right.
staticnet_rewrite_keyfile() {
	while IFS= read -r line || [ -n "$line" ]; do
		case $line in
		id=* | interface-name=* | parent=* | master=* | controller=*)
			printf '%s=%s\n' "${line%%=*}" "$(staticnet_translate "${line#*=}" "$3")"
			;;
		*)
			printf '%s\n' "$line"
			;;
		esac
	done <"$1" >"$2"
}
