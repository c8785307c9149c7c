#!/usr/bin/env bash
# Runs each argument, a shell command line, with at most $JOBS (default 2)
# running at once. Each one's output is printed whole, in the order given,
# once it and the ones before it have finished; the script fails if any did.
#
# `make test` runs the C suites under valgrind with it: valgrind runs all of
# a process's threads on one core, and most of each run is valgrind
# translating libtorch's code at start-up, so two at once use both cores of
# the CI machine and halve that part of the run.
set -uo pipefail
max=${JOBS:-2}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cmds=("$@")
for i in "${!cmds[@]}"; do
    while (($(jobs -rp | wc -l) >= max)); do
        wait -n || true
    done
    (
        bash -c "${cmds[$i]}" >"$dir/$i.out" 2>&1
        echo $? >"$dir/$i.rc.tmp" && mv "$dir/$i.rc.tmp" "$dir/$i.rc"
    ) &
done
rc=0
for i in "${!cmds[@]}"; do
    while [ ! -f "$dir/$i.rc" ]; do
        wait -n 2>/dev/null || sleep 0.2
    done
    cat "$dir/$i.out"
    r=$(cat "$dir/$i.rc")
    if [ "$r" != 0 ]; then
        echo "FAILED (exit $r): ${cmds[$i]}"
        rc=1
    fi
done
wait
exit $rc
