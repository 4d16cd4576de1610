#!/usr/bin/env bash
# A one-node SLURM on this machine, to try the cluster path (`cli.py sweep SPEC --launcher slurm`) and to test it
# against a real scheduler: Debian's packages (slurmctld, slurmd, munge; 22.05 on Debian 12), as root.
#
#   scripts/local_slurm.sh start    install what is missing, write the config, start munge + slurmctld + slurmd,
#                                   wait until the node is idle; does nothing when a controller already answers
#   scripts/local_slurm.sh stop     stop the daemons this script started (recorded in its state folder), no others
#   scripts/local_slurm.sh status   sinfo's view, or why there is none
#
# One partition, `debug` (the default), with this machine's CPUs and 90% of its memory. No accounting database:
# `sacct` does not answer, so the sweep reads a submitted job's state as unknown and relies on its run claims.
set -euo pipefail

STATE=${LOCAL_SLURM_STATE:-/var/lib/local-slurm}
CONF=/etc/slurm/slurm.conf
HOST=$(hostname -s)

answers() { timeout 5 sinfo -h >/dev/null 2>&1; }

install() {
    if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null \
        && command -v sbatch >/dev/null; then
        return
    fi
    [ "$(id -u)" = 0 ] || { echo "error: installing SLURM needs root (apt-get)" >&2; exit 1; }
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurmctld slurmd slurm-client munge >/dev/null
}

write_config() {
    local cpus mem
    cpus=$(nproc)
    mem=$(awk '/MemTotal/ {printf "%d", $2 / 1024 * 0.9}' /proc/meminfo)
    mkdir -p /etc/slurm /var/lib/slurm/slurmctld /var/lib/slurm/slurmd /var/log/slurm "$STATE"
    cat >"$CONF" <<CONF
# written by scripts/local_slurm.sh: a one-node cluster on $HOST
ClusterName=local
SlurmctldHost=$HOST
SlurmUser=root
AuthType=auth/munge
# a requeued job waits cred_expire seconds before it may start again (default 120): the requeue tests' jobs wait less
AuthInfo=cred_expire=10
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
NodeName=$HOST CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
}

start() {
    if answers; then
        echo "a SLURM controller already answers: nothing started"
        return
    fi
    install
    write_config
    if ! pgrep -x munged >/dev/null; then
        mkdir -p /run/munge /var/log/munge /var/lib/munge
        [ -s /etc/munge/munge.key ] || dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null
        chown -R munge:munge /etc/munge /run/munge /var/log/munge /var/lib/munge
        chmod 0400 /etc/munge/munge.key
        runuser -u munge -- /usr/sbin/munged
        for _ in $(seq 20); do [ -s /run/munge/munged.pid ] && break; sleep 0.5; done
        cp /run/munge/munged.pid "$STATE/munged.pid"  # the daemon's own pid (the command above forks)
    fi
    /usr/sbin/slurmctld
    /usr/sbin/slurmd
    for _ in $(seq 60); do
        if answers && sinfo -h -o %t | grep -qx idle; then
            echo "one-node SLURM on $HOST: partition debug, $(nproc) CPUs (stop: scripts/local_slurm.sh stop)"
            return
        fi
        sleep 1
    done
    echo "error: the node did not become idle in 60 s; see /var/log/slurm/slurmctld.log and slurmd.log" >&2
    exit 1
}

stop() {
    local daemon pid
    for daemon in slurmd slurmctld munged; do
        if [ -s "$STATE/$daemon.pid" ]; then
            pid=$(cat "$STATE/$daemon.pid")
            kill "$pid" 2>/dev/null || true
            rm -f "$STATE/$daemon.pid"
        fi
    done
    echo "stopped what scripts/local_slurm.sh started"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) if answers; then sinfo; else echo "no SLURM controller answers (start one: scripts/local_slurm.sh start)"; fi ;;
    *) echo "usage: scripts/local_slurm.sh start|stop|status" >&2; exit 2 ;;
esac
