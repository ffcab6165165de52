"""A container image's file system built from its Dockerfile's own recipe, without Docker:
the runtime stage's Debian base (`FROM debian:<suite>-slim`) made with `debootstrap
--variant=minbase`, and the packages its `apt-get install` lines name installed into it
with apt inside the tree. The deploy and load rehearsals run the stage-runner function in
it (chrooted), so a package the image lacks (a library COLMAP needs, the certificates)
fails the rehearsal instead of the first reconstruction on AWS.

What it is not: Docker's layers, the base image's exact snapshot (the tree is made from
Debian's archive as it is today, through the same mirror this machine's apt uses), or
the build stage (the function's binary is this workspace's build). Trees are kept under
~/.cache/tessera/rootfs, one per recipe (suite and packages), and reused.

Usage: python image_rootfs.py DOCKERFILE   (prints the tree's path)
"""

import hashlib
import os
import re
import shutil
import subprocess
import sys

CACHE = os.path.join(os.environ.get("TESSERA_CACHE", os.path.expanduser("~/.cache/tessera")), "rootfs")
# Bumped when the way a tree is made changes, so older trees are not reused.
RECIPE_VERSION = 1


def mirror():
    """The Debian mirror this machine's apt uses (the one archive it may reach)."""
    for path in ("/etc/apt/sources.list.d/debian.sources", "/etc/apt/sources.list"):
        if os.path.exists(path):
            text = open(path).read()
            m = re.search(r"^URIs:\s*(\S+/debian)\s*$", text, re.M) or re.search(
                r"^deb\s+(\S+/debian)\s", text, re.M)
            if m:
                return m.group(1)
    return "http://deb.debian.org/debian"


def recipe(dockerfile):
    """(suite, packages) of the Dockerfile's last stage: its `FROM debian:<suite>[-slim]`
    and every package its `apt-get install` lines name."""
    text = open(dockerfile).read().replace("\\\n", " ")
    stages = re.split(r"^FROM\s+", text, flags=re.M)
    last = stages[-1]
    base = last.split()[0]
    m = re.fullmatch(r"(?:docker\.io/)?(?:library/)?debian:([a-z]+)(?:-slim)?", base)
    if not m:
        raise SystemExit(f"{dockerfile}: the runtime stage is FROM {base}, not a Debian image this can rebuild")
    packages = []
    for line in re.finditer(r"apt-get install ([^&\n]+)", last):
        packages += [w for w in line.group(1).split() if not w.startswith("-")]
    return m.group(1), sorted(set(packages))


def run(cmd, **kw):
    out = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    return out.stdout


def build(dockerfile, log=print):
    """The tree for `dockerfile`, made now or found in the cache."""
    suite, packages = recipe(dockerfile)
    key = hashlib.sha256(json_key(suite, packages).encode()).hexdigest()[:16]
    name = os.path.splitext(os.path.basename(dockerfile))[0]
    root = os.path.join(CACHE, f"{name}-{suite}-{key}")
    if os.path.exists(os.path.join(root, ".tessera-complete")):
        return root
    if shutil.which("debootstrap") is None:
        raise SystemExit("debootstrap is not installed (scripts/setup installs it: apt-get install debootstrap)")
    part = root + ".part"
    unmount_all(part)
    shutil.rmtree(part, ignore_errors=True)
    os.makedirs(CACHE, exist_ok=True)
    log(f"image rootfs: debootstrap {suite} into {part} from {mirror()}")
    run(["debootstrap", "--variant=minbase", suite, part, mirror()])
    shutil.copy("/etc/resolv.conf", os.path.join(part, "etc/resolv.conf"))
    with mounted(part):
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive", PATH="/usr/sbin:/usr/bin:/sbin:/bin")
        run(["chroot", part, "apt-get", "update", "-qq"], env=env)
        log(f"image rootfs: apt-get install {' '.join(packages)}")
        run(["chroot", part, "apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages], env=env)
        run(["chroot", part, "apt-get", "clean"], env=env)
    open(os.path.join(part, ".tessera-complete"), "w").write(json_key(suite, packages))
    os.rename(part, root)
    return root


def json_key(suite, packages):
    return f"v{RECIPE_VERSION} {suite} {' '.join(packages)}"


class mounted:
    """/proc and /dev of this machine bound into the tree while it is in use (what a
    container runtime gives a container), unmounted after."""

    def __init__(self, root):
        self.points = [os.path.join(root, "proc"), os.path.join(root, "dev")]

    def __enter__(self):
        for src, dst in zip(("/proc", "/dev"), self.points):
            os.makedirs(dst, exist_ok=True)
            if not os.path.ismount(dst):
                run(["mount", "--bind", src, dst])
        return self

    def __exit__(self, *exc):
        for dst in reversed(self.points):
            if os.path.ismount(dst):
                subprocess.run(["umount", "--lazy", dst], capture_output=True)


def unmount_all(root):
    """Mounts left in a tree by a run that was killed."""
    for sub in ("dev", "proc"):
        p = os.path.join(root, sub)
        if os.path.ismount(p):
            subprocess.run(["umount", "--lazy", p], capture_output=True)


if __name__ == "__main__":
    print(build(sys.argv[1]))
