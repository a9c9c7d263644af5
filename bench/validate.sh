#!/bin/sh
# Regenerates bench/validation.md: the planner's predicted step of every
# tiny plan, and of the predicted best and worst five plans of a wider
# model, against the step `amspc run`'s runtime measures on this machine,
# after calibrating with `amspc profile`. Run it on a quiet machine
# (about 8 minutes on 2 cores): sh bench/validate.sh
set -eu
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/amspc" ./cmd/amspc
amspc="$tmp/amspc"
# Collective sizes up to 64 MiB: the wide model's gathers are 13 MB.
"$amspc" profile --shard auto --max-bytes 67108864 -o bench/profiles/tiny.csv testdata/models/tiny.amsp
"$amspc" profile --shard auto --max-bytes 67108864 -o bench/profiles/wide.csv bench/models/wide.amsp
{
	echo "# The planner's predictions against measured steps"
	echo
	echo "Regenerate with \`sh bench/validate.sh\` (bench/README.md says what it does)."
	echo
	"$amspc" validate --markdown --plans all --steps 7 --profile bench/profiles/tiny.csv testdata/models/tiny.amsp
	"$amspc" validate --markdown --plans extremes=5 --steps 7 --profile bench/profiles/wide.csv bench/models/wide.amsp
} > "$tmp/validation.md"
mv "$tmp/validation.md" bench/validation.md
cat bench/validation.md
