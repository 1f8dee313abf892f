/* Wine 8 (Debian 12's) has no bcryptprimitives.dll; Rust's standard library (1.78+) takes its
 * random bytes from ProcessPrng there. This stand-in, used only to run the Windows test binaries
 * under Wine in CI, forwards to BCryptGenRandom with the system RNG, which Wine implements.
 * Windows itself ships the real DLL; nothing of this is part of gatehouse. */
#include <windows.h>
#include <bcrypt.h>

BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len)
{
    while (len > 0) {
        ULONG chunk = len > 0x7fffffff ? 0x7fffffff : (ULONG)len;
        if (BCryptGenRandom(NULL, data, chunk, BCRYPT_USE_SYSTEM_PREFERRED_RNG) != 0)
            return FALSE;
        data += chunk;
        len -= chunk;
    }
    return TRUE;
}
