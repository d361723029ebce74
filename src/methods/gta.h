/* gta.h - internals of the generalized task arithmetic family (gta.c),
 * exposed for the unit tests.  Internal to src/methods. */
#ifndef MK_METHODS_GTA_H
#define MK_METHODS_GTA_H

#include <stdint.h>
#include "mk/method.h"

enum mk_gta_consensus {
	MK_GTA_CONS_NONE,
	MK_GTA_CONS_SUM,     /* majority sign of sum_m v_m (TIES) */
	MK_GTA_CONS_COUNT,   /* majority of the signs: sum_m sign(v_m) */
};

/* DELLA keep probability of the element of 0-based ascending rank rank0 in
 * a row of len elements: (density - epsilon) + 2 epsilon (r - 1)/(L - 1),
 * in float32 as mergekit computes it (or float64); a row of one element
 * gets density. */
float mk_gta_della_prob_f32(uint64_t rank0, uint64_t len, double density, double epsilon);
double mk_gta_della_prob_f64(uint64_t rank0, uint64_t len, double density, double epsilon);

/* What apply() of a float32 job of this family does, after its passes,
 * for kernels outside gta.c (the GPU).  Per element e of the chunk, with
 * b the base and, for each input j in order, x_j its value:
 *   delta = x_j - b;  key = the bits of fabsf(delta) as uint32;
 *   kept:  DENSE   always                     ZERO  never (m = 0)
 *          MAG     key > lo_key || (key == lo_key && e < lo_cut1)
 *          OUTL    (key > lo_key || (key == lo_key && e >= lo_cut1)) &&
 *                  (key < hi_key || (key == hi_key && e < hi_cut1))
 *          RAND    (mk_rng_u64(stream, e) >> 11) < thr
 *          DELLA   bit e of mask (bit e & 7 of byte e >> 3)
 *   m = DENSE ? delta : ZERO ? 0 : delta * (kept ? 1 : 0), then
 *       m = m * factor when scale;       v_j = m * w
 * then the consensus, normalize and lambda steps of gta.c's header, all
 * in float32 without fused multiply-add. */
enum mk_gta_kind { MK_GTA_DENSE, MK_GTA_ZERO, MK_GTA_MAG, MK_GTA_OUTL, MK_GTA_RAND, MK_GTA_DELLA };

struct mk_gta_export_input {
	int idx;                    /* the input's index in a chunk's in[] */
	enum mk_gta_kind kind;
	float w;                    /* weight, in float32 */
	bool scale;                 /* multiply kept deltas by factor */
	float factor;
	uint32_t lo_key, hi_key;    /* MAG: lo; OUTL: both */
	uint64_t lo_cut1, hi_cut1;
	uint64_t stream, thr;       /* RAND */
	const uint8_t *mask;        /* DELLA: [nelem / 8 + 1], owned by the job */
};

struct mk_gta_export {
	enum mk_gta_consensus cons;
	int base;                   /* the base's index in in[] */
	bool normalize, scale_lam;
	float lam, div;             /* div: used without consensus */
	size_t n;                   /* inputs below (0: the output is the base) */
	const struct mk_gta_export_input *in;   /* [n], owned by the job */
};

/* Fill *x for a job of this family once its last pass finished;
 * MK_EUNSUPPORTED when the job computes in float64 or is not of this
 * family.  Valid until the job is released. */
int mk_gta_export(const struct mk_job *job, struct mk_gta_export *x, struct mk_err *err);

/* `ties` with count consensus (mergekit's ConsensusMethod.count, which no
 * registered method uses); not registered. */
extern const struct mk_method mk_gta_method_ties_count;

#endif
