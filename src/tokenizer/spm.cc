// spm.cc - a SentencePiece model's pieces (tokenizer.model), read with
// libsentencepiece: the helper libmk-spm.so, which libmk loads when it
// needs it (spm_load.c; vocab_impl.h has the call).  The one C++ file of
// mk.  Nothing escapes as an exception: the library's errors come back as
// its status message.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <sentencepiece_processor.h>

extern "C" {
#include "vocab_impl.h"
}

extern "C" int mk_spm_pieces_v1(const void *data, size_t len, struct mk__spm_piece **out, size_t *n, char *msg,
				size_t cap)
{
	*out = nullptr;
	*n = 0;
	try {
		sentencepiece::SentencePieceProcessor sp;
		auto st = sp.LoadFromSerializedProto(absl::string_view(static_cast<const char *>(data), len));
		if (!st.ok()) {
			std::snprintf(msg, cap, "%s", st.ToString().c_str());
			return -1;
		}
		int np = sp.GetPieceSize();
		auto *v = static_cast<struct mk__spm_piece *>(std::calloc(np > 0 ? (size_t)np : 1, sizeof(struct mk__spm_piece)));
		if (!v) {
			std::snprintf(msg, cap, "out of memory");
			return -2;
		}
		for (int i = 0; i < np; i++) {
			const std::string &p = sp.IdToPiece(i);
			v[i].piece = static_cast<char *>(std::malloc(p.size() + 1));
			if (!v[i].piece) {
				for (int k = 0; k < i; k++)
					std::free(v[k].piece);
				std::free(v);
				std::snprintf(msg, cap, "out of memory");
				return -2;
			}
			std::memcpy(v[i].piece, p.data(), p.size());
			v[i].piece[p.size()] = '\0';
			v[i].control = sp.IsControl(i);
			v[i].unknown = sp.IsUnknown(i);
		}
		*out = v;
		*n = (size_t)np;
		return 0;
	} catch (const std::bad_alloc &) {
		std::snprintf(msg, cap, "out of memory");
		return -2;
	} catch (...) {
		std::snprintf(msg, cap, "the SentencePiece library failed");
		return -1;
	}
}
