#!/usr/bin/env python3
"""Fails when a file of src/ includes a header of a layer above its own, or
when the folders' includes form a cycle. The layers, bottom up, are
CMakeLists.txt's XF_LAYERS; the build's include paths already refuse most
upward includes, this names each one. It also fails when a file outside
src/near and src/share (which fills the near port) names the near cache's
internals (xf__near_*): the others reach it through its port (ports.h)."""
import os
import re
import sys

root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
with open(os.path.join(root, "CMakeLists.txt")) as f:
    layers = re.search(r"set\(XF_LAYERS ([^)]*)\)", f.read()).group(1).split()
rank = {name: i for i, name in enumerate(layers)}
home = {}
for layer in layers:
    for name in os.listdir(os.path.join(root, "src", layer)):
        home[name] = layer
near_owners = ("near", "share")
bad = []
for layer in layers:
    folder = os.path.join(root, "src", layer)
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name)) as f:
            for n, line in enumerate(f, 1):
                m = re.match(r'#include "([^"]+)"', line)
                if m and m.group(1) in home and rank[home[m.group(1)]] > rank[layer]:
                    bad.append(f"src/{layer}/{name}:{n}: includes {m.group(1)} "
                               f"(src/{home[m.group(1)]}/, a layer above)")
                if layer not in near_owners and "xf__near_" in line:
                    bad.append(f"src/{layer}/{name}:{n}: names the near cache's internals "
                               f"(reach it through ports.h's near port)")
if bad:
    sys.exit("\n".join(bad))
print("layers " + " < ".join(layers) + ": no include goes up; "
      "only src/near and src/share name xf__near_*")
