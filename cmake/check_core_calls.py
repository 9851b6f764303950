"""Fails when an object file of the core needs a symbol of xfetch that the
core does not define itself (a call into the near cache, the share, a
driver...), or a thread's (pthread, thread-local storage): what the flow
needs from outside comes through src/core/ports.h. libc and libm are fine.

Usage: check_core_calls.py NM OBJECTS (xfetch_core's object files, joined
by "|")."""
import os
import re
import subprocess
import sys

nm, objects = sys.argv[1], sys.argv[2].split("|")


def symbols(flag):
    """{object: [symbol names]} from one nm run over every object."""
    out = subprocess.run([nm, flag, "-P", "-A", *objects], check=True,
                         capture_output=True, text=True).stdout
    found = {o: [] for o in objects}
    for line in out.splitlines():
        # -A -P: "file: symbol type [value size]"
        obj, _, rest = line.partition(": ")
        if obj in found and rest:
            found[obj].append(rest.split()[0])
    return found


defined = {s for syms in symbols("--defined-only").values() for s in syms}
outside = re.compile(r"^(pthread_|__tls_get_addr$|redis)")
bad = []
for obj, syms in symbols("--undefined-only").items():
    mine = [s for s in syms
            if (s.startswith("xf_") and s not in defined) or outside.match(s)]
    if mine:
        bad.append(f"  {os.path.basename(obj)}: {' '.join(mine)}")
if bad:
    sys.exit(f"{len(bad)} of the core's {len(objects)} object files need what the core "
             "does not define (the flow calls outside through src/core/ports.h):\n"
             + "\n".join(bad))
print(f"src/core: {len(objects)} object files, none needs a symbol of xfetch from "
      "outside it, nor a thread")
