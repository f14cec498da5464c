# --version (base/version.h): the release here, the commit from git at
# build time ("unknown" outside a checkout or without git), the -O level
# and the CUDA archs, into $(BUILD)/gen/q35_version.h. The header is
# written on every make but replaced only when its text changes, so an
# unchanged tree rebuilds nothing and a new commit recompiles only
# base/version.c (and relinks).
Q35_VERSION := 0.7.0
Q35_GIT := $(or $(shell git -C $(CURDIR) describe --always --dirty 2>/dev/null),unknown)
# recursive: cuda/cuda.mk, included after this file, sets CUDA_ON
Q35_CUDA_BUILT = $(if $(CUDA_ON),CUDA archs $(CUDA_ARCHS),no CUDA)

.PHONY: q35-version-always
$(BUILD)/gen/q35_version.h: q35-version-always
	@mkdir -p $(@D)
	@printf '#define Q35_VERSION "%s"\n#define Q35_GIT "%s"\n#define Q35_OPT "%s"\n#define Q35_CUDA_BUILT "%s"\n' \
	    '$(Q35_VERSION)' '$(Q35_GIT)' '$(strip $(OPT))' '$(Q35_CUDA_BUILT)' >$@.tmp
	@if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv $@.tmp $@; fi

$(BUILD)/obj/base/version.o: $(BUILD)/gen/q35_version.h
