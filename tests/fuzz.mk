# The fuzz targets live in tests/fuzz/ (the top Makefile reads */*.mk only).
include tests/fuzz/fuzz.mk
