/* Wine 8 (Debian bookworm) has no bcryptprimitives.dll, and Rust's std (1.78 and later) imports
 * ProcessPrng from it on Windows, so no Rust test binary starts under it. This stand-in exports
 * the one function, backed by the system RNG Wine does have (BCryptGenRandom). Test-only: it is
 * placed beside the test binaries by tests/wine/setup.sh and never shipped. */
#include <windows.h>
#include <bcrypt.h>

BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len)
{
    while (len) {
        ULONG n = len > 0x40000000 ? 0x40000000 : (ULONG)len;
        if (BCryptGenRandom(NULL, data, n, BCRYPT_USE_SYSTEM_PREFERRED_RNG) != 0)
            return FALSE;
        data += n;
        len -= n;
    }
    return TRUE;
}
