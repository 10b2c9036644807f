#!/bin/sh
# Builds one relocatable object from the jemalloc shim and libjemalloc_pic.a
# in which every symbol except tierrt_je_* is local, so that nothing that
# links it (a shared library or an executable) exports or binds to
# jemalloc's malloc/free.
# jemalloc's calls of secure_getenv and readlink go to jemalloc_env.c's
# versions, so that the application's MALLOC_CONF never reaches it.
#   make_private_jemalloc.sh LD OBJCOPY SHIM_OBJECT ENV_OBJECT ARCHIVE OUTPUT
set -eu
ld_prog=$1 objcopy_prog=$2 shim=$3 env=$4 archive=$5 out=$6
"$ld_prog" -r -o "$out.tmp1.o" "$shim" "$archive"
"$objcopy_prog" --redefine-sym secure_getenv=tierrt_je_env_getenv \
  --redefine-sym readlink=tierrt_je_env_readlink "$out.tmp1.o" "$out.tmp2.o"
"$ld_prog" -r -o "$out.tmp.o" "$out.tmp2.o" "$env"
rm -f "$out.tmp1.o" "$out.tmp2.o"
"$objcopy_prog" \
  -G tierrt_je_arena_create -G tierrt_je_arena_destroy -G tierrt_je_alloc \
  -G tierrt_je_free -G tierrt_je_usable -G tierrt_je_round -G tierrt_je_version \
  "$out.tmp.o" "$out"
rm -f "$out.tmp.o"
