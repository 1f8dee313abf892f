#!/usr/bin/env python3
"""Checks the macOS binaries cross-checked here (scripts/cross-check.sh): each of gatehouse's
programs is in DIR, and every executable in DIR is a 64-bit Mach-O executable for the arch of
DIR's target, built for macOS (LC_BUILD_VERSION), with an entry point (LC_MAIN), that loads
/usr/lib/libSystem.B.dylib and nothing else, but for the secrets-helper, which also loads the
Security and CoreFoundation frameworks (the Keychain). A binary that came to load another library
would need it on every Mac and a stub here: it is named, and the check fails.

    scripts/macho-check.py target/aarch64-apple-darwin/debug
"""
import os
import struct
import sys

PROGRAMS = [
    "gatehouse", "gatehouse-broker", "gatehouse-mcp", "gatehouse-notify", "gatehouse-spawner",
    "fs-helper", "net-helper", "exec-helper", "secrets-helper", "servers-helper",
]
LIBSYSTEM = "/usr/lib/libSystem.B.dylib"
FRAMEWORKS = [
    "/System/Library/Frameworks/CoreFoundation.framework/Versions/A/CoreFoundation",
    "/System/Library/Frameworks/Security.framework/Versions/A/Security",
]
CPU = {"aarch64": 0x0100000C, "x86_64": 0x01000007}  # CPU_TYPE_ARM64, CPU_TYPE_X86_64
MH_MAGIC_64, MH_EXECUTE = 0xFEEDFACF, 2
LC_MAIN, LC_BUILD_VERSION, PLATFORM_MACOS = 0x80000028, 0x32, 1
LOADS = {0xC: "LC_LOAD_DYLIB", 0x80000018: "LC_LOAD_WEAK_DYLIB", 0x8000001F: "LC_REEXPORT_DYLIB",
         0x20: "LC_LAZY_LOAD_DYLIB", 0x80000023: "LC_LOAD_UPWARD_DYLIB"}


def inspect(path, cpu):
    """(problems, libraries loaded) of the Mach-O file at `path`."""
    data = open(path, "rb").read()
    if len(data) < 32:
        return ["too short for a Mach-O header"], []
    magic, cputype, _, filetype, ncmds, sizeofcmds, _, _ = struct.unpack_from("<IiIIIIII", data)
    if magic != MH_MAGIC_64:
        return [f"not a 64-bit Mach-O file (magic {magic:#x})"], []
    problems = []
    if cputype & 0xFFFFFFFF != cpu:
        problems.append(f"CPU type {cputype & 0xFFFFFFFF:#x}, not {cpu:#x}")
    if filetype != MH_EXECUTE:
        problems.append(f"file type {filetype}, not an executable")
    libs, main, platform = [], False, None
    off, end = 32, 32 + sizeofcmds
    for _ in range(ncmds):
        if off + 8 > min(end, len(data)):
            problems.append("load commands run past their size")
            break
        cmd, size = struct.unpack_from("<II", data, off)
        if size < 8:
            problems.append(f"load command {cmd:#x} of size {size}")
            break
        if cmd in LOADS:
            (name_at,) = struct.unpack_from("<I", data, off + 8)
            name = data[off + name_at:off + size].split(b"\0", 1)[0].decode()
            libs.append(name)
            if cmd != 0xC:
                problems.append(f"{LOADS[cmd]} {name} (only plain loads are expected)")
        elif cmd == LC_MAIN:
            main = True
        elif cmd == LC_BUILD_VERSION:
            (platform,) = struct.unpack_from("<I", data, off + 8)
        off += size
    if not main:
        problems.append("no entry point (LC_MAIN)")
    if platform != PLATFORM_MACOS:
        problems.append(f"built for platform {platform}, not macOS ({PLATFORM_MACOS})")
    return problems, libs


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    d = sys.argv[1]
    arch = os.path.basename(os.path.dirname(os.path.abspath(d))).split("-")[0]
    if arch not in CPU:
        sys.exit(f"{d}: not a target/<arch>-apple-darwin/<profile> directory")
    failed = [f"{p}: not built" for p in PROGRAMS if not os.path.isfile(os.path.join(d, p))]
    found = sorted(
        f for f in os.listdir(d)
        if os.path.isfile(os.path.join(d, f)) and os.access(os.path.join(d, f), os.X_OK)
    )
    for f in found:
        problems, libs = inspect(os.path.join(d, f), CPU[arch])
        want = [LIBSYSTEM] + (FRAMEWORKS if f == "secrets-helper" else [])
        if sorted(libs) != sorted(want):
            problems.append(f"loads {sorted(libs)}, expected {sorted(want)}")
        failed += [f"{f}: {p}" for p in problems]
    if failed:
        print("\n".join(failed), file=sys.stderr)
        sys.exit(f"the {arch} macOS binaries in {d} are not as expected")
    print(f"{len(found)} {arch} macOS executables linked, each loading only libSystem "
          "(the secrets-helper also Security and CoreFoundation): " + ", ".join(found))


if __name__ == "__main__":
    main()
