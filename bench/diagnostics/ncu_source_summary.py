"""Summarise the per-instruction warp-state samples that bench/diagnostics/ncu_source.sh exports.

Input: the CSV of Nsight Compute's source page (SASS view). Output: the share of all samples by
stall reason, by opcode, and the instructions with the most samples in stall reasons other than
"selected" / "not selected" (or in one reason given with --reason): where a kernel's warps wait.

    python3 bench/diagnostics/ncu_source_summary.py src_128x256_fp_sass.csv [--top 30] [--reason stall_long_sb]
"""
import argparse
import collections
import csv


def main():
    p = argparse.ArgumentParser()
    p.add_argument("csv")
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--reason", default=None, help="rank instructions by this column only")
    args = p.parse_args()
    rows = list(csv.reader(open(args.csv)))
    print(f"{rows[0][0]}: {rows[0][1]}")
    hdr, data = rows[1], rows[2:]
    col = {h: i for i, h in enumerate(hdr)}
    reasons = [h for h in hdr if h.startswith("stall_") and "(Not" not in h]
    insts = []
    for r in data:
        if len(r) < len(hdr):
            continue
        insts.append((r[col["Source"]].strip(), {h: int(r[col[h]] or 0) for h in reasons}))
    total = collections.Counter()
    for _, v in insts:
        total.update(v)
    n = sum(total.values())
    print(f"samples: {n}")
    for h, v in total.most_common():
        if v:
            print(f"  {h:24s} {v:9d} {100 * v / n:5.1f}%")

    by_op = collections.defaultdict(collections.Counter)
    for src, v in insts:
        words = src.split()
        op = (words[1] if words[0].startswith("@") else words[0]).split(".")[0]
        by_op[op].update(v)
    print("\nby opcode (% of all samples; top reasons):")
    for op, c in sorted(by_op.items(), key=lambda kv: -sum(kv[1].values()))[:12]:
        top = ", ".join(f"{h[6:]} {100 * v / n:.1f}" for h, v in c.most_common(5) if v)
        print(f"  {op:10s} {100 * sum(c.values()) / n:5.1f}%  {top}")

    def waiting(v):
        return v[args.reason] if args.reason else sum(v.values()) - v["stall_selected"] - v["stall_not_selected"]

    print(f"\ninstructions with the most {'samples in ' + args.reason if args.reason else 'waiting samples'}:")
    for src, v in sorted(insts, key=lambda x: waiting(x[1]), reverse=True)[: args.top]:
        top = ", ".join(f"{h[6:]} {x}" for h, x in sorted(v.items(), key=lambda kv: -kv[1])[:4] if x)
        print(f"  {waiting(v):7d}  {src[:58]:58s} {top}")


if __name__ == "__main__":
    main()
