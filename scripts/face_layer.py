"""Assemble and check the face-runtime Lambda layer (see scripts/build-face-layer).

ONNX Runtime needs libstdc++ and libgcc_s. Whether provided.al2023 (the AL2023 minimal
image) holds them is not something a layer should bet on, so the layer brings its own:
the C++ runtime of an older Debian (bullseye, gcc 10), which needs nothing newer from glibc
than AL2023's 2.34, while it defines every GLIBCXX_/CXXABI_/GCC_ version ONNX Runtime
asks for. Lambda puts /opt/lib last on LD_LIBRARY_PATH, so where the image has its own
(gcc 11's, newer) it is the image's that loads; either way every version is met.

The checks read every library with readelf: its ELF machine, the files it needs, and the
version names it needs from each. A need from a library the layer bundles must be one that
library defines; a need from glibc must be at most provided.al2023's; a file that is
neither bundled nor part of glibc is refused (it would not be there). `--load` then loads
the layer's ONNX Runtime in a fresh process that sees only the layer's lib/ and glibc,
asks it its version, and names the C++ runtime it was linked against.
"""

import argparse
import os
import re
import struct
import subprocess
import sys
import tempfile
import zipfile

ORT_LIBRARY = "libonnxruntime.so.1.32.0"
MACHINES = {"x86_64": 62, "arm64": 183}  # EM_X86_64, EM_AARCH64
# provided.al2023: glibc 2.34 (AL2023 core toolchain).
GLIBC_MAX = (2, 34)
# Files glibc itself provides: always on the runtime.
GLIBC_FILES = {
    "libc.so.6", "libm.so.6", "libdl.so.2", "librt.so.1", "libpthread.so.0",
    "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1", "libresolv.so.2",
}
MODELS = ["yunet_2023mar_fp32_dynamic.onnx", "sface_2021dec_fp32.onnx", "centerface_dynamic.onnx"]


def elf_machine(data: bytes) -> int:
    if data[:4] != b"\x7fELF":
        raise SystemExit("not an ELF file")
    little = data[5] == 1
    return struct.unpack("<H" if little else ">H", data[18:20])[0]


def version(name: str):
    """GLIBCXX_3.4.22 -> ("GLIBCXX", (3, 4, 22))."""
    family, _, v = name.partition("_")
    return family, tuple(int(p) for p in re.findall(r"[0-9]+", v))


class Elf:
    """What readelf says a shared library needs and defines."""

    def __init__(self, path: str, name: str):
        self.name = name
        with open(path, "rb") as f:
            self.machine = elf_machine(f.read(64))
        dynamic = subprocess.run(["readelf", "-d", "--wide", path], capture_output=True, text=True, check=True).stdout
        self.needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic)
        soname = re.findall(r"\(SONAME\)\s+Library soname: \[([^\]]+)\]", dynamic)
        self.soname = soname[0] if soname else name
        versions = subprocess.run(["readelf", "-V", "--wide", path], capture_output=True, text=True, check=True).stdout
        self.defines, self.needs, section, current = set(), {}, None, None
        for line in versions.splitlines():
            if line.startswith("Version definition section"):
                section = "d"
            elif line.startswith("Version needs section"):
                section = "r"
            elif line.startswith("Version symbols section"):
                section = None
            elif section == "d":
                m = re.search(r"Name: (\S+)", line)
                if m:
                    self.defines.add(m.group(1))
            elif section == "r":
                m = re.search(r"File: (\S+)", line)
                if m:
                    current = m.group(1)
                    self.needs.setdefault(current, set())
                    continue
                m = re.search(r"Name: (\S+)", line)
                if m and current:
                    self.needs[current].add(m.group(1))


def check(libs: list, arch: str) -> list:
    """Problems with the layer's libraries (`Elf`s, ONNX Runtime first) on provided.al2023."""
    problems = []
    bundled = {lib.soname: lib for lib in libs}
    for lib in libs:
        if lib.machine != MACHINES[arch]:
            other = {v: k for k, v in MACHINES.items()}.get(lib.machine, f"machine {lib.machine}")
            problems.append(f"{lib.name} is built for {other}, not {arch}")
            continue
        for needed in lib.needed:
            if needed not in bundled and needed not in GLIBC_FILES:
                problems.append(f"{lib.name} needs {needed}, which is neither in the layer nor part of glibc")
        for file, names in lib.needs.items():
            for name in sorted(names):
                if file in bundled:
                    if name not in bundled[file].defines:
                        problems.append(f"{lib.name} needs {name} from {file}; the layer's {file} does not define it")
                elif file in GLIBC_FILES:
                    family, v = version(name)
                    if family == "GLIBC" and v > GLIBC_MAX:
                        problems.append(
                            f"{lib.name} needs {name} from {file}; provided.al2023 has glibc {'.'.join(map(str, GLIBC_MAX))}"
                        )
    return problems


def highest(libs: list) -> dict:
    """The highest version each family of names is needed at, for the report."""
    top = {}
    for lib in libs:
        for names in lib.needs.values():
            for name in names:
                family, v = version(name)
                if v and v > top.get(family, ()):
                    top[family] = v
    return {k: ".".join(map(str, v)) for k, v in sorted(top.items())}


def load(lib_dir: str) -> str:
    """Load the layer's ONNX Runtime in a process that sees only `lib_dir` and glibc;
    return its version and the C++ runtime the loader bound it to."""
    probe = r"""
import ctypes, sys
ort = ctypes.CDLL(sys.argv[1])
class ApiBase(ctypes.Structure):
    _fields_ = [("GetApi", ctypes.c_void_p), ("GetVersionString", ctypes.CFUNCTYPE(ctypes.c_char_p))]
ort.OrtGetApiBase.restype = ctypes.POINTER(ApiBase)
version = ort.OrtGetApiBase().contents.GetVersionString().decode()
maps = open("/proc/self/maps").read().split()
cxx = sorted({p for p in maps if "libstdc++" in p or "libgcc_s" in p})
print(version, *cxx)
"""
    out = subprocess.run(
        [sys.executable, "-S", "-c", probe, os.path.join(lib_dir, ORT_LIBRARY)],
        env={"LD_LIBRARY_PATH": lib_dir, "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True,
    )
    if out.returncode != 0:
        sys.exit(f"face layer: ONNX Runtime does not load from the layer alone: {out.stderr.strip()[-600:]}")
    version, *runtime = out.stdout.split()
    outside = [p for p in runtime if not p.startswith(lib_dir)]
    if outside or not runtime:
        sys.exit(f"face layer: ONNX Runtime loaded a C++ runtime from outside the layer: {outside or 'none'}")
    return f"ONNX Runtime {version} loads with the layer's {', '.join(os.path.basename(p) for p in runtime)}"


def read_layer(zip_path: str, into: str) -> list:
    with zipfile.ZipFile(zip_path) as z:
        names = [n for n in z.namelist() if n.startswith("lib/") and not n.endswith("/")]
        z.extractall(into, names)
    order = sorted(names, key=lambda n: not n.endswith(ORT_LIBRARY))
    if not order or not order[0].endswith(ORT_LIBRARY):
        sys.exit(f"face layer: {zip_path} has no lib/{ORT_LIBRARY}")
    return [Elf(os.path.join(into, n), os.path.basename(n)) for n in order]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", choices=sorted(MACHINES), required=True)
    ap.add_argument("--wheel", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--bundle", action="append", default=[], help="a shared library to put in lib/ (repeat)")
    ap.add_argument("--check-only", action="store_true", help="check OUT, build nothing")
    ap.add_argument("--load", action="store_true", help="also load ONNX Runtime from the layer (same architecture only)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if a.check_only:
            libs = read_layer(a.out, tmp)
        else:
            os.makedirs(os.path.join(tmp, "lib"))
            with zipfile.ZipFile(a.wheel) as w:
                with open(os.path.join(tmp, "lib", ORT_LIBRARY), "wb") as f:
                    f.write(w.read(f"onnxruntime/capi/{ORT_LIBRARY}"))
            libs = [Elf(os.path.join(tmp, "lib", ORT_LIBRARY), ORT_LIBRARY)]
            for path in a.bundle:
                lib = Elf(path, os.path.basename(path))
                with open(path, "rb") as src, open(os.path.join(tmp, "lib", lib.soname), "wb") as dst:
                    dst.write(src.read())
                lib.name = lib.soname
                libs.append(lib)
        problems = check(libs, a.arch)
        if problems:
            sys.exit("face layer: " + "; ".join(problems))
        loaded = load(os.path.join(tmp, "lib")) if a.load else None
        if a.check_only:
            print(f"{a.out}: {ORT_LIBRARY} is {a.arch}; the layer's libraries need at most {highest(libs)}"
                  + (f"; {loaded}" if loaded else ""))
            return
        part = a.out + ".part"
        with zipfile.ZipFile(part, "w", zipfile.ZIP_DEFLATED) as z:
            for lib in libs:
                info = zipfile.ZipInfo(f"lib/{lib.name}")
                info.external_attr = 0o755 << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                with open(os.path.join(tmp, "lib", lib.name), "rb") as f:
                    z.writestr(info, f.read())
            for m in MODELS:
                z.write(os.path.join(a.models, m), f"models/{m}")
        os.replace(part, a.out)
    print(f"{a.out}: {a.arch} layer ({', '.join(l.name for l in libs)}), {os.path.getsize(a.out) // (1 << 20)} MiB"
          + (f"; {loaded}" if loaded else ""))


if __name__ == "__main__":
    main()
