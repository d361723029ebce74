/* fuzz_plugin_elf.c - mk_plugin_elf_check, the look at a plugin's ELF
 * headers and dynamic symbols before dlopen, on arbitrary bytes: never
 * reads outside them, and accepts only what names the entry point. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "mk/plugin.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	struct mk_err err;
	int rc = mk_plugin_elf_check(d, n, "fuzz.so", MK_PLUGIN_INIT, &err);

	if (rc && (err.code == 0 || !err.msg[0]))
		abort();              /* every refusal says why */
	if (!rc && !memmem(d, n, MK_PLUGIN_INIT, sizeof(MK_PLUGIN_INIT)))
		abort();              /* accepted: the name is in there */
	return 0;
}
