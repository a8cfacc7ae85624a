#!/usr/bin/env python3
"""Composes scripts/gpu_check.sh's one JSON line from its state file and the files it names.

    gpu_check_report.py STATE STATUS TOTAL_S

STATE holds JSON objects one after another (gpu_check.sh's `record`): {"step": {...}} for each
step, and keys naming results ("gtest_dir", "fmnist_summary", "gpt_summary", "curve",
"two_ranks", "mfu", ...). STATUS is the script's verdict ("pass", "fail", "built", "located");
a pass turns into a fail here when the GPT's GPU curve strays from the CPU's. Prints the line.
Standard library only: it runs on the bare GPU machine.
"""
import json
import os
import statistics
import sys

# The GPU's plain FP32 peak (no tensor cores: cuBLAS runs with CUBLAS_DEFAULT_MATH, no TF32),
# TFLOP/s, from NVIDIA's H200 datasheet (H200 SXM 67, H200 NVL 60) and H100 datasheet (SXM 67,
# PCIe 51). Matched on nvidia-smi's name; another GPU gets no MFU.
PEAK_FP32_TFLOPS = [
    ("H200 NVL", 60.0, "NVIDIA H200 NVL datasheet, FP32"),
    ("H200", 67.0, "NVIDIA H200 SXM datasheet, FP32 (non-tensor)"),
    ("H100 PCIe", 51.0, "NVIDIA H100 PCIe datasheet, FP32"),
    ("H100", 67.0, "NVIDIA H100 SXM datasheet, FP32 (non-tensor)"),
]

# The GPT's loss on the GPU against the CPU, the same run on both (150 steps of 4,096 tokens):
# the first steps agree to float rounding (tests/trainers/cuda_test.cc's GptStepsMatchTheCpu holds
# 10 steps of a smaller GPT to 0.5%); later the runs drift apart as any two float orders do, so
# only the level is compared.
CURVE_FIRST_STEPS = 10
CURVE_FIRST_REL = 1e-2
CURVE_LAST_STEPS = 20
CURVE_LAST_REL = 0.03


def read_state(path):
    text = open(path, encoding="utf-8", errors="replace").read()
    dec = json.JSONDecoder()
    i, out = 0, []
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            return out
        try:
            obj, i = dec.raw_decode(text, i)
        except json.JSONDecodeError:
            nl = text.find("\n", i)
            if nl < 0:
                return out
            i = nl + 1
            continue
        out.append(obj)


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError, TypeError):
        return None


def load_jsonl(path):
    rows = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    pass
    except (OSError, TypeError):
        pass
    return rows


def round_or_none(x, digits=4):
    return None if x is None else round(x, digits)


def as_number(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return text


def gtest_results(directory):
    """Per test: ok, seconds, failure text, and the recorded properties (layer error shares)."""
    tests = {}
    if not directory or not os.path.isdir(directory):
        return tests
    reserved = {"name", "file", "line", "status", "result", "timestamp", "time", "classname",
                "failures", "type_param", "value_param"}
    for name in sorted(os.listdir(directory)):
        doc = load_json(os.path.join(directory, name))
        if not doc:
            continue
        for suite in doc.get("testsuites", []):
            for case in suite.get("testsuite", []):
                if case.get("status") == "NOTRUN":
                    continue
                full = suite["name"] + "." + case["name"]
                entry = {"ok": not case.get("failures") and case.get("result") != "SKIPPED",
                         "seconds": float(str(case.get("time", "0")).rstrip("s") or 0)}
                if case.get("result") == "SKIPPED":
                    entry["skipped"] = True
                if case.get("failures"):
                    entry["failure"] = case["failures"][0].get("failure", "")[:300]
                props = {k: as_number(v) for k, v in case.items() if k not in reserved}
                if props:
                    entry["worst_share_of_tolerance"] = props
                tests[full] = entry
    return tests


def compare_curves(gpu_path, cpu_path):
    gpu = {r["step"]: r["loss"] for r in load_jsonl(gpu_path) if "loss" in r}
    cpu = {r["step"]: r["loss"] for r in load_jsonl(cpu_path) if "loss" in r}
    common = sorted(set(gpu) & set(cpu))
    if len(common) < CURVE_FIRST_STEPS + CURVE_LAST_STEPS:
        return {"ok": False, "error": f"{len(common)} steps on both devices"}
    first = common[:CURVE_FIRST_STEPS]
    last = common[-CURVE_LAST_STEPS:]
    first_rel = max(abs(gpu[s] - cpu[s]) / abs(cpu[s]) for s in first)
    g_last = statistics.mean(gpu[s] for s in last)
    c_last = statistics.mean(cpu[s] for s in last)
    last_rel = abs(g_last - c_last) / abs(c_last)
    val = lambda p: [r["val_loss"] for r in load_jsonl(p) if "val_loss" in r]
    ok = first_rel <= CURVE_FIRST_REL and last_rel <= CURVE_LAST_REL
    return {"ok": ok, "steps": len(common),
            "first_steps_max_rel_diff": round(first_rel, 6),
            "first_steps_limit": CURVE_FIRST_REL,
            "last_steps_mean_loss": {"gpu": round(g_last, 4), "cpu": round(c_last, 4)},
            "last_steps_rel_diff": round(last_rel, 5), "last_steps_limit": CURVE_LAST_REL,
            "val_loss": {"gpu": val(gpu_path)[-1:], "cpu": val(cpu_path)[-1:]}}


def steady_rate(metrics_path, key, skip):
    rates = [r[key] for r in load_jsonl(metrics_path) if key in r and r.get("step", 0) > skip]
    return statistics.median(rates) if rates else None


def main():
    state_path, status, total = sys.argv[1], sys.argv[2], float(sys.argv[3])
    state = read_state(state_path)
    report = {"gpu_check": status}
    steps = []
    facts = {}
    for obj in state:
        for k, v in obj.items():
            if k == "step":
                steps.append(v)
            elif k == "error":
                facts.setdefault("errors", []).append(v)
            else:
                facts[k] = v
    for k in ("mode", "gpu", "host", "found", "gpu_tests_listed"):
        if k in facts:
            report[k] = facts[k]
    report["steps"] = steps
    if "errors" in facts:
        report["errors"] = facts["errors"]

    tests = gtest_results(facts.get("gtest_dir"))
    if tests:
        report["tests"] = {"passed": sum(t["ok"] for t in tests.values()),
                           "failed": [n for n, t in tests.items() if not t["ok"]],
                           "total": len(tests)}
        report["layers"] = {n.split(".", 1)[1]: t.get("worst_share_of_tolerance", {})
                            for n, t in tests.items() if n.startswith("CudaVsCpu.")}
        slowest = sorted(tests.items(), key=lambda kv: -kv[1]["seconds"])[:3]
        report["slowest_tests"] = {n: round(t["seconds"], 1) for n, t in slowest}
        # The first failures' messages (the whole of them is in the log): the line must stay
        # short enough to come back whole.
        fails = [(n, t["failure"]) for n, t in tests.items() if "failure" in t]
        if fails:
            report["test_failures"] = {n: " ".join(f.split())[:200] for n, f in fails[:6]}

    fm = load_json(facts.get("fmnist_summary"))
    if fm:
        report["fmnist"] = {k: fm.get(k) for k in ("test_accuracy", "raw_test_accuracy",
                                                   "samples_per_s", "steps", "train_seconds",
                                                   "comm_seconds", "device", "gradient_path")}
    gpt = load_json(facts.get("gpt_summary"))
    if gpt:
        report["gpt"] = {k: gpt.get(k) for k in ("val_loss", "train_loss", "tokens_per_s", "steps",
                                                 "model_tflops", "train_seconds", "device")}
        report["gpt"]["steady_tokens_per_s"] = round_or_none(
            steady_rate(facts.get("gpt_metrics"), "tokens_per_s", 10), 0)
        # The same 300 steps on a CPU (AMD EPYC, one thread): gpu_check.sh's bound comes from it.
        report["gpt"]["cpu_reference_val_loss"] = 2.626

    curve = facts.get("curve")
    if curve:
        cmp_ = compare_curves(curve.get("gpu"), curve.get("cpu"))
        cmp_["cpu_threads"] = curve.get("cpu_threads")
        report["gpt_vs_cpu"] = cmp_
        if status == "pass" and not cmp_["ok"]:
            status = "fail"

    tr = load_json(facts.get("two_ranks"))
    if tr:
        share = (tr["comm_seconds"] / tr["train_seconds"]) if tr.get("train_seconds") else None
        report["two_ranks_one_gpu"] = {
            "gradient_path": tr.get("gradient_path"), "tokens_per_s": tr.get("tokens_per_s"),
            "allreduce_share_of_step_time": round_or_none(share),
            "world_size": tr.get("world_size"), "val_loss": tr.get("val_loss")}

    mfu = facts.get("mfu")
    if mfu:
        s = load_json(mfu.get("summary"))
        if s:
            rate = steady_rate(mfu.get("metrics"), "tokens_per_s", 10)
            fpt = s.get("model_flops_per_token")
            entry = {"tokens_per_s": round_or_none(rate, 0), "model_flops_per_token": fpt,
                     "config": "12 layers, 12 heads, 768 wide, 256 tokens, batch 16, fp32",
                     "flops_formula": "6 N + 12 L C T (PaLM, appendix B), N without wpe"}
            if rate and fpt:
                achieved = rate * fpt / 1e12
                entry["model_tflops"] = round(achieved, 2)
                name = mfu.get("gpu_name", "")
                for key, peak, source in PEAK_FP32_TFLOPS:
                    if key in name:
                        entry.update({"peak_fp32_tflops": peak, "peak_source": source,
                                      "mfu": round(achieved / peak, 4)})
                        break
                else:
                    entry["mfu"] = None
                    entry["peak_source"] = f"no FP32 peak known for {name!r}"
            report["gpt_mfu"] = entry

    nvml = nvml_section(load_json(facts.get("nvml_report")), facts.get("nvml_preflight"),
                        tests.get("RealNvml.TheMetricsTextPassesPromtool"))
    if nvml:
        report["nvml"] = nvml

    report["gpu_check"] = status
    report["total_s"] = round(total, 1)
    print(json.dumps(short_floats(report), separators=(", ", ": ")))


def nvml_section(readings, preflight, metrics_test):
    """What cohort's NVML wrapper read from the real driver (tests/launcher/gpu/nvml_gpu_test.cc),
    whether promtool checked the metrics text, and cohortrun --gpu-preflight's answers."""
    out = {}
    if readings:
        keys = ("index", "name", "temperature_c", "power_w", "sm_clock_mhz", "processes",
                "throttle_reasons", "ecc_uncorrected", "xid_watched")
        out["gpus"] = [dict({k: g[k] for k in keys if k in g},
                            memory_total_gib=round(g.get("memory_total_bytes", 0) / 2**30, 1))
                       for g in readings.get("gpus", [])]
        out["metrics_bytes"] = readings.get("metrics_bytes")
        out["preflight_problems"] = readings.get("preflight_problems")
    if metrics_test:
        props = metrics_test.get("worst_share_of_tolerance", {})  # the test's recorded properties
        out["metrics_text"] = {"ok": metrics_test.get("ok"), "promtool": props.get("promtool")}
    if preflight:
        out["cohortrun_preflight"] = preflight
    return out


def short_floats(x):
    """Floats to 5 significant digits, everywhere in x: the line is for people to read."""
    if isinstance(x, float):
        return float(f"{x:.5g}")
    if isinstance(x, dict):
        return {k: short_floats(v) for k, v in x.items()}
    if isinstance(x, list):
        return [short_floats(v) for v in x]
    return x


if __name__ == "__main__":
    main()
