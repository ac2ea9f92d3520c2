#!/usr/bin/python3
"""Check the LoRA adapter fleet in data/adapters/ from its PEFT files alone.

For every data/adapters/<name>/ (or the directories given):

  * adapter_config.json is the PEFT LoRA config tools/train_family.py writes
    (peft_type LORA, base `base`, r, lora_alpha, no rsLoRA / DoRA / bias /
    modules_to_save / fan_in_fan_out, target modules among the attention and
    MLP projections);
  * adapter_model.safetensors holds, for every layer and target, F16
    lora_A [r, in] and lora_B [out, r] under PEFT's names, nothing else, and
    is well under 10% of the base's bytes;
  * the merged model (W + s*B*A, s = lora_alpha / r, in f32) gives the
    low-rank model's logits (W x + s*B*(A x) with the same factors) on the
    adapter's held-out text, within 1e-4;
  * the merged model reproduces the figures training.json recorded for the
    shipped adapter (held-out bits-per-byte, and base's), and is within 0.01
    bpb of the f32 model training ended with (the F16 rounding of A and B is
    all that separates them); it beats base on its own domain.

  /usr/bin/python3 tools/check_adapters.py                 # the whole fleet
  /usr/bin/python3 tools/check_adapters.py data/adapters/perl
Exit status 0 when every adapter passes; one line per adapter either way.
"""
import argparse
import glob
import json
import os
import struct
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import train_family as tf  # noqa: E402  (the training code: Model, LoRALinear, load_peft)

TARGETS = dict((hf.split(".")[1], (n, hf)) for n, hf in tf.PEFT_TARGETS)


def shape_of(c, n):
    """[out, in] of the family's linear n"""
    d, hd = c["d_model"], c["head_dim"]
    return {"wq": [c["n_heads"] * hd, d], "wk": [c["n_kv_heads"] * hd, d],
            "wv": [c["n_kv_heads"] * hd, d], "wo": [d, c["n_heads"] * hd],
            "w1": [c["d_ff"], d], "w3": [c["d_ff"], d], "w2": [d, c["d_ff"]]}[n]


def check_files(d, base_bytes):
    """Problems with the PEFT files of adapter directory d (a list of strings)."""
    bad = []
    with open(os.path.join(d, "adapter_config.json")) as f:
        cfg = json.load(f)
    want = {"peft_type": "LORA", "base_model_name_or_path": "base", "use_rslora": False,
            "bias": "none", "fan_in_fan_out": False, "modules_to_save": None,
            "use_dora": False, "task_type": "CAUSAL_LM"}
    for k, v in want.items():
        if cfg.get(k, "<missing>") != v:
            bad.append(f"adapter_config.json: {k} is {cfg.get(k, '<missing>')!r}, want {v!r}")
    r = cfg.get("r")
    if not isinstance(r, int) or r < 1 or not isinstance(cfg.get("lora_alpha"), (int, float)):
        return bad + [f"adapter_config.json: r {r!r}, lora_alpha {cfg.get('lora_alpha')!r}"]
    tm = cfg.get("target_modules") or []
    unknown = [m for m in tm if m not in TARGETS]
    if unknown or not tm:
        return bad + [f"adapter_config.json: target_modules {tm!r}"]
    path = os.path.join(d, "adapter_model.safetensors")
    size = os.path.getsize(path)
    if size >= base_bytes // 10:
        bad.append(f"{size} B is not well under 10% of base's {base_bytes} B")
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    hdr.pop("__metadata__", None)
    expect = {}
    for i in range(tf.CONFIG["n_layers"]):
        for m in tm:
            ln, hf = TARGETS[m]
            out, inp = shape_of(tf.CONFIG, ln)
            p = f"base_model.model.model.layers.{i}.{hf}."
            expect[p + "lora_A.weight"] = [r, inp]
            expect[p + "lora_B.weight"] = [out, r]
    for k, shp in expect.items():
        t = hdr.get(k)
        if t is None:
            bad.append(f"missing tensor {k}")
        elif t["dtype"] != "F16" or t["shape"] != shp:
            bad.append(f"{k}: {t['dtype']} {t['shape']}, want F16 {shp}")
    extra = sorted(set(hdr) - set(expect))
    if extra:
        bad.append(f"unexpected tensors {extra[:3]}")
    end = max((t["data_offsets"][1] for t in hdr.values()), default=0)
    if 8 + n + end != len(raw):
        bad.append(f"data ends at {8 + n + end}, file is {len(raw)} B")
    return bad


@torch.no_grad()
def check(d, base_path, heldout_dir, fast=False):
    name = os.path.basename(os.path.normpath(d))
    bad = check_files(d, os.path.getsize(base_path))
    if bad:
        more = f" (and {len(bad) - 3} more)" if len(bad) > 3 else ""
        return False, f"{name}: " + "; ".join(bad[:3]) + more
    with open(os.path.join(d, "training.json")) as f:
        info = json.load(f)
    with open(os.path.join(heldout_dir, name + ".txt"), "rb") as f:
        held = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).long()
    merged = tf.load_peft(base_path, d, merge=True)
    lowrank = tf.load_peft(base_path, d, merge=False)
    x = held[:128 if fast else 512].unsqueeze(0)
    diff = float((merged(x) - lowrank(x)).abs().max())
    if fast:
        ok = diff <= 1e-4
        return ok, (f"{name}: merged vs low-rank logits max |diff| {diff:.2e}" +
                    ("" if ok else "; FAIL: merged and low-rank logits differ"))
    bpb = tf.eval_bpb(merged, held, max_windows=64)
    base_bpb = tf.eval_bpb(tf.load_model(base_path), held, max_windows=64)
    if "trained_f32_heldout_bpb" in info:     # the first adapter recorded all windows
        f32, bpb_f32 = info["trained_f32_heldout_bpb"], bpb
    else:
        f32, bpb_f32 = info["trained_f32_bpb_16_windows"], tf.eval_bpb(merged, held, max_windows=16)
    msg = (f"{name}: merged vs low-rank logits max |diff| {diff:.2e}; held-out bpb "
           f"{bpb:.4f} (recorded {info['heldout_bpb']}; f32 trained {f32}, F16 shipped "
           f"{bpb_f32:.4f}), base {base_bpb:.4f}")
    ok = True
    if diff > 1e-4:
        ok, msg = False, msg + "; FAIL: merged and low-rank logits differ"
    if abs(bpb - info["heldout_bpb"]) > 1e-3 or abs(base_bpb - info["base_heldout_bpb"]) > 1e-3:
        ok, msg = False, msg + "; FAIL: not the bpb training.json recorded"
    if abs(bpb_f32 - f32) > 0.01:
        ok, msg = False, msg + "; FAIL: the F16 adapter is not the model training ended with"
    if not bpb < base_bpb:
        ok, msg = False, msg + "; FAIL: no better than base on its own domain"
    return ok, msg


def table(data):
    """The fleet's figures as a markdown table (from data/adapters/TRAINING.json)."""
    with open(os.path.join(data, "adapters", "TRAINING.json")) as f:
        t = json.load(f)
    base = os.path.getsize(os.path.join(data, "models", "base", "model.safetensors"))
    rows = ["| adapter | domain | targets | r | steps | lr | train s | bytes (% of base) | "
            "held-out bpb | base bpb | vs base | raw reuse ppl 192 / 384 | KL 192 / 384 | "
            "top-1 192 / 384 |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    short = {"q_proj": "q", "k_proj": "k", "v_proj": "v", "o_proj": "o",
             "gate_proj": "gate", "up_proj": "up", "down_proj": "down"}
    for name, i in t["adapters"].items():
        r = i["raw_reuse"]["by_prefix"]
        rows.append(
            f"| {name} | {i['domain']} | {','.join(short[m] for m in i['target_modules'])} | "
            f"{i['lora_rank']} | {i['steps']} | {i['lr']:g} | {i['train_seconds']:.0f} | "
            f"{i['adapter_bytes']} ({100 * i['adapter_bytes'] / base:.1f}%) | "
            f"{i['heldout_bpb']:.3f} | {i['base_heldout_bpb']:.3f} | "
            f"{100 * i['bpb_vs_base']:+.1f}% | {100 * r['192']['raw_vs_oracle']:+.1f}% / "
            f"{100 * r['384']['raw_vs_oracle']:+.1f}% | {r['192']['kl']:.3f} / "
            f"{r['384']['kl']:.3f} | {r['192']['top1']:.3f} / {r['384']['top1']:.3f} |")
    return "\n".join(rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dirs", nargs="*", help="adapter directories (default data/adapters/*/)")
    ap.add_argument("--data", default=os.path.join(os.path.dirname(HERE), "data"))
    ap.add_argument("--fast", action="store_true", help="files and merged-vs-low-rank "
                    "logits on 128 tokens only (no held-out figures)")
    ap.add_argument("--table", action="store_true",
                    help="print the fleet's figures as a markdown table and exit")
    a = ap.parse_args()
    if a.table:
        print(table(a.data))
        return 0
    torch.set_num_threads(1)
    dirs = a.dirs or sorted(p for p in glob.glob(os.path.join(a.data, "adapters", "*"))
                            if os.path.exists(os.path.join(p, "adapter_config.json")))
    if not dirs:
        print("no adapters found")
        return 1
    base_path = os.path.join(a.data, "models", "base", "model.safetensors")
    fails = 0
    for d in dirs:
        ok, msg = check(d, base_path, os.path.join(a.data, "heldout"), a.fast)
        fails += not ok
        print(("ok   " if ok else "FAIL ") + msg, flush=True)
    print(f"{len(dirs) - fails}/{len(dirs)} adapters pass")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
