# src/arch/arch.mk - embed the architecture definitions into libmk.
# $(BUILD)/gen/arch_data.c holds every src/arch/data/*.json as bytes; it is
# compiled into the library, and listed in LIB_SRC so the fuzz build (which
# compiles LIB_SRC directly) links too.

ARCH_JSON := $(sort $(wildcard src/arch/data/*.json))

LIB_SRC += $(BUILD)/gen/arch_data.c
LIB_OBJ += $(BUILD)/gen/arch_data.o

$(BUILD)/gen/arch_data.c: scripts/embed.sh $(ARCH_JSON) src/arch/arch.mk
	@mkdir -p $(@D)
	@$(if $(Q),echo "  GEN     $@")
	$(Q)sh scripts/embed.sh mk_arch_data arch/arch.h "struct mk_arch_file" $(ARCH_JSON) > $@.tmp && mv $@.tmp $@

$(BUILD)/gen/arch_data.o: $(BUILD)/gen/arch_data.c
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -c -o $@ $<
