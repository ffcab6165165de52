"""Assemble and check the face-runtime Lambda layer (see scripts/build-face-layer).

The checks read the ELF file itself: e_machine for the architecture, and the version
names the library needs (GLIBC_x.y, GLIBCXX_3.4.z) against provided.al2023's.
"""

import argparse
import os
import re
import struct
import sys
import zipfile

ORT_LIBRARY = "libonnxruntime.so.1.32.0"
MACHINES = {"x86_64": 62, "arm64": 183}  # EM_X86_64, EM_AARCH64
# provided.al2023: glibc 2.34 and gcc 11.2's libstdc++ (AL2023 core toolchain).
RUNTIME_MAX = {"GLIBC": (2, 34), "GLIBCXX": (3, 4, 29)}
MODELS = ["yunet_2023mar_fp32_dynamic.onnx", "sface_2021dec_fp32.onnx", "centerface_dynamic.onnx"]


def elf_machine(data: bytes) -> int:
    if data[:4] != b"\x7fELF":
        raise SystemExit("not an ELF file")
    little = data[5] == 1
    return struct.unpack("<H" if little else ">H", data[18:20])[0]


def needed_versions(data: bytes) -> dict:
    """The highest GLIBC_ and GLIBCXX_ version names in the library's string table."""
    found = {}
    for name, version in re.findall(rb"\b(GLIBC|GLIBCXX)_([0-9]+(?:\.[0-9]+)+)\b", data):
        key = name.decode()
        v = tuple(int(p) for p in version.decode().split("."))
        found[key] = max(found.get(key, v), v)
    return found


def check(data: bytes, arch: str) -> list:
    problems = []
    machine = elf_machine(data)
    if machine != MACHINES[arch]:
        other = {v: k for k, v in MACHINES.items()}.get(machine, f"machine {machine}")
        problems.append(f"{ORT_LIBRARY} is built for {other}, not {arch}")
    for name, version in needed_versions(data).items():
        if version > RUNTIME_MAX[name]:
            have = ".".join(map(str, RUNTIME_MAX[name]))
            problems.append(
                f"{ORT_LIBRARY} needs {name}_{'.'.join(map(str, version))}; provided.al2023 has {name}_{have}"
            )
    return problems


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", choices=sorted(MACHINES), required=True)
    ap.add_argument("--wheel", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--libstdcxx")
    ap.add_argument("--check-only", action="store_true", help="check OUT, build nothing")
    a = ap.parse_args()
    if a.check_only:
        with zipfile.ZipFile(a.out) as z:
            data = z.read(f"lib/{ORT_LIBRARY}")
    else:
        with zipfile.ZipFile(a.wheel) as w:
            data = w.read(f"onnxruntime/capi/{ORT_LIBRARY}")
    problems = check(data, a.arch)
    if problems:
        sys.exit("face layer: " + "; ".join(problems))
    if a.check_only:
        print(f"{a.out}: {ORT_LIBRARY} is {a.arch}, needs at most {needed_versions(data)}")
        return
    tmp = a.out + ".part"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        info = zipfile.ZipInfo(f"lib/{ORT_LIBRARY}")
        info.external_attr = 0o755 << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        z.writestr(info, data)
        for m in MODELS:
            z.write(os.path.join(a.models, m), f"models/{m}")
        if a.libstdcxx:
            z.write(a.libstdcxx, "lib/libstdc++.so.6")
    os.replace(tmp, a.out)
    print(f"{a.out}: {a.arch} layer, {os.path.getsize(a.out) // (1 << 20)} MiB")


if __name__ == "__main__":
    main()
