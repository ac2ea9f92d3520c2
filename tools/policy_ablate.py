#!/usr/bin/python3
"""policy_ablate.py IN.safetensors OUT.safetensors NAME[,NAME...]|window=F —
a copy of a learned eviction policy (schema/FORMATS.md, version 3 or 4)
that ignores the named inputs: their columns of fc1.weight are zeroed, so
the network sees each of them at its standardised mean (0) in every slot.
With window=F (version 4), the learned recent window is replaced by a
fixed one: the head always picks its choice F (a fraction of the budget,
one of `window_choices`), the hand-set rule the head replaced when F = 0.5.  `scdb bench
evict --policy OUT` then measures how much the trained network relies on
them (an ablation at evaluation time; retraining without the inputs,
`scdb train-policy --inputs ...`, measures whether they earn their place).
The metadata gains "ablated": the zeroed names.
"""
import json
import struct
import sys


def main():
    if len(sys.argv) != 4:
        sys.stderr.write(__doc__)
        return 2
    with open(sys.argv[1], "rb") as f:
        blob = f.read()
    (hl,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + hl])
    data = bytearray(blob[8 + hl:])
    meta = header.get("__metadata__", {})
    names = meta.get("features", "").split(",")
    if sys.argv[3].startswith("window="):
        return fix_window(sys.argv[2], header, data, meta, float(sys.argv[3][7:]))
    drop = sys.argv[3].split(",")
    for d in drop:
        if d not in names:
            sys.stderr.write("policy_ablate: %s reads no input '%s' (it reads %s)\n" %
                             (sys.argv[1], d, ",".join(names)))
            return 1
    t = header["fc1.weight"]
    if t["dtype"] != "F32":
        sys.stderr.write("policy_ablate: fc1.weight is not F32\n")
        return 1
    rows, cols = t["shape"]
    begin = t["data_offsets"][0]
    for d in drop:
        c = names.index(d)
        for r in range(rows):
            off = begin + 4 * (r * cols + c)
            data[off:off + 4] = struct.pack("<f", 0.0)
    meta["ablated"] = ",".join(drop)
    return write(sys.argv[2], header, data, meta)


def fix_window(out, header, data, meta, frac):
    choices = [float(x) for x in meta.get("window_choices", "").split(",") if x]
    t = header.get("window.weight")
    if not choices or t is None:
        sys.stderr.write("policy_ablate: window= needs a version-4 file (window_choices, window.weight)\n")
        return 1
    near = [abs(c - frac) < 1e-6 for c in choices]
    if not any(near):
        sys.stderr.write("policy_ablate: %g is not among window_choices %s\n" % (frac, meta["window_choices"]))
        return 1
    begin = t["data_offsets"][0]
    for c, hit in enumerate(near):
        data[begin + 8 * c:begin + 8 * c + 8] = struct.pack("<ff", 1.0 if hit else 0.0, 0.0)
    meta["ablated"] = "window=%g" % frac
    return write(out, header, data, meta)


def write(out, header, data, meta):
    header["__metadata__"] = meta
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    with open(out, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        f.write(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
