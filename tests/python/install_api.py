"""The Python API refuses what it cannot honour (ValueError naming the keyword), load()
reads any path as a file, and install()'s report at each OOM is that OOM's, past the dump
cap too. Run from an empty directory with OOMSCOPE_BIN and OOMSCOPE_LIB set."""
import os
import sys

import oomscope

DUMP = sys.argv[1]  # a dump to load under hostile names
failures = []


def expect(cond, what):
    if not cond:
        failures.append(what)
        print(f"FAILED: {what}", file=sys.stderr, flush=True)


bad = [
    {"no_ops": "no"},
    {"emulate": "no"},
    {"live": 1},
    {"dump_at_step": "10"},
    {"dump_at_step": [1.7]},
    {"dump_at_step": [-1]},
    {"device": 123},
    {"device": "cuda:1"},
    {"limit": True},
    {"limit": -5},
    {"limit_fraction": "half"},
    {"dump_dir": 3},
]
for kw in bad:
    name = next(iter(kw))
    try:
        oomscope.install(**kw)
    except ValueError as e:
        expect(str(e).startswith(name), f"install({kw}) names {name}: {e}")
    except Exception as e:  # noqa: BLE001
        expect(False, f"install({kw}) raised {type(e).__name__}: {e}")
    else:
        expect(False, f"install({kw}) was accepted")
expect("torch" not in sys.modules, "nothing imported torch yet")

# load(): names that look like options or standard input are files; a dump after a BOM or
# a newline is a dump.
text = open(DUMP, "rb").read()
for name, content in [("--help", text), ("-", text), ("bom.json", b"\xef\xbb\xbf" + text), ("nl.json", b"\n\n" + text)]:
    with open(name, "wb") as f:
        f.write(content)
    try:
        r = oomscope.load(name)
        expect(r.kind != "undetermined" or r.requested is not None, f"load({name!r}) read the dump: {r.kind}")
    except Exception as e:  # noqa: BLE001
        expect(False, f"load({name!r}) raised {type(e).__name__}: {e}")

oomscope.install(device="sim:512MiB", dump_dir="dumps", emulate=True)
try:
    oomscope.install(device="sim:1GiB", dump_dir="elsewhere", emulate=True)
except RuntimeError as e:
    expect("called already" in str(e), str(e))
else:
    expect(False, "a second install() before torch was imported was accepted")

import torch  # noqa: E402

for i, mib in enumerate([800, 1000, 2000, 600, 700, 800, 1000, 2000]):
    print(f"=== OOM {i + 1}: {mib} MiB", file=sys.stderr, flush=True)
    try:
        torch.empty(mib << 20, dtype=torch.uint8)
    except torch.cuda.OutOfMemoryError:
        pass
    else:
        expect(False, f"{mib} MiB fitted in 512 MiB")
print(f"=== done: {len(failures)} failed", file=sys.stderr, flush=True)
sys.exit(1 if failures else 0)
