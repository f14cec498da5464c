# deploy/: man pages generated from the option tables, systemd units,
# example configs, make install / uninstall.
#
#   make install   [PREFIX=/usr/local] [DESTDIR=] [SYSCONFDIR=/etc] [UNITDIR=...]
#   make uninstall (same variables): removes exactly what install put there;
#                  a config in SYSCONFDIR/qwen35 is removed only while it is
#                  still the shipped example (an edited one stays).
# Every installed program prints its page from its option table (--man).
MAN_PROGS := qwen35-stage qwen35-coordinator qwen35-run qwen35-client qwen35-info \
             qwen35-tokenize qwen35-keygen qwen35-mkmodel
MAN_PAGES := $(patsubst %,$(BUILD)/man/%.1,$(MAN_PROGS))
ALL_EXTRA += $(MAN_PAGES)

$(BUILD)/man/%.1: $(BUILD)/bin/%
	@mkdir -p $(@D)
	$< --man > $@.tmp && mv $@.tmp $@

.PHONY: man install uninstall
man: $(MAN_PAGES)

SYSCONFDIR ?= /etc
BINDIR     ?= $(PREFIX)/bin
MANDIR     ?= $(PREFIX)/share/man
UNITDIR    ?= $(PREFIX)/lib/systemd/system
DOCDIR     ?= $(PREFIX)/share/doc/qwen35
CONFDIR    := $(SYSCONFDIR)/qwen35

UNITS        := qwen35-stage@.service qwen35-coordinator.service qwen35-http.service qwen35.target
# The single-host set (examples/two-die) becomes /etc/qwen35/*.conf.
ETC_CONFIGS  := stage-0.conf stage-1.conf coordinator.conf http.conf
EXAMPLES     := README $(patsubst deploy/examples/%,%,$(wildcard deploy/examples/*/*.conf))
INSTALL_BINS  = $(filter-out $(INTERNAL_BINS),$(BINS))

install: bins $(MAN_PAGES)
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(UNITDIR) $(DESTDIR)$(CONFDIR)
	$(if $(INSTALL_BINS),install -m 0755 $(addprefix $(BUILD)/bin/,$(INSTALL_BINS)) $(DESTDIR)$(BINDIR)/)
	install -m 0644 $(MAN_PAGES) $(DESTDIR)$(MANDIR)/man1/
	for u in $(UNITS); do \
	    sed 's|@BINDIR@|$(BINDIR)|g' deploy/systemd/$$u > $(DESTDIR)$(UNITDIR)/$$u.tmp && \
	    chmod 0644 $(DESTDIR)$(UNITDIR)/$$u.tmp && mv $(DESTDIR)$(UNITDIR)/$$u.tmp $(DESTDIR)$(UNITDIR)/$$u || exit 1; \
	done
	for e in $(EXAMPLES); do install -D -m 0644 deploy/examples/$$e $(DESTDIR)$(DOCDIR)/examples/$$e || exit 1; done
	for c in $(ETC_CONFIGS); do \
	    if [ -e $(DESTDIR)$(CONFDIR)/$$c ]; then echo "install: keeping existing $(DESTDIR)$(CONFDIR)/$$c"; \
	    else install -m 0644 deploy/examples/two-die/$$c $(DESTDIR)$(CONFDIR)/$$c || exit 1; fi; \
	done
	@echo "installed; then: systemctl daemon-reload && systemctl enable --now qwen35-stage@0 qwen35-stage@1 qwen35-coordinator"

uninstall:
	$(if $(INSTALL_BINS),rm -f $(addprefix $(DESTDIR)$(BINDIR)/,$(INSTALL_BINS)))
	rm -f $(addprefix $(DESTDIR)$(MANDIR)/man1/,$(notdir $(MAN_PAGES)))
	rm -f $(addprefix $(DESTDIR)$(UNITDIR)/,$(UNITS))
	rm -f $(addprefix $(DESTDIR)$(DOCDIR)/examples/,$(EXAMPLES))
	rmdir $(sort $(dir $(addprefix $(DESTDIR)$(DOCDIR)/examples/,$(EXAMPLES)))) $(DESTDIR)$(DOCDIR)/examples $(DESTDIR)$(DOCDIR) 2>/dev/null || true
	for c in $(ETC_CONFIGS); do \
	    f=$(DESTDIR)$(CONFDIR)/$$c; \
	    if cmp -s $$f deploy/examples/two-die/$$c; then rm -f $$f; \
	    elif [ -e $$f ]; then echo "uninstall: keeping edited $$f"; fi; \
	done
	rmdir $(DESTDIR)$(CONFDIR) 2>/dev/null || true

# The fake systemd the integration tests run the daemons under.
BINS += qwen35-fake-systemd
qwen35-fake-systemd_SRCS := tests/fake_systemd.c
INTERNAL_BINS += qwen35-fake-systemd
