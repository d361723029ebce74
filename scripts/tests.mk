# tests.mk - the job graph of scripts/run-tests.sh (which see), run as
# make -f scripts/tests.mk -jN -k CHECK_LIST=FILE CHECK_LOGS=DIR CHECK_MAKE=0|1
# One target per test, run/BUILD/KIND/NAME, made by scripts/run-test.sh
# (its log, its .res, one line); they start in CHECK_LIST's order (the
# slowest first).  With CHECK_MAKE=1 each BUILD is made first by the
# top Makefile (`make all-tests`, with SAN=address,undefined for a build
# named *san*), the builds in parallel, and a build's tests start as
# soon as it is made (the sanitized tests also wait for build/, whose
# LD_PRELOAD shims they load).  A test's recipe never fails: only a
# build can, and -k lets the other build's tests run on.
CHECK_LOGS ?= build/test-logs
CHECK_LIST ?= $(CHECK_LOGS)/list
CHECK_MAKE ?= 0
CHECK_SAN  ?= address,undefined

ids  := $(strip $(file < $(CHECK_LIST)))
builds := $(sort $(foreach t,$(ids),$(firstword $(subst /, ,$(t)))))
# the tests of build B
tests_of = $(addprefix run/,$(filter $(1)/%,$(ids)))

.PHONY: all $(ids:%=run/%) $(builds:%=made/%)
all: $(ids:%=run/%)

$(ids:%=run/%): run/%:
	@sh scripts/run-test.sh -l $(CHECK_LOGS) $*

$(foreach b,$(builds),$(eval $(call tests_of,$(b)): made/$(b)))
$(foreach b,$(filter %san,$(builds)),$(eval $(call tests_of,$(b)): $(filter made/build,$(builds:%=made/%))))

ifeq ($(CHECK_MAKE),1)
$(builds:%=made/%): made/%:
	+@$(MAKE) --no-print-directory -f Makefile BUILD=$* $(if $(findstring san,$*),SAN=$(CHECK_SAN)) all-tests
else
$(builds:%=made/%):
	@:
endif
