/* km_blob.c — the fatbin of runtime/kernels/km_util.cu, embedded in the binary so kmrun
 * needs no files beside it to fill, compare, checksum and time on the GPU. */
#include <stddef.h>

__asm__(".section .rodata\n"
        ".balign 64\n"
        ".global km_util_fatbin\n"
        "km_util_fatbin:\n"
        ".incbin \"" KM_UTIL_FATBIN "\"\n"
        ".global km_util_fatbin_end\n"
        "km_util_fatbin_end:\n"
        ".byte 0\n"
        ".previous\n");
