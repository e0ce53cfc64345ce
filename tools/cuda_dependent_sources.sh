#!/usr/bin/env bash
# Prints the C files (src/ and tests/, one a line) whose compiled text can
# change with -DLOOM_HAVE_CUDA: those that name it, and those that include,
# at any depth, a header that names it.  The Makefile's CUDA compile check
# (build/cuda) compiles these again with the cuda backend and takes every
# other object from the release tree, where it is the same object.
# A header is matched by its file name, whatever folder the #include names,
# so two headers sharing a name can only add files, never miss one.
set -euo pipefail
cd "$(dirname "$0")/.."
dirs=(src include tests)
set_now=$(grep -rlw LOOM_HAVE_CUDA "${dirs[@]}" --include='*.c' --include='*.h' | sort -u)
while :; do
    names=$(printf '%s\n' "$set_now" | grep '\.h$' | xargs -r -n1 basename | sed 's/[.]/[.]/g' | paste -sd'|' -)
    [ -n "$names" ] || break
    more=$(grep -rlE "^[[:space:]]*#[[:space:]]*include[[:space:]]*\"([^\"]*/)?($names)\"" "${dirs[@]}" \
                --include='*.c' --include='*.h' || true)
    grown=$(printf '%s\n%s\n' "$set_now" "$more" | grep -v '^$' | sort -u)
    [ "$grown" = "$set_now" ] && break
    set_now=$grown
done
printf '%s\n' "$set_now" | grep '\.c$' || true
