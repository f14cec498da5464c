# Command-line tools built on the engine library. Each binary:
#   BINS += name ; name_SRCS := files ; name_LIBS := extra -l ; name_NET := 1 to link libqwen35net
