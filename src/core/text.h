/* text.h - names (tensors, paths, files) checked and escaped for
 * messages: what libmk prints of a name it read from a file.
 */
#ifndef MK_CORE_TEXT_H
#define MK_CORE_TEXT_H

#include <stdbool.h>
#include <stddef.h>

/* Whether len bytes of s are printable UTF-8: well-formed (no overlong
 * forms, surrogates or code points past U+10FFFF) and without control
 * characters (U+0000-U+001F, U+007F-U+009F). */
bool mk_text_printable(const char *s, size_t len);

/* A name (tensor, path, file) as it is safe to print: s when it is
 * printable (mk_text_printable), else a copy in buf where every control
 * character and every byte that is not UTF-8 is written as \n, \r, \t
 * or \xHH, cut at a character to fit `size` ("..." marks a cut).
 * len (size_t)-1: s is NUL-terminated, and returned as is when printable;
 * otherwise len bytes of s (NULs included) are always copied into buf.
 * Returns s or buf, NUL-terminated ("(null)" for s NULL). */
const char *mk_text_escape(const char *s, size_t len, char *buf, size_t size);

#endif
