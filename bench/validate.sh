#!/bin/sh
# Regenerates bench/validation.md: the planner's predicted step against
# the step `amspc run`'s runtime measures on this machine, after
# calibrating with `amspc profile`, for four models of different shapes
# (tiny; wide: d 512 x 2 blocks; deep: d 96 x 12; fewwide: d 1024 x 1)
# on 8 local ranks (their files' 2 x 4 clusters) and on 2 (one node of
# 2). On 8 ranks tiny runs every plan and the others their 5 predicted
# fastest and 5 slowest (by the profile taken first); on 2 ranks every
# model runs every plan. The predictions are costed with a profile of
# the plans' own kernels and collectives measured between the rounds of
# the steps' rotation (validate --calibrate), so that the machine's
# drift falls on both; and every time, a step or a calibration's
# measurement, is taken against a step of a reference plan (ZeRO-3)
# beside it and shown at the reference's median step, so that the
# machine's episodes of speed (1.5x apart, seconds long) move neither
# (validate --reference, on by default). Each plan runs twice, as two separate runs of 4
# timed steps (--instances 2): how far apart their medians land is how
# far measuring the plan again may move it, and validate counts two
# plans as ordered only when they are further apart than that. Run it
# on a quiet machine (about 50 minutes on the 2-vCPU Xeon); each table
# ends with the share of the processors' time the hypervisor stole and
# other processes took while it measured: sh bench/validate.sh
set -eu
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/amspc" ./cmd/amspc
amspc="$tmp/amspc"
printf 'cluster cpu_1x2 {\n  nodes = 1\n  gpus_per_node = 2\n  gpu = "cpu"\n  intra_node_bw = 10 GB/s\n  inter_node_bw = 1 GB/s\n}\n' >"$tmp/two.amsp"
# models: name, file, the plans on 8 ranks.
models="tiny:testdata/models/tiny.amsp:all wide:bench/models/wide.amsp:extremes=5 deep:bench/models/deep.amsp:extremes=5 fewwide:bench/models/fewwide.amsp:extremes=5"
for m in $models; do
	name=${m%%:*}
	rest=${m#*:}
	file=${rest%%:*}
	# Collective sizes up to 64 MiB: the wide models' gathers are 13 MB
	# and more.
	"$amspc" profile --shard auto --max-bytes 67108864 -o bench/profiles/$name.csv "$file"
	"$amspc" profile --shard auto --max-bytes 67108864 --cluster "$tmp/two.amsp" -o bench/profiles/$name-2.csv "$file"
done
{
	echo "# The planner's predictions against measured steps"
	echo
	echo "Regenerate with \`sh bench/validate.sh\` (bench/README.md says what it does)."
	echo
	for m in $models; do
		name=${m%%:*}
		rest=${m#*:}
		file=${rest%%:*}
		plans=${rest#*:}
		"$amspc" validate --markdown --calibrate --plans "$plans" --steps 4 --instances 2 --profile bench/profiles/$name.csv "$file"
		"$amspc" validate --markdown --calibrate --plans all --steps 4 --instances 2 --cluster "$tmp/two.amsp" --shard auto --profile bench/profiles/$name-2.csv "$file"
	done
} >"$tmp/validation.md"
mv "$tmp/validation.md" bench/validation.md
cat bench/validation.md
