#!/usr/bin/python3
"""No include points upward: each folder includes only the layers below it
(DESIGN.md's arrows, docs/architecture.md's diagram).

Usage: test_layers.py SOURCE_DIR

Reads every `#include "..."` of the C++ and CUDA sources and checks it
against the rule of the deepest folder the file lies in. Inside the
communicator, tcp/ includes neither shm/ nor host/, and shm/ does not
include host/: host/ composes the two. Exits 1 listing
"file:line: includes X (allowed: ...)" for each include that breaks a rule.
Before scanning, it checks the rules on a few cases.
"""
import os
import re
import sys

BELOW_TRAIN = ("runtime/", "kernels/", "tensor/", "autograd/", "parallel/")
# The deepest matching folder decides; a file includes from its own folder
# freely unless a rule names a sibling it must not reach.
RULES = {
    "runtime/": ("runtime/",),
    "kernels/": ("kernels/", "runtime/"),
    "tensor/": ("tensor/", "kernels/", "runtime/"),
    "autograd/": ("autograd/", "tensor/", "kernels/", "runtime/"),
    "parallel/": BELOW_TRAIN,
    "parallel/comm/": ("parallel/comm/", "tensor/", "runtime/"),
    "parallel/comm/tcp/": ("parallel/comm/tcp/", "parallel/comm/types.h", "parallel/comm/work.h",
                           "tensor/", "runtime/"),
    "parallel/comm/shm/": ("parallel/comm/shm/", "parallel/comm/tcp/", "parallel/comm/types.h",
                           "parallel/comm/work.h", "tensor/", "runtime/"),
    "launcher/": ("launcher/", "runtime/"),
    "launcher/preflight/": ("launcher/", ) + BELOW_TRAIN,
    "train/": ("train/",) + BELOW_TRAIN,
    # The programs on top: each may use every library, none another's files.
    "bench/": ("bench/", "train/", "launcher/") + BELOW_TRAIN,
    "examples/": ("examples/",) + BELOW_TRAIN,
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
EXTS = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh")


def rule_for(path):
    """The allowed prefixes for a file at `path` (relative), or None."""
    best = None
    for folder in RULES:
        if path.startswith(folder) and (best is None or len(folder) > len(best)):
            best = folder
    return RULES[best] if best else None


OURS = ("runtime", "kernels", "tensor", "autograd", "parallel", "launcher", "train", "bench",
        "examples")


def allowed(path, target):
    rule = rule_for(path)
    if rule is None or target.split("/")[0] not in OURS:  # unruled, beside it, or a library's
        return True
    return any(target.startswith(prefix) for prefix in rule)


def self_check():
    cases = [("runtime/env.cpp", "tensor/tensor.h", False),
             ("parallel/comm/tcp/ring.cpp", "parallel/comm/shm/zero_copy.h", False),
             ("parallel/comm/shm/zero_copy.cpp", "parallel/comm/tcp/algorithm.h", True),
             ("parallel/comm/shm/zero_copy.cpp", "parallel/comm/host/transport.h", False),
             ("parallel/comm/host/transport.cpp", "parallel/comm/shm/shm_channel.h", True),
             ("parallel/comm/process_group.cpp", "autograd/engine.h", False),
             ("autograd/nn/module.h", "parallel/placement.h", False),
             ("parallel/ddp/ddp.cpp", "train/config.h", False),
             ("launcher/main.cpp", "parallel/comm/init.h", False),
             ("launcher/preflight/spmd_preflight.cpp", "parallel/comm/init.h", True),
             ("train/trainer.cpp", "parallel/fsdp/fully_shard.h", True),
             ("examples/05_ddp/main.cpp", "train/trainer.h", False),
             ("bench/train_bench.cpp", "examples/common/flags.h", False),
             ("bench/peers/gloo_bench.cpp", "gloo/allreduce.h", True)]
    for path, target, want in cases:
        assert allowed(path, target) == want, (path, target, want)


def main(root):
    self_check()
    bad = []
    for folder in sorted({f.split("/")[0] for f in RULES}):
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, folder)):
            dirnames[:] = [d for d in dirnames if not d.startswith((".", "build"))]
            for name in sorted(filenames):
                if not name.endswith(EXTS):
                    continue
                full = os.path.join(dirpath, name)
                rel = os.path.relpath(full, root)
                with open(full, encoding="utf-8", errors="replace") as f:
                    for n, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if m and not allowed(rel, m.group(1)):
                            bad.append(f"{rel}:{n}: includes {m.group(1)} "
                                       f"(allowed: {', '.join(rule_for(rel))})")
    for line in bad:
        print(line)
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
