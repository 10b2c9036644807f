#!/bin/sh
# Builds one relocatable object from the jemalloc shim and libjemalloc_pic.a
# in which every symbol except tierrt_je_* is local, so that nothing that
# links it (a shared library or an executable) exports or binds to
# jemalloc's malloc/free.
#   make_private_jemalloc.sh LD OBJCOPY SHIM_OBJECT ARCHIVE OUTPUT
set -eu
ld_prog=$1 objcopy_prog=$2 shim=$3 archive=$4 out=$5
"$ld_prog" -r -o "$out.tmp.o" "$shim" "$archive"
"$objcopy_prog" \
  -G tierrt_je_arena_create -G tierrt_je_arena_destroy -G tierrt_je_alloc \
  -G tierrt_je_free -G tierrt_je_usable -G tierrt_je_round -G tierrt_je_version \
  "$out.tmp.o" "$out"
rm -f "$out.tmp.o"
