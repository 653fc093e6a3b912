#!/usr/bin/env bash
# hpsearch on a real Slurm: brings up a one-node cluster (munged, slurmctld,
# slurmd) in a temporary folder, then
#  (a) runs a study with `--launcher slurm --workers 4` to its budget and
#      checks that its trials ran on 4 distinct Slurm tasks, and that
#      `hpsearch status` names the workers after their tasks;
#  (b) submits examples/slurm/hpsearch.sbatch and checks its study completes
#      (and that the coordinator's hint names a reachable host); (b2) with the
#      coordinator's port busy, the script ends its worker step at once;
#  (c) cancels a running job of that script with scancel, resubmits it (as
#      a requeue would) and checks that the budget is finished with nothing
#      lost and nothing left RUNNING;
#  (d) cancels the worker job of a `--launcher slurm` run: the launcher
#      starts its workers again and the study still finishes;
#  (e) cancels the job of a trial that checkpoints each epoch and resubmits
#      it: the trial continues from its last reported epoch;
#  (f) runs 2-process trials (resources.processes) over `--launcher slurm
#      --workers 4`: each trial's ranks meet at rank 0's MASTER_ADDR and
#      MASTER_PORT (a TCP rendezvous of their own, as torch.distributed's),
#      on two distinct Slurm tasks;
#  (g) kills a `--launcher slurm` coordinator with SIGKILL mid-study: its
#      srun and job end with it (nothing left queued or running).
# Everything it started is stopped at the end, on failure too. A machine
# where Slurm cannot start FAILS this test (it never skips).
#
#   tests/slurm_cluster_test.sh BUILD/hpsearch SOURCE_DIR
#
# Needs root (slurmd runs jobs as their user; CI runs as root) and the
# Debian packages slurmctld, slurmd, slurm-client and munge
# (scripts/install-deps.sh).
set -euo pipefail

hpsearch=$(realpath "${1:?usage: slurm_cluster_test.sh HPSEARCH SOURCE_DIR}")
source_dir=$(realpath "${2:?usage: slurm_cluster_test.sh HPSEARCH SOURCE_DIR}")
sbatch_example="$source_dir/examples/slurm/hpsearch.sbatch"

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
log() { echo "[$(date +%H:%M:%S)] $*"; }

for tool in munged slurmctld slurmd srun sbatch squeue scancel sinfo python3; do
  command -v "$tool" > /dev/null ||
    fail "$tool not found: install slurmctld slurmd slurm-client munge (scripts/install-deps.sh)"
done
[[ $(id -u) -eq 0 ]] || fail "needs root (slurmd starts job steps as their user)"

T=$(mktemp -d /tmp/hpsearch-slurm.XXXXXX)
chmod 755 "$T"
export SLURM_CONF="$T/slurm.conf"
# Clients and daemons (hence every process of every job) carry this mark, so
# that cleanup finds exactly what this test started.
export HPSEARCH_SLURM_TEST="$T"

pids_of_this_test() {
  local p
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    [[ $p == "$$" || $p == "$BASHPID" ]] && continue
    if { tr '\0' '\n' < "/proc/$p/environ"; } 2> /dev/null | grep -qx "HPSEARCH_SLURM_TEST=$T"; then
      echo "$p"
    fi
  done
}

cleanup() {
  local rc=$?
  set +e
  if [[ $rc -ne 0 ]]; then
    echo "---- logs (test failed, rc=$rc) ----" >&2
    for f in "$T"/log/*.log "$T"/*/hpsearch-*.out "$T"/*/run.err; do
      [[ -f $f ]] && { echo "== $f" >&2; tail -n 40 "$f" >&2; }
    done
  fi
  if [[ -f "$T/slurmctld.pid" ]] || [[ -n ${slurmctld_pid:-} ]]; then
    scancel --user="$(id -un)" > /dev/null 2>&1
    for _ in $(seq 1 50); do
      [[ -z $(squeue --noheader 2> /dev/null) ]] && break
      sleep 0.2
    done
  fi
  for pid in ${slurmd_pid:-} ${slurmctld_pid:-} ${munged_pid:-}; do
    kill -TERM "$pid" 2> /dev/null
  done
  for pid in ${slurmd_pid:-} ${slurmctld_pid:-} ${munged_pid:-}; do
    for _ in $(seq 1 50); do
      kill -0 "$pid" 2> /dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2> /dev/null
    wait "$pid" 2> /dev/null
  done
  # Whatever is left of the jobs (slurmstepd, workers, objectives).
  local left
  left=$(pids_of_this_test)
  if [[ -n $left ]]; then
    echo "cleanup: killing leftover processes: $left" >&2
    kill -KILL $left 2> /dev/null
  fi
  rm -rf "$T"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- the cluster -----------------------------------------------------------
mkdir -p "$T"/{munge,state,spool,log}
chmod 700 "$T/munge"
dd if=/dev/urandom of="$T/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$T/munge/munge.key"
# Its own socket: a munged the machine may already run is left alone.
munged --foreground --force --socket="$T/munge/munge.socket" --key-file="$T/munge/munge.key" \
  --log-file="$T/log/munged.log" --pid-file="$T/munge/munged.pid" \
  --seed-file="$T/munge/munged.seed" &
munged_pid=$!

free_ports=$(python3 -c '
import socket
ss = [socket.socket() for _ in range(2)]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))')
read -r ctld_port slurmd_port <<< "$free_ports"
node_line=$(slurmd -C | head -n 1)  # NodeName=... CPUs=N ... RealMemory=M: the real machine
node_name=$(sed -E 's/^NodeName=([^ ]+).*/\1/' <<< "$node_line")
cpus=$(sed -E 's/.* CPUs=([0-9]+).*/\1/' <<< "$node_line")
[[ -n $node_name && -n $cpus ]] || fail "cannot read the node from 'slurmd -C': $node_line"
cat > "$SLURM_CONF" << EOF
ClusterName=hpsearchtest
SlurmctldHost=$(hostname -s)(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
AuthInfo=socket=$T/munge/munge.socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$T/state
SlurmdSpoolDir=$T/spool
SlurmctldPidFile=$T/slurmctld.pid
SlurmdPidFile=$T/slurmd.pid
SlurmctldLogFile=$T/log/slurmctld.log
SlurmdLogFile=$T/log/slurmd.log
PlugStackConfig=$T/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
KillWait=5
InactiveLimit=0
MinJobAge=5
$node_line NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
touch "$T/plugstack.conf"
log "cluster: node $node_name with $cpus CPUs, slurmctld port $ctld_port, slurmd port $slurmd_port"
slurmctld -D -f "$SLURM_CONF" > "$T/log/slurmctld.out.log" 2>&1 &
slurmctld_pid=$!
slurmd -D -f "$SLURM_CONF" > "$T/log/slurmd.out.log" 2>&1 &
slurmd_pid=$!
for _ in $(seq 1 150); do
  state=$(sinfo --noheader --format=%T 2> /dev/null || true)
  [[ $state == idle ]] && break
  sleep 0.2
done
[[ $state == idle ]] || fail "the one-node Slurm cluster did not come up (node state '$state')"
log "cluster up: $(sinfo --noheader --format='%P %D %T %C')"

# ---- a study whose objective says which Slurm task ran it --------------------
cat > "$T/objective.sh" << 'EOF'
#!/bin/sh
# $1 = x; reports x and the Slurm task that ran the trial.
sleep "${OBJECTIVE_SLEEP_S:-0.3}"
printf 'hpsearch: {"value": %s, "attrs": {"slurm_task": "%s", "slurm_job": "%s"}}\n' \
  "$1" "${SLURM_PROCID:-none}" "${SLURM_JOB_ID:-none}"
EOF
chmod 755 "$T/objective.sh"
export PATH="$(dirname "$hpsearch"):$PATH"
export HPSEARCH="$hpsearch"

# space.json for study $1 with budget $2 and objective sleep $3 seconds.
write_space() {
  cat << EOF
{
  "study": {"name": "$1", "direction": "minimize", "storage": "$1.db"},
  "sampler": {"type": "random", "seed": 7},
  "pruner": {"type": "none"},
  "budget": {"n_trials": $2},
  "objective": {"type": "command", "argv": ["$T/objective.sh", "{x}"],
                "env": {"OBJECTIVE_SLEEP_S": "$3"}},
  "space": {"x": {"type": "float", "low": 0, "high": 1}}
}
EOF
}

# Prints "COMPLETE RUNNING WAITING FAIL TASKS WORKERS" of a store: counts by
# state, the distinct Slurm tasks that ran COMPLETE trials (SLURM_PROCID as
# the objective saw it), and the distinct task-named workers that ran them
# (the trials' worker field: host:jobJ.S:taskP).
summarize() {
  "$hpsearch" trials "$1" --format json | python3 -c '
import json, sys
trials = json.load(sys.stdin)
count = lambda s: sum(1 for t in trials if t["state"] == s)
done = [t for t in trials if t["state"] == "COMPLETE"]
tasks = {t.get("user_attrs", {}).get("slurm_task") for t in done} - {None, "none"}
workers = {t["worker"].split("/")[0] for t in done if ":task" in t.get("worker", "")}
print(count("COMPLETE"), count("RUNNING"), count("WAITING"), count("FAIL"), len(tasks),
      len(workers))'
}

no_jobs_left() {
  for _ in $(seq 1 100); do
    [[ -z $(squeue --noheader) ]] && return 0
    sleep 0.2
  done
  fail "jobs left in the queue: $(squeue)"
}

# ---- (a) --launcher slurm --workers 4 ----------------------------------------
mkdir "$T/a" && cd "$T/a"
write_space a 16 0.5 > space.json
log "(a) hpsearch run --launcher slurm --workers 4"
start=$(date +%s.%N)
# 4 tasks on a node with fewer CPUs need --overcommit (a real cluster has the CPUs).
"$hpsearch" run space.json --launcher slurm --workers 4 --slurm-args "--overcommit" \
  > run.out 2> run.err &
run_pid=$!
seen_status=""
for _ in $(seq 1 300); do
  kill -0 "$run_pid" 2> /dev/null || break
  if [[ -f a.db ]] && "$hpsearch" status a.db 2> /dev/null | grep -q ":task[0-9]"; then
    seen_status=$("$hpsearch" status a.db 2> /dev/null)
    break
  fi
  sleep 0.2
done
wait "$run_pid" || fail "(a) hpsearch run --launcher slurm exited $?: $(tail -n 20 run.err)"
end=$(date +%s.%N)
read -r complete running waiting failed tasks workers <<< "$(summarize a.db)"
[[ $complete -eq 16 && $running -eq 0 && $waiting -eq 0 ]] ||
  fail "(a) expected 16 COMPLETE trials and none RUNNING/WAITING, got $complete/$running/$waiting"
[[ $tasks -eq 4 ]] || fail "(a) trials ran on $tasks distinct Slurm tasks, expected 4"
[[ $workers -eq 4 ]] || fail "(a) trials name $workers distinct task workers, expected 4"
grep -q ":job[0-9]*\.[0-9]*:task[0-3]" <<< "$seen_status" ||
  fail "(a) hpsearch status did not name the workers after their Slurm tasks: $seen_status"
[[ $(stat -c %a a.keys) == 700 ]] || fail "(a) the keys folder a.keys is not 0700"
no_jobs_left
log "(a) ok: 16 trials on 4 Slurm tasks in $(python3 -c "print(round($end - $start, 1))") s"

# ---- (b) the sbatch example --------------------------------------------------
mkdir "$T/b" && cd "$T/b"
write_space b 12 0.3 > space.json
log "(b) sbatch examples/slurm/hpsearch.sbatch"
sbatch --wait --overcommit --ntasks=4 --output="$T/b/hpsearch-%j.out" "$sbatch_example" \
  space.json > sbatch.out || fail "(b) the sbatch job failed: $(cat hpsearch-*.out)"
read -r complete running waiting failed tasks workers <<< "$(summarize b.db)"
[[ $complete -eq 12 && $running -eq 0 && $waiting -eq 0 ]] ||
  fail "(b) expected 12 COMPLETE trials and none RUNNING/WAITING, got $complete/$running/$waiting"
[[ $tasks -eq 4 ]] || fail "(b) trials ran on $tasks distinct Slurm tasks, expected 4"
# The coordinator's hint names the host the workers reach, not the wildcard.
grep -q "connect with: hpsearch worker --connect tcp://[^0*[]" hpsearch-*.out ||
  fail "(b) the coordinator's hint does not name a reachable host: $(grep -h 'connect with' hpsearch-*.out)"
no_jobs_left
log "(b) ok: the sbatch example finished 12 trials on 4 tasks"

# ---- (b2) the sbatch example whose coordinator cannot start --------------------
# A busy port: the coordinator exits at once, and the script must end the
# worker step then (before: the workers held the allocation ~100 s).
mkdir "$T/b2" && cd "$T/b2"
write_space b2 4 0.1 > space.json
busy_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')
# The listener says when it listens: on a loaded machine Python can take
# more than a second to start, and a coordinator that binds first runs
# the study (seen: "the job succeeded although its coordinator could not
# bind").
python3 -c "import socket, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('0.0.0.0', $busy_port)); s.listen(); open('listening', 'w').close(); time.sleep(300)" &
listener=$!
for _ in $(seq 100); do
  [[ -e listening ]] && break
  kill -0 "$listener" 2> /dev/null || fail "(b2) the listener on port $busy_port did not start"
  sleep 0.1
done
[[ -e listening ]] || fail "(b2) the listener on port $busy_port did not listen within 10 s"
log "(b2) sbatch with the coordinator's port $busy_port busy"
b2_start=$SECONDS
if HPSEARCH_PORT=$busy_port sbatch --wait --overcommit --ntasks=2 \
  --output="$T/b2/hpsearch-%j.out" "$sbatch_example" space.json > /dev/null; then
  kill "$listener" 2> /dev/null || true
  fail "(b2) the job succeeded although its coordinator could not bind: $(cat hpsearch-*.out)"
fi
b2_s=$((SECONDS - b2_start))
kill "$listener" 2> /dev/null || true
wait "$listener" 2> /dev/null || true
grep -q "ending the worker step" hpsearch-*.out ||
  fail "(b2) the script did not end the worker step: $(cat hpsearch-*.out)"
[[ $b2_s -lt 60 ]] ||
  fail "(b2) the job held its allocation ${b2_s} s after its coordinator failed: $(cat hpsearch-*.out)"
no_jobs_left
log "(b2) ok: the job ended ${b2_s} s after submission, its worker step ended with the coordinator"

# ---- (c) scancel a running job, then resume ------------------------------------
mkdir "$T/c" && cd "$T/c"
write_space c 40 1.5 > space.json
log "(c) sbatch, scancel mid-study, resubmit"
job=$(sbatch --parsable --overcommit --ntasks=4 --output="$T/c/hpsearch-%j.out" \
  "$sbatch_example" space.json)
complete=0
running=0
deadline=$((SECONDS + 120))
while [[ $SECONDS -lt $deadline && $complete -lt 40 ]]; do
  if [[ -f c.db ]]; then
    read -r complete running _ <<< "$(summarize c.db 2> /dev/null || echo 0 0)"
  fi
  [[ $complete -ge 3 && $running -ge 1 ]] && break
  sleep 0.2
done
log "(c) scancel $job at $complete COMPLETE, $running RUNNING trials"
[[ $complete -ge 3 ]] || fail "(c) the job did not get going: $(cat hpsearch-*.out)"
scancel "$job"
no_jobs_left
"$hpsearch" trials c.db --format json > before.json
read -r before_complete _ <<< "$(summarize c.db)"
[[ $before_complete -lt 40 ]] || fail "(c) the study finished before scancel; nothing to test"
sbatch --wait --overcommit --ntasks=4 --output="$T/c/hpsearch-%j.out" "$sbatch_example" \
  space.json > /dev/null || fail "(c) the resubmitted job failed: $(cat hpsearch-*.out)"
"$hpsearch" trials c.db --format json > after.json
python3 - << 'EOF' || fail "(c) the resumed study lost or left trials"
import json
before = {t["number"]: t for t in json.load(open("before.json"))}
after = {t["number"]: t for t in json.load(open("after.json"))}
states = [t["state"] for t in after.values()]
assert "RUNNING" not in states and "WAITING" not in states, states
fails = [(t["number"], t["fail_reason"][:80]) for t in after.values() if t["state"] == "FAIL"]
assert states.count("COMPLETE") == 40, f"{states.count('COMPLETE')} COMPLETE, expected 40; FAIL: {fails}"
for n, t in before.items():
    if t["state"] == "COMPLETE":
        assert after[n]["state"] == "COMPLETE" and after[n]["value"] == t["value"], (n, after[n])
# The cancel hit running trials: they failed and ran again with the same params.
failed = [t for t in after.values() if t["state"] == "FAIL"]
assert failed, "no trial was interrupted by scancel"
completed_params = [t["params"] for t in after.values() if t["state"] == "COMPLETE"]
for t in failed:
    assert t["params"] in completed_params, ("interrupted trial not run again", t)
print(f"before scancel: {sum(t['state'] == 'COMPLETE' for t in before.values())} COMPLETE;"
      f" after resume: 40 COMPLETE, {len(failed)} interrupted and run again")
EOF
no_jobs_left
log "(c) ok"

# ---- (d) the launcher's worker job is cancelled mid-study ------------------------
mkdir "$T/d" && cd "$T/d"
write_space d 16 2.0 > space.json
log "(d) --launcher slurm, its worker job cancelled mid-study"
"$hpsearch" run space.json --launcher slurm --workers 2 --slurm-args "--overcommit" \
  --heartbeat-ms 500 --liveness 4 > run.out 2> run.err &
run_pid=$!
complete=0
deadline=$((SECONDS + 120))
while [[ $SECONDS -lt $deadline ]] && kill -0 "$run_pid" 2> /dev/null; do
  [[ -f d.db ]] && read -r complete _ <<< "$(summarize d.db 2> /dev/null || echo 0)"
  [[ $complete -ge 2 ]] && break
  sleep 0.2
done
[[ $complete -lt 16 ]] || fail "(d) the study finished before its job could be cancelled"
first_job=$(squeue --noheader --format=%A | head -n 1)
[[ -n $first_job ]] || fail "(d) no worker job in the queue"
scancel "$first_job"
wait "$run_pid" || fail "(d) hpsearch run exited $? after its worker job was cancelled"
read -r complete running waiting failed tasks workers <<< "$(summarize d.db)"
[[ $complete -eq 16 && $running -eq 0 && $waiting -eq 0 ]] ||
  fail "(d) expected 16 COMPLETE trials and none RUNNING/WAITING, got $complete/$running/$waiting"
jobs=$("$hpsearch" trials d.db --format json | python3 -c '
import json, sys
print(len({t["user_attrs"]["slurm_job"] for t in json.load(sys.stdin) if t["state"] == "COMPLETE"}))')
[[ $jobs -ge 2 ]] || fail "(d) every trial ran in one job: the cancelled job was not replaced"
grep -q "starting it again" run.err || fail "(d) the launcher did not say it restarted the step"
no_jobs_left
log "(d) ok: the study finished on a second worker job"

# ---- (e) a checkpointing trial cancelled with its job continues where it stopped --
# The batch-script way again (one task): a Python program that saves its
# state to HPSEARCH_CHECKPOINT_DIR before each report; scancel while it
# trains, resubmit: the retry starts from HPSEARCH_RESUME_STEP with the
# whole learning curve and the value of an uninterrupted run (docs, "Long
# trials").
mkdir "$T/e" && cd "$T/e"
cat > train.py << 'PY'
import json, os, time
ck = os.environ["HPSEARCH_CHECKPOINT_DIR"]
x = json.loads(os.environ["HPSEARCH_PARAMS"])["x"]
resume = os.environ.get("HPSEARCH_RESUME_STEP")
start, loss = 1, x
if resume is not None:
    with open(os.path.join(ck, "state.json")) as f:
        st = json.load(f)
    start, loss = st["epoch"] + 1, st["loss"]
for epoch in range(start, 11):
    with open("epochs.log", "a") as f:
        f.write("%s %d\n" % (os.environ["HPSEARCH_TRIAL_NUMBER"], epoch))
    time.sleep(0.5)
    loss = loss * 0.9
    with open(os.path.join(ck, "state.tmp"), "w") as f:
        json.dump({"epoch": epoch, "loss": loss}, f)
    os.replace(os.path.join(ck, "state.tmp"), os.path.join(ck, "state.json"))
    print("hpsearch: " + json.dumps({"step": epoch, "value": loss}), flush=True)
print("hpsearch: " + json.dumps({"value": loss}), flush=True)
PY
cat > space.json << JSON
{
  "study": {"name": "e", "direction": "minimize", "storage": "e.db"},
  "sampler": {"type": "random", "seed": 7},
  "budget": {"n_trials": 1},
  "objective": {"type": "command", "argv": ["/usr/bin/python3", "$T/e/train.py"]},
  "space": {"x": {"type": "float", "low": 1, "high": 2}}
}
JSON
log "(e) sbatch a checkpointing trial, scancel mid-trial, resubmit"
job=$(sbatch --parsable --overcommit --ntasks=1 --output="$T/e/hpsearch-%j.out" \
  "$sbatch_example" space.json)
epochs_started() { [[ -f epochs.log ]] && wc -l < epochs.log || echo 0; }
deadline=$((SECONDS + 120))
while [[ $SECONDS -lt $deadline && $(epochs_started) -lt 4 ]]; do sleep 0.2; done
[[ $(epochs_started) -ge 4 ]] || fail "(e) the trial did not get going: $(cat hpsearch-*.out)"
scancel "$job"
no_jobs_left
sbatch --wait --overcommit --ntasks=1 --output="$T/e/hpsearch-%j.out" "$sbatch_example" \
  space.json > /dev/null || fail "(e) the resubmitted job failed: $(cat hpsearch-*.out)"
"$hpsearch" trials e.db --format json > after.json
python3 - << 'PY' || fail "(e) the cancelled trial did not continue from its checkpoint"
import json
trials = json.load(open("after.json"))
done = [t for t in trials if t["state"] == "COMPLETE"]
assert len(done) == 1, [(t["number"], t["state"], t["fail_reason"][:80]) for t in trials]
t = done[0]
frm = t["system_attrs"].get("resumed_from")
assert frm and 1 <= frm["step"] < 10, t["system_attrs"]
assert sorted(int(k) for k in t["intermediate_values"]) == list(range(1, 11)), t["intermediate_values"]
v = t["params"]["x"]
for _ in range(10):
    v *= 0.9
assert t["value"] == v, (t["value"], v)
epochs = [l.split() for l in open("epochs.log") if l.strip()]
assert len(epochs) <= 11, epochs
print(f"resumed after step {frm['step']}; {len(epochs)} epochs trained for 10")
PY
no_jobs_left
log "(e) ok"

# ---- (f) 2-process trials over the Slurm launcher ------------------------------
mkdir "$T/f" && cd "$T/f"
cat > ranks.py << 'PY'
import json, os, socket, time
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
with open("ranks.log", "a") as f:
    f.write("%s %d %d %s %s\n" % (os.environ["HPSEARCH_TRIAL_NUMBER"], rank, world,
                                  os.environ.get("SLURM_PROCID", "none"), port))
if rank == 0:  # rank 0 listens where the others were told to meet it
    srv = socket.create_server(("", port))
    total = 0
    for _ in range(world - 1):
        conn, _ = srv.accept()
        total += int(conn.recv(16).decode())
        conn.close()
    print("hpsearch: " + json.dumps({"value": total}), flush=True)
else:
    for _ in range(200):
        try:
            with socket.create_connection((addr, port), timeout=5) as c:
                c.sendall(str(rank).encode())
            break
        except OSError:
            time.sleep(0.05)
    else:
        raise SystemExit("rank %d could not reach rank 0 at %s:%d" % (rank, addr, port))
PY
cat > space.json << JSON
{
  "study": {"name": "f", "direction": "minimize", "storage": "f.db"},
  "sampler": {"type": "random", "seed": 7},
  "budget": {"n_trials": 4},
  "resources": {"processes": 2},
  "objective": {"type": "command", "argv": ["/usr/bin/python3", "$T/f/ranks.py"]},
  "space": {"x": {"type": "float", "low": 0, "high": 1}}
}
JSON
log "(f) 2-process trials: hpsearch run --launcher slurm --workers 4"
"$hpsearch" run space.json --launcher slurm --workers 4 --slurm-args "--overcommit" \
  > run.out 2> run.err || fail "(f) hpsearch run exited $?: $(tail -n 20 run.err)"
"$hpsearch" trials f.db --format json > trials.json
python3 - << 'PY' || fail "(f) the 2-process trials did not run as 2 ranks on 2 Slurm tasks"
import json
trials = json.load(open("trials.json"))
assert len(trials) == 4 and all(t["state"] == "COMPLETE" for t in trials), \
    [(t["number"], t["state"], t["fail_reason"][:120]) for t in trials]
assert all(t["value"] == 1 for t in trials), [t["value"] for t in trials]  # rank 1 reached rank 0
lines = [l.split() for l in open("ranks.log") if l.strip()]
by_trial = {}
for number, rank, world, task, port in lines:
    by_trial.setdefault(number, []).append((int(rank), int(world), task, port))
assert len(by_trial) == 4, by_trial
for number, ranks in by_trial.items():
    assert sorted(r for r, _, _, _ in ranks) == [0, 1], (number, ranks)
    assert all(w == 2 for _, w, _, _ in ranks), (number, ranks)
    assert len({t for _, _, t, _ in ranks}) == 2, ("one Slurm task ran both ranks", number, ranks)
    assert len({p for _, _, _, p in ranks}) == 1, ("the ranks were told different ports", ranks)
print("4 trials, each 2 ranks on 2 Slurm tasks")
PY
no_jobs_left
log "(f) ok"

# ---- (g) a coordinator killed with SIGKILL leaves nothing in the queue --------
mkdir "$T/g" && cd "$T/g"
write_space g 40 2 > space.json
log "(g) kill -9 of a --launcher slurm coordinator"
"$hpsearch" run space.json --launcher slurm --workers 2 --slurm-args "--overcommit" \
  > run.out 2> run.err &
run_pid=$!
deadline=$((SECONDS + 60))
while [[ $SECONDS -lt $deadline ]]; do
  [[ -f g.db ]] && [[ $("$hpsearch" trials g.db --state running --format json 2> /dev/null |
    python3 -c 'import json,sys; print(len(json.load(sys.stdin)))' 2> /dev/null) -ge 1 ]] && break
  sleep 0.2
done
[[ -n $(squeue --noheader) ]] || fail "(g) no job in the queue while the study ran: $(tail run.err)"
kill -9 "$run_pid"
wait "$run_pid" 2> /dev/null || true
no_jobs_left
log "(g) ok: the job ended with its coordinator"

log "all Slurm tests passed"
