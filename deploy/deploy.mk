# deploy/: man pages generated from the option tables, systemd units,
# example configs, make install / uninstall.
BINS += qwen35-mkman
qwen35-mkman_SRCS := deploy/mkman.c
qwen35-mkman_NET  := 1

MAN_PAGES := $(BUILD)/man/qwen35-stage.1 $(BUILD)/man/qwen35-coordinator.1
ALL_EXTRA += $(MAN_PAGES)

$(BUILD)/man/%.1: $(BUILD)/bin/qwen35-mkman
	@mkdir -p $(@D)
	$< $* > $@.tmp && mv $@.tmp $@

.PHONY: man
man: $(MAN_PAGES)
