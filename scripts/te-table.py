#!/usr/bin/env python3
"""Max utilisation of ECMP, DAR and the TE LP on the WAN topologies, under uniform and gravity
demand, at the loads where ECMP's max utilisation is 0.8, 1 and 2 (the table in docs/fluid.md).

  scripts/te-table.py [--dar-sim build/src/cli/dar-sim] [--topologies data/topologies/wan]

ECMP's loads are linear in the demand, so the unit rate that puts ECMP at a level x is
x / (ECMP's max utilisation at 1 Gb/s per unit); so is the LP's optimum, which is solved once
per matrix (at ECMP's level 1) and scaled. DAR runs at every level. Prints a Markdown table.
Python 3 standard library only.
"""
import argparse
import glob
import json
import os
import subprocess
import sys

LEVELS = (0.8, 1.0, 2.0)


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
    print("| topology | nodes | demand | ECMP / LP | DAR / LP at ECMP 0.8 | at 1 | at 2 "
          "| DAR iterations at 1 | DAR gap at 1 | stretch ECMP / DAR / LP at 1 |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---|")
    for f in files:
        name = os.path.basename(f)[:-len(".json")]
        nodes = len(json.load(open(f))["nodes"])
        for demand in ("uniform", "gravity"):
            base = loads(args.dar_sim, f, "ecmp", demand, 1.0)["max_utilisation"]
            unit = 1.0 / base
            ecmp = loads(args.dar_sim, f, "ecmp", demand, unit)
            lp = loads(args.dar_sim, f, "lp", demand, unit)
            optimum = lp["max_utilisation"]
            ratios, at_one = [], None
            for level in LEVELS:
                dar = loads(args.dar_sim, f, "dar", demand, unit * level)
                if not dar["dar"]["settled"] or dar["dar"]["oscillated"]:
                    sys.exit(f"{name} {demand} at ECMP {level}: DAR did not settle"
                             f" (oscillated: {dar['dar']['oscillated']})")
                ratios.append(dar["max_utilisation"] / (optimum * level))
                if level == 1.0:
                    at_one = dar
            cells = " | ".join(f"{r:.3f}" for r in ratios)
            print(f"| {name} | {nodes} | {demand} | {ecmp['max_utilisation'] / optimum:.2f} "
                  f"| {cells} | {at_one['dar']['iterations']} | {at_one['dar']['gap']:.1e} "
                  f"| {ecmp['stretch']:.3f} / {at_one['stretch']:.3f} / {lp['stretch']:.3f} |")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
