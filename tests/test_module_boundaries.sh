#!/usr/bin/env bash
# Checks the never-arrows between the folders of src/ (docs/ARCHITECTURE.md):
# every `#include "..."` under src/ (.c, .h, .cu, .cuh) is resolved (a bare name in the including
# file's folder, else a path below src/ or include/) and tested against the
# rules below, and src/engine/ must name no model family.  Prints one line per
# violation ("file:line: what") and closes with
# "test_module_boundaries.sh: N passed, M failed" (one check per rule), the
# summary line tests/run.sh adds up; exits non-zero when a rule is violated.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2
name=$(basename "$0")

# file<TAB>line<TAB>resolved target, for every quoted include under src/
includes=$(
    find src \( -name '*.[ch]' -o -name '*.cu' -o -name '*.cuh' \) -print | LC_ALL=C sort |
    while IFS= read -r file; do
        dir=$(dirname "${file#src/}")
        grep -n -E '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[^"]+"' "$file" |
            sed -E 's/^([0-9]+):[^"]*"([^"]+)".*/\1\t\2/' |
            while IFS=$'\t' read -r line target; do
                if [[ $target != */* && -f src/$dir/$target ]]; then target=$dir/$target; fi
                printf '%s\t%s\t%s\n' "$file" "$line" "$target"
            done
    done
)

passed=0; failed=0
report() { # $1 = rule name, stdin = violation lines
    local v
    v=$(cat)
    if [ -n "$v" ]; then
        printf '%s\n' "$v"
        failed=$((failed + 1))
    else
        passed=$((passed + 1))
    fi
}

# include_rule LABEL FROM_DIR TARGET_REGEX [ALLOWED_REGEX]: no file under
# src/FROM_DIR/ includes a target matching TARGET_REGEX (unless it matches ALLOWED_REGEX).
include_rule() {
    local label=$1 from=$2 bad=$3 allowed=${4:-^$}
    report "$label" < <(printf '%s\n' "$includes" | awk -F'\t' -v from="src/$from/" \
        -v bad="$bad" -v allowed="$allowed" -v label="$label" '
        $1 != "" && index($1, from) == 1 && $3 ~ bad && $3 !~ allowed {
            printf "%s:%s: includes \"%s\" (%s)\n", $1, $2, $3, label
        }')
}

include_rule "models/ must not include engine/, server/ or cli/" models \
    '^(engine|server|cli)/'
# The model families: each in its folder models/<family>/, over the core
# (the files of models/ itself).  A family may use the core but no other
# family, and the core knows no family (the registry knows them by their
# descriptors alone).
for family_dir in src/models/*/; do
    family=$(basename "$family_dir")
    include_rule "models/$family/ must not include another family's folder" "models/$family" \
        '^models/[^/]+/' "^models/$family/"
done
# core_rule LABEL TARGET_REGEX: no file directly in src/models/ includes a match.
core_rule() {
    local label=$1 bad=$2
    report "$label" < <(printf '%s\n' "$includes" | awk -F'\t' -v bad="$bad" -v label="$label" '
        $1 ~ /^src\/models\/[^\/]+$/ && $3 ~ bad {
            printf "%s:%s: includes \"%s\" (%s)\n", $1, $2, $3, label
        }')
}
core_rule "the models/ core must not include a family folder (models/<family>/)" '^models/[^/]+/'
# image/ turns pictures into patches and prompts into placeholder rows,
# for engine/ and cli/ as much as for models/: it knows no model.
include_rule "image/ includes only base/, io/ and image/" image '.' '^(base|io|image)/'
# (the CUDA kernels, .cu and .cuh, included)
include_rule "ops/ must not include models/, engine/, server/ or cli/" ops \
    '^(models|engine|server|cli)/'
include_rule "io/ must not include models/, engine/, server/, cli/ or ops/" io \
    '^(models|engine|server|cli|ops)/'
include_rule "text/ must not include models/, engine/, ops/, server/ or cli/" text \
    '^(models|engine|ops|server|cli)/'
# grammar/ knows bytes and JSON: token ids come in as byte strings, so it
# needs neither the tokenizer (text/) nor anything that runs a model.
include_rule "grammar/ includes only base/ and grammar/" grammar '.' '^(base|grammar)/|^loom\.h$'
include_rule "base/ includes only base/" base '.' '^base/'
include_rule "engine/ must not include a backend-private header (ops/<backend>/)" engine \
    '^ops/[^/]+/'
# The models write the seam's plain ops; what a backend fuses of them (its
# kernels, its fusion window) is its own business.
include_rule "models/ must not include a backend-private header (ops/<backend>/)" models \
    '^ops/[^/]+/'
# The family-agnostic contracts of models/: the interface, the StepBatch, the
# registry and the tensor-parallel model, which drives any family's ranks as
# one model (the prompt side of images is image/'s, which engine/ may use).
include_rule "engine/ includes of models/ only its contracts, never a family folder" engine '^models/' \
    '^models/(model|step_batch|registry|tensor_parallel)\.h$'
include_rule "cli/ must not include a family folder (models/<family>/)" cli '^models/[^/]+/'
include_rule "server/ must not include a family folder (models/<family>/)" server '^models/[^/]+/'

# engine/ names no model family: identifiers outside comments and string literals.
family_names() {
    find src/engine -name '*.[ch]' -print | LC_ALL=C sort | while IFS= read -r file; do
        perl -0777 -ne '
            s{/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\x27(?:\\.|[^\x27\\\n])*\x27}{
                my $m = $&; $m =~ m{^/[/*]} ? ($m =~ tr/\n//dcr) : q("")
            }gse;
            my $n = 0;
            for my $line (split /\n/, $_, -1) {
                $n++;
                while ($line =~ /\b(\w*(?:qwen35|qwen3_5|glm)\w*)/gi) {
                    print "$ARGV:$n: names a model family: $1 (engine/ must stay family-agnostic)\n";
                }
            }' "$file"
    done
}
report "engine/ names no model family" < <(family_names)

echo "$name: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
