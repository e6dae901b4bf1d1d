"""Debian's Python Kubernetes client (python3-kubernetes) against `bootstream serve`, as a script of a
hub user would use it: list InfraEnvs and Secrets, then watch from the list's resourceVersion until the
InfraEnv is labelled color=red (which the test does once this prints "ready").

Usage: python3 python_client.py KUBECONFIG NAMESPACE
"""

import sys

from kubernetes import client, config, watch

kubeconfig, ns = sys.argv[1], sys.argv[2]
config.load_kube_config(config_file=kubeconfig)
custom = client.CustomObjectsApi()
group, version, plural = "agent-install.openshift.io", "v1beta1", "infraenvs"

listed = custom.list_namespaced_custom_object(group, version, ns, plural)
for item in listed["items"]:
    condition = item["status"]["conditions"][0]
    print("listed", item["metadata"]["name"], condition["type"], condition["reason"])
one = custom.get_namespaced_custom_object(group, version, ns, plural, listed["items"][0]["metadata"]["name"])
print("got", one["metadata"]["name"], one["status"]["isoDownloadURL"].startswith("http://"))

core = client.CoreV1Api()
for secret in core.list_namespaced_secret(ns).items:
    print("secret", secret.metadata.name, secret.type, ",".join(sorted(secret.data)))
print("namespace", core.read_namespace(ns).status.phase)
print("ready", flush=True)

w = watch.Watch()
for event in w.stream(
    custom.list_namespaced_custom_object,
    group,
    version,
    ns,
    plural,
    resource_version=listed["metadata"]["resourceVersion"],
    timeout_seconds=30,
):
    obj = event["object"]
    color = (obj["metadata"].get("labels") or {}).get("color", "")
    print("event", event["type"], obj["metadata"]["name"], color, flush=True)
    if color == "red":
        w.stop()
        break
else:
    print("the watch ended without the change")
    sys.exit(1)
