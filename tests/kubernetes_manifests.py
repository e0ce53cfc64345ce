#!/usr/bin/env python3
"""contrib/kubernetes/*.yaml hold together (python3-yaml; no cluster needed).

usage: kubernetes_manifests.py LOOM

Each file is a Deployment and a Service that selects its pods; the Service's
targetPort and every probe's port name the container's port; the startup,
readiness and liveness probes ask /health, the startup one long enough for a
large checkpoint to load; --host 0.0.0.0 and --port match the container
port; requests and limits are set; the model volume is mounted read-only;
loom.yaml runs the CPU image, loom-gpu.yaml the CUDA one with --device cuda
and one nvidia.com/gpu.  Then loom serve runs with loom.yaml's own flags
(the bundled model for --model) and must answer /health.
Prints "kubernetes_manifests: N passed, N failed"; exits 1 on a failure."""
import os
import re
import subprocess
import sys
import time
import urllib.request

import yaml

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
passed = failed = 0


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print("FAIL", what)
    return ok


def flag(args, name):
    return args[args.index(name) + 1] if name in args and args.index(name) + 1 < len(args) else None


def port_number(container, port):
    """The containerPort a probe's or Service's port names (by name or number)."""
    for p in container.get("ports", []):
        if port in (p.get("name"), p["containerPort"]):
            return p["containerPort"]
    return None


def check_file(name, gpu):
    docs = [d for d in yaml.safe_load_all(open(os.path.join(ROOT, "contrib/kubernetes", name))) if d]
    by_kind = {d["kind"]: d for d in docs}
    if not check(sorted(by_kind) == ["Deployment", "Service"], "%s: a Deployment and a Service" % name):
        return None
    deployment, service = by_kind["Deployment"], by_kind["Service"]
    pod = deployment["spec"]["template"]
    labels = pod["metadata"]["labels"]
    check(deployment["spec"]["selector"]["matchLabels"].items() <= labels.items() and
          service["spec"]["selector"].items() <= labels.items(), "%s: the selectors match the pods" % name)
    container = pod["spec"]["containers"][0]
    args = container["args"]
    port = port_number(container, "http")
    check(port is not None and all(port_number(container, p["targetPort"]) == port
                                   for p in service["spec"]["ports"]),
          "%s: the Service's targetPort is the container's port" % name)
    check(flag(args, "--host") == "0.0.0.0" and flag(args, "--port") == str(port),
          "%s: --host 0.0.0.0 and --port %s: %s" % (name, port, args))
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        get = container.get(probe, {}).get("httpGet", {})
        check(get.get("path") == "/health" and port_number(container, get.get("port")) == port,
              "%s: %s asks /health on the container's port" % (name, probe))
    startup = container.get("startupProbe", {})
    check(startup.get("periodSeconds", 10) * startup.get("failureThreshold", 3) >= 600,
          "%s: the startup probe waits at least 10 minutes for the weights" % name)
    grace_ms = int(flag(args, "--shutdown-grace-ms") or 5000)
    check(pod["spec"].get("terminationGracePeriodSeconds", 30) * 1000 > grace_ms,
          "%s: terminationGracePeriodSeconds outlasts --shutdown-grace-ms" % name)
    res = container.get("resources", {})
    check(all(k in res.get(side, {}) for side in ("requests", "limits") for k in ("cpu", "memory")),
          "%s: cpu and memory requests and limits" % name)
    mounts = {m["name"]: m for m in container.get("volumeMounts", [])}
    model = flag(args, "--model") or ""
    check(any(model.startswith(m["mountPath"] + "/") and m.get("readOnly") for m in mounts.values()),
          "%s: --model %s is on a read-only mount" % (name, model))
    env = {e["name"] for e in container.get("env", [])}
    check(all(v in env for a in args for v in re.findall(r"\$\((\w+)\)", a)),
          "%s: every $(VAR) in the args is in env" % name)
    gpus = res.get("limits", {}).get("nvidia.com/gpu")
    if gpu:
        check(gpus == 1 and flag(args, "--device") == "cuda" and container["image"] == "loom:cuda",
              "%s: loom:cuda, --device cuda, one GPU" % name)
    else:
        check(gpus is None and flag(args, "--device") in (None, "cpu") and container["image"] == "loom:latest",
              "%s: loom:latest on the CPU" % name)
    return container


def serve_with(binary, container):
    """loom accepts the manifest's flags: it serves the bundled model with them."""
    args = list(container["args"])
    args[args.index("--model") + 1] = os.path.join(ROOT, "models/loom-tiny")
    args[args.index("--port") + 1] = "0"
    args[args.index("--host") + 1] = "127.0.0.1"
    args = [a.replace("$(LOOM_THREADS)", "2") for a in args]
    env = dict(os.environ)
    env.pop("LOOM_API_KEY", None)
    p = subprocess.Popen([binary, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    try:
        log, port, deadline = b"", None, time.time() + 60
        while port is None and time.time() < deadline:
            line = p.stderr.readline()
            if not line:
                break
            log += line
            m = re.search(rb"on http://[0-9.]+:(\d+)", line)
            port = int(m.group(1)) if m else None
        ok = False
        while port and time.time() < deadline and not ok:
            try:
                ok = urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=5).status == 200
            except OSError:
                time.sleep(0.1)
        check(ok, "loom serve runs with loom.yaml's flags: %s" % log.decode(errors="replace")[-800:])
    finally:
        p.terminate()
        p.communicate(timeout=30)


def main():
    cpu = check_file("loom.yaml", gpu=False)
    check_file("loom-gpu.yaml", gpu=True)
    if cpu:
        serve_with(sys.argv[1], cpu)
    print("kubernetes_manifests: %d passed, %d failed" % (passed, failed))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
