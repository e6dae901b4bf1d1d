"""Loads an ironic-python-agent configuration file the way the agent itself does and reports
what the agent makes of it, as one JSON object on stdout.

Used by tests/it/content/ipa_conf.rs with the Python of a virtualenv that holds ironic-python-agent
from PyPI (.ci/test makes it: target/ipa-venv). The options are the agent's own: importing its
entry point module registers them on oslo.config's global ConfigOpts, as starting the agent does,
and oslo.log's are added as the entry point adds them before parsing.

    python ipa_conf_check.py [--as NAME] SOURCE

SOURCE is a file, or a `data:` URL (decoded with Python's own data-URL handler, not bootstream's).
Its bytes are written as NAME (default: the file's name) into an empty folder, and that folder is
given to the agent's options as `--config-dir`, the way the agent image starts the agent
(`ironic-python-agent --config-dir /etc/ironic-python-agent`, where our unit mounts the file).

oslo.config ignores options nobody registered, so a misspelt key or a key in the wrong section
would just not take effect; this reads the file's sections and keys with oslo.config's own file
parser and names every one no registered option answers to. Every registered option is then read,
which runs its type conversion and checks (a value of the wrong type fails there).

Exit status: 0 when nothing is wrong, 1 when the report lists a finding, 2 when the check could not
run (stderr says why).
"""

import argparse
import contextlib
import importlib.metadata
import io
import json
import os
import sys
import tempfile
import urllib.request


def fail(msg):
    print(f"ipa_conf_check: {msg}", file=sys.stderr)
    sys.exit(2)


def read_source(source):
    if source.startswith("data:"):
        with urllib.request.urlopen(source) as f:  # urllib's DataHandler (RFC 2397)
            return f.read()
    with open(source, "rb") as f:
        return f.read()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("source")
    ap.add_argument("--as", dest="name", help="file name in the config folder (must end in .conf)")
    args = ap.parse_args()
    name = args.name or (None if args.source.startswith("data:") else os.path.basename(args.source))
    if not name:
        fail("--as NAME is needed for a data: URL")
    if not name.endswith(".conf") or "/" in name:
        # oslo.config's --config-dir reads <dir>/*.conf and nothing else.
        fail(f"{name!r}: the agent's --config-dir reads only files named *.conf")
    data = read_source(args.source)

    try:
        from oslo_config import cfg
        from oslo_log import log

        # What `ironic-python-agent` (ironic_python_agent.cmd.agent:run) imports and registers.
        from ironic_python_agent import config as ipa_config
        from ironic_python_agent import inspector
        from ironic_python_agent import ironic_api_client
        from ironic_python_agent.cmd import agent as _agent  # noqa: F401 (registers the rest)
    except ImportError as e:
        fail(f"ironic-python-agent is not importable with {sys.executable}: {e}")

    # The agent's option defaults come from the kernel command line (ipa-* parameters); a host
    # booted from a discovery image has none, so neither must the machine running this check.
    kernel = sorted(k for k in ipa_config.APARAMS if k.startswith("ipa-"))
    if kernel:
        fail(f"this machine's kernel command line sets {kernel}, which would change the agent's defaults")

    CONF = cfg.CONF
    log.register_options(CONF)  # as run() does before parsing

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, name)
        with open(path, "wb") as f:
            f.write(data)

        # The file as oslo.config's parser reads it: {section: {key: [value, ...]}}.
        sections = {}
        try:
            cfg.ConfigParser(path, sections).parse()
        except Exception as e:  # a parse error is a finding: the agent would die on it
            print(json.dumps({"ipa_version": version(), "parse_error": f"{type(e).__name__}: {e}"}, indent=1))
            sys.exit(1)

        # No default files or folders: only what this check is given (the agent's
        # /etc/ironic-python-agent.conf of this machine, if any, is not the host's). The agent's
        # options are command-line options too, and oslo.config checks those while parsing: a bad
        # value there ends the agent at start (argparse exits), so it ends this check with a finding.
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                CONF(
                    args=["--config-dir", d],
                    project=None,
                    prog="ironic-python-agent",
                    default_config_files=[],
                    default_config_dirs=[],
                )
        except (Exception, SystemExit) as e:
            report = {"ipa_version": version(), "parse_error": f"{err.getvalue().strip()} ({type(e).__name__}: {e})"}
            print(json.dumps(report, indent=1))
            sys.exit(1)
        sys.stderr.write(err.getvalue())

        report = check(CONF, cfg, sections, data)

    # Where the agent goes with these values: the API URLs as the agent splits api_url (agent.py)
    # and its API client keeps them, and the inspection URLs as its inspector computes them (the
    # callback URL(s), or with none each API URL + /v1/continue_inspection, when inspection runs).
    if not report["type_errors"]:
        api_urls = list(filter(None, (CONF.api_url or "").split(",")))
        report["api_urls"] = ironic_api_client.APIClient(api_urls).api_urls if api_urls else []
        report["inspection_urls"] = inspector._get_urls() if (CONF.inspection_callback_url or CONF.api_url) else []
        report["connects_to"] = {u: endpoint(u) for u in report["api_urls"] + report["inspection_urls"]}
    report["ipa_version"] = version()
    report["oslo_config_version"] = importlib.metadata.version("oslo.config")
    print(json.dumps(report, indent=1, sort_keys=True, default=str))
    findings = any(report[k] for k in ("unknown", "type_errors", "duplicates", "deprecated"))
    sys.exit(1 if findings else 0)


def version():
    return importlib.metadata.version("ironic-python-agent")


def endpoint(url):
    """The scheme, host, port and path the agent's HTTP client (requests over urllib3) uses."""
    from urllib3.connectionpool import connection_from_url
    from urllib3.util import parse_url

    u = parse_url(url)
    pool = connection_from_url(url)
    return {"scheme": u.scheme, "host": pool.host, "port": pool.port, "path": u.path or ""}


def section_of(cfg, name):
    """A section or group name as oslo.config matches it: DEFAULT as written, others lower-case."""
    return "DEFAULT" if name in (None, "DEFAULT") else cfg._normalize_group_name(name)


def check(CONF, cfg, sections, data):
    # Registered options, by section, under the names each answers to in a file: its dest, and its
    # deprecated names (as oslo.config's Opt._get_from_namespace looks them up).
    groups = {None: CONF}
    for key in CONF:
        if isinstance(CONF[key], cfg.ConfigOpts.GroupAttr):
            groups[key] = CONF[key]
    current = set()  # (section, dest)
    deprecated = {}  # (section, name) -> "section.dest" it stands for
    for group_name in groups:
        section = section_of(cfg, group_name)
        for opt in registered_opts(CONF, group_name):
            current.add((section, opt.dest))
            for d in opt.deprecated_opts:
                if d.name or d.group:
                    dsec = section_of(cfg, d.group or group_name)
                    deprecated[(dsec, d.name or opt.dest)] = f"{section}.{opt.dest}"

    # Read every registered option: oslo.config converts (and checks type, choices, regex, bounds)
    # on access, so a bad value fails here as it would in the agent.
    type_errors = []
    values = {}  # (section, dest) -> effective value
    for group_name, attrs in groups.items():
        section = section_of(cfg, group_name)
        for opt in registered_opts(CONF, group_name):
            try:
                values[(section, opt.dest)] = getattr(attrs, opt.dest)
            except Exception as e:
                type_errors.append(f"{section}.{opt.dest}: {type(e).__name__}: {e}")

    unknown, dups, deps, set_values = [], [], [], {}
    for sec, keys in sections.items():
        nsec = section_of(cfg, sec)
        for key, vals in keys.items():
            where = f"{sec}.{key}"
            if len(vals) > 1:
                dups.append(where)
            if (nsec, key) in current:
                set_values[where] = values.get((nsec, key))
            elif (nsec, key) in deprecated:
                deps.append(f"{where} (now {deprecated[(nsec, key)]})")
            else:
                unknown.append(where)

    wanted = ["api_url", "inspection_callback_url", "insecure", "enable_vlan_interfaces", "inspection_collectors"]
    return {
        "conf_text": data.decode("utf-8", "replace"),
        "sections": sections,
        "unknown": unknown,
        "duplicates": dups,
        "deprecated": deps,
        "type_errors": type_errors,
        "set": set_values,
        "effective": {k: values.get(("DEFAULT", k)) for k in wanted},
    }


def registered_opts(CONF, group_name):
    """The Opt objects registered in a group (None: DEFAULT)."""
    if group_name is None:
        infos = CONF._opts
    else:
        infos = CONF._get_group(group_name)._opts
    return [info["opt"] for info in infos.values()]


if __name__ == "__main__":
    main()
