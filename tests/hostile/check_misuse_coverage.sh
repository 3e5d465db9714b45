#!/bin/sh
# check_misuse_coverage.sh <include/hermod dir> <test_api_misuse.c>
# Every function a public header exports (HM_EXPORT) must be named in the
# misuse test, so a new public function cannot be added without its misuse
# checks. Prints the missing ones; exit 1 if any.
set -eu
headers=$1
test_src=$2
names=$(cat "$headers"/*.h | tr '\n' ' ' | grep -o 'HM_EXPORT [^;(]*(' |
        sed 's/(\*\{0,1\}$//; s/.*[ *]//' | grep '^hm_' | sort -u)
count=0
missing=0
for name in $names; do
    count=$((count + 1))
    if ! grep -q "\\b$name\\b" "$test_src"; then
        echo "not covered by $(basename "$test_src"): $name"
        missing=$((missing + 1))
    fi
done
echo "$count public functions, $missing not covered"
[ "$count" -gt 0 ] && [ "$missing" -eq 0 ]
