/* elf.c - what can be known of a plugin before dlopen runs any of its
 * code (see mk_plugin_elf_check in plugin.h). */
#include <elf.h>
#include <string.h>
#include "mk/plugin.h"

#if defined(__x86_64__)
#define HOST_MACHINE EM_X86_64
#elif defined(__aarch64__)
#define HOST_MACHINE EM_AARCH64
#elif defined(__powerpc64__)
#define HOST_MACHINE EM_PPC64
#elif defined(__riscv)
#define HOST_MACHINE EM_RISCV
#else
#define HOST_MACHINE EM_NONE /* not checked */
#endif

/* [off, off + len) lies in a buffer of n bytes */
static int in_range(uint64_t off, uint64_t len, size_t n)
{
	return off <= n && len <= n - off;
}

int mk_plugin_elf_check(const uint8_t *buf, size_t n, const char *label, const char *symbol,
			struct mk_err *err)
{
	Elf64_Ehdr ehdr, *eh = &ehdr;
	size_t want = strlen(symbol);

	/* (copied out field by field: a hostile file's offsets need not be aligned) */
	if (n >= sizeof(ehdr))
		memcpy(&ehdr, buf, sizeof(ehdr));
	if (n < sizeof(*eh) || memcmp(buf, ELFMAG, SELFMAG))
		return mk_err_set(err, MK_EINVAL, "plugin %s: not an ELF shared object", label);
	if (buf[EI_CLASS] != ELFCLASS64 || buf[EI_DATA] != ELFDATA2LSB)
		return mk_err_set(err, MK_EINVAL, "plugin %s: not a 64-bit little-endian ELF object, as mk is", label);
	if (eh->e_type != ET_DYN)
		return mk_err_set(err, MK_EINVAL, "plugin %s: an ELF object, but not a shared object (type %u)", label,
				  eh->e_type);
	if (HOST_MACHINE != EM_NONE && eh->e_machine != HOST_MACHINE)
		return mk_err_set(err, MK_EINVAL, "plugin %s: built for another machine (ELF machine %u, this is %u)",
				  label, eh->e_machine, HOST_MACHINE);
	if (eh->e_shentsize != sizeof(Elf64_Shdr) || !eh->e_shnum ||
	    !in_range(eh->e_shoff, (uint64_t)eh->e_shnum * sizeof(Elf64_Shdr), n))
		return mk_err_set(err, MK_EINVAL, "plugin %s: no section table to find %s in (stripped of it?)", label,
				  symbol);
	for (size_t i = 0; i < eh->e_shnum; i++) {
		Elf64_Shdr sd, st, *s = &sd, *str = &st;
		memcpy(&sd, buf + eh->e_shoff + i * sizeof(sd), sizeof(sd));
		if (s->sh_type != SHT_DYNSYM)
			continue;
		if (s->sh_entsize != sizeof(Elf64_Sym) || !in_range(s->sh_offset, s->sh_size, n) ||
		    s->sh_link >= eh->e_shnum)
			return mk_err_set(err, MK_EINVAL, "plugin %s: a malformed dynamic symbol table", label);
		memcpy(&st, buf + eh->e_shoff + (size_t)s->sh_link * sizeof(st), sizeof(st));
		if (str->sh_type != SHT_STRTAB || !in_range(str->sh_offset, str->sh_size, n))
			return mk_err_set(err, MK_EINVAL, "plugin %s: a malformed dynamic string table", label);
		for (uint64_t k = 0; k < s->sh_size / sizeof(Elf64_Sym); k++) {
			Elf64_Sym sy, *sym = &sy;
			const char *name;
			memcpy(&sy, buf + s->sh_offset + k * sizeof(sy), sizeof(sy));
			if (sym->st_name >= str->sh_size || str->sh_size - sym->st_name <= want)
				continue;
			name = (const char *)buf + str->sh_offset + sym->st_name;
			if (memcmp(name, symbol, want + 1))
				continue;
			if (sym->st_shndx == SHN_UNDEF || ELF64_ST_TYPE(sym->st_info) != STT_FUNC ||
			    (ELF64_ST_BIND(sym->st_info) != STB_GLOBAL && ELF64_ST_BIND(sym->st_info) != STB_WEAK))
				return mk_err_set(err, MK_EINVAL, "plugin %s: %s is not a function it defines and exports",
						  label, symbol);
			return 0;
		}
	}
	return mk_err_set(err, MK_EINVAL, "plugin %s: exports no %s function (not an mk plugin?); not loaded", label,
			  symbol);
}
