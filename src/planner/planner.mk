# src/planner/planner.mk - embed the built-in chat templates into libmk.
TEMPLATES := $(sort $(wildcard src/planner/templates/*.jinja))

LIB_SRC += $(BUILD)/gen/template_data.c
LIB_OBJ += $(BUILD)/gen/template_data.o

$(BUILD)/gen/template_data.c: scripts/embed.sh $(TEMPLATES) src/planner/planner.mk
	@mkdir -p $(@D)
	@$(if $(Q),echo "  GEN     $@")
	$(Q)sh scripts/embed.sh mk_template_data arch/arch.h "struct mk_arch_file" $(TEMPLATES) > $@.tmp && mv $@.tmp $@

$(BUILD)/gen/template_data.o: $(BUILD)/gen/template_data.c
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -c -o $@ $<
