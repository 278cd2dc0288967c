#!/usr/bin/env python3
"""Max utilisation of ECMP, DAR and the TE LP on the WAN topologies, at the load where ECMP's
max utilisation is 0.8, under uniform and gravity demand (the table in docs/fluid.md).

  scripts/te-table.py [--dar-sim build/src/cli/dar-sim] [--topologies data/topologies/wan]

ECMP's loads are linear in the demand, so the unit rate that puts ECMP at 0.8 is
0.8 / (ECMP's max utilisation at 1 Gb/s per unit). DAR and the LP then run at that unit.
Prints a Markdown table. Python 3 standard library only.
"""
import argparse
import glob
import json
import os
import subprocess
import sys

TARGET = 0.8


def loads(dar_sim, topology, policy, demand, unit_gbps):
    out = subprocess.run(
        [dar_sim, "loads", "--topology", topology, "--policy", policy, "--demand", demand,
         "--unit-gbps", repr(unit_gbps), "--json"],
        check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser.add_argument("--dar-sim", default=os.path.join(root, "build/src/cli/dar-sim"))
    parser.add_argument("--topologies", default=os.path.join(root, "data/topologies/wan"))
    args = parser.parse_args()

    files = sorted(glob.glob(os.path.join(args.topologies, "*.json")),
                   key=lambda f: len(json.load(open(f))["nodes"]))
    print("| topology | nodes | demand | unit (Gb/s) | ECMP | DAR | LP | DAR/LP | ECMP/LP "
          "| DAR settled | DAR best seen | stretch ECMP / DAR / LP |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---|---:|---|")
    for f in files:
        name = os.path.basename(f)[:-len(".json")]
        nodes = len(json.load(open(f))["nodes"])
        for demand in ("uniform", "gravity"):
            base = loads(args.dar_sim, f, "ecmp", demand, 1.0)["max_utilization"]
            unit = TARGET / base
            ecmp = loads(args.dar_sim, f, "ecmp", demand, unit)
            dar = loads(args.dar_sim, f, "dar", demand, unit)
            lp = loads(args.dar_sim, f, "lp", demand, unit)
            e, d, o = (x["max_utilization"] for x in (ecmp, dar, lp))
            loop = dar["dar"]
            if loop["settled"]:
                settled = f"yes, {loop['cycles']} cycles"
            elif loop["oscillating"]:
                period = f", period {loop['period']}" if loop["period"] else ""
                settled = f"no, oscillating{period}"
            else:
                settled = f"no ({loop['cycles']} cycles)"
            print(f"| {name} | {nodes} | {demand} | {unit:.4g} | {e:.3f} | {d:.3f} | {o:.3f} "
                  f"| {d / o:.2f} | {e / o:.2f} | {settled} | {loop['best_max_utilization']:.3f} "
                  f"| {ecmp['stretch']:.3f} / {dar['stretch']:.3f} / {lp['stretch']:.3f} |")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
