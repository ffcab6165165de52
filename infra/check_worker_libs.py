"""Check that the Batch worker's binary runs in its runtime image without a Docker daemon:
every shared library it needs (ELF NEEDED entries) is either in the base image or
installed by infra/worker.Dockerfile's runtime stage (infra/worker-runtime-libs.txt says
which, and the packages it names must be on that stage's `apt-get install` line), and no
versioned symbol it binds is newer than the base image's glibc and libstdc++ provide.

Usage: check_worker_libs.py BINARY. Prints one line per check and `N passed, N failed`.
"""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_VERSIONS = {"GLIBC": (2, 35), "GLIBCXX": (3, 4, 30), "CXXABI": (1, 3, 13), "GCC": (12, 0, 0)}


def runtime_packages(dockerfile: str) -> set:
    """Packages the last stage's apt-get install lines name."""
    last = dockerfile.split("\nFROM ")[-1]
    names = set()
    for m in re.finditer(r"apt-get install[^\n]*?((?:\\\n|[^\n])*)", last):
        for word in m.group(0).replace("\\\n", " ").split():
            if not word.startswith("-") and word not in {"apt-get", "install", "&&"} and "=" not in word:
                names.add(word)
    return names


def main() -> int:
    binary = sys.argv[1]
    allowed = {}
    for line in (ROOT / "infra/worker-runtime-libs.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            parts = line.split()
            allowed[parts[0]] = parts[1:]
    packages = runtime_packages((ROOT / "infra/worker.Dockerfile").read_text())
    dynamic = subprocess.run(["readelf", "-d", "--wide", binary], check=True, capture_output=True, text=True).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic)
    versions = subprocess.run(["readelf", "-V", "--wide", binary], check=True, capture_output=True, text=True).stdout
    results = []

    def check(name, ok, detail=""):
        results.append(ok)
        print(("ok   " if ok else "FAIL ") + name + (f": {detail}" if detail and not ok else ""))

    check("the binary is dynamically linked", bool(needed), "no NEEDED entries read")
    for lib in needed:
        src = allowed.get(lib)
        if src is None:
            check(f"{lib} is in the runtime image", False, "not in infra/worker-runtime-libs.txt: install it in the runtime stage and list it, or build without what needs it")
        elif src[0] == "apt":
            check(f"{lib} is installed by the runtime stage ({src[1]})", len(src) > 1 and src[1] in packages, f"`{src[1] if len(src) > 1 else '?'}` is not on the runtime apt-get line")
        else:
            check(f"{lib} is in the base image", src[0] == "base", f"unknown source {src[0]}")
    newest = {}
    for family, ver in re.findall(r"Name: (GLIBCXX|GLIBC|CXXABI|GCC)_([0-9.]+)", versions):
        v = tuple(int(x) for x in ver.split("."))
        newest[family] = max(newest.get(family, v), v)
    for family, v in sorted(newest.items()):
        limit = MAX_VERSIONS[family]
        check(f"{family} symbols up to {'.'.join(map(str, v))} (image has {'.'.join(map(str, limit))})", v <= limit, "newer than the runtime image provides")
    passed = sum(results)
    print(f"{passed} passed, {len(results) - passed} failed")
    return 1 if passed != len(results) else 0


if __name__ == "__main__":
    sys.exit(main())
