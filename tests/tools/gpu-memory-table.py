#!/usr/bin/env python3
"""gpu-memory-table.py WORK OUT REHEARSE SECONDS — results.json and
table.txt of tests/tools/gpu-memory.sh from its work folder: one row per
mode × budget run (planned against measured device peak, per forward time,
bytes streamed, the bound and the ratio to it), the MoE runs, the ids of
resident and streamed generations, the optimizer's picks, the held-memory
steps and the peers."""
import csv
import glob
import json
import os
import sys

work, out, rehearse, elapsed = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4])


def load(path):
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return {"output_tail": text[-2000:]} if text else None


res = {"rehearsal": rehearse, "seconds": elapsed, "steps": {}}
with open(os.path.join(work, "outcomes.txt")) as f:
    for line in f:
        k, _, v = line.strip().partition("=")
        res["steps"][k] = v
try:
    with open(os.path.join(work, "gpu.csv")) as f:
        res["gpu"] = list(csv.DictReader(f))
except OSError:
    pass
for p in sorted(glob.glob(os.path.join(work, "*.json"))):
    name = os.path.basename(p)[:-5]
    res[name] = load(p)
    err = os.path.join(work, name + ".err")
    if os.path.exists(err):
        with open(err) as f:
            tail = f.read()[-600:]
        if tail.strip():
            res.setdefault("stderr", {})[name] = tail

# nvidia-smi's per-process samples, tagged with the step: the most any
# process other than the samplers held during each step.
apps = {}
try:
    with open(os.path.join(out, "apps.csv")) as f:
        for row in csv.reader(f):
            if len(row) >= 4:
                try:
                    mib = float(row[3])
                except ValueError:
                    continue
                apps[row[1]] = max(apps.get(row[1], 0.0), mib * 1048576)
except OSError:
    pass
res["smi_peak_bytes_by_step"] = apps


def gib(b):
    return "%.2f" % (b / 2 ** 30) if b else "-"


lines = []
g = (res.get("gpu") or [{}])[0]
lines.append("device: %s, driver %s%s" % (g.get("name", "?"), g.get(" driver_version", g.get("driver_version", "?")),
                                          " (REHEARSAL on the host emulation: no figure here is a GPU's)"
                                          if rehearse else ""))
bw = res.get("bandwidth")
if bw and "pinned_gb_per_s" in bw:
    lines.append("host to device (PyTorch, %d MiB copies): %.1f GB/s pinned, %.1f GB/s pageable" %
                 (bw["bytes"] >> 20, bw["pinned_gb_per_s"], bw["pageable_gb_per_s"]))
hdr = "%-44s %7s %7s %7s %7s %7s %9s %9s %9s %6s" % ("run (GiB: plan, backend, cudaMemGetInfo, NVML, smi)", "plan",
                                                   "backend", "memget", "nvml", "smi", "s/forward", "MB/fwd",
                                                   "bound s", "ratio")
lines.append(hdr)
rows = []
for name in sorted(k for k in res if isinstance(res.get(k), dict) and "seconds_per_forward" in res[k]
                   and ("plan" in res[k])):
    d = res[name]
    plan = d.get("plan", {})
    meas = d.get("measured", {})
    s = d.get("streaming", {})
    part = s.get("layers") or s.get("experts") or {}
    backend = meas.get("device_peak_bytes", 0) + meas.get("backend_overhead_bytes", 0)
    memget = meas.get("device_used_delta_peak_bytes", 0) + meas.get("device_context_estimate_bytes", 0)
    row = {
        "run": name, "mode": plan.get("mode"), "budget": plan.get("device_capacity_bytes"),
        "planned_device_peak": plan.get("device_peak_bytes"), "backend_peak": backend,
        "cudamemgetinfo_peak": memget, "nvml_peak": meas.get("nvml_process_bytes"),
        "smi_peak": apps.get(name), "seconds_per_forward": d.get("seconds_per_forward"),
        "bytes_streamed_per_forward": part.get("bytes_per_forward"),
        "bound_seconds": part.get("bound_seconds_per_forward"), "ratio_to_bound": part.get("ratio_to_bound"),
        "upload_bytes_per_s": s.get("upload_bytes_per_s"),
    }
    rows.append(row)
    lines.append("%-44s %7s %7s %7s %7s %7s %9.4f %9s %9s %6s" % (
        name, gib(row["planned_device_peak"]), gib(backend), gib(memget), gib(row["nvml_peak"] or 0),
        gib(row["smi_peak"] or 0), row["seconds_per_forward"] or 0,
        "%.1f" % (row["bytes_streamed_per_forward"] / 1e6) if row["bytes_streamed_per_forward"] else "-",
        "%.4f" % row["bound_seconds"] if row["bound_seconds"] else "-",
        "%.2f" % row["ratio_to_bound"] if row["ratio_to_bound"] else "-"))
res["rows"] = rows
for k, v in sorted(res["steps"].items()):
    if v.startswith("does not fit"):
        lines.append("%-44s %s" % (k, v))
ids = {k: res.get(k) for k in ("ids_resident", "ids_streamed", "ids_streamed_zstd")}
if ids["ids_resident"] and "ids" in ids["ids_resident"]:
    ref = ids["ids_resident"]["ids"]
    for k in ("ids_streamed", "ids_streamed_zstd"):
        o = ids[k]
        if o and "ids" in o:
            same = o["ids"] == ref
            res.setdefault("ids_equal", {})[k] = same
            lines.append("%s: ids %s the resident run's (%d tokens)" % (k, "EQUAL to" if same else "DIFFER from",
                                                                       len(ref)))
for k in sorted(k for k in res["steps"] if k.startswith("optimize_")):
    o = res.get(k) or {}
    if o.get("chosen_mode"):
        lines.append("%s: picks %s — %s" % (k, o["chosen_mode"], o.get("reason", "")))
    else:
        msg = (res.get("stderr", {}).get(k) or "").strip().splitlines()
        lines.append("%s: %s — %s" % (k, res["steps"][k], msg[-1] if msg else "(no output)"))
for k in ("held_before_load", "held_after_plan"):
    if k in res["steps"]:
        msg = (res.get("stderr", {}).get(k) or "").strip().splitlines()
        lines.append("%s: %s — %s" % (k, res["steps"][k], msg[-1] if msg else "(no message)"))
to = res.get("torch_offload")
if to and "forward" in to:
    for r in to["forward"]:
        lines.append("PyTorch offload (%s, %d of %d layers resident, max_memory %.2f GiB): %.4f s per forward, "
                     "peak %s GiB" % (to["peer"].split(" (")[0], to["resident_layers"], to["n_layers"],
                                      to["max_memory_bytes"] / 2 ** 30, r["seconds_per_forward"],
                                      gib(to.get("device_peak_bytes", 0))))
lines.append("steps: " + "; ".join("%s %s" % kv for kv in sorted(res["steps"].items())))
with open(os.path.join(out, "results.json"), "w") as f:
    json.dump(res, f, indent=1)
with open(os.path.join(out, "table.txt"), "w") as f:
    f.write("\n".join(lines) + "\n")
print("\n".join(lines))
