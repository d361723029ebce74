/* preload.h - what the fault injectors (failalloc.so, faultio.so) share:
 * knowing which calls are mk's own.  A call counts when it comes from the
 * program's text (libmk and the main, linked statically) once main has
 * started (the static constructors before it, the CUDA runtime's say, are
 * not mk's code).  preload_init() finds the text; from_mk(caller) asks. */
#ifndef MK_PRELOAD_H
#define MK_PRELOAD_H

#include <dlfcn.h>
#include <link.h>
#include <stdint.h>

static uintptr_t exe_lo, exe_hi;     /* the program's text */
static int ready;                    /* main has started */

static int phdr_cb(struct dl_phdr_info *info, size_t size, void *data)
{
	(void)size;
	(void)data;
	if (info->dlpi_name && info->dlpi_name[0])
		return 0;              /* the main program has no name */
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
			exe_lo = info->dlpi_addr + ph->p_vaddr;
			exe_hi = exe_lo + ph->p_memsz;
		}
	}
	return 1;
}

static void preload_init(void)
{
	dl_iterate_phdr(phdr_cb, NULL);
}

static int from_mk(void *caller)
{
	uintptr_t a = (uintptr_t)caller;

	return ready && a >= exe_lo && a < exe_hi;
}

static int (*real_main)(int, char **, char **);

static int main_wrapper(int argc, char **argv, char **envp)
{
	ready = 1;
	return real_main(argc, argv, envp);
}

int __libc_start_main(int (*main)(int, char **, char **), int argc, char **argv, void (*init)(void),
		      void (*fini)(void), void (*rtld_fini)(void), void *stack_end)
{
	int (*real)(int (*)(int, char **, char **), int, char **, void (*)(void), void (*)(void),
		    void (*)(void), void *) = dlsym(RTLD_NEXT, "__libc_start_main");
	real_main = main;
	return real(main_wrapper, argc, argv, init, fini, rtld_fini, stack_end);
}

#endif
