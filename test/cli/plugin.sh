# A merge method from a shared object built outside the source tree, used
# by name from YAML, by every stage that needs it; the plan pins its spec.
. "$MK_TOP/test/cli/lib.inc"
cc=${CC:-cc}
command -v "$cc" >/dev/null 2>&1 || exit 77
cp "$MK_TOP/test/plugins/weighted_average.c" .
"$cc" -O2 -fPIC -shared -I"$MK_TOP/include" -o wa.so weighted_average.c
# a variant whose spec differs (another default)
sed 's/.b = true }/.b = false }/' weighted_average.c > variant.c
mkdir variant
"$cc" -O2 -fPIC -shared -I"$MK_TOP/include" -o variant/wa.so variant.c
M=$MK_TOP/testdata/models
printf 'merge_method: weighted_average\nmodels:\n  - model: %s/tiny-a\n    parameters: {weight: 3}\n  - model: %s/tiny-b\n    parameters: {weight: 1}\nparameters:\n  normalize: true\n' "$M" "$M" > wa.yml
mk-yaml --plugin ./wa.so wa.yml out
mk-st-compare --lin 3,1/4 --bf16-ulps 1 --inputs "$M/tiny-a,$M/tiny-b" out "$M/tiny-a" "$M/tiny-b" > cmp.txt || { cat cmp.txt; fail "weighted_average is not (3a + b)/4"; }
grep -q "merged using the \[Weighted Average\](https://example.com/docs) merge method" out/README.md || fail "card lacks the plugin's name"
mk-card --plugin ./wa.so wa.yml | grep -q "Weighted Average" || fail "mk-card did not load the plugin"
mk-merge --plugin ./wa.so --list-methods | grep -q "^weighted_average" || fail "--list-methods lacks the plugin"
# MK_PLUGIN_PATH (a directory) in a hand-built pipe gives the same bytes
mkdir plugins && cp wa.so plugins/
MK_PLUGIN_PATH=$PWD/plugins mk-plan --name out wa.yml > plan.mks
MK_PLUGIN_PATH=$PWD/plugins sh -c 'mk-fetch < plan.mks | mk-merge | mk-pack hand'
for f in out/*; do cmp "$f" "hand/$(basename "$f")" || fail "$f differs between mk-yaml and the pipe"; done
# two plugins in one process, by MK_PLUGIN_PATH and by two --plugin: each
# its own file (each is loaded through its descriptor, and dlopen knows a
# library by that name)
sed 's/"weighted_average"/"weighted_average_two"/; s/"Weighted Average"/"Weighted Average Two"/' weighted_average.c > two.c
"$cc" -O2 -fPIC -shared -I"$MK_TOP/include" -o plugins/two.so two.c
tab=$(printf '\t')
for how in path flags; do
	if [ $how = path ]; then
		MK_PLUGIN_PATH=$PWD/plugins mk-merge --list-methods > list.txt
	else
		mk-merge --plugin ./wa.so --plugin plugins/two.so --list-methods > list.txt
	fi
	grep -q "^weighted_average$tab" list.txt && grep -q "^weighted_average_two$tab" list.txt ||
		{ cat list.txt; fail "two plugins ($how): not both methods listed"; }
done
# the plan records the plugin; mk-merge without it, or with another spec, refuses
mk-fetch < plan.mks > inputs.mks
expect_fail 1 "load it with --plugin" mk-merge -i inputs.mks -o x.mks
expect_fail 1 "differs from the one mk-plan used" mk-merge --plugin variant/wa.so -i inputs.mks -o x.mks
[ ! -e x.mks ] || fail "mk-merge left output after refusing"
# unknown without the plugin at plan time, with a clear message
expect_fail 1 "unknown merge method 'weighted_average'" mk-plan wa.yml
# a file that is not a plugin
echo 'int x;' > notplugin.c && "$cc" -fPIC -shared -o notplugin.so notplugin.c
expect_fail 1 "not an mk plugin" mk-plan --plugin ./notplugin.so wa.yml
# checked before dlopen runs any of its code: a shared object without
# mk_plugin_init whose constructor leaves a mark is refused unrun
printf '#include <fcntl.h>\n#include <unistd.h>\n__attribute__((constructor)) static void ran(void) { close(open("constructor-ran", O_CREAT | O_WRONLY, 0644)); }\nint x;\n' > ctor.c
"$cc" -fPIC -shared -o ctor.so ctor.c
expect_fail 1 "plugin ./ctor.so: exports no mk_plugin_init function (not an mk plugin?); not loaded" mk-plan --plugin ./ctor.so wa.yml
[ ! -e constructor-ran ] || fail "a rejected plugin's constructor ran"
expect_fail 1 "not loaded" env MK_PLUGIN_PATH="$PWD/ctor.so" mk-plan wa.yml
[ ! -e constructor-ran ] || fail "a rejected plugin's constructor ran (MK_PLUGIN_PATH)"
# not ELF, a directory's stray file, writable by others
echo 'not elf' > text.so
expect_fail 1 "plugin ./text.so: not an ELF shared object" mk-plan --plugin ./text.so wa.yml
cp wa.so open.so && chmod o+w open.so
expect_fail 1 "plugin ./open.so: writable by group or others" mk-plan --plugin ./open.so wa.yml
# an executable, not a shared object
printf 'int main(void) { return 0; }\n' > prog.c && "$cc" -no-pie -o prog.so prog.c
expect_fail 1 "plugin ./prog.so: an ELF object, but not a shared object" mk-plan --plugin ./prog.so wa.yml
# a method with several outputs a job (a tool's kind): a merge configuration
# cannot place them; libmk's own tool methods (mk-extract-lora's) are
# refused by name
cat > multi.c <<'C'
#include "mk/method.h"
static int out(const struct mk_method *m, const struct mk_job_desc *d, struct mk_plan_out *po, bool *used,
	       struct mk_err *err)
{
	po->out = d->in[0];
	po->nmore = 1;
	po->more[0] = d->in[0];
	return 0;
}
static unsigned passes(const struct mk_method *m, const struct mk_job_desc *d, const bool *used) { return 1; }
static int acc(struct mk_job *j, unsigned p, const struct mk_job_chunk *c, struct mk_err *e) { return 0; }
static int fin(struct mk_job *j, unsigned p, struct mk_err *e) { return 0; }
static int app(struct mk_job *j, const struct mk_job_chunk *c, void *o, struct mk_err *e) { return 0; }
static const struct mk_method two = { .abi = MK_METHOD_ABI, .name = "two_outputs", .pretty_name = "two",
	.contract = { .base = MK_BASE_IGNORED, .min_inputs = 1, .max_inputs = MK_ARITY_ANY, .max_non_base = MK_ARITY_ANY },
	.output = out, .npasses = passes, .accumulate = acc, .finish = fin, .apply = app };
static const struct mk_method *const list[] = { &two };
int mk_plugin_init(uint32_t abi, const struct mk_method *const **m, size_t *n)
{
	*m = list;
	*n = 1;
	return abi == MK_METHOD_ABI ? 0 : -1;
}
C
"$cc" -O2 -fPIC -shared -I"$MK_TOP/include" -o multi.so multi.c
sed 's/merge_method: weighted_average/merge_method: two_outputs/' wa.yml > two.yml
grep -q two_outputs two.yml || fail "two.yml names no two_outputs"
expect_fail 1 "it makes 2 tensors of one weight, which a merge cannot place" mk-plan --plugin ./multi.so -o /dev/null two.yml
printf 'merge_method: lora_extract\nbase_model: %s/tiny-a\nmodels:\n  - model: %s/tiny-a\n  - model: %s/tiny-b\n' "$M" "$M" "$M" > le.yml
expect_fail 1 "'lora_extract' is one of mk-extract-lora's own methods, not a merge method" mk-plan -o /dev/null le.yml
mk-merge --list-methods | grep -qw -e lora_extract -e delta && fail "--list-methods lists an unlisted method"
echo "plugin: two plugins, refusals, and methods a merge cannot name checked"
