#!/usr/bin/env python3
"""Converts the reference manifests (JSON) into the TSV tables the tests read.

usage: make_manifest_tsv.py [MANIFEST.json]   (default: manifest.json beside this script)

Writes manifest_native.tsv and manifest_hf.tsv beside this script (and pocket/pocket_manifest.tsv
from pocket/pocket_manifest.json), one tensor per line in the
manifest's order, tab-separated: name, shape (dims joined by "x", e.g. 1536x512), the float64
sum of its seed-0 values and the sum of their absolute values (17 significant digits, so each
number reads back as exactly the double in the manifest). The manifest gives no abs-sum for the
HF tensors: that column is "-" there. Lines starting with '#' are comments.
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def write_table(path, tensors):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("# name\tshape\tsum_seed0\tabssum_seed0\n")
        for t in tensors:
            shape = "x".join(str(int(d)) for d in t["shape"])
            abssum = "%.17g" % t["abssum_seed0"] if "abssum_seed0" in t else "-"
            f.write("%s\t%s\t%.17g\t%s\n" % (t["name"], shape, t["sum_seed0"], abssum))


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "manifest.json")
    with open(src, encoding="utf-8") as f:
        manifest = json.load(f)
    for key in ("native", "hf"):
        write_table(os.path.join(HERE, "manifest_%s.tsv" % key), manifest[key])
        print("%s: %d tensors" % (key, len(manifest[key])))
    with open(os.path.join(HERE, "pocket", "pocket_manifest.json"), encoding="utf-8") as f:
        pocket = json.load(f)["pocket"]
    write_table(os.path.join(HERE, "pocket", "pocket_manifest.tsv"), pocket)
    print("pocket: %d tensors" % len(pocket))


if __name__ == "__main__":
    main()
