#!/usr/bin/env python3
"""The headline table of a policy against ECMP and the strongest baseline, from the seed runs
of `dar-sim run --seeds` (DIR/NAME/seed-N/results.json), as in docs/results.md.

  scripts/summary-table.py [--dir out/eval] [--policy dar] [--also dar-diffusion]

Per use case (scenario and metric, listed below): ECMP's mean, the strongest baseline (the
lowest mean among the policies that are not DAR's: neither --policy, --also nor dar-*),
--also's and --policy's
means, and --policy's paired per-seed differences against ECMP and against the strongest, each
relative to the other's mean with a 95% Student t interval; bold where the interval excludes
zero. Means are ± half the 95% interval. Python 3 standard library only.
"""
import argparse
import glob
import json
import math
import os
import re

USE_CASES = [
    ("allreduce-fattree", "comm_time_s", "GPU training: AllReduce, k=8 fat-tree, a degraded link"),
    ("allreduce-multijob", "comm_time_s", "GPU training: 4 AllReduce jobs across racks"),
    ("moe-alltoall", "alltoall_time_s", "GPU training: MoE all-to-all"),
    ("inference-tail", "latency_p99_s", "Inference: serving p99, a degraded spine link"),
    ("inference-tail", "latency_p999_s", "Inference: serving p99.9"),
    ("incast", "qct_p99_s", "Inference: incast query p99"),
    ("incast", "response_fct_mean_s", "Inference: incast responses, mean"),
    ("replication-wan", "completion_stddev_s", "Replication: Abilene, spread of completion"),
    ("replication-geant", "completion_stddev_s", "Replication: GÉANT, spread of completion"),
    ("websearch-asym-30", "fct_mean_s", "Web search, asymmetric fabric, 30% load"),
    ("websearch-asym-50", "fct_mean_s", "Web search, asymmetric fabric, 50% load"),
    ("websearch-asym-70", "fct_mean_s", "Web search, asymmetric fabric, 70% load"),
    ("websearch-asym-90", "fct_mean_s", "Web search, asymmetric fabric, 90% load"),
    # Held out: written after DAR's settings were chosen (seeds 201-210).
    ("allreduce-failing-spine", "comm_time_s", "Held out: AllReduce, a failing spine, stragglers"),
    ("allreduce-failed-core", "comm_time_s", "Held out: AllReduce, k=8 fat-tree, 4 core links down"),
    ("inference-rack-hotspot", "latency_p99_s", "Held out: serving p99, replicas on one rack"),
    ("inference-rack-hotspot", "latency_long_p99_s", "Held out: long-context p99, one rack"),
    ("gray-failure", "fct_mean_s", "Held out: web search, a gray failure"),
    ("flapping-link", "fct_mean_s", "Held out: web search, a flapping link"),
    ("websearch-sym-70", "fct_mean_s", "Held out: web search, healthy fabric, 70%"),
    ("websearch-sym-90", "fct_mean_s", "Held out: web search, healthy fabric, 90%"),
    ("hadoop-sym-70", "fct_mean_s", "Held out: Hadoop flows, healthy fabric, 70%"),
    ("hadoop-sym-90", "fct_mean_s", "Held out: Hadoop flows, healthy fabric, 90%"),
]

# Two-sided 97.5% quantiles of Student's t by degrees of freedom.
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
        9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131}


def mean_ci(xs):
    n = len(xs)
    m = sum(xs) / n
    if n < 2:
        return m, 0.0
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1))
    return m, T975.get(n - 1, 1.96) * sd / math.sqrt(n)


def seed_values(directory):
    """{policy: [value per seed]} for every metric: {metric: {policy: [..]}}."""
    out = {}
    files = sorted(glob.glob(os.path.join(directory, "seed-*", "results.json")),
                   key=lambda f: int(re.search(r"seed-(\d+)", f).group(1)))
    for f in files:
        for p in json.load(open(f))["policies"]:
            for k, v in p["metrics"].items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    out.setdefault(k, {}).setdefault(p["name"], []).append(float(v))
    return out


def fmt(x, unit):
    return f"{x * unit:.3g}"


def paired(a, b):
    """a minus b per seed, relative to b's mean: (rel, lo, hi, significant)."""
    d = [x - y for x, y in zip(a, b)]
    m, h = mean_ci(d)
    base = sum(b) / len(b)
    if base == 0:
        return None
    return m / base, (m - h) / base, (m + h) / base, (m - h > 0 or m + h < 0)


def cell(p):
    if p is None:
        return "—"
    rel, lo, hi, sig = p
    text = f"{rel * 100:+.1f}% [{lo * 100:+.1f}, {hi * 100:+.1f}]"
    return f"**{text}**" if sig else text


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default="out/eval")
    ap.add_argument("--policy", default="dar")
    ap.add_argument("--also", default="dar-diffusion")
    args = ap.parse_args()
    print(f"| use case | scenario | metric | ECMP | strongest baseline | {args.also} | {args.policy} "
          f"| {args.policy} vs ECMP | {args.policy} vs the strongest |")
    print("|---|---|---|---|---|---|---|---|---|")
    for scenario, metric, label in USE_CASES:
        d = os.path.join(args.dir, scenario)
        if not os.path.isdir(d):
            continue
        values = seed_values(d).get(metric)
        if not values or args.policy not in values or "ecmp" not in values:
            continue
        unit, suffix = (1e3, " ms") if metric.endswith("_s") else (1, "")
        if metric.startswith("completion"):
            unit, suffix = 1, " s"
        # DAR's own variants (dar-learned) are not baselines.
        baselines = {p: v for p, v in values.items()
                     if p not in (args.policy, args.also) and not p.startswith("dar")}
        strongest = min(baselines, key=lambda p: sum(baselines[p]) / len(baselines[p]))

        def mean_cell(p):
            m, h = mean_ci(values[p])
            return f"{fmt(m, unit)} ±{fmt(h, unit)}{suffix}"

        also = mean_cell(args.also) if args.also in values else "—"
        print(f"| {label} | `{scenario}` | {metric} | {mean_cell('ecmp')} "
              f"| {strongest} {mean_cell(strongest)} | {also} | {mean_cell(args.policy)} "
              f"| {cell(paired(values[args.policy], values['ecmp']))} "
              f"| {cell(paired(values[args.policy], values[strongest]))} |")


if __name__ == "__main__":
    main()
