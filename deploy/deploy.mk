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
LIBEXECDIR ?= $(PREFIX)/lib/qwen35
MANDIR     ?= $(PREFIX)/share/man
UNITDIR    ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR ?= $(PREFIX)/lib/sysusers.d
TMPFILESDIR ?= $(PREFIX)/lib/tmpfiles.d
DOCDIR     ?= $(PREFIX)/share/doc/qwen35
MODELDIR   ?= /srv/qwen35/models
CONFDIR    := $(SYSCONFDIR)/qwen35
KEYDIR     := $(CONFDIR)/keys
WANTSDIR   := $(SYSCONFDIR)/systemd/system/qwen35.target.wants

UNITS        := qwen35-stage@.service qwen35-coordinator.service qwen35-http.service qwen35.target \
                qwen35-wait-up.service qwen35-wait-down.service
# The single-host set (examples/two-die) becomes /etc/qwen35/*.conf; each
# config installed anew also enables its unit (wanted by qwen35.target),
# as `systemctl enable` would: stage-N.conf -> qwen35-stage@N.service.
ETC_CONFIGS  := stage-0.conf stage-1.conf coordinator.conf http.conf
EXAMPLES     := README $(patsubst deploy/examples/%,%,$(wildcard deploy/examples/*/*.conf))
# $(BINDIR) gets the programs a user or operator runs (fragments add theirs:
# USER_BINS += name); the other built programs (benchmarks, the GPU
# checker, the model generator) go to $(LIBEXECDIR).
USER_BINS    += qwen35-stage qwen35-coordinator qwen35-http qwen35-client qwen35-run qwen35-info \
                qwen35-tokenize qwen35-keygen
INSTALL_BINS  = $(filter $(USER_BINS),$(filter-out $(INTERNAL_BINS),$(BINS)))
LIBEXEC_BINS  = $(filter-out $(USER_BINS) $(INTERNAL_BINS),$(BINS))
unit_of = $(if $(filter stage-%.conf,$(1)),$(patsubst stage-%.conf,qwen35-stage@%.service,$(1)),qwen35-$(basename $(1)).service)
template_of = $(if $(findstring @,$(1)),$(firstword $(subst @, ,$(1)))@.service,$(1))

install: bins $(MAN_PAGES)
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBEXECDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(UNITDIR) \
	    $(DESTDIR)$(SYSUSERSDIR) $(DESTDIR)$(TMPFILESDIR) $(DESTDIR)$(CONFDIR) $(DESTDIR)$(MODELDIR)
	install -d -m 0700 $(DESTDIR)$(KEYDIR)
	$(if $(INSTALL_BINS),install -m 0755 $(addprefix $(BUILD)/bin/,$(INSTALL_BINS)) $(DESTDIR)$(BINDIR)/)
	$(if $(LIBEXEC_BINS),install -m 0755 $(addprefix $(BUILD)/bin/,$(LIBEXEC_BINS)) $(DESTDIR)$(LIBEXECDIR)/)
	install -m 0644 $(MAN_PAGES) $(DESTDIR)$(MANDIR)/man1/
	for u in $(UNITS); do \
	    sed 's|@BINDIR@|$(BINDIR)|g' deploy/systemd/$$u > $(DESTDIR)$(UNITDIR)/$$u.tmp && \
	    chmod 0644 $(DESTDIR)$(UNITDIR)/$$u.tmp && mv $(DESTDIR)$(UNITDIR)/$$u.tmp $(DESTDIR)$(UNITDIR)/$$u || exit 1; \
	done
	install -m 0644 deploy/qwen35.sysusers $(DESTDIR)$(SYSUSERSDIR)/qwen35.conf
	install -m 0644 deploy/qwen35.tmpfiles $(DESTDIR)$(TMPFILESDIR)/qwen35.conf
	for e in $(EXAMPLES); do install -D -m 0644 deploy/examples/$$e $(DESTDIR)$(DOCDIR)/examples/$$e || exit 1; done
	$(foreach c,$(ETC_CONFIGS),\
	    if [ -e $(DESTDIR)$(CONFDIR)/$(c) ]; then echo "install: keeping existing $(DESTDIR)$(CONFDIR)/$(c)"; \
	    else install -m 0644 deploy/examples/two-die/$(c) $(DESTDIR)$(CONFDIR)/$(c) && \
	        install -d $(DESTDIR)$(WANTSDIR) && \
	        ln -sfn $(UNITDIR)/$(call template_of,$(call unit_of,$(c))) $(DESTDIR)$(WANTSDIR)/$(call unit_of,$(c)) || exit 1; fi;)
	@# the group of the coordinator's socket: on this system now (or in a
	@# DESTDIR that is a system root); a package runs systemd-sysusers itself
	if [ -z "$(DESTDIR)" ] || [ -f $(DESTDIR)$(SYSCONFDIR)/group ]; then \
	    if command -v systemd-sysusers >/dev/null; then \
	        systemd-sysusers $(if $(DESTDIR),--root=$(DESTDIR)) $(DESTDIR)$(SYSUSERSDIR)/qwen35.conf || exit 1; \
	    else echo "install: no systemd-sysusers: create the system group qwen35 by hand"; fi; \
	fi
	@# CURVE keys for tcp:// links (deploy/README.md): one keypair per unit of
	@# the single-host set and the coordinator's key in clients, made once and
	@# never overwritten; .installed lists them so uninstall removes only
	@# those still as made (a key copied in from another host stays)
	set -e; for k in coordinator $(patsubst %.conf,%,$(filter stage-%.conf,$(ETC_CONFIGS))); do \
	    if [ ! -e $(DESTDIR)$(KEYDIR)/$$k.key ] && [ ! -e $(DESTDIR)$(KEYDIR)/$$k.pub ]; then \
	        $(BUILD)/bin/qwen35-keygen $(DESTDIR)$(KEYDIR)/$$k >/dev/null; \
	        (cd $(DESTDIR)$(KEYDIR) && sha256sum $$k.key $$k.pub >> .installed); fi; \
	done; \
	if [ ! -e $(DESTDIR)$(KEYDIR)/clients ]; then \
	    { echo "# coordinators allowed in (a stage's curve-clients)"; cat $(DESTDIR)$(KEYDIR)/coordinator.pub; } \
	        > $(DESTDIR)$(KEYDIR)/clients; \
	    (cd $(DESTDIR)$(KEYDIR) && sha256sum clients >> .installed); fi
	@# /run/qwen35 (the sockets) now; at boot systemd-tmpfiles-setup makes it
	if [ -z "$(DESTDIR)" ] && command -v systemd-tmpfiles >/dev/null; then \
	    systemd-tmpfiles --create $(TMPFILESDIR)/qwen35.conf || exit 1; fi
	@echo "installed; then: systemctl daemon-reload && systemctl enable --now qwen35.target"

uninstall:
	$(if $(INSTALL_BINS),rm -f $(addprefix $(DESTDIR)$(BINDIR)/,$(INSTALL_BINS)))
	$(if $(LIBEXEC_BINS),rm -f $(addprefix $(DESTDIR)$(LIBEXECDIR)/,$(LIBEXEC_BINS)))
	rm -f $(addprefix $(DESTDIR)$(MANDIR)/man1/,$(notdir $(MAN_PAGES)))
	rm -f $(addprefix $(DESTDIR)$(UNITDIR)/,$(UNITS)) $(DESTDIR)$(SYSUSERSDIR)/qwen35.conf $(DESTDIR)$(TMPFILESDIR)/qwen35.conf
	rm -f $(addprefix $(DESTDIR)$(DOCDIR)/examples/,$(EXAMPLES))
	rmdir $(sort $(dir $(addprefix $(DESTDIR)$(DOCDIR)/examples/,$(EXAMPLES)))) $(DESTDIR)$(DOCDIR)/examples $(DESTDIR)$(DOCDIR) 2>/dev/null || true
	@# the units enabled by install or systemctl enable (links into UNITDIR)
	for l in $(DESTDIR)$(WANTSDIR)/qwen35-*.service; do \
	    case "$$(readlink "$$l" 2>/dev/null)" in $(UNITDIR)/qwen35-*) rm -f "$$l";; esac; \
	done
	rmdir $(DESTDIR)$(WANTSDIR) 2>/dev/null || true
	for c in $(ETC_CONFIGS); do \
	    f=$(DESTDIR)$(CONFDIR)/$$c; \
	    if cmp -s $$f deploy/examples/two-die/$$c; then rm -f $$f; \
	    elif [ -e $$f ]; then echo "uninstall: keeping edited $$f"; fi; \
	done
	if [ -f $(DESTDIR)$(KEYDIR)/.installed ]; then \
	    (cd $(DESTDIR)$(KEYDIR) && while read -r sum f; do \
	        if echo "$$sum  $$f" | sha256sum -c --status 2>/dev/null; then rm -f "$$f"; \
	        elif [ -e "$$f" ]; then echo "uninstall: keeping changed $(DESTDIR)$(KEYDIR)/$$f"; fi; \
	    done < .installed && rm -f .installed); fi
	rmdir $(DESTDIR)$(KEYDIR) $(DESTDIR)$(CONFDIR) $(DESTDIR)$(MODELDIR) $(DESTDIR)$(patsubst %/,%,$(dir $(MODELDIR))) $(DESTDIR)$(LIBEXECDIR) $(DESTDIR)$(SYSUSERSDIR) $(DESTDIR)$(TMPFILESDIR) 2>/dev/null || true

# The fake systemd the integration tests run the daemons under.
BINS += qwen35-fake-systemd
qwen35-fake-systemd_SRCS := tests/fake_systemd.c
INTERNAL_BINS += qwen35-fake-systemd
