#!/bin/sh
# check_misuse_coverage.sh <include/hermod dir> <test.c>...
# Every function a public header exports (HM_EXPORT) must be named in one of
# the misuse tests, so a new public function cannot be added without its
# misuse checks. Prints the missing ones; exit 1 if any.
set -eu
if [ "$#" -lt 2 ]; then
    echo "usage: $0 <include/hermod dir> <test.c>..." >&2
    exit 2
fi
headers=$1
shift
for test_src in "$@"; do
    [ -r "$test_src" ] || { echo "cannot read $test_src" >&2; exit 2; }
done
names=$(cat "$headers"/*.h | tr '\n' ' ' | grep -o 'HM_EXPORT [^;(]*(' |
        sed 's/(\*\{0,1\}$//; s/.*[ *]//' | grep '^hm_' | sort -u)
count=0
missing=0
for name in $names; do
    count=$((count + 1))
    if ! cat "$@" | grep -q "\\b$name\\b"; then
        echo "not covered by the misuse tests ($*): $name"
        missing=$((missing + 1))
    fi
done
echo "$count public functions, $missing not covered"
[ "$count" -gt 0 ] && [ "$missing" -eq 0 ]
