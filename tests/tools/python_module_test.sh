#!/usr/bin/env bash
# python/tierrt.py under python3, without tierrt and under LD_PRELOAD.
# Usage: python_module_test.sh PYTHON3 MODULE_DIR CHECK_SCRIPT TIERRT_H LIBTIERRT
# TIERRT_TEST_PRELOAD_PREFIX names a sanitizer runtime to preload first.
set -uo pipefail
python=$1 module_dir=$(realpath "$2") check=$(realpath "$3") header=$(realpath "$4") lib=$(realpath "$5")
export PYTHONPATH=$module_dir
echo "== without tierrt"
env -u LD_PRELOAD "$python" "$check" absent "$header" || exit 1
echo "== under LD_PRELOAD"
LD_PRELOAD=${TIERRT_TEST_PRELOAD_PREFIX:+$TIERRT_TEST_PRELOAD_PREFIX:}$lib SIMDEV_MEM=128MiB \
  "$python" "$check" preloaded "$header"
