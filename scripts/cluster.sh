#!/usr/bin/env bash
# A Spark standalone cluster on this machine, from the pip pyspark's `spark-class` launcher:
# one master and N workers of C cores each (what the cluster tests and the README's
# cluster commands use).
#   bash scripts/cluster.sh start [WORKERS] [CORES]   # default 3 workers of 2 cores
#   bash scripts/cluster.sh stop
#   bash scripts/cluster.sh status
# The master listens on spark://127.0.0.1:7077 (SPARKFLUX_MASTER_PORT to change); logs and pid
# files are kept under .cluster/ (SPARKFLUX_CLUSTER_DIR to change).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
DIR=${SPARKFLUX_CLUSTER_DIR:-$PWD/.cluster}
PORT=${SPARKFLUX_MASTER_PORT:-7077}
MASTER=spark://127.0.0.1:$PORT
SPARK_HOME=$("$PY" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')
export SPARK_HOME
CLASS=$SPARK_HOME/bin/spark-class

start_daemon() {  # NAME ARGS...: run spark-class in the background, its pid in DIR/NAME.pid
  local name=$1; shift
  nohup setsid "$CLASS" "$@" >"$DIR/$name.log" 2>&1 </dev/null &
  echo $! >"$DIR/$name.pid"
}

wait_for() {  # PATTERN FILE: until the daemon's log says it is up (30 s at most)
  for _ in $(seq 300); do
    grep -q "$1" "$2" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "cluster: $(basename "$2" .log) did not start; its log:" >&2
  tail -20 "$2" >&2
  return 1
}

case "${1:-status}" in
  start)
    workers=${2:-3} cores=${3:-2}
    mkdir -p "$DIR"
    if [[ -f $DIR/master.pid ]] && kill -0 "$(cat "$DIR/master.pid")" 2>/dev/null; then
      echo "cluster: already running ($MASTER); stop it first" >&2; exit 1
    fi
    start_daemon master org.apache.spark.deploy.master.Master \
      --host 127.0.0.1 --port "$PORT" --webui-port 0
    wait_for "I have been elected leader" "$DIR/master.log"
    for i in $(seq "$workers"); do
      mkdir -p "$DIR/work-$i"
      start_daemon "worker-$i" org.apache.spark.deploy.worker.Worker "$MASTER" \
        --host 127.0.0.1 --cores "$cores" --memory 2g --webui-port 0 --work-dir "$DIR/work-$i"
    done
    for i in $(seq "$workers"); do
      wait_for "Successfully registered with master" "$DIR/worker-$i.log"
    done
    echo "cluster: $MASTER with $workers workers of $cores cores (logs in $DIR)"
    ;;
  stop)
    for f in "$DIR"/*.pid; do
      [[ -f $f ]] || continue
      pid=$(cat "$f")
      kill -- "-$pid" 2>/dev/null || kill "$pid" 2>/dev/null || true
      rm -f "$f"
    done
    echo "cluster: stopped"
    ;;
  status)
    for f in "$DIR"/*.pid; do
      [[ -f $f ]] || continue
      if kill -0 "$(cat "$f")" 2>/dev/null; then s=up; else s=down; fi
      echo "$(basename "$f" .pid) $(cat "$f") $s"
    done
    ;;
  *) echo "usage: scripts/cluster.sh start [WORKERS] [CORES] | stop | status" >&2; exit 2 ;;
esac
