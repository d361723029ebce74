/* fused.c - transformers-v5 fused MoE tensors from per-expert checkpoints
 * (gate_up_proj [E, 2I, H], down_proj [E, H, I], stacked from each expert's
 * own tensors as transformers v5 converts mixtral- and qwen2_moe-family
 * checkpoints): a description of the sources, no data moved. */
#include <stdlib.h>
#include <string.h>
#include "arch/arch.h"
#include "arch_impl.h"

enum family { FAM_NONE, FAM_MIXTRAL, FAM_QWEN2MOE };

/* Model types with a conversion table in transformers v5, by family. */
static enum family family_of(const char *model_type)
{
	static const char *const mixtral[] = { "mixtral", "minimax", "phimoe" };
	static const char *const qwen[] = {
		"qwen2_moe", "qwen3_moe", "qwen3_vl_moe", "qwen3_omni_moe", "qwen3_next",
		"deepseek_v2", "deepseek_v3", "kimi_k2", "dots1", "ernie4_5_moe", "glm4_moe", "glm4_moe_lite",
		"glm4v_moe", "longcat_flash", "hunyuan_v1_moe", "flex_olmo", "olmoe", "solar_open",
	};

	if (!model_type)
		return FAM_NONE;
	for (size_t i = 0; i < sizeof(mixtral) / sizeof(mixtral[0]); i++)
		if (!strcmp(model_type, mixtral[i]))
			return FAM_MIXTRAL;
	for (size_t i = 0; i < sizeof(qwen) / sizeof(qwen[0]); i++)
		if (!strcmp(model_type, qwen[i]))
			return FAM_QWEN2MOE;
	return FAM_NONE;
}

bool mk_arch_fused_known(const char *model_type)
{
	return family_of(model_type) != FAM_NONE;
}

void mk_fused_free(struct mk_fused *f)
{
	if (!f)
		return;
	mk_strv_free(f->sources, f->nexperts * f->nparts);
	free(f);
}

static bool ends_with(const char *s, const char *suf, size_t *stem)
{
	size_t a = strlen(s), b = strlen(suf);

	if (a < b || strcmp(s + a - b, suf))
		return false;
	*stem = a - b;
	return true;
}

struct hit {
	unsigned long idx;
	const char *name;
};

static int cmp_hit(const void *x, const void *y)
{
	const struct hit *a = x, *b = y;

	return a->idx < b->idx ? -1 : a->idx > b->idx;
}

/* Names "<base><digits>.<part>", sorted by expert number. */
static struct hit *collect(const char *base, const char *part, const char *const *names, size_t n,
			   size_t *nh)
{
	size_t bl = strlen(base);
	struct hit *h = malloc((n ? n : 1) * sizeof(*h));

	*nh = 0;
	if (!h)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		const char *s = names[i], *d;
		unsigned long v = 0;
		size_t nd = 0;

		if (strncmp(s, base, bl))
			continue;
		for (d = s + bl; *d >= '0' && *d <= '9'; d++, nd++)
			v = v * 10 + (unsigned long)(*d - '0');
		if (!nd || nd > 9 || *d != '.' || strcmp(d + 1, part))
			continue;
		h[*nh].idx = v;
		h[(*nh)++].name = s;
	}
	qsort(h, *nh, sizeof(*h), cmp_hit);
	return h;
}

int mk_arch_fused(const char *model_type, const char *target, const char *const *names, size_t n,
		  struct mk_fused **out, struct mk_err *err)
{
	static const char *const mix_gu[] = { "w1.weight", "w3.weight" }, *const mix_d[] = { "w2.weight" };
	static const char *const qw_gu[] = { "gate_proj.weight", "up_proj.weight" },
			  *const qw_d[] = { "down_proj.weight" };
	static const char *const mix_bases[] = { ".block_sparse_moe.experts.", ".mlp.experts." },
			  *const qw_bases[] = { ".mlp.experts." };
	enum family fam = family_of(model_type);
	const char *const *parts, *const *bases;
	size_t stem, nparts, nbases, nh[2] = { 0, 0 };
	struct hit *h[2] = { NULL, NULL };
	struct mk_fused *f = NULL;
	enum mk_fused_kind kind;
	char *base = NULL;
	int rc = 0;

	*out = NULL;
	if (fam == FAM_NONE)
		return 0;
	if (fam == FAM_MIXTRAL && ends_with(target, ".mlp.gate.weight", &stem)) {
		/* block_sparse_moe.gate is renamed to mlp.gate */
		size_t len = stem + sizeof(".block_sparse_moe.gate.weight");
		char *src = malloc(len);
		bool found = false;

		if (!src)
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		memcpy(src, target, stem);
		strcpy(src + stem, ".block_sparse_moe.gate.weight");
		for (size_t i = 0; i < n && !found; i++)
			found = !strcmp(names[i], src);
		if (!found || !(f = calloc(1, sizeof(*f))) || !(f->sources = calloc(1, sizeof(char *)))) {
			free(src);
			if (!found)
				return 0;
			mk_fused_free(f);
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		}
		f->kind = MK_FUSED_RENAME;
		f->nexperts = f->nparts = 1;
		f->sources[0] = src;
		*out = f;
		return 0;
	}
	if (ends_with(target, ".mlp.experts.gate_up_proj", &stem)) {
		kind = MK_FUSED_STACK_CONCAT;
		parts = fam == FAM_MIXTRAL ? mix_gu : qw_gu;
		nparts = 2;
	} else if (ends_with(target, ".mlp.experts.down_proj", &stem)) {
		kind = MK_FUSED_STACK;
		parts = fam == FAM_MIXTRAL ? mix_d : qw_d;
		nparts = 1;
	} else {
		return 0;
	}
	bases = fam == FAM_MIXTRAL ? mix_bases : qw_bases;
	nbases = fam == FAM_MIXTRAL ? 2 : 1;
	for (size_t b = 0; b < nbases; b++) {
		size_t bl = strlen(bases[b]);
		bool any = false;

		free(base);
		base = malloc(stem + bl + 1);
		if (!base) {
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
			goto out;
		}
		memcpy(base, target, stem);
		memcpy(base + stem, bases[b], bl + 1);
		for (size_t p = 0; p < nparts; p++) {
			free(h[p]);
			if (!(h[p] = collect(base, parts[p], names, n, &nh[p]))) {
				rc = mk_err_set(err, MK_ENOMEM, "out of memory");
				goto out;
			}
			any |= nh[p] > 0;
		}
		if (any)
			break;
	}
	if (!nh[0] && (nparts < 2 || !nh[1]))
		goto out;   /* nothing to convert from */
	for (size_t p = 0; p < nparts; p++) {
		if (nh[p] != nh[0] || (nh[p] && h[p][nh[p] - 1].idx != h[0][nh[0] - 1].idx)) {
			rc = mk_err_set(err, MK_EMISMATCH,
					"%s: cannot assemble from %s*.%s (%zu experts) and %s*.%s (%zu experts): "
					"the expert sets differ", target, base, parts[0], nh[0], base, parts[p], nh[p]);
			goto out;
		}
		for (size_t e = 0; e < nh[p]; e++)
			if (h[p][e].idx != e) {
				rc = mk_err_set(err, MK_EMISMATCH,
						"%s: experts of %s*.%s are not numbered 0..%zu (found %s)", target,
						base, parts[p], nh[p] - 1, h[p][e].name);
				goto out;
			}
	}
	f = calloc(1, sizeof(*f));
	if (!f || !(f->sources = calloc(nh[0] * nparts, sizeof(char *)))) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	f->kind = kind;
	f->axis = 0;
	f->nexperts = nh[0];
	f->nparts = nparts;
	for (size_t e = 0; e < nh[0]; e++)
		for (size_t p = 0; p < nparts; p++)
			if (!(f->sources[e * nparts + p] = strdup(h[p][e].name))) {
				rc = mk_err_set(err, MK_ENOMEM, "out of memory");
				goto out;
			}
	*out = f;
	f = NULL;
out:
	mk_fused_free(f);
	free(h[0]);
	free(h[1]);
	free(base);
	return rc;
}
