/* mk-gen-model - write a small synthetic llama-shaped checkpoint for tests
 * and benchmarks: deterministic data from --seed, any number of shards,
 * config.json and small tokenizer files.
 *
 *   mk-gen-model [--seed N] [--layers L] [--hidden H] [--inter I]
 *                [--vocab V] [--dtype DT] [--shards K] [--all-dtypes]
 *                [--big-rows R] [--pad-leading] [--arch llama|mistral]
 *                [--bpe-tokenizer[=EXTRA]] [--tok-skip K] [--tok-size N] [--unigram] [--tied]
 *                [--spm FILE [--spm-added A,B]] [--slow]
 *                [--heads N] [--kv-heads N] [--weight-scale S] [--head-scale S] [--unit-norms] [--biases]
 *                [--arch gpt_oss [--experts E]] [--quantized fp8|mxfp4|fp8-bare|mxfp4-bare]
 *                [--quant-block B] [--config-extra JSON] OUTDIR
 *
 * --all-dtypes adds one small tensor of every safetensors dtype, a scalar
 * and an empty tensor; --big-rows adds "big.weight" [R, H] in F32 (make it
 * larger than a chunk); --pad-leading writes headers with leading
 * whitespace (readers must accept it).  Shards are filled round-robin.
 * --bpe-tokenizer writes a tokenizer transformers loads, with one token
 * per id: a BPE tokenizer.json of regular tokens (one character, then two
 * characters with their merge when both halves are tokens, then three)
 * and the added
 * specials <s> and </s> at the last ids (EXTRA, when given, in place of
 * </s>; a comma-separated list: those specials), its tokenizer_config.json
 * with transformers' model_max_length (an integer beyond 64 bits);
 * --tok-skip K starts the regular tokens K further along the sequence
 * (vocabularies that overlap partly), --tok-size N gives the tokenizer N
 * tokens instead of --vocab; --unigram writes a SentencePiece-style
 * Unigram model instead (<unk> first, every other piece with the word-start
 * mark, Metaspace pre-tokenizer; no merges); --tied ties lm_head to the embeddings (no
 * lm_head tensor).  --spm FILE: the tokenizer is FILE, a SentencePiece
 * tokenizer.model, alone (a LlamaTokenizer's tokenizer_config.json, no
 * tokenizer.json), --spm-added A,B the specials added after its pieces.
 * --slow (with --bpe-tokenizer): the same vocabulary as a slow GPT-2
 * tokenizer's vocab.json and merges.txt, no tokenizer.json.
 * Without --bpe-tokenizer or --spm the files are a small
 * WordLevel stand-in.
 *
 * For the forward pass (mk_forward): --arch qwen2 adds q/k/v biases,
 * --arch qwen3 the q_norm/k_norm weights (and writes head_dim); --biases
 * a bias for every attention and MLP projection (llama's attention_bias
 * and mlp_bias);
 * --heads/--kv-heads set the attention heads (4 and 4; k_proj and v_proj
 * are [kv-heads * head_dim, H]); --weight-scale multiplies every value
 * (so attention is not near uniform); --head-scale multiplies the first
 * eighth of each float tensor's values (a tensor whose first eighth is
 * unlike the rest, where a selection's window misses its cut);
 * --unit-norms fills the RMSNorm
 * weights with 1 + a value instead (norms that keep activations' size);
 * --quantized fp8 stores every layer matrix (attention and MLP
 * projections) as block FP8, as DeepSeek-V3 ships: NAME.weight in
 * F8_E4M3 and NAME.weight_scale_inv (F32, one per --quant-block B
 * square, 128 unless told) made from the values the model would have
 * had (in --dtype) by transformers' reference quantizer (per block
 * amax, scale = 448 · (1 / amax), the weight times it clamped to ±448 and
 * rounded to E4M3, the inverse scale 1 / scale kept; an all-zero block
 * scale 1), and writes config.json's quantization_config;
 * --arch gpt_oss writes a gpt-oss model instead: attention with biases
 * and sinks, a router with its bias and --experts E (4) fused experts
 * mlp.experts.gate_up_proj [E, H, 2I] and down_proj [E, I, H] with
 * biases; --quantized mxfp4 stores those experts as gpt-oss ships them:
 * NAME_blocks (U8 [E, R, C/32, 16], random FP4 codes, two a byte) and
 * NAME_scales (U8 [E, R, C/32], E8M0 exponents 118 to 129, 2^-9 to 2^2)
 * of the transposed [E, R, C], H and I multiples of 32, and writes
 * config.json's quantization_config (quant_method "mxfp4");
 * --quantized fp8-bare and mxfp4-bare add one token tensor of each
 * format and its scales (block-FP8; gpt-oss's MXFP4 blocks and scales,
 * U8), config.json saying nothing of it unless --config-extra adds a
 * quantization_config;
 * --config-extra appends JSON members to config.json (a later duplicate
 * key wins, as Python reads it). */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "mk/dtype.h"
#include "core/fp8block.h"
#include "core/fsutil.h"
#include "io/safetensors.h"
#include "core/jsondoc.h"
#include "core/sbuf.h"
#include "tokenizer/vocab.h"

struct gt {
	char name[128];
	enum mk_dtype dt;
	unsigned ndim;
	uint64_t shape[4];
	unsigned shard;
	enum mk_dtype orig;       /* fp8: the dtype its values were made in */
	int qrole;                /* 0; 1: a block-FP8 weight; 2: its scales */
	char qof[128];            /* (scales) the weight's name */
	/* qrole 3: MXFP4 scales, E8M0 exponents in a range of weights */
	uint64_t qshape[2];       /* (scales) the weight's shape */
};

static struct gt *ts;
static size_t nts;

static void add(const char *name, enum mk_dtype dt, unsigned ndim, uint64_t a, uint64_t b)
{
	ts = realloc(ts, (nts + 1) * sizeof(*ts));
	if (!ts)
		abort();
	memset(&ts[nts], 0, sizeof(ts[nts]));
	snprintf(ts[nts].name, sizeof(ts[nts].name), "%s", name);
	ts[nts].dt = dt;
	ts[nts].ndim = ndim;
	ts[nts].shape[0] = a;
	ts[nts].shape[1] = b;
	nts++;
}

static void add4(const char *name, enum mk_dtype dt, unsigned ndim, uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
	add(name, dt, ndim, a, b);
	ts[nts - 1].shape[2] = c;
	ts[nts - 1].shape[3] = d;
}

/* gpt-oss's layers (--arch gpt_oss): its experts MXFP4 when mx. */
static void add_gpt_oss_layer(uint64_t l, enum mk_dtype dt, uint64_t hidden, uint64_t inter, uint64_t heads,
			      uint64_t hd, uint64_t kvd, uint64_t experts, bool mx)
{
	static const char *const sq[] = { "q_proj", "k_proj", "v_proj", "o_proj" };
	char name[128];
	unsigned long long L = (unsigned long long)l;

	snprintf(name, sizeof(name), "model.layers.%llu.input_layernorm.weight", L);
	add(name, dt, 1, hidden, 0);
	for (int i = 0; i < 4; i++) {
		uint64_t rows = i == 0 ? heads * hd : i == 3 ? hidden : kvd;
		snprintf(name, sizeof(name), "model.layers.%llu.self_attn.%s.weight", L, sq[i]);
		add(name, dt, 2, rows, i == 3 ? heads * hd : hidden);
		snprintf(name, sizeof(name), "model.layers.%llu.self_attn.%s.bias", L, sq[i]);
		add(name, dt, 1, rows, 0);
	}
	snprintf(name, sizeof(name), "model.layers.%llu.self_attn.sinks", L);
	add(name, dt, 1, heads, 0);
	snprintf(name, sizeof(name), "model.layers.%llu.mlp.router.weight", L);
	add(name, dt, 2, experts, hidden);
	snprintf(name, sizeof(name), "model.layers.%llu.mlp.router.bias", L);
	add(name, dt, 1, experts, 0);
	/* gate_up_proj [E, H, 2I] (stored transposed: R = 2I, C = H), down_proj [E, I, H] */
	const uint64_t shp[2][2] = { { hidden, 2 * inter }, { inter, hidden } };
	for (int k = 0; k < 2; k++) {
		const char *pn = k ? "down_proj" : "gate_up_proj";
		if (mx) {
			snprintf(name, sizeof(name), "model.layers.%llu.mlp.experts.%s_blocks", L, pn);
			add4(name, MK_DT_U8, 4, experts, shp[k][1], shp[k][0] / 32, 16);
			snprintf(name, sizeof(name), "model.layers.%llu.mlp.experts.%s_scales", L, pn);
			add4(name, MK_DT_U8, 3, experts, shp[k][1], shp[k][0] / 32, 0);
			ts[nts - 1].qrole = 3;
		} else {
			snprintf(name, sizeof(name), "model.layers.%llu.mlp.experts.%s", L, pn);
			add4(name, dt, 3, experts, shp[k][0], shp[k][1], 0);
		}
		snprintf(name, sizeof(name), "model.layers.%llu.mlp.experts.%s_bias", L, pn);
		add(name, dt, 2, experts, shp[k][1]);
	}
	snprintf(name, sizeof(name), "model.layers.%llu.post_attention_layernorm.weight", L);
	add(name, dt, 1, hidden, 0);
}

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static double weight_scale = 1.0, head_scale = 1.0;

/* --quantized fp8: the block side, and whether tensor i is a layer
 * matrix stored as block FP8 (its scales follow it in the list). */
static unsigned quant_block = 128;

/* A scale option's value (> 0) into *v; false, told, when it is not. */
static bool scale_arg(const char *opt, const char *arg, double *v)
{
	char *end;

	*v = strtod(arg, &end);
	if (*end || !(*v > 0)) {
		fprintf(stderr, "mk-gen-model: bad --%s %s\n", opt, arg);
		return false;
	}
	return true;
}

/* The i-th value fill makes from seed s (advanced). */
static float gen_value(uint64_t *s, uint64_t i, uint64_t nelem, bool unit)
{
	double u = (double)(splitmix(s) >> 11) / 9007199254740992.0 - 0.5;
	float v = (float)(u * 0.08 * weight_scale * (i < nelem / 8 ? head_scale : 1.0));
	return unit ? (float)(1.0 + u) : v;
}

/* A block-FP8 weight of rows x cols made from the values fill would give
 * it in dtype orig (seed), by transformers' reference quantizer (libmk's
 * mk_fp8_block_row, a block-row at a time): into q (F8_E4M3 bytes) or inv
 * (the float32 inverse scales, one per block). */
static void quant_fp8(uint64_t seed, enum mk_dtype orig, uint64_t rows, uint64_t cols, uint8_t *q, float *inv)
{
	uint64_t n = rows * cols, s = seed, B = quant_block, sc = (cols + B - 1) / B;
	float *v = malloc((n ? n : 1) * sizeof(float)), *row = malloc(sc * sizeof(float) + 1);
	uint8_t *qb = malloc(B * cols + 1);

	if (!v || !row || !qb)
		abort();
	for (uint64_t i = 0; i < n; i++) {      /* as stored in orig, read back as float32 */
		float f = gen_value(&s, i, n, false);
		uint8_t b[4];
		mk_dtype_convert(orig, b, MK_DT_F32, &f, 1);
		mk_dtype_convert(MK_DT_F32, &v[i], orig, b, 1);
	}
	for (uint64_t r0 = 0; r0 < rows; r0 += B) {
		uint64_t nr = rows - r0 < B ? rows - r0 : B;
		mk_fp8_block_row(v + r0 * cols, nr, cols, (uint32_t)B, qb, row);
		if (q)
			memcpy(q + r0 * cols, qb, nr * cols);
		if (inv)
			memcpy(inv + (r0 / B) * sc, row, sc * sizeof(float));
	}
	free(v);
	free(row);
	free(qb);
}

static void fill(uint8_t *buf, uint64_t nbytes, enum mk_dtype dt, uint64_t nelem, uint64_t seed, bool unit)
{
	uint64_t s = seed;

	if (mk_dtype_is_float(dt) && dt != MK_DT_F8_E8M0) {
		size_t es = mk_dtype_bits(dt) / 8;
		for (uint64_t i = 0; i < nelem; i++) {
			/* roughly N(0, 0.02)-sized values, as weights are */
			float v = gen_value(&s, i, nelem, unit);
			mk_dtype_convert(dt, buf + i * es, MK_DT_F32, &v, 1);
		}
	} else if (dt == MK_DT_BOOL) {
		for (uint64_t i = 0; i < nbytes; i++)
			buf[i] = splitmix(&s) & 1;
	} else {
		for (uint64_t i = 0; i < nbytes; i++)
			buf[i] = (uint8_t)splitmix(&s);
	}
}

static int write_text(const char *dir, const char *name, const char *text)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
		perror(path);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "seed", 1, 0, 's' }, { "layers", 1, 0, 'l' }, { "hidden", 1, 0, 'H' },
		{ "inter", 1, 0, 'I' }, { "vocab", 1, 0, 'v' }, { "dtype", 1, 0, 'd' },
		{ "shards", 1, 0, 'k' }, { "all-dtypes", 0, 0, 'a' }, { "big-rows", 1, 0, 'b' },
		{ "quantized", 1, 0, 'z' }, { "quant-block", 1, 0, 'q' },
		{ "pad-leading", 0, 0, 'p' }, { "arch", 1, 0, 'A' }, { "bpe-tokenizer", 2, 0, 'T' },
		{ "tok-skip", 1, 0, 'K' }, { "tok-size", 1, 0, 'S' }, { "tied", 0, 0, 't' }, { "unigram", 0, 0, 'U' },
		{ "spm", 1, 0, 'P' }, { "spm-added", 1, 0, 'Q' }, { "slow", 0, 0, 'W' },
		{ "heads", 1, 0, 'h' }, { "kv-heads", 1, 0, 'g' }, { "weight-scale", 1, 0, 'w' },
		{ "head-scale", 1, 0, 'e' },
		{ "unit-norms", 0, 0, 'u' }, { "config-extra", 1, 0, 'x' }, { "biases", 0, 0, 'B' },
		{ "experts", 1, 0, 'E' }, { 0 },
	};
	uint64_t heads = 4, kv_heads = 0, experts = 4;
	bool unit_norms = false, biases = false;
	const char *extra = NULL;
	uint64_t seed = 1, layers = 2, hidden = 64, inter = 0, vocab = 256, shards = 1, big = 0, tokskip = 0, toksize = 0;
	bool tied = false, unigram = false, slow = false;
	enum mk_dtype dt = MK_DT_BF16;
	bool all = false, pad = false;
	const char *quant = NULL, *quant_config = NULL;
	const char *arch = "llama", *bpe = NULL, *spm = NULL, *spm_added = NULL;
	struct mk_err err = { 0 };
	char name[128], path[4096], buf[4096];
	int c;

	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		uint64_t *dst = NULL;
		switch (c) {
		case 's': dst = &seed; break;
		case 'l': dst = &layers; break;
		case 'H': dst = &hidden; break;
		case 'I': dst = &inter; break;
		case 'v': dst = &vocab; break;
		case 'k': dst = &shards; break;
		case 'b': dst = &big; break;
		case 'K': dst = &tokskip; break;
		case 'S': dst = &toksize; break;
		case 't': tied = true; break;
		case 'U': unigram = true; break;
		case 'W': slow = true; break;
		case 'P': spm = optarg; break;
		case 'h': dst = &heads; break;
		case 'g': dst = &kv_heads; break;
		case 'u': unit_norms = true; break;
		case 'B': biases = true; break;
		case 'E': experts = strtoull(optarg, NULL, 10); break;
		case 'x': extra = optarg; break;
		case 'w':
			if (!scale_arg("weight-scale", optarg, &weight_scale))
				return 2;
			break;
		case 'e':
			if (!scale_arg("head-scale", optarg, &head_scale))
				return 2;
			break;
		case 'Q': spm_added = optarg; break;
		case 'a': all = true; break;
		case 'z': quant = optarg; break;
		case 'q': quant_block = (unsigned)strtoul(optarg, NULL, 10); if (!quant_block) return 2; break;
		case 'p': pad = true; break;
		case 'T': bpe = optarg ? optarg : "</s>"; break;
		case 'A':
			if (strcmp(optarg, "llama") && strcmp(optarg, "mistral") && strcmp(optarg, "qwen2") &&
			    strcmp(optarg, "qwen3") && strcmp(optarg, "gpt_oss")) {
				fprintf(stderr, "mk-gen-model: --arch llama, mistral, qwen2, qwen3 or gpt_oss\n");
				return 2;
			}
			arch = optarg;
			break;
		case 'd':
			if (mk_dtype_from_name(optarg, &dt)) {
				fprintf(stderr, "mk-gen-model: unknown dtype %s\n", optarg);
				return 2;
			}
			break;
		default: return 2;
		}
		if (dst && mk_size_parse(optarg, dst)) {
			fprintf(stderr, "mk-gen-model: bad number %s\n", optarg);
			return 2;
		}
	}
	if (optind + 1 != argc || shards < 1) {
		fprintf(stderr, "usage: mk-gen-model [options] OUTDIR\n");
		return 2;
	}
	const char *dir = argv[optind];
	if (!kv_heads)
		kv_heads = heads;
	if (!heads || hidden % heads || heads % kv_heads) {
		fprintf(stderr, "mk-gen-model: --heads must divide --hidden, --kv-heads --heads\n");
		return 2;
	}
	const uint64_t hd = hidden / heads, kvd = kv_heads * hd;
	if (!inter)
		inter = hidden * 2 + hidden / 2;
	if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
		perror(dir);
		return 1;
	}
	const bool gpt_oss = !strcmp(arch, "gpt_oss"), mx = quant && !strcmp(quant, "mxfp4");
	if (mx && (!gpt_oss || hidden % 32 || inter % 32 || !experts)) {
		fprintf(stderr, "mk-gen-model: --quantized mxfp4 needs --arch gpt_oss, --hidden and --inter multiples of 32\n");
		return 2;
	}
	add("model.embed_tokens.weight", dt, 2, vocab, hidden);
	for (uint64_t l = 0; l < layers; l++) {
		if (gpt_oss) {
			add_gpt_oss_layer(l, dt, hidden, inter, heads, hd, kvd, experts, mx);
			continue;
		}
		static const char *const sq[] = { "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
						  "self_attn.o_proj" };
		snprintf(name, sizeof(name), "model.layers.%llu.input_layernorm.weight", (unsigned long long)l);
		add(name, dt, 1, hidden, 0);
		for (int i = 0; i < 4; i++) {
			snprintf(name, sizeof(name), "model.layers.%llu.%s.weight", (unsigned long long)l, sq[i]);
			add(name, dt, 2, i == 1 || i == 2 ? kvd : hidden, hidden);
			if ((!strcmp(arch, "qwen2") && i < 3) || biases) {
				snprintf(name, sizeof(name), "model.layers.%llu.%s.bias", (unsigned long long)l, sq[i]);
				add(name, dt, 1, i == 1 || i == 2 ? kvd : hidden, 0);
			}
		}
		if (!strcmp(arch, "qwen3")) {
			snprintf(name, sizeof(name), "model.layers.%llu.self_attn.q_norm.weight", (unsigned long long)l);
			add(name, dt, 1, hd, 0);
			snprintf(name, sizeof(name), "model.layers.%llu.self_attn.k_norm.weight", (unsigned long long)l);
			add(name, dt, 1, hd, 0);
		}
		snprintf(name, sizeof(name), "model.layers.%llu.mlp.gate_proj.weight", (unsigned long long)l);
		add(name, dt, 2, inter, hidden);
		snprintf(name, sizeof(name), "model.layers.%llu.mlp.up_proj.weight", (unsigned long long)l);
		add(name, dt, 2, inter, hidden);
		snprintf(name, sizeof(name), "model.layers.%llu.mlp.down_proj.weight", (unsigned long long)l);
		add(name, dt, 2, hidden, inter);
		if (biases) {
			snprintf(name, sizeof(name), "model.layers.%llu.mlp.gate_proj.bias", (unsigned long long)l);
			add(name, dt, 1, inter, 0);
			snprintf(name, sizeof(name), "model.layers.%llu.mlp.up_proj.bias", (unsigned long long)l);
			add(name, dt, 1, inter, 0);
			snprintf(name, sizeof(name), "model.layers.%llu.mlp.down_proj.bias", (unsigned long long)l);
			add(name, dt, 1, hidden, 0);
		}
		snprintf(name, sizeof(name), "model.layers.%llu.post_attention_layernorm.weight",
			 (unsigned long long)l);
		add(name, dt, 1, hidden, 0);
	}
	add("model.norm.weight", dt, 1, hidden, 0);
	if (!tied)
		add("lm_head.weight", dt, 2, vocab, hidden);
	if (all) {
		for (unsigned d = 0; d < MK_DT_COUNT; d++) {
			unsigned bits = mk_dtype_bits((enum mk_dtype)d);
			snprintf(name, sizeof(name), "extra.%s", mk_dtype_name((enum mk_dtype)d));
			/* rows of 8 elements: whole bytes for every bit width */
			add(name, (enum mk_dtype)d, 2, bits < 8 ? 4 : 3, 8);
		}
		add("extra.scalar", MK_DT_F32, 0, 0, 0);
		add("extra.empty", MK_DT_F16, 2, 0, 4);
		add("extra.odd_f4", MK_DT_F4, 2, 2, 3); /* rows of 1.5 bytes */
	}
	if (quant && !strcmp(quant, "fp8")) {
		/* every layer matrix block FP8, its scales after it */
		size_t n0 = nts;
		for (size_t i = 0; i < n0; i++) {
			size_t nl = strlen(ts[i].name);
			if (strncmp(ts[i].name, "model.layers.", 13) || ts[i].ndim != 2 || nl < 7 ||
			    strcmp(ts[i].name + nl - 7, ".weight"))
				continue;
			ts[i].orig = ts[i].dt;
			ts[i].dt = MK_DT_F8_E4M3;
			ts[i].qrole = 1;
			snprintf(name, sizeof(name), "%s_scale_inv", ts[i].name);
			add(name, MK_DT_F32, 2, (ts[i].shape[0] + quant_block - 1) / quant_block,
			    (ts[i].shape[1] + quant_block - 1) / quant_block);
			ts[nts - 1].qrole = 2;
			ts[nts - 1].orig = ts[i].orig;
			snprintf(ts[nts - 1].qof, sizeof(ts[nts - 1].qof), "%s", ts[i].name);
			ts[nts - 1].qshape[0] = ts[i].shape[0];
			ts[nts - 1].qshape[1] = ts[i].shape[1];
		}
		static char qc[160];
		snprintf(qc, sizeof(qc), "\"quantization_config\": {\"activation_scheme\": \"dynamic\", \"fmt\": "
			 "\"e4m3\", \"quant_method\": \"fp8\", \"weight_block_size\": [%u, %u]}", quant_block, quant_block);
		quant_config = qc;
	} else if (quant && !strcmp(quant, "fp8-bare")) {
		/* DeepSeek-V3's block FP8: the weight, its inverse scales */
		add("model.layers.0.mlp.fp8_proj.weight", MK_DT_F8_E4M3, 2, 8, 8);
		add("model.layers.0.mlp.fp8_proj.weight_scale_inv", MK_DT_F32, 2, 1, 1);
	} else if (quant && !strcmp(quant, "mxfp4-bare")) {
		/* gpt-oss's MXFP4: blocks and scales, both U8 */
		add("model.layers.0.mlp.experts.down_proj_blocks", MK_DT_U8, 2, 8, 8);
		add("model.layers.0.mlp.experts.down_proj_scales", MK_DT_U8, 2, 8, 1);
	} else if (mx) {
		quant_config = "\"quantization_config\": {\"quant_method\": \"mxfp4\", \"modules_to_not_convert\": "
			       "[\"model.layers.*.self_attn\", \"model.layers.*.mlp.router\", \"model.embed_tokens\", "
			       "\"lm_head\"]}";
	} else if (quant) {
		fprintf(stderr, "mk-gen-model: --quantized fp8, mxfp4, fp8-bare or mxfp4-bare\n");
		return 2;
	}
	if (big)
		add("big.weight", MK_DT_F32, 2, big, hidden);
	for (size_t i = 0; i < nts; i++)
		ts[i].shard = (unsigned)(i % shards);
	/* write shards */
	for (unsigned s = 0; s < shards; s++) {
		struct mk_st_out_tensor *ot = calloc(nts, sizeof(*ot));
		size_t n = 0, hlen;
		uint8_t *hdr;
		FILE *f;

		for (size_t i = 0; i < nts; i++)
			if (ts[i].shard == s)
				ot[n++] = (struct mk_st_out_tensor){ ts[i].name, ts[i].dt, ts[i].ndim, ts[i].shape, 0, 0 };
		if (mk_st_header_build(ot, n, 8, &hdr, &hlen, NULL, &err)) {
			fprintf(stderr, "mk-gen-model: %s\n", err.msg);
			return 1;
		}
		if (shards == 1)
			snprintf(path, sizeof(path), "%s/model.safetensors", dir);
		else
			snprintf(path, sizeof(path), "%s/model-%05u-of-%05llu.safetensors", dir, s + 1,
				 (unsigned long long)shards);
		f = fopen(path, "wb");
		if (!f) {
			perror(path);
			return 1;
		}
		if (pad) {
			/* move the JSON right by 8 bytes of leading spaces */
			uint64_t jl = hlen - 8 + 8;
			uint8_t le[8];
			for (int b = 0; b < 8; b++)
				le[b] = (uint8_t)(jl >> (8 * b));
			fwrite(le, 1, 8, f);
			fwrite("        ", 1, 8, f);
			fwrite(hdr + 8, 1, hlen - 8, f);
		} else {
			fwrite(hdr, 1, hlen, f);
		}
		/* data in offset order */
		uint64_t total = 0;
		for (size_t j = 0; j < n; j++)
			if (ot[j].begin + ot[j].nbytes > total)
				total = ot[j].begin + ot[j].nbytes;
		uint8_t *data = calloc(total ? total : 1, 1);
		for (size_t j = 0; j < n; j++) {
			uint64_t nelem = 1;
			for (unsigned d = 0; d < ot[j].ndim; d++)
				nelem *= ot[j].shape[d];
			uint64_t h = seed * 1000003;
			for (const char *q = ot[j].name; *q; q++)
				h = h * 131 + (uint8_t)*q;
			size_t nl = strlen(ot[j].name);
			bool unit = unit_norms && nl > 11 && !strcmp(ot[j].name + nl - 11, "norm.weight");
			const struct gt *g = NULL;
			for (size_t k = 0; k < nts && !g; k++)
				if (!strcmp(ts[k].name, ot[j].name))
					g = &ts[k];
			if (g && g->qrole == 3) {
				uint64_t sm = h;
				for (uint64_t i = 0; i < ot[j].nbytes; i++)
					data[ot[j].begin + i] = (uint8_t)(118 + splitmix(&sm) % 12);
			} else if (g && g->qrole == 1) {
				quant_fp8(h, g->orig, g->shape[0], g->shape[1], data + ot[j].begin, NULL);
			} else if (g && g->qrole == 2) {
				uint64_t hw = seed * 1000003;
				for (const char *q = g->qof; *q; q++)
					hw = hw * 131 + (uint8_t)*q;
				quant_fp8(hw, g->orig, g->qshape[0], g->qshape[1], NULL, (float *)(data + ot[j].begin));
			} else {
				fill(data + ot[j].begin, ot[j].nbytes, ot[j].dtype, nelem, h, unit);
			}
		}
		if (fwrite(data, 1, total, f) != total || fclose(f) != 0) {
			perror(path);
			return 1;
		}
		free(data);
		free(hdr);
		free(ot);
	}
	if (shards > 1) {
		snprintf(path, sizeof(path), "%s/model.safetensors.index.json", dir);
		FILE *f = fopen(path, "w");
		fprintf(f, "{\n  \"metadata\": {\n    \"total_size\": 0\n  },\n  \"weight_map\": {");
		for (size_t i = 0; i < nts; i++)
			fprintf(f, "%s\n    \"%s\": \"model-%05u-of-%05llu.safetensors\"", i ? "," : "", ts[i].name,
				ts[i].shard + 1, (unsigned long long)shards);
		fprintf(f, "\n  }\n}");
		fclose(f);
	}
	char hdtext[32];
	snprintf(hdtext, sizeof(hdtext), "%llu", (unsigned long long)hd);
	if (extra && strlen(extra) > 2048) {
		fprintf(stderr, "mk-gen-model: --config-extra is too long\n");
		return 2;
	}
	snprintf(buf, sizeof(buf),
		 "{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"%s\",\n"
		 "  \"hidden_size\": %llu,\n  \"intermediate_size\": %llu,\n  \"num_hidden_layers\": %llu,\n"
		 "  \"num_attention_heads\": %llu,\n  \"num_key_value_heads\": %llu,\n  \"vocab_size\": %llu,\n"
		 "  \"max_position_embeddings\": 256,\n  \"rms_norm_eps\": 1e-05,\n"
		 "  \"tie_word_embeddings\": %s,\n  \"torch_dtype\": \"%s\"%s%s%s%s\n}\n",
		 !strcmp(arch, "mistral") ? "MistralForCausalLM" : !strcmp(arch, "qwen2") ? "Qwen2ForCausalLM"
		 : gpt_oss ? "GptOssForCausalLM"
		 : !strcmp(arch, "qwen3") ? "Qwen3ForCausalLM" : "LlamaForCausalLM", arch,
		 (unsigned long long)hidden, (unsigned long long)inter, (unsigned long long)layers,
		 (unsigned long long)heads, (unsigned long long)kv_heads,
		 (unsigned long long)vocab, tied ? "true" : "false", dt == MK_DT_F32 ? "float32" : dt == MK_DT_F16 ? "float16" : "bfloat16",
		 strcmp(arch, "qwen3") ? "" : ",\n  \"head_dim\": ", strcmp(arch, "qwen3") ? "" : hdtext,
		 extra ? ",\n  " : "", extra ? extra : "");
	if (gpt_oss) {
		size_t bl = strlen(buf);
		if (bl < 3)
			return 2;
		snprintf(buf + bl - 3, sizeof(buf) - bl + 3,
			 ",\n  \"head_dim\": %llu,\n  \"num_local_experts\": %llu,\n  \"num_experts_per_tok\": %llu,\n"
			 "  \"attention_bias\": true,\n  \"sliding_window\": 128\n}\n",
			 (unsigned long long)hd, (unsigned long long)experts, (unsigned long long)(experts < 2 ? experts : 2));
	}
	if (quant_config) {
		size_t bl = strlen(buf);
		if (bl < 3 || bl + strlen(quant_config) + 8 > sizeof(buf))
			return 2;
		snprintf(buf + bl - 3, sizeof(buf) - bl + 3, ",\n  %s\n}\n", quant_config);
	}
	if (bpe) {
		/* regular tokens: one character (printable ASCII from '!', less
		 * '"' and '\\'), then two; the added specials after them */
		static const char alpha[] = "!#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[]^_`"
					    "abcdefghijklmnopqrstuvwxyz{|}~";
		const size_t na = sizeof(alpha) - 1;
		char added[8][64], list[512];
		size_t nadded = 0, tsz = toksize ? toksize : vocab, nreg;
		snprintf(list, sizeof(list), "%s%s", strchr(bpe, ',') ? "" : "<s>,", bpe);
		for (char *tk = strtok(list, ","); tk && nadded < 8; tk = strtok(NULL, ","))
			snprintf(added[nadded++], sizeof(added[0]), "%s", tk);
		if (tsz < nadded + 1 || tsz - nadded + tokskip > na + na * na + na * na * na) {
			fprintf(stderr, "mk-gen-model: --bpe-tokenizer: too few or too many tokens\n");
			return 2;
		}
		nreg = tsz - nadded;
		size_t cap = 256 + tsz * 96, n = 0;
		char *tj = malloc(cap);
		if (!tj)
			return 1;
		n += (size_t)snprintf(tj + n, cap - n, "{\"version\": \"1.0\", \"truncation\": null, \"padding\": null, \"added_tokens\": [");
		for (size_t k = 0; k < nadded; k++)
			n += (size_t)snprintf(tj + n, cap - n,
					      "%s{\"id\": %zu, \"content\": \"%s\", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": false, \"special\": true}",
					      k ? ", " : "", nreg + k, added[k]);
		if (unigram)
			n += (size_t)snprintf(tj + n, cap - n,
					      "], \"normalizer\": null, \"pre_tokenizer\": {\"type\": \"Metaspace\", \"replacement\": \"\u2581\", "
					      "\"prepend_scheme\": \"always\", \"split\": true}, \"post_processor\": null, "
					      "\"decoder\": {\"type\": \"Metaspace\", \"replacement\": \"\u2581\", \"prepend_scheme\": \"always\", \"split\": true}, "
					      "\"model\": {\"type\": \"Unigram\", \"unk_id\": 0, \"byte_fallback\": false, \"vocab\": [");
		else
			n += (size_t)snprintf(tj + n, cap - n,
					      "], \"normalizer\": null, \"pre_tokenizer\": null, \"post_processor\": null, \"decoder\": null, "
					      "\"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": null, \"continuing_subword_prefix\": null, "
					      "\"end_of_word_suffix\": null, \"fuse_unk\": false, \"byte_fallback\": false, \"ignore_merges\": false, \"vocab\": {");
		for (size_t k = 0; k < nreg; k++) {
			size_t t = k + tokskip;
			char tok[4] = { 0 };
			if (t < na) {
				tok[0] = alpha[t];
			} else if (t < na + na * na) {
				tok[0] = alpha[(t - na) / na];
				tok[1] = alpha[(t - na) % na];
			} else {
				size_t u = t - na - na * na;
				tok[0] = alpha[u / (na * na)];
				tok[1] = alpha[u / na % na];
				tok[2] = alpha[u % na];
			}
			if (unigram && k == 0)
				n += (size_t)snprintf(tj + n, cap - n, "[\"<unk>\", 0.0]");
			else if (unigram) /* SentencePiece's word-start pieces: \u2581 + the token */
				n += (size_t)snprintf(tj + n, cap - n, ", [\"%s%s\", %.1f]", k % 2 ? "\\u2581" : "", tok,
						      -1.0 - 0.1 * (double)(k % 50));
			else
				n += (size_t)snprintf(tj + n, cap - n, "%s\"%s\": %zu", k ? ", " : "", tok, k);
		}
		if (unigram) {
			n += (size_t)snprintf(tj + n, cap - n, "]}}\n");
			goto written;
		}
		n += (size_t)snprintf(tj + n, cap - n, "}, \"merges\": [");
		/* a merge for every two-character token whose halves are tokens */
		for (size_t k = 0, m = 0; k < nreg; k++) {
			size_t t = k + tokskip, a, b;
			if (t < na || t >= na + na * na)
				continue;
			a = (t - na) / na;
			b = (t - na) % na;
			if (a < tokskip || b < tokskip || a - tokskip >= nreg || b - tokskip >= nreg)
				continue;
			n += (size_t)snprintf(tj + n, cap - n, "%s\"%c %c\"", m++ ? ", " : "", alpha[a], alpha[b]);
		}
		n += (size_t)snprintf(tj + n, cap - n, "]}}\n");
written:;
		char tc[512];
		snprintf(tc, sizeof(tc),
			 "{\n  \"bos_token\": \"%s\",\n  \"eos_token\": \"%s\",\n"
			 "  \"model_max_length\": 1000000000000000019884624838656,\n"
			 "  \"tokenizer_class\": \"PreTrainedTokenizerFast\"\n}\n",
			 added[0], nadded > 1 ? added[1] : added[0]);
		int bad;
		if (slow) {
			/* a slow GPT-2 tokenizer's files: vocab.json and merges.txt
			 * from the same vocabulary, the specials in
			 * tokenizer_config.json's added_tokens_decoder */
			struct mk_vocab *v = NULL;
			struct mk_jsondoc *jd = NULL;
			struct mk_sbuf vj = { 0 }, mt = { 0 }, cf = { 0 };
			if (mk_vocab_parse(tj, strlen(tj), "tokenizer.json", &v, &err) ||
			    mk_jsondoc_parse(tj, strlen(tj), "tokenizer.json", &jd, &err)) {
				fprintf(stderr, "mk-gen-model: %s\n", err.msg);
				return 1;
			}
			mk_sbuf_str(&vj, "{");
			for (size_t k = 0; k < v->n; k++)
				mk_sbuf_fmt(&vj, "%s\"%s\": %zu", k ? ", " : "", v->token[k], k);
			mk_sbuf_str(&vj, "}\n");
			mk_sbuf_str(&mt, "#version: 0.2\n");
			size_t mg = mk_jsondoc_at(jd, "model.merges");
			for (size_t at = mk_jsondoc_first(jd, mg); at != SIZE_MAX; at = mk_jsondoc_next(jd, at)) {
				char *m = mk_jsondoc_node_string(jd, at, NULL);
				mk_sbuf_fmt(&mt, "%s\n", m ? m : "");
				free(m);
			}
			mk_sbuf_str(&cf, "{\n  \"added_tokens_decoder\": {");
			for (size_t k = 0; k < v->nadded; k++)
				mk_sbuf_fmt(&cf,
					    "%s\n    \"%lld\": {\n      \"content\": \"%s\",\n      \"lstrip\": false,\n      \"normalized\": false,\n"
					    "      \"rstrip\": false,\n      \"single_word\": false,\n      \"special\": true\n    }",
					    k ? "," : "", v->added[k].id, v->added[k].content);
			mk_sbuf_fmt(&cf, "\n  },\n  \"bos_token\": \"%s\",\n  \"eos_token\": \"%s\",\n"
				    "  \"model_max_length\": 1000000000000000019884624838656,\n  \"tokenizer_class\": \"GPT2Tokenizer\"\n}\n",
				    added[0], nadded > 1 ? added[1] : added[0]);
			bad = vj.oom || mt.oom || cf.oom || write_text(dir, "vocab.json", vj.p) ||
			      write_text(dir, "merges.txt", mt.p) || write_text(dir, "tokenizer_config.json", cf.p);
			free(vj.p);
			free(mt.p);
			free(cf.p);
			mk_jsondoc_free(jd);
			mk_vocab_free(v);
		} else {
			bad = write_text(dir, "tokenizer.json", tj) || write_text(dir, "tokenizer_config.json", tc);
		}
		free(tj);
		if (bad)
			return 1;
	}
	if (spm) {
		/* a SentencePiece tokenizer alone: tokenizer.model as given, the
		 * added specials in tokenizer_config.json after its pieces */
		FILE *f = fopen(spm, "rb");
		static char model[1 << 20];
		size_t ml = f ? fread(model, 1, sizeof(model), f) : 0;
		struct mk_vocab *v = NULL;
		char mpath[4096], tc[4096];
		size_t n = 0;
		if (f)
			fclose(f);
		if (!ml || mk_vocab_parse_spm(model, ml, spm, &v, &err)) {
			fprintf(stderr, "mk-gen-model: --spm %s: %s\n", spm, ml ? err.msg : "cannot read it");
			return 1;
		}
		snprintf(mpath, sizeof(mpath), "%s/tokenizer.model", dir);
		if (!(f = fopen(mpath, "wb")) || fwrite(model, 1, ml, f) != ml || fclose(f)) {
			perror(mpath);
			return 1;
		}
		n += (size_t)snprintf(tc + n, sizeof(tc) - n,
				      "{\n  \"add_bos_token\": true,\n  \"add_eos_token\": false,\n  \"added_tokens_decoder\": {");
		char list[512];
		snprintf(list, sizeof(list), "%s", spm_added ? spm_added : "");
		size_t k = 0;
		for (char *tk = strtok(list, ","); tk; tk = strtok(NULL, ","), k++)
			n += (size_t)snprintf(tc + n, sizeof(tc) - n,
					      "%s\n    \"%zu\": {\n      \"content\": \"%s\",\n      \"lstrip\": false,\n      \"normalized\": false,\n"
					      "      \"rstrip\": false,\n      \"single_word\": false,\n      \"special\": true\n    }",
					      k ? "," : "", v->n + k, tk);
		snprintf(tc + n, sizeof(tc) - n,
			 "%s},\n  \"bos_token\": \"<s>\",\n  \"eos_token\": \"</s>\",\n  \"legacy\": false,\n"
			 "  \"model_max_length\": 1000000000000000019884624838656,\n  \"tokenizer_class\": \"LlamaTokenizer\",\n"
			 "  \"unk_token\": \"<unk>\"\n}\n", k ? "\n  " : "");
		mk_vocab_free(v);
		if (write_text(dir, "tokenizer_config.json", tc))
			return 1;
	}
	if (write_text(dir, "config.json", buf) ||
	    write_text(dir, "generation_config.json", "{\n  \"bos_token_id\": 1,\n  \"eos_token_id\": 2\n}\n") ||
	    (!bpe && !spm && write_text(dir, "tokenizer_config.json",
				"{\n  \"bos_token\": \"<s>\",\n  \"eos_token\": \"</s>\",\n  \"model_max_length\": 256\n}\n")) ||
	    write_text(dir, "special_tokens_map.json", "{\"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}\n") ||
	    (!bpe && !spm && write_text(dir, "tokenizer.json",
				"{\"version\": \"1.0\", \"model\": {\"type\": \"WordLevel\", \"vocab\": {\"<s>\": 1, \"</s>\": 2, \"caf\\u00e9\": 3}, \"unk_token\": \"<s>\"}}\n")) ||
	    write_text(dir, "README.md", "a synthetic test model (not carried by copy mode)\n"))
		return 1;
	free(ts);
	return 0;
}
