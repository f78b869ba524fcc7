#!/usr/bin/env bash
# Opt-in end-to-end check of the Slurm path: starts a single-node Slurm (munged, slurmctld, slurmd) as
# root, runs sweep-array.slurm and merge.slurm on the quick study, and checks that the merged output is
# byte-identical to the same sweep on one machine. Not part of `deno task test`, which cannot start daemons.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: sudo scenarios/cluster/check_slurm.sh [--install] [--npx] [--spec FILE] [--timeout SECS] [--keep]

Starts a private single-node Slurm on this machine (its own munge key and socket, its own slurm.conf,
state, spool and logs, on ports 16817/16818 — /etc/slurm is neither read nor written), copies the
working tree to a temporary directory, submits scenarios/cluster/sweep-array.slurm (SWEEP=--spec) and
then merge.slurm with --dependency=afterok, runs the same sweep on one machine with
`deno task sweep --spec FILE`, and compares the two outputs byte for byte with diff -r.

  --install        apt-get install slurm-wlm munge first (Debian; needs the network)
  --npx            let the job scripts run `npx -y deno@VERSION` as written (npx uses a global npm
                   install of that version, else downloads it); by default a stand-in npx runs this
                   machine's deno when its version is the one asked for
  --spec FILE      a committed sweep scenarios/sweeps/NAME.json other than default.json (merge.slurm
                   writes the sweep's home, results/NAME); default scenarios/sweeps/quick.json
  --timeout SECS   wall seconds to wait for the Slurm jobs (default 1200)
  --keep           keep the temporary directory (it is always kept when the check fails)
  -h, --help       show this help

Exits 0 when the outputs are identical, 1 when they differ or a step fails (the temporary directory,
with every daemon and job log, is kept and named), 2 on bad usage or missing prerequisites.
EOF
}

say() { echo "check_slurm: $*" >&2; }
usage_error() {
  say "$*"
  exit 2
}

install=0 use_npx=0 keep=0 timeout_s=1200 spec=scenarios/sweeps/quick.json
while [ $# -gt 0 ]; do
  case "$1" in
    --install) install=1 ;;
    --npx) use_npx=1 ;;
    --keep) keep=1 ;;
    --spec)
      [ $# -ge 2 ] || usage_error "--spec: expected a sweep file, got nothing"
      spec=$2
      shift
      ;;
    --timeout)
      [ $# -ge 2 ] || usage_error "--timeout: expected a whole number of seconds, got nothing"
      [[ "$2" =~ ^[1-9][0-9]*$ ]] || usage_error "--timeout: expected a whole number of seconds > 0, got \"$2\""
      timeout_s=$2
      shift
      ;;
    -h | --help)
      usage
      exit 0
      ;;
    *) usage_error "unknown argument \"$1\" (see --help)" ;;
  esac
  shift
done

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# merge.slurm gives no --out, so the merge writes the sweep's home: the spec must be a committed sweep
# file, and not default.json (whose home is results/ itself, and which is hours of work).
case "$spec" in
  scenarios/sweeps/default.json) usage_error "--spec: expected a committed sweep other than default.json, got \"$spec\"" ;;
  scenarios/sweeps/*.json) [ -f "$REPO/$spec" ] || usage_error "--spec: \"$spec\": no such file in $REPO" ;;
  *) usage_error "--spec: expected scenarios/sweeps/NAME.json (a committed sweep), got \"$spec\"" ;;
esac
[ "$(id -u)" -eq 0 ] || usage_error "must run as root (it starts munged, slurmctld and slurmd): sudo $0"

if [ "$install" -eq 1 ]; then
  say "installing slurm-wlm and munge with apt-get"
  DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge >&2
fi
missing=()
for tool in munged munge mungekey slurmctld slurmd sbatch sinfo squeue scontrol scancel git tar; do
  command -v "$tool" >/dev/null || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
  usage_error "missing ${missing[*]}: install them with \`apt-get install slurm-wlm munge\` (or run with --install)"
fi
DENO=${DENO:-$(command -v deno || true)}
[ -n "$DENO" ] || usage_error "deno: not found on PATH (set DENO=/path/to/deno)"
deno_version=$("$DENO" --version | awk 'NR == 1 { print $2 }')
slurm_version=$(slurmctld -V | awk '{ print $2 }')

# --- a private directory for everything: the copy of the tree, munge, Slurm, the two outputs ---------
T=$(mktemp -d /tmp/rrsim-slurm-check.XXXXXX)
chmod 755 "$T" # munged requires every directory above its socket to be searchable by all
daemon_pids=() jobs_submitted=() passed=0
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
  local status=$?
  set +e
  if [ ${#jobs_submitted[@]} -gt 0 ]; then
    # Cancel what is left and give slurmstepd up to 15 s to end its tasks before slurmd stops.
    scancel "${jobs_submitted[@]}" 2>/dev/null
    local ids
    ids=$(IFS=,; echo "${jobs_submitted[*]}")
    for _ in $(seq 30); do
      [ -z "$(squeue -h -j "$ids" -t RUNNING,COMPLETING -o '%i' 2>/dev/null)" ] && break
      sleep 0.5
    done
  fi
  # Stop in reverse order of starting (slurmd, slurmctld, munged): only the processes this script started.
  for ((i = ${#daemon_pids[@]} - 1; i >= 0; i--)); do
    kill "${daemon_pids[i]}" 2>/dev/null && wait "${daemon_pids[i]}" 2>/dev/null
  done
  if [ "$passed" -eq 1 ] && [ "$keep" -eq 0 ]; then
    rm -rf "$T"
  else
    say "kept $T (slurm/*.log, munge/munged.log, repo/results/shards/slurm-*.log)"
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

# The jobs run in a copy of the working tree (tracked and untracked files, no results/): the scripts
# write results/shards and the merge writes the sweep's home (results/quick), which must not touch the
# repository's own results.
mkdir -p "$T/repo/results" "$T/munge" "$T/munge-run" "$T/slurm/state" "$T/slurm/spool" "$T/bin"
chmod 700 "$T/munge"
(cd "$REPO" && git ls-files -z -co --exclude-standard | grep -zv '^results/' |
  tar --null -T - --ignore-failed-read -cf -) | tar -C "$T/repo" -xf -

# A stand-in npx: the job scripts run `npx -y deno@VERSION task …`; on one node the local deno serves.
real_npx=$(command -v npx || true)
cat >"$T/bin/npx" <<EOF
#!/usr/bin/env bash
# Stand-in for \`npx -y deno@VERSION ARGS\`: runs $DENO when it is that version, else the real npx.
if [ "\${1:-}" = "-y" ] && [ "\${2:-}" = "deno@$deno_version" ]; then
  shift 2
  exec "$DENO" "\$@"
fi
[ -n "$real_npx" ] || { echo "npx stand-in: \$*: no real npx to run it" >&2; exit 127; }
echo "npx stand-in: \$2 is not this machine's deno $deno_version; running the real npx" >&2
exec "$real_npx" "\$@"
EOF
chmod 755 "$T/bin/npx"
if [ "$use_npx" -eq 0 ]; then export PATH="$T/bin:$PATH"; fi

# --- munge: a fresh key and a private socket, so an existing munged is neither used nor disturbed -----
mungekey -c -k "$T/munge/munge.key" -b 1024
munged -F -S "$T/munge-run/munge.socket" --key-file="$T/munge/munge.key" --log-file="$T/munge/munged.log" \
  --pid-file="$T/munge-run/munged.pid" --seed-file="$T/munge/munged.seed" >"$T/munge/munged.out" 2>&1 &
daemon_pids+=($!)
for _ in $(seq 50); do
  if [ -S "$T/munge-run/munge.socket" ]; then break; fi
  sleep 0.2
done
if ! munge -n -S "$T/munge-run/munge.socket" | unmunge -S "$T/munge-run/munge.socket" >/dev/null; then
  say "FAIL: munged did not start; its log:"
  tail -n 20 "$T/munge/munged.out" >&2
  exit 1
fi

# --- Slurm: one node, this machine, every path under $T ----------------------------------------------
node=$(hostname -s)
cpus=$(nproc)
mem_mb=$(awk '/^MemTotal:/ { printf "%d", $2 / 1024 * 0.9 }' /proc/meminfo) # slurmd drains a node that has less
export SLURM_CONF="$T/slurm/slurm.conf"
: >"$T/slurm/plugstack.conf" # no SPANK plugins from /etc/slurm
cat >"$SLURM_CONF" <<EOF
# Written by scenarios/cluster/check_slurm.sh: a private single-node Slurm for one check.
ClusterName=rrsim-check
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=16817
SlurmdPort=16818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$T/munge-run/munge.socket
StateSaveLocation=$T/slurm/state
SlurmdSpoolDir=$T/slurm/spool
SlurmctldPidFile=$T/slurm/slurmctld.pid
SlurmdPidFile=$T/slurm/slurmd.pid
SlurmctldLogFile=$T/slurm/slurmctld.log
SlurmdLogFile=$T/slurm/slurmd.log
PlugStackConfig=$T/slurm/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MailProg=/bin/true
MpiDefault=none
SchedulerType=sched/backfill
SchedulerParameters=kill_invalid_depend
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MinJobAge=3600
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
slurmctld -D -c -f "$SLURM_CONF" >"$T/slurm/slurmctld.out" 2>&1 &
daemon_pids+=($!)
slurmd -D -f "$SLURM_CONF" >"$T/slurm/slurmd.out" 2>&1 &
daemon_pids+=($!)
state=""
for _ in $(seq 120); do
  state=$(sinfo -h -N -n "$node" -o '%t' 2>/dev/null || true)
  [ "$state" = "idle" ] && break
  sleep 0.5
done
if [ "$state" != "idle" ]; then
  say "FAIL: node $node is not idle after 60 s (sinfo says \"${state:-nothing}\"); the daemons' logs:"
  tail -n 15 "$T/slurm/slurmctld.log" "$T/slurm/slurmd.log" "$T/slurm/slurmctld.out" "$T/slurm/slurmd.out" >&2 || true
  exit 1
fi
say "Slurm $slurm_version up: node $node idle, $cpus CPUs, ${mem_mb} MB; deno $deno_version; in $T"

# --- the cluster path, as its scripts say: sweep as a job array, then merge after it -----------------
cd "$T/repo"
mkdir -p results/shards
export SWEEP="$spec"
start=$(date +%s)
array_job=$(sbatch --parsable scenarios/cluster/sweep-array.slurm | cut -d';' -f1)
jobs_submitted+=("$array_job")
merge_job=$(sbatch --parsable --dependency="afterok:$array_job" scenarios/cluster/merge.slurm | cut -d';' -f1)
jobs_submitted+=("$merge_job")
say "submitted sweep-array.slurm as job $array_job and merge.slurm as job $merge_job (afterok), SWEEP=$spec"
deadline=$((start + timeout_s))
while [ -n "$(squeue -h -j "$array_job,$merge_job" -o '%i' 2>/dev/null)" ]; do
  if [ "$(date +%s)" -ge "$deadline" ]; then
    say "FAIL: the jobs did not finish in $timeout_s s:"
    squeue -j "$array_job,$merge_job" >&2 || true
    exit 1
  fi
  sleep 2
done
slurm_wall=$(($(date +%s) - start))

# One line per job, array tasks as ARRAYJOB_TASK in task order: id, state, exit code, run time.
job_lines() {
  scontrol -o show job "$1" | tr ' ' '\n' |
    awk -F= '/^JobId=/ { id = $2; task = 0 } /^ArrayJobId=/ { id = $2 } /^ArrayTaskId=/ { task = $2; id = id "_" $2 }
      /^JobState=/ { st = $2 } /^ExitCode=/ { ec = $2 }
      /^RunTime=/ { print task, id, st, "exit", ec, "run", $2 }' | sort -n | cut -d' ' -f2-
}
summary=$(job_lines "$array_job"; job_lines "$merge_job")
while read -r line; do echo "  job $line" >&2; done <<<"$summary"
bad=$(echo "$summary" | awk '$2 != "COMPLETED" || $4 != "0:0"')
tasks=$(job_lines "$array_job" | wc -l)
if [ -n "$bad" ]; then
  say "FAIL: a job did not complete:"
  echo "$bad" >&2
  tail -n 20 results/shards/slurm-*.log >&2 || true
  exit 1
fi
say "Slurm path done in ${slurm_wall} s wall ($tasks array tasks + merge)"

# --- the same sweep on one machine, into the same directory name, then byte for byte ----------------
merged=$(sed -n 's/^merged .* into \(.*\)\/$/\1/p' results/shards/slurm-merge-"$merge_job".log)
if [ -z "$merged" ] || [ ! -d "$merged" ]; then
  say "FAIL: cannot tell from results/shards/slurm-merge-$merge_job.log where the merge wrote"
  exit 1
fi
mv "$merged" "$T/slurm-output"
start=$(date +%s)
"$DENO" task sweep --spec "$spec" >"$T/one-machine.log" 2>&1 || {
  say "FAIL: the one-machine sweep failed:"
  tail -n 20 "$T/one-machine.log" >&2
  exit 1
}
one_wall=$(($(date +%s) - start))
say "one machine: deno task sweep --spec $spec done in ${one_wall} s wall, into $merged"
files=$(find "$T/slurm-output" -type f | wc -l)
if diff -r "$T/slurm-output" "$merged" >"$T/diff.txt"; then
  passed=1
  say "PASS: Slurm $slurm_version, jobs $array_job ($tasks tasks) + $merge_job: $merged is byte-identical" \
    "to one machine ($files files, diff -r)"
  exit 0
fi
say "differences (diff -r Slurm one-machine):"
cat "$T/diff.txt" >&2
say "FAIL: Slurm $slurm_version, jobs $array_job + $merge_job: $merged differs from one machine"
exit 1
