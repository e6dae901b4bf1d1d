#!/bin/sh
# Make sure the discovery agent image is present before agent.service starts it. Registries
# or networks that are not reachable yet are retried with a growing delay (5 s, doubling, at
# most 5 min) instead of failing the unit straight away.
image="$1"
podman image exists "$image" && exit 0
delay=5
until podman pull "$image"; do
	echo "bootstream-agent-pull: pulling $image failed, next attempt in ${delay}s" >&2
	sleep "$delay"
	delay=$((delay * 2))
	if [ "$delay" -gt 300 ]; then
		delay=300
	fi
done
