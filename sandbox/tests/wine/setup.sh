#!/bin/sh
# Makes the Windows test binaries start under Wine 8: builds the ProcessPrng stand-in
# (bcryptprimitives.c) and puts it beside them (the loader looks in the binary's directory
# first): the test binaries in deps/, the helper binaries a test spawns one level up. Then run:
#   CARGO_TARGET_X86_64_PC_WINDOWS_GNU_RUNNER=wine cargo test -p sandbox --target x86_64-pc-windows-gnu
set -eu
here=$(cd "$(dirname "$0")" && pwd)
target=${CARGO_TARGET_DIR:-$here/../../../target}
out=$target/x86_64-pc-windows-gnu/debug/deps
mkdir -p "$out"
x86_64-w64-mingw32-gcc -O2 -shared -o "$out/bcryptprimitives.dll" \
    "$here/bcryptprimitives.c" "$here/bcryptprimitives.def" -lbcrypt
cp "$out/bcryptprimitives.dll" "$out/../bcryptprimitives.dll"
echo "built $out/bcryptprimitives.dll"
