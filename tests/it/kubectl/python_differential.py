"""Debian's Python Kubernetes client (python3-kubernetes) through the steps of the differential test
(differential.rs), against whichever server KUBECONFIG names: it prints what it gets back, one line
a step, with the values no two servers share (uids, resourceVersions, times) replaced, so that the
test compares the lines the real kube-apiserver and `bootstream serve` make it print.

Usage: python3 python_differential.py KUBECONFIG NAMESPACE
"""

import json
import sys

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

kubeconfig, ns = sys.argv[1], sys.argv[2]
config.load_kube_config(config_file=kubeconfig)
api = client.ApiClient()
custom = client.CustomObjectsApi(api)
core = client.CoreV1Api(api)
group, version, plural = "agent-install.openshift.io", "v1beta1", "nmstateconfigs"


def normalized(value):
    if isinstance(value, dict):
        return {
            k: (f"<{k}>" if k in ("uid", "resourceVersion", "creationTimestamp", "time") and isinstance(v, str)
                else normalized(v))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [normalized(v) for v in value]
    return value


def show(step, value):
    print(step, json.dumps(normalized(value), sort_keys=True), flush=True)


def attempt(step, call):
    """A call that may fail: what it returned, or the error's status and body."""
    try:
        show(step, call())
    except ApiException as e:
        show(step + " error", {"status": e.status, "body": json.loads(e.body)})


def nmstateconfig(name, mac="52:54:00:00:00:01"):
    return {
        "apiVersion": f"{group}/{version}", "kind": "NMStateConfig",
        "metadata": {"name": name, "namespace": ns, "labels": {"rack": "r1"}},
        "spec": {
            "config": {"interfaces": [{"name": "eth0", "type": "ethernet", "state": "up", "mac-address": mac}]},
            "interfaces": [{"name": "eth0", "macAddress": mac}],
        },
    }


start = custom.list_namespaced_custom_object(group, version, ns, plural)["metadata"]["resourceVersion"]
attempt("create", lambda: custom.create_namespaced_custom_object(group, version, ns, plural, nmstateconfig("p1")))
attempt("create again", lambda: custom.create_namespaced_custom_object(group, version, ns, plural, nmstateconfig("p1")))
attempt("get missing", lambda: custom.get_namespaced_custom_object(group, version, ns, plural, "nope"))
bad = nmstateconfig("p2")
bad["spec"]["interfaces"][0]["macAddress"] = 7
attempt("create invalid", lambda: custom.create_namespaced_custom_object(group, version, ns, plural, bad))
attempt("dry run", lambda: custom.create_namespaced_custom_object(group, version, ns, plural, nmstateconfig("p3"), dry_run="All"))
attempt("patch", lambda: custom.patch_namespaced_custom_object(group, version, ns, plural, "p1", {"metadata": {"labels": {"color": "red"}}}))
stale = nmstateconfig("p1")
stale["metadata"]["resourceVersion"] = "1"
attempt("replace stale", lambda: custom.replace_namespaced_custom_object(group, version, ns, plural, "p1", stale))
attempt("list", lambda: custom.list_namespaced_custom_object(group, version, ns, plural, label_selector="color=red"))
attempt("delete", lambda: custom.delete_namespaced_custom_object(group, version, ns, plural, "p1"))
attempt("delete again", lambda: custom.delete_namespaced_custom_object(group, version, ns, plural, "p1"))

secret = client.V1Secret(metadata=client.V1ObjectMeta(name="ps"), string_data={"k": "v"})
attempt("create secret", lambda: api.sanitize_for_serialization(core.create_namespaced_secret(ns, secret)))
attempt("patch secret", lambda: api.sanitize_for_serialization(
    core.patch_namespaced_secret("ps", ns, {"metadata": {"finalizers": ["example.com/f"]}})))
attempt("read secret", lambda: api.sanitize_for_serialization(core.read_namespaced_secret("ps", ns)))

# The events since the first list, as a Python script watching would see them.
w = watch.Watch()
for event in w.stream(custom.list_namespaced_custom_object, group, version, ns, plural, resource_version=start,
                      timeout_seconds=2):
    show("event " + event["type"], event["object"])
print("done", flush=True)
