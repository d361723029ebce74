/* plugin.h - merge methods from shared objects, without rebuilding mk.
 *
 * A plugin is a shared object exporting
 *
 *   int mk_plugin_init(uint32_t abi, const struct mk_method *const **methods,
 *                      size_t *n);
 *
 * which returns 0 and sets *methods and *n to its methods (static storage;
 * each with .abi = MK_METHOD_ABI), or non-zero when it cannot serve this
 * `abi`.  The programs load plugins named by --plugin FILE and by
 * MK_PLUGIN_PATH (a colon-separated list of .so files and directories,
 * every file ending in .so in a directory), and register their methods beside the
 * built-ins (a name already taken is an error).  Kernels may call libmk's
 * functions: the programs export them (linked with -rdynamic).
 *
 * The plan records, for every plugin method it uses, its name, ABI and
 * spec hash; mk-merge refuses a job whose method it cannot load or whose
 * spec hash differs (the plugin changed since mk-plan ran).
 */
#ifndef MK_PLUGIN_H
#define MK_PLUGIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "mk/api.h"
#include "mk/err.h"
#include "mk/method.h"

/* The entry point's type and name. */
typedef int (*mk_plugin_init_fn)(uint32_t abi, const struct mk_method *const **methods, size_t *n);
#define MK_PLUGIN_INIT "mk_plugin_init"

/* Load one plugin and register its methods.  Before dlopen runs any of
 * its code (constructors run at dlopen), the file is checked: a regular
 * file, owned by the user or root and writable by no one else (a plugin
 * others can replace is code they can run as you), and an ELF shared
 * object for this machine that defines and exports MK_PLUGIN_INIT
 * (mk_plugin_elf_check).  What cannot be checked beforehand: a file that
 * passes runs its constructors at dlopen, before mk_plugin_init is asked
 * for the ABI; only load plugins you trust. */
MK_API int mk_plugin_load(const char *path, struct mk_err *err);
/* The ELF part of that check, on the file's bytes (label names it in
 * messages): a 64-bit little-endian ET_DYN object for this machine whose
 * dynamic symbol table defines the global function `symbol`. */
MK_API int mk_plugin_elf_check(const uint8_t *buf, size_t n, const char *label, const char *symbol,
			struct mk_err *err);
/* Load every plugin of MK_PLUGIN_PATH (unset or empty: none). */
MK_API int mk_plugin_load_env(struct mk_err *err);
/* Was this method registered from a plugin?  Its file, else NULL. */
MK_API const char *mk_plugin_of(const struct mk_method *m);

/* SHA-256 (hex, 65 bytes with the NUL) of a canonical text of the spec:
 * name, ABI, parameters (name, scope, type, flags, default, bounds),
 * contract, whole_tensor.  Changes when anything a plan relies on does. */
MK_API void mk_method_spec_hash(const struct mk_method *m, char hex[65]);

#endif
