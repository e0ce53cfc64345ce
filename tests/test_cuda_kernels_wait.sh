#!/usr/bin/env bash
# Every kernel of the cuda backend is launched early (programmatic dependent
# launch, src/ops/cuda/launch.h): its blocks may be placed while the kernel
# before it still runs.  That is safe only if every kernel waits
# (lm_cuda_wait_for_prior) before it touches what earlier work writes, and
# only if one kernel's end implies the end of all before it, which holds when
# each kernel waits.  This check reads src/ops/cuda/: every __global__
# function must call the wait, itself or through a __device__ function that
# does (one that calls one that does, ...).  One check per kernel; prints the
# kernels that never wait and closes with
# "test_cuda_kernels_wait.sh: N passed, M failed".
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2
perl -e '
use strict; use warnings;
my (%body, %kernel, %where); my ($globals, $parsed) = (0, 0);
for my $file (sort glob("src/ops/cuda/*.cu src/ops/cuda/*.h")) {
    open(my $fh, "<", $file) or die "$file: $!";
    local $/; my $src = <$fh>; close $fh;
    # Attributes with their (possibly nested) parentheses are read past.
    $src =~ s!/\*.*?\*/! !gs; $src =~ s!//[^\n]*!!g;
    $src =~ s!\b(?:__launch_bounds__|__cluster_dims__)\s*(\((?:[^()]++|(?1))*\))! !g;
    $globals += () = $src =~ /\b__global__\b/g;
    # A definition: __global__ or __device__, then up to the parameter list
    # of a name, then its body (braces matched).
    while ($src =~ m!\b(__global__|__device__)\b!g) {
        my ($kind, $at) = ($1, pos($src));
        my $head = substr($src, $at, 600);
        next unless $head =~ m!^([^;{}()]*?)\b(\w+)\s*\(!;
        my $name = $2;
        my $p = $at + $+[0] - 1, my $depth = 0;
        for (; $p < length $src; $p++) {
            my $c = substr($src, $p, 1);
            $depth++ if $c eq "("; $depth-- if $c eq ")";
            last if $depth == 0;
        }
        my $rest = substr($src, $p + 1, 200);
        next unless $rest =~ m!^[^;{]*\{!;   # else a declaration, not a definition
        my $open = $p + 1 + $-[0] + length($&) - 1;
        $depth = 0; my $q = $open;
        for (; $q < length $src; $q++) {
            my $c = substr($src, $q, 1);
            $depth++ if $c eq "{"; $depth-- if $c eq "}";
            last if $depth == 0;
        }
        $body{$name} .= substr($src, $open, $q - $open + 1);
        if ($kind eq "__global__") { $kernel{$name} = 1; $where{$name} = $file; $parsed++; }
        pos($src) = $q;
    }
}
my %waits = map { $_ => 1 } grep { $body{$_} =~ /\blm_cuda_wait_for_prior\w*\s*\(/ } keys %body;
for (my $grew = 1; $grew;) {   # a function that calls a waiting one waits too
    $grew = 0;
    for my $f (keys %body) {
        next if $waits{$f};
        for my $g (keys %waits) {
            if ($body{$f} =~ /\b\Q$g\E\s*(<[^;{}]*?>)?\s*\(/) { $waits{$f} = 1; $grew = 1; last; }
        }
    }
}
my ($passed, $failed) = (0, 0);
for my $k (sort keys %kernel) {
    if ($waits{$k}) { $passed++; } else { $failed++; print "$where{$k}: kernel $k never calls lm_cuda_wait_for_prior\n"; }
}
# A __global__ this reading could not take apart (a new attribute, say)
# would drop out of the check unseen: that fails too.
if ($parsed != $globals) { $failed++; print "src/ops/cuda: $globals __global__ functions, $parsed read\n"; }
print "test_cuda_kernels_wait.sh: $passed passed, $failed failed\n";
exit($failed || !$passed ? 1 : 0);
'
