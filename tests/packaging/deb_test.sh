#!/usr/bin/env bash
# ctest package.deb: makes the Debian package with cpack from this build and checks with
# dpkg-deb what it holds (public headers, the CMake package, every library, kolorun) and
# that it declares the Debian packages a user's program needs.
#
#   deb_test.sh BUILD_DIR SOURCE_DIR WORK_DIR "LIBRARY FILES" "DEPENDS"
set -euo pipefail
build=$1 source=$2 work=$3 libraries=$4 depends=$5
fail() { echo "FAIL: $*"; exit 1; }

rm -rf "$work"
mkdir -p "$work"
(cd "$work" && "${CPACK:-cpack}" --config "$build/CPackConfig.cmake" -G DEB -B "$work") > "$work/cpack.log" 2>&1 ||
  { cat "$work/cpack.log"; fail "cpack -G DEB failed"; }
debs=("$work"/*.deb)
[ "${#debs[@]}" -eq 1 ] && [ -f "${debs[0]}" ] || fail "expected one .deb in $work, got: ${debs[*]}"
deb=${debs[0]}
info=$(dpkg-deb --info "$deb")
contents=$(dpkg-deb --contents "$deb" | awk '{print $NF}')
echo "$info"

want=(./usr/bin/kolorun ./usr/lib/cmake/kolo/koloConfig.cmake
      ./usr/lib/cmake/kolo/koloConfigVersion.cmake ./usr/lib/cmake/kolo/koloTargets.cmake)
with_torch=0
[[ " $libraries " != *" libkolo_torch.a "* ]] || with_torch=1
for h in "$source"/include/kolo/*.h; do
  [ "${h##*/}" != torch.h ] || [ "$with_torch" = 1 ] || continue  # a build without libtorch
  [ "${h##*/}" != train.h ] || [[ " $libraries " == *" libkolo_train.a "* ]] || continue
  want+=("./usr/include/kolo/${h##*/}")
done
for l in $libraries; do want+=("./usr/lib/$l"); done
[ "$with_torch" = 0 ] || want+=(./usr/lib/cmake/kolo/koloTorchTargets.cmake)
for f in "${want[@]}"; do
  grep -qxF "$f" <<< "$contents" || fail "$deb does not hold $f"
done

declared=$(sed -n 's/^ Depends: //p' <<< "$info")
[ -n "$declared" ] || fail "$deb declares no dependencies"
# One package name per line, versions and alternatives dropped: "a (>= 1), b | c" -> a b c.
names=$(sed 's/([^)]*)//g; s/[|,]/\n/g' <<< "$declared" | tr -d ' ')
for d in $depends libc6 libstdc++6; do
  grep -qxF "$d" <<< "$names" || fail "$deb does not depend on $d (Depends: $declared)"
done
# Every declared package must exist in Debian (here: be known to apt, when apt has its
# package lists; images often delete them).
if command -v apt-cache > /dev/null && apt-cache show libc6 > /dev/null 2>&1; then
  for d in $names; do
    apt-cache show "$d" > /dev/null 2>&1 || fail "$deb depends on $d, which apt does not know"
  done
fi
echo "PASS: $deb holds ${#want[@]} expected files and depends on: $declared"
