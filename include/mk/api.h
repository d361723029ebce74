/* api.h - MK_API marks the calls and data that libmk exports.
 *
 * libmk is built with -fvisibility=hidden: only a declaration marked
 * MK_API in an installed header (include/mk) is visible to programs and
 * plugins that load libmk.so; everything else is internal to the
 * library, whatever its name.  A program that links libmk.a statically
 * sees the same set through these headers.
 */
#ifndef MK_API_H
#define MK_API_H

#if defined(__GNUC__) || defined(__clang__)
#define MK_API __attribute__((visibility("default")))
#else
#define MK_API
#endif

#endif
