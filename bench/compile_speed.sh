#!/bin/sh
# Compile speed of LLaMA-2-70B (issue 31's line): `amspc compile` with the
# search at 2048 GPUs (the file's cluster) and at 16384 (2048 nodes, a
# global batch of 64Mi tokens), and with the plan given at 16384. Wall
# times, medians of $RUNS (default 5), interleaved so that the machine's
# drift falls on every case alike. With OLD=path/to/amspc (and
# OLD_LABEL=its commit), that binary is timed too, interleaved with this
# tree's (a before/after figure).
#
#   sh bench/compile_speed.sh                  # prints the medians
#   OUT=bench/results/compile-speed.json sh bench/compile_speed.sh
set -eu
cd "$(dirname "$0")/.."
RUNS=${RUNS:-5}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/amspc" ./cmd/amspc
model=testdata/models/llama2-70b-gqa.amsp
sed -n '/^cluster /,/^}/p' $model | sed 's/^  nodes  *= 256$/  nodes         = 2048/' > "$tmp/c16k.amsp"
sed -n '/^train {/,/^}/p' $model | sed 's/^  global_batch = 8Mi tokens.*/  global_batch = 64Mi tokens/' > "$tmp/t16k.amsp"
grep -q 'nodes *= 2048' "$tmp/c16k.amsp" && grep -q '64Mi tokens' "$tmp/t16k.amsp" || {
	echo "compile_speed.sh: could not make the 16384-GPU sections from $model" >&2
	exit 1
}
shard='{tensor=8, sequence=true, params=1, grads=1, optim=1x2048}'

# wall BIN CASE: one run's wall seconds.
wall() {
	bin=$1
	case $2 in
	2048) set -- compile -o "$tmp/out" $model ;;
	16384) set -- compile -o "$tmp/out" --cluster "$tmp/c16k.amsp" --train "$tmp/t16k.amsp" $model ;;
	shard) set -- compile -o "$tmp/out" --cluster "$tmp/c16k.amsp" --train "$tmp/t16k.amsp" --shard "$shard" $model ;;
	esac
	start=$(date +%s.%N)
	"$bin" "$@" > /dev/null
	end=$(date +%s.%N)
	echo "$end - $start" | bc
}

bins="new"
[ -n "${OLD:-}" ] && bins="new old"
for i in $(seq "$RUNS"); do
	for c in 2048 16384 shard; do
		for b in $bins; do
			bin="$tmp/amspc"
			[ "$b" = old ] && bin=$OLD
			echo "$b $c $(wall "$bin" $c)" >> "$tmp/times"
		done
	done
done

median() { sort -n | awk '{a[NR]=$1} END {if (NR%2) printf "%.3f\n", a[(NR+1)/2]; else printf "%.3f\n", (a[NR/2]+a[NR/2+1])/2}'; }
cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
json="{\n  \"what\": \"amspc compile of LLaMA-2-70B (testdata/models/llama2-70b-gqa.amsp), wall seconds, median of $RUNS interleaved runs: search at 2048 GPUs, search at 16384 (2048 nodes, 64Mi tokens), plan given at 16384 ($shard)\",\n  \"command\": \"sh bench/compile_speed.sh\",\n  \"date\": \"$(date +%F)\",\n  \"cpu\": \"$cpu\",\n  \"cores\": $(nproc)"
for b in $bins; do
	label=$(git rev-parse --short HEAD)
	git diff --quiet HEAD -- . || label="$label+changes"
	[ "$b" = old ] && label=${OLD_LABEL:-$OLD}
	line=",\n    \"binary\": \"$label\""
	for c in 2048 16384 shard; do
		m=$(awk -v b=$b -v c=$c '$1==b && $2==c {print $3}' "$tmp/times" | median)
		all=$(awk -v b=$b -v c=$c '$1==b && $2==c {printf "%s%.2f", sep, $3; sep=", "}' "$tmp/times")
		echo "$b $c: median $m s ($all)"
		key=$c
		[ $c = shard ] && key=16384_shard_given
		line="$line,\n    \"$key\": {\"median_s\": $m, \"runs_s\": [$all]}"
	done
	key=this
	[ "$b" = old ] && key=old
	json="$json,\n  \"$key\": {${line#,}\n  }"
done
json="$json\n}"
if [ -n "${OUT:-}" ]; then
	printf "$json\n" > "$OUT"
	echo "wrote $OUT"
fi
