#!/bin/bash
# k8s-recipe.sh: the Kubernetes kit's commands run by hand on a GPU machine,
# as the chart runs them, to check the kit on a real GPU:
#   - the DaemonSet's collector: bin/otelcol-gpuprobe --config with the
#     receiver section of deploy/kubernetes/config.yaml, as root with group
#     10100 (runAsUser 0, runAsGroup 10100); its k8s processors need an API
#     server and are left out, its exporters replaced by files;
#   - the GPU pod recipe (deploy/kubernetes/gpu-pod.yaml): gpuprobe
#     install-shim DIR, then the application with LD_PRELOAD, GPUPROBE_SOCKET
#     and OTEL_SERVICE_NAME, as uid 1000 with supplementary group 10100, in a
#     cgroup of its own named as a container runtime names one
#     (docker-<id>.scope).
# The PyTorch job's spans and metrics must carry its own resource:
# service.name, process.pid and container.id.
#   K8S_OUT=DIR bash scripts/gpu/k8s-recipe.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${K8S_OUT:-$PWD/build/gpu-k8s}
rm -rf "$out"; mkdir -p "$out/podlib" "$out/home"; chmod 777 "$out/home"
export PYTHONUNBUFFERED=1
sock=/run/gpuprobe/agent.sock
mkdir -p /run/gpuprobe
python3 - deploy/kubernetes/config.yaml "$out" <<'PY' || exit 1
import json, sys, yaml
cfg = yaml.safe_load(open(sys.argv[1]))
out = sys.argv[2]
new = {"receivers": {"gpuprobe": cfg["receivers"]["gpuprobe"]},
       "exporters": {"file/traces": {"path": out + "/traces.json"}, "file/metrics": {"path": out + "/metrics.json"}},
       "service": {"pipelines": {"traces": {"receivers": ["gpuprobe"], "exporters": ["file/traces"]},
                                 "metrics": {"receivers": ["gpuprobe"], "exporters": ["file/metrics"]}}}}
json.dump(new, open(out + "/config.json", "w"), indent=1)  # JSON is YAML
print("k8s: receiver config from deploy/kubernetes/config.yaml:", json.dumps(new["receivers"]["gpuprobe"]))
PY
setpriv --reuid=0 --regid=10100 --clear-groups bin/otelcol-gpuprobe --config "$out/config.json" >"$out/collector.log" 2>&1 &
col=$!
for _ in $(seq 200); do [[ -S $sock ]] && break; sleep 0.05; done
ls -l $sock
bin/gpuprobe install-shim --shim bin/libgpuprobe.so "$out/podlib" && ls -l "$out/podlib"
id=$(head -c 64 /dev/urandom | sha256sum | cut -c1-64)
cg=/sys/fs/cgroup/gpuprobe-pods/docker-$id.scope
mkdir -p "$cg" || { echo "k8s: FAIL: cannot make a cgroup at $cg"; kill $col; exit 1; }
sh -c "echo \$\$ > $cg/cgroup.procs && exec setpriv --reuid=1000 --regid=1000 --groups=10100 env HOME=$out/home \
	LD_PRELOAD=$out/podlib/libgpuprobe.so GPUPROBE_SOCKET=$sock OTEL_SERVICE_NAME=torch-job \
	OTEL_RESOURCE_ATTRIBUTES=deployment.environment.name=gpu-check python3 scripts/gpu/torchstep.py eager --steps 20" \
	>"$out/job.json" 2>"$out/job.err" &
job=$!
wait $job; rc=$?
sleep 3
kill -TERM $col; wait $col
rmdir "$cg" 2>/dev/null
echo "k8s: job pid $job rc $rc, cgroup docker-$id.scope: $(cat "$out/job.json")"
python3 - "$out" "$job" "$id" <<'PY'
import json, sys
out, pid, cid = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def resources(path, key):
    res = {}
    for line in open(path):
        for r in json.loads(line).get(key, []):
            at = {a["key"]: list(a["value"].values())[0] for a in r.get("resource", {}).get("attributes", [])}
            n = sum(len(s.get("spans", s.get("metrics", []))) for s in r.get("scopeSpans", r.get("scopeMetrics", [])))
            k = tuple(sorted(at.items()))
            res[k] = res.get(k, 0) + n
    return res
bad = 0
for path, key in (("traces.json", "resourceSpans"), ("metrics.json", "resourceMetrics")):
    res = resources(out + "/" + path, key)
    job = [(dict(k), n) for k, n in res.items() if dict(k).get("service.name") == "torch-job"]
    for at, n in job:
        ok = int(at.get("process.pid", -1)) == pid and at.get("container.id") == cid
        print("k8s %s: resource %s: %d %s%s" % (path, at, n, key[8:].lower(), "" if ok else "  <- FAIL: want process.pid %d, container.id %s" % (pid, cid)))
        bad |= not ok
    if not job:
        print("k8s %s: FAIL: no resource with service.name torch-job; resources: %s" % (path, [dict(k) for k in res]))
        bad = 1
print("k8s: %s" % ("PASS" if not bad else "FAIL"))
sys.exit(bad)
PY
