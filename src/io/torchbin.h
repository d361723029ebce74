/* torchbin.h - PyTorch checkpoints in torch.save's zip format
 * (pytorch_model.bin, .pt, .pth: a zip holding ARCHIVE/data.pkl, a
 * pickle of the state dict, and ARCHIVE/data/KEY, one member per
 * storage; ARCHIVE any name, torch.save's is the file's stem or
 * "archive"), read without running the pickle.
 *
 * The pickle is read by a restricted machine of mk's own that knows only
 * what state dicts use: dicts and collections.OrderedDict, tuples and
 * lists, strings, numbers, booleans and None, torch._utils
 * ._rebuild_tensor_v2 and _rebuild_parameter, the storage types, and
 * persistent ids naming storages.  Any other global is refused, naming
 * it, before anything would be called; nothing is ever executed (as
 * torch.load(weights_only=True)).  A storage member must be stored (not
 * deflated).  The result is the same struct mk_st_file a safetensors
 * header gives: every tensor's dtype, shape and byte range in the file
 * (data_start 0; tensors that share a storage may overlap), so the rest
 * of mk reads it as it reads safetensors.  A tensor that is a view not
 * contiguous (transposed, sliced, expanded) gets its strides
 * (mk_st_tensor.stride) and the span of storage it lies in; one spread
 * over more than 4 times its bytes and 16 MiB is refused.  header_hash is the SHA-256 of data.pkl.  The legacy
 * (pre-zip) torch.save format is refused with a message.  What the
 * machine may build is bounded by the tensors it has built (torchbin.c,
 * PKL_*): a pickle that builds more is refused, naming the bound.
 */
#ifndef MK_TORCHBIN_H
#define MK_TORCHBIN_H

#include <stddef.h>
#include <stdint.h>
#include "mk/err.h"
#include "io/safetensors.h"

/* Open a torch.save zip file.  Free the result with mk_st_file_free. */
int mk_torchbin_open(const char *path, struct mk_st_file **out, struct mk_err *err);
/* The same over a file held in memory (len bytes; label names it). */
int mk_torchbin_parse(const void *buf, size_t len, const char *label, struct mk_st_file **out, struct mk_err *err);

#endif
