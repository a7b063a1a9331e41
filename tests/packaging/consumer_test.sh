#!/usr/bin/env bash
# ctest package.consumer: installs this build into a fresh prefix, builds tests/consumer
# (an out-of-tree project: find_package(kolo) and kolo::torch, nothing else) against it,
# and runs the program with the installed kolorun on 2 workers. Also checks that the
# installed CMake package names no path of the build or source tree.
#
#   consumer_test.sh BUILD_DIR SOURCE_DIR WORK_DIR [cmake arguments for the consumer...]
set -euo pipefail
build=$1 source=$2 work=$3
shift 3
consumer=$source/tests/consumer
cmake=${CMAKE:-cmake}
fail() { echo "FAIL: $*"; exit 1; }

rm -rf "$work"
mkdir -p "$work"
# Installed into one prefix, then moved: the package must be relocatable.
staged=$work/staged
prefix=$work/prefix
"$cmake" --install "$build" --prefix "$staged" > "$work/install.log" ||
  { cat "$work/install.log"; fail "cmake --install $build failed"; }
mv "$staged" "$prefix"
for f in bin/kolorun include/kolo/kolo.h include/kolo/torch.h lib/cmake/kolo/koloConfig.cmake; do
  [ -e "$prefix/$f" ] || fail "the install has no $f"
done
if grep -rlF -e "$build" -e "$source" -e "$staged" "$prefix/lib/cmake/kolo"; then
  fail "the installed CMake package above names the build or source tree or the staged prefix"
fi
# No library of this machine by its path (libzmq once was: /usr/lib/x86_64-linux-gnu/libzmq.so).
if grep -rnE '/usr/lib[^" ;]*\.(so|a)' "$prefix/lib/cmake/kolo"; then
  fail "the installed CMake package above names a system library by its path"
fi

# The consumer sees only the prefix: no kolo source or build directory on any path.
"$cmake" -S "$consumer" -B "$work/build" -DCMAKE_PREFIX_PATH="$prefix" "$@" > "$work/configure.log" ||
  { cat "$work/configure.log"; fail "configuring tests/consumer against $prefix failed"; }
"$cmake" --build "$work/build" -j2 -v > "$work/build.log" 2>&1 ||
  { cat "$work/build.log"; fail "building tests/consumer against $prefix failed"; }
# What the consumer inherits: C++20 from kolo's targets (the project sets no standard), the
# string ABI once, and none of MPI's include directories or definitions.
compile=$(grep -E -- ' -c .*train\.cc' "$work/build.log" | head -1)
[ -n "$compile" ] || fail "no compile line of train.cc in the consumer's build log"
case "$compile" in *-std=gnu++20*|*-std=c++20*) ;; *) fail "train.cc was not compiled as C++20: $compile" ;; esac
abi=$(grep -o -- '-D_GLIBCXX_USE_CXX11_ABI=[01]' <<< "$compile" | wc -l)
[ "$abi" -le 1 ] || fail "train.cc gets _GLIBCXX_USE_CXX11_ABI $abi times: $compile"
case "$compile" in *OMPI_SKIP_MPICXX*|*/openmpi/*|*/mpich/*) fail "train.cc inherits MPI's flags: $compile" ;; esac

out=$work/run.log
status=0
timeout 300 "$prefix/bin/kolorun" -np 2 "$work/build/consumer_train" 2 > "$out" 2>&1 || status=$?
cat "$out"
[ "$status" -eq 0 ] || fail "kolorun -np 2 consumer_train exited with $status"
oks=$(grep -c "consumer OK" "$out" || true)
[ "$oks" -eq 2 ] || fail "expected 'consumer OK' from 2 ranks, got $oks"
if [ -e "$prefix/include/kolo/train.h" ]; then
  [ -x "$work/build/consumer_fit" ] || fail "kolo::train is installed but consumer_fit was not built"
  timeout 300 "$work/build/consumer_fit" || fail "consumer_fit (kolo::train) failed"
fi
echo "PASS: installed kolo built and ran tests/consumer on 2 workers"
