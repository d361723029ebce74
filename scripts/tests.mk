# tests.mk - the job graph of scripts/run-tests.sh (which see), run as
# make -f scripts/tests.mk -jN -k CHECK_LIST=FILE CHECK_LOGS=DIR [CHECK_SERIAL=1] [all]
# One target per test, run/BUILD/KIND/NAME, made by scripts/run-test.sh
# (its log, its .res, one line); they start in CHECK_LIST's order (the
# slowest first).  A test's recipe never fails.  `builds` with
# CHECK_MAKE=1 makes each BUILD of the list with the top Makefile (`make
# all-tests`, with SAN=address,undefined for a build named *san*), the
# builds in parallel; run-tests.sh makes them before the tests, not in
# the same graph, where make would start the tests in no useful order.
CHECK_LOGS ?= build/test-logs
CHECK_LIST ?= $(CHECK_LOGS)/list
CHECK_MAKE ?= 0
CHECK_SAN  ?= address,undefined

ids  := $(strip $(file < $(CHECK_LIST)))
builds := $(sort $(foreach t,$(ids),$(firstword $(subst /, ,$(t)))))

.PHONY: all builds $(ids:%=run/%) $(builds:%=made/%)
all: $(ids:%=run/%)

$(ids:%=run/%): run/%:
	@sh scripts/run-test.sh -l $(CHECK_LOGS) $*

builds: $(builds:%=made/%)

# CHECK_SERIAL=1: one test at a time, whatever -j (or a parent's job slots)
ifeq ($(CHECK_SERIAL),1)
.NOTPARALLEL:
endif

ifeq ($(CHECK_MAKE),1)
$(builds:%=made/%): made/%:
	+@$(MAKE) --no-print-directory -f Makefile BUILD=$* $(if $(findstring san,$*),SAN=$(CHECK_SAN)) all-tests
endif
