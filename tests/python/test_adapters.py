"""The LoRA adapter fleet of data/adapters/ (tools/train_family.py --stage
adapters): where its text came from, and that its PEFT files are the model
it was trained as (tools/check_adapters.py)."""
import glob
import json
import os
import sys
import zlib

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def fleet(data_dir):
    path = os.path.join(data_dir, "adapters", "TRAINING.json")
    if not os.path.exists(path):
        pytest.skip("no adapter fleet in data/adapters (train_family.py --stage adapters)")
    with open(path) as f:
        return json.load(f)


def test_no_adapter_trains_on_an_eval_or_heldout_file(data_dir):
    """No adapter's training file is a file of the eviction suite (any
    portion), of the model family (trained or held out), or any adapter's
    held-out file; a file belongs to one adapter only."""
    t = fleet(data_dir)
    with open(os.path.join(data_dir, "evict_suite", "manifest.json")) as f:
        suite = {x["path"] for d in json.load(f)["domains"]
                 for p in d["portions"].values() for x in p["files"]}
    with open(os.path.join(data_dir, "models", "TRAINING.json")) as f:
        family = {p for d in json.load(f)["domains"].values()
                  for p in d.get("train_files", []) + d.get("heldout_files", [])}
    held = {x["path"] for d in t["domains"].values() for x in d["heldout_files"]}
    seen = {}
    for name, d in t["domains"].items():
        train = [x["path"] for x in d["train_files"]]
        assert train, name
        assert not set(train) & suite, (name, sorted(set(train) & suite)[:3])
        assert not set(train) & family, (name, sorted(set(train) & family)[:3])
        assert not set(train) & held, (name, sorted(set(train) & held)[:3])
        for p in train + [x["path"] for x in d["heldout_files"]]:
            assert seen.setdefault(p, name) == name, (p, seen[p], name)
        for p in train:     # the held-out rule keeps its files out of training
            assert zlib.crc32(("adapter:" + p).encode()) % 10 != 0, p


def test_heldout_texts_are_the_recorded_chunks(data_dir):
    """Every trained adapter's data/heldout/<name>.txt is made of the chunks
    TRAINING.json records (place, length, crc32), from held-out files only."""
    t = fleet(data_dir)
    for name in t["adapters"]:
        d = t["domains"][name]
        with open(os.path.join(data_dir, "heldout", name + ".txt"), "rb") as f:
            text = f.read()
        assert len(text) == d["heldout_bytes"] and len(text) >= 16000, name
        for x in d["heldout_files"]:
            assert zlib.crc32(("adapter:" + x["path"]).encode()) % 10 == 0, x["path"]
            chunk = text[x["at"]:x["at"] + x["bytes"]]
            assert zlib.crc32(chunk) == x["crc32"], (name, x["path"])


def test_every_adapter_beats_base_on_its_domain_and_is_small(data_dir):
    t = fleet(data_dir)
    base = os.path.getsize(os.path.join(data_dir, "models", "base", "model.safetensors"))
    dirs = {os.path.basename(os.path.dirname(p))
            for p in glob.glob(os.path.join(data_dir, "adapters", "*", "training.json"))}
    assert dirs == set(t["adapters"]), "TRAINING.json lists other adapters than data/adapters/"
    for name, info in t["adapters"].items():
        with open(os.path.join(data_dir, "adapters", name, "training.json")) as f:
            assert json.load(f) == info, f"{name}: TRAINING.json is not its training.json"
        assert info["heldout_bpb"] < info["base_heldout_bpb"], name
        size = os.path.getsize(os.path.join(data_dir, "adapters", name,
                                            "adapter_model.safetensors"))
        assert size == info["adapter_bytes"] and size < base // 10, name
        assert set(info["raw_reuse"]["by_prefix"]) == {"192", "384"}, name


def test_merged_adapter_is_the_low_rank_one(data_dir):
    """Each adapter read back from its PEFT files: config and tensors as PEFT
    writes them, and W + s*B*A merged gives the low-rank model's logits."""
    pytest.importorskip("torch")
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import check_adapters
    fleet(data_dir)
    dirs = sorted(p for p in glob.glob(os.path.join(data_dir, "adapters", "*"))
                  if os.path.exists(os.path.join(p, "adapter_config.json")))
    base = os.path.join(data_dir, "models", "base", "model.safetensors")
    for d in dirs:
        ok, msg = check_adapters.check(d, base, os.path.join(data_dir, "heldout"), fast=True)
        assert ok, msg
