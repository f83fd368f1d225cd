#!/usr/bin/env bash
# bench/current.sh REPORT: puts a report of bench/run.sh (bench/out/*.txt)
# into the "Current figures" of bench/README.md, in the block of the
# report's broker (embedded or kafka), with the commit it was measured at.
# bench/run.sh calls it at the end of every full run (not with --quick, nor
# with BENCH_README=0); it can be run again by hand on any saved report.
set -euo pipefail
cd "$(dirname "$0")/.."
report=${1:?usage: bash bench/current.sh bench/out/REPORT.txt}
[ -s "$report" ] || { echo "bench/current.sh: no report $report" >&2; exit 1; }
broker=$(sed -n '1s/.*, broker \([a-z]*\).*/\1/p' "$report")
case $broker in
  embedded|kafka) ;;
  *) echo "bench/current.sh: $report does not say its broker (embedded or kafka)" >&2; exit 1 ;;
esac
commit=$(git -c safe.directory='*' rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git -c safe.directory='*' status --porcelain -- src 2>/dev/null | head -1)
[ -n "$dirty" ] && commit="$commit with uncommitted changes in src/"
python3 - "$report" "$broker" "$commit" <<'PY'
import re, sys
report, broker, commit = sys.argv[1:4]
text = open(report).read().rstrip('\n')
name = 'Apache Kafka' if broker == 'kafka' else 'the embedded broker'
block = (f'<!-- current: {broker} -->\n'
         f'On {name}, at {commit} (`{report}`):\n\n```\n{text}\n```\n'
         f'<!-- end current: {broker} -->')
p = 'bench/README.md'
s = open(p).read()
pat = re.compile(r'<!-- current: %s -->.*?<!-- end current: %s -->' % (broker, broker), re.S)
if not pat.search(s):
    sys.exit('bench/current.sh: bench/README.md has no block for %s' % broker)
open(p, 'w').write(pat.sub(lambda m: block, s))
print('bench/README.md: current figures on %s from %s' % (name, report))
PY
