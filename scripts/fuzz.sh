#!/usr/bin/env bash
# fuzz.sh [FUZZTIME]: runs every Go fuzz target of the module, one after the
# other, for FUZZTIME each (default 30s; `make fuzz FUZZTIME=10m` for the long
# runs). `go test -fuzz` takes one target of one package at a time, so the
# targets are found by their `func FuzzXxx(f *testing.F)` declarations.
# Prints one line per target and a final "N passed, M failed".
set -uo pipefail

cd "$(dirname "$0")/.."
fuzztime=${1:-30s}
passed=0
failed=0
while IFS= read -r hit; do
	file=${hit%%:*}
	name=$(sed -E 's/.*func (Fuzz[A-Za-z0-9_]*)\(.*/\1/' <<<"${hit#*:}")
	pkg=./$(dirname "${file#./}")
	echo "==> $pkg $name ($fuzztime)"
	if go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" -fuzzminimizetime 1s "$pkg"; then
		passed=$((passed + 1))
	else
		failed=$((failed + 1))
		echo "FAIL: $pkg $name"
	fi
done < <(grep -rE --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*\(f \*testing\.F\)' . |
	grep -vE '^\./(build|\.cache)/' | sort)
echo "$passed passed, $failed failed"
((failed == 0))
